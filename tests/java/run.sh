#!/usr/bin/env bash
# The Java suite in one command: starts the broker from $TIDEBUS_BIN (default: the release
# build) on ephemeral loopback ports, runs the JUnit classes of tests/java with Maven against
# it, stops the broker it started, and prints per class passed/failed/skipped, then the total
# as its last line: `N passed, N failed`.
#
#   tests/java/run.sh                      # every class
#   tests/java/run.sh -Dgroups=smoke       # the smoke slice `cargo test` runs
#   tests/java/run.sh -Dtest=SessionTest   # one class (or Class#method, comma-separated)
#
# Arguments go to Maven as they are (so `-o` runs offline once ~/.m2 holds the pinned
# artifacts). Environment: TIDEBUS_BIN (the broker), TIDEBUS_JAVA_BUILD_DIR (Maven's output,
# default <repo>/target/java), TIDEBUS_JAVA_KEEP=1 keeps the broker's directory (config, log)
# even when everything passed. Exit status: 0 when every test passed, 1 otherwise.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${TIDEBUS_BIN:-$repo/target/release/tidebus}"
build_dir="${TIDEBUS_JAVA_BUILD_DIR:-$repo/target/java}"
reports="$build_dir/surefire-reports"

if [[ ! -x "$bin" ]]; then
    echo "run.sh: no broker binary at $bin (build it with \`cargo build --release\` or set TIDEBUS_BIN)" >&2
    exit 2
fi
for tool in mvn java keytool; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not on PATH (needs a JDK 17 and Maven)" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/tidebus-java-XXXXXX")"
broker_pid=""

# Stops the broker this script started (by its pid, SIGTERM then, after 20 s, SIGKILL) and
# removes its directory unless a test failed or TIDEBUS_JAVA_KEEP is set.
stop_broker() {
    if [[ -n "$broker_pid" ]] && kill -0 "$broker_pid" 2>/dev/null; then
        kill -TERM "$broker_pid" 2>/dev/null || true
        for _ in $(seq 200); do
            kill -0 "$broker_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$broker_pid" 2>/dev/null; then
            echo "run.sh: the broker (pid $broker_pid) ignored SIGTERM for 20 s; killing it" >&2
            kill -KILL "$broker_pid" 2>/dev/null || true
        fi
        wait "$broker_pid" 2>/dev/null || true
    fi
    broker_pid=""
}
cleanup() {
    local status=$?
    stop_broker
    if [[ $status -eq 0 && -z "${TIDEBUS_JAVA_KEEP:-}" ]]; then
        rm -rf "$work"
    else
        echo "run.sh: the broker's config and log are kept in $work" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# TLS for the administration endpoint (the SDK's administration client speaks HTTPS only): a
# `gen-cert` certificate, its CA in a Java trust store the test JVM is pointed at.
"$bin" gen-cert --out "$work/certs" --host localhost --host 127.0.0.1 >/dev/null
keytool -importcert -noprompt -alias tidebus-ca -file "$work/certs/ca.pem" \
    -keystore "$work/truststore.p12" -storetype PKCS12 -storepass tidebus >/dev/null 2>&1

# In memory: the suite tests the SDK's view of Service Bus's semantics, not durability (which
# the Rust and Python suites kill and restart the broker for).
{
    cat <<EOF
[broker]
durability = "memory"
allow_anonymous = false
idle_timeout = "60s"

[broker.tls]
listen = "127.0.0.1:0"
cert = "$work/certs/server.pem"
key = "$work/certs/server-key.pem"

EOF
    cat "$here/entities.toml"
} >"$work/tidebus.toml"

# The testing features for TestingRecipeTest (the README's recipe): the reset and the controlled
# clock, and `exposed` because [broker.tls] is configured (the listeners stay on loopback).
RUST_LOG="${RUST_LOG:-info}" "$bin" --config "$work/tidebus.toml" --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 --data-dir "$work/data" --ready-file "$work/ready" \
    --testing reset,clock,exposed \
    >"$work/broker.log" 2>&1 </dev/null &
broker_pid=$!

# The ready file: the plain address first, then `tls ADDR` and `admin ADDR` lines.
amqp="" admin=""
for _ in $(seq 300); do
    if ! kill -0 "$broker_pid" 2>/dev/null; then
        echo "run.sh: the broker exited before it was ready; its log:" >&2
        cat "$work/broker.log" >&2
        broker_pid=""
        exit 2
    fi
    if [[ -s "$work/ready" ]] && grep -q '^admin ' "$work/ready"; then
        amqp="$(head -n1 "$work/ready")"
        admin="$(sed -n 's/^admin //p' "$work/ready")"
        break
    fi
    sleep 0.1
done
if [[ -z "$amqp" || -z "$admin" ]]; then
    echo "run.sh: the broker did not write its ready file within 30 s; its log:" >&2
    cat "$work/broker.log" >&2
    exit 2
fi
echo "run.sh: broker $bin (pid $broker_pid) on $amqp, administration https://$admin"

key="SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
export TIDEBUS_CONNECTION_STRING="Endpoint=sb://localhost:${amqp##*:};$key;UseDevelopmentEmulator=true"
# The SDK keeps only the host of an administration endpoint (it always dials HTTPS on 443):
# the tests put TIDEBUS_ADMIN_PORT back into each request's URL.
export TIDEBUS_ADMIN_CONNECTION_STRING="Endpoint=sb://localhost:${admin##*:}/;$key"
export TIDEBUS_ADMIN_PORT="${admin##*:}"

rm -rf "$reports"
set +e
mvn -B -ntp -Dstyle.color=never -f "$here/pom.xml" -Dtidebus.buildDirectory="$build_dir" \
    -DargLine="-Djavax.net.ssl.trustStore=$work/truststore.p12 -Djavax.net.ssl.trustStorePassword=tidebus -Djavax.net.ssl.trustStoreType=PKCS12" \
    "$@" test 2>&1
maven=$?
set -e
stop_broker

if ! ls "$reports"/TEST-*.xml >/dev/null 2>&1; then
    echo "run.sh: Maven exited with $maven and wrote no test report (see its output above)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
# Maven ends its output (stdout and stderr, merged above) with colour resets and no newline:
# start the summary on a line of its own.
echo
# Summary.java reads the Surefire reports: a line per class, each failure with its message,
# and the total last. It exits 1 when a test failed.
java "$here/Summary.java" "$reports" || exit 1
if [[ $maven -ne 0 ]]; then
    echo "run.sh: Maven exited with $maven although every reported test passed" >&2
    exit 1
fi
