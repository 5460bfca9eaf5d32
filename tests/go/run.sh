#!/bin/bash
# The Azure Service Bus Go SDK's own tests against Tidebus, by one command.
#
# github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus ships its _test.go files in the
# module itself: go.mod / go.sum here pin the version (and its hash), `go mod download` takes
# it from the Go module proxy into the module cache, and this script copies that module into
# the work dir and runs `go test` there, unchanged; its own go.mod and go.sum govern its test
# dependencies (testify, godotenv, azidentity, ...), which come from the proxy as well. Nothing
# of Rust is built: the broker is $TIDEBUS_BIN.
#
# Usage (from anywhere; paths default relative to the project root):
#   tests/go/run.sh                                 # every package of the module (./...)
#   tests/go/run.sh -run 'TestSessionReceiver' .    # go test flags and/or package patterns
# Environment:
#   TIDEBUS_BIN       broker binary (default: target/release/tidebus)
#   GO_SUITE_WORK     work dir: module copy, certificates, test.json, failures.txt, and per
#                     namespace (standard/, premium/) its config, data and tidebus.log
#                     (default: target/go-suite)
#   GO_TEST_TIMEOUT   go test -timeout, per package (default 30m)
#   TIDEBUS_DURABILITY  the broker's durability (default sync)
#   RUST_LOG          the broker's log level (default info)
# Prints one line per finished test while it runs, then per test file passed / failed /
# skipped, each failure's key lines, and as its last line "N passed, N failed, N skipped"
# (top-level tests). Exit status: 0 when nothing failed, 1 when a test failed, 2 when the
# harness could not run.
#
# The shims, where the suite reaches for Azure itself, and nothing else:
# - The namespace. The suite reads SERVICEBUS_ENDPOINT, a host name without a port that it
#   dials both as amqps://HOST/ (5671) and https://HOST/ (443, the administration API),
#   SERVICEBUS_CONNECTION_STRING and its NO_MANAGE, SEND_ONLY and LISTEN_ONLY variants (policies
#   of those rights, as the suite's test-resources.bicep makes them), and _PREMIUM variants.
#   (A port in the host name does not work: go-amqp would send it in the TLS server name.)
#   So the namespace is a loopback address of its own, 127.x.y.z picked at random (127.0.0.1
#   stays free: TestClientUsingCustomEndpoint expects nothing on 127.0.0.1:5671), and on its
#   ports 5671 and 443 `harness front` (harness/front.go; binding 443 needs root) stands in for
#   the namespace's one host: it passes bytes through untouched and sends a connection whose
#   TLS ClientHello offers HTTP (ALPN h2 / http/1.1) to Tidebus's administration listener and
#   every other one to its AMQP listener. TLS is Tidebus's own ([broker.tls] with a `tidebus
#   gen-cert` certificate for that address), trusted through SSL_CERT_FILE. The connection
#   strings are production-style (no UseDevelopmentEmulator: AMQPS, as the token-credential
#   path always is). The Premium variables name a second broker on an address of its own,
#   with Premium's 100 MB message size (the suite's two *_Premium administration tests).
# - Entra ID. Most tests authenticate with the suite's credential (azidentity's
#   DefaultAzureCredential in live mode). AZURE_TOKEN_CREDENTIALS=AzureCLICredential narrows
#   it to the Azure CLI (no managed-identity probe leaves the machine), and bin/az, a link to
#   the harness, answers `az account get-access-token` with a shared access signature for the
#   namespace root signed with RootManageSharedAccessKey. Tidebus takes that text on $cbs (put
#   as a jwt) and as the administration API's Authorization header. (Both namespaces have the
#   same policies and keys, and Tidebus reads no host in a token, so it serves both.)
# - Entities. The suite creates its own queues, topics and subscriptions through the
#   administration API; the config declares the two its bicep template makes (testQueue,
#   testQueueWithSessions, lock 5 minutes).
# - Tests skipped here (never run, listed in the output): see SKIP below.
# AZURE_RECORD_MODE=live runs the live tests (the default, playback, skips them).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MODULE=github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus
TIDEBUS_BIN=${TIDEBUS_BIN:-$ROOT/target/release/tidebus}
WORK=${GO_SUITE_WORK:-$ROOT/target/go-suite}
KEY=SAS_KEY_VALUE

# Tests that need what no broker of ours can give; each with its reason, printed with the results.
# Entra ID only: a ClientSecretCredential with a bogus tenant must fail at
# login.microsoftonline.com (AuthenticationFailedError); that request would leave the machine.
SKIP_NAMES=('TestClientUnauthorizedCreds/invalid_identity_creds'
  'TestReceiverUnauthorizedCreds/invalid_identity_creds')
SKIP_WHY=('Entra ID only: expects azidentity to fail against login.microsoftonline.com'
  'Entra ID only: expects azidentity to fail against login.microsoftonline.com')
SKIP='^(TestClientUnauthorizedCreds|TestReceiverUnauthorizedCreds)$/^invalid_identity_creds$'

die() { echo "run.sh: $*" >&2; exit 2; }
[ -x "$TIDEBUS_BIN" ] || die "no broker at $TIDEBUS_BIN: cargo build --release, or set TIDEBUS_BIN"
command -v go >/dev/null || die "go is not installed"
case "$TIDEBUS_BIN" in /*) ;; *) TIDEBUS_BIN=$PWD/$TIDEBUS_BIN ;; esac
mkdir -p "$WORK" || die "cannot create $WORK"
WORK=$(cd "$WORK" && pwd)

# Separate package patterns from go test flags (a flag's value, e.g. -run X, is not a pattern).
GOARGS=() PKGS=() prev=""
for a in "$@"; do
  case "$prev" in -run|-skip|-timeout|-count|-parallel|-p|-cpu|-shuffle|-list) GOARGS+=("$a"); prev=""; continue ;; esac
  case "$a" in
    .|./*) PKGS+=("$a") ;;
    *) GOARGS+=("$a") ;;
  esac
  prev=$a
done
[ ${#PKGS[@]} -gt 0 ] || PKGS=(./...)

# The pinned module, from the module cache (downloaded from the proxy and checked against go.sum).
( cd "$HERE" && go mod download "$MODULE" ) || die "go mod download $MODULE failed"
SRC_DIR=$(cd "$HERE" && go list -m -f '{{.Dir}}' "$MODULE") || die "go list -m $MODULE failed"
VERSION=$(cd "$HERE" && go list -m -f '{{.Version}}' "$MODULE")
[ -d "$SRC_DIR" ] || die "module $MODULE not in the module cache"
rm -rf "$WORK/src" && cp -r "$SRC_DIR" "$WORK/src" && chmod -R u+w "$WORK/src" || die "copying $SRC_DIR"
mkdir -p "$WORK/bin"
( cd "$HERE" && go build -buildvcs=false -o "$WORK/bin/harness" ./harness ) || die "building the harness failed"
ln -sf harness "$WORK/bin/az"
( cd "$WORK/src" && go mod download ) || die "go mod download in the module failed"

# Two namespaces, as the suite's bicep template makes them: Standard (everything) and Premium
# (only its two *_Premium administration tests: 100 MB messages). Each is one broker with TLS
# (the administration API is HTTPS) behind a `harness front` on a loopback address of its own
# (see "The namespace" above); one gen-cert CA signs both addresses.
random_address() { echo "127.$((RANDOM % 200 + 20)).$((RANDOM % 254 + 1)).$((RANDOM % 254 + 1))"; }
NS=$(random_address)
NS_PREMIUM=$(random_address)
rm -rf "$WORK/certs"
"$TIDEBUS_BIN" gen-cert --out "$WORK/certs" --host "$NS" --host "$NS_PREMIUM" --host localhost \
  --host 127.0.0.1 >/dev/null || die "gen-cert failed"

write_config() { # FILE MAX_MESSAGE_SIZE
  cat > "$1" <<EOF
[broker]
durability = "${TIDEBUS_DURABILITY:-sync}"
# The tier's message size: Standard 256 KB, Premium 100 MB.
max_message_size = "$2"
allow_anonymous = false

[broker.tls]
listen = "127.0.0.1:0"
cert = "$WORK/certs/server.pem"
key = "$WORK/certs/server-key.pem"

[admin]
listen = "127.0.0.1:0"

# The suite's policies (its test-resources.bicep): the root, and three with fewer rights.
[[shared_access_policies]]
name = "RootManageSharedAccessKey"
key = "$KEY"
rights = ["Manage", "Send", "Listen"]

[[shared_access_policies]]
name = "NoManage"
key = "$KEY"
rights = ["Send", "Listen"]

[[shared_access_policies]]
name = "SendOnly"
key = "$KEY"
rights = ["Send"]

[[shared_access_policies]]
name = "ListenOnly"
key = "$KEY"
rights = ["Listen"]

# The entities its bicep template declares; every other one the tests create themselves.
[[queues]]
name = "testQueue"
lock_duration = "5m"

[[queues]]
name = "testQueueWithSessions"
lock_duration = "5m"
requires_session = true
EOF
}

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_file() { # FILE PID: 0 once FILE has content, 1 if PID exits first or after 60 s
  local i
  for i in $(seq 1 600); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

namespace() { # DIR ADDRESS MAX_MESSAGE_SIZE: a broker in DIR behind a front on ADDRESS:5671/443
  local dir=$1 address=$2 amqp admin
  rm -rf "$dir" && mkdir -p "$dir"
  write_config "$dir/tidebus.toml" "$3"
  RUST_LOG=${RUST_LOG:-info} "$TIDEBUS_BIN" --config "$dir/tidebus.toml" --listen 127.0.0.1:0 \
    --data-dir "$dir/data" --ready-file "$dir/ready" >"$dir/tidebus.log" 2>&1 &
  PIDS+=($!)
  wait_file "$dir/ready" "${PIDS[-1]}" || die "tidebus did not start; see $dir/tidebus.log"
  amqp=$(head -n1 "$dir/ready")
  admin=$(sed -n 's/^admin //p' "$dir/ready")
  [ -n "$admin" ] || die "no admin address in $dir/ready"
  "$WORK/bin/harness" front -listen "$address:5671,$address:443" -amqp "$amqp" -admin "$admin" \
    -ready-file "$dir/front.ready" 2>>"$dir/front.log" &
  PIDS+=($!)
  wait_file "$dir/front.ready" "${PIDS[-1]}" \
    || die "harness front could not listen on $address:5671 and :443 (root is needed); see $dir/front.log"
  echo "namespace $address: tidebus AMQP $amqp, admin $admin, log $dir/tidebus.log"
}

echo "azservicebus $VERSION against $TIDEBUS_BIN"
namespace "$WORK/standard" "$NS" 256KiB
namespace "$WORK/premium" "$NS_PREMIUM" 100MiB

cs() { echo "Endpoint=sb://${2:-$NS}/;SharedAccessKeyName=$1;SharedAccessKey=$KEY"; }
export AZURE_RECORD_MODE=live \
  SERVICEBUS_ENDPOINT=$NS SERVICEBUS_ENDPOINT_PREMIUM=$NS_PREMIUM \
  SERVICEBUS_CONNECTION_STRING="$(cs RootManageSharedAccessKey)" \
  SERVICEBUS_CONNECTION_STRING_PREMIUM="$(cs RootManageSharedAccessKey "$NS_PREMIUM")" \
  SERVICEBUS_CONNECTION_STRING_NO_MANAGE="$(cs NoManage)" \
  SERVICEBUS_CONNECTION_STRING_SEND_ONLY="$(cs SendOnly)" \
  SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY="$(cs ListenOnly)" \
  SSL_CERT_FILE="$WORK/certs/ca.pem" \
  AZURE_TOKEN_CREDENTIALS=AzureCLICredential \
  TIDEBUS_GO_NAMESPACE=$NS TIDEBUS_GO_KEY_NAME=RootManageSharedAccessKey TIDEBUS_GO_KEY=$KEY \
  PATH="$WORK/bin:$PATH"

cd "$WORK/src"
go test -json -p 1 -count=1 -timeout "${GO_TEST_TIMEOUT:-30m}" -skip "$SKIP" "${GOARGS[@]}" "${PKGS[@]}" \
  2>"$WORK/test.stderr" | "$WORK/bin/harness" progress -out "$WORK/test.json"
[ -s "$WORK/test.stderr" ] && cat "$WORK/test.stderr"
echo
echo "skipped here (not run):"
for i in "${!SKIP_NAMES[@]}"; do echo "  ${SKIP_NAMES[$i]}: ${SKIP_WHY[$i]}"; done
echo
"$WORK/bin/harness" report -src "$WORK/src" -json "$WORK/test.json" -failures "$WORK/failures.txt"
