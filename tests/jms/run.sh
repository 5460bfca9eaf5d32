#!/usr/bin/env bash
# The JMS suite in one command: starts the broker from $TIDEBUS_BIN (default: the release build)
# on an ephemeral loopback port, runs the JUnit classes of tests/jms (Qpid JMS) with Maven
# against it, stops the broker it started, and prints per class passed/failed/skipped, then the
# total as its last line: `N passed, N failed`.
#
# The broker also serves TLS on an ephemeral port with a `gen-cert` certificate, whose CA is in
# a Java trust store the test JVM is pointed at: azure-servicebus-jms dials amqps only
# (AzureServiceBusJmsTest). InteropTest runs the Python and JavaScript Service Bus SDKs as
# subprocesses; it is skipped, saying why, unless <repo>/target/pyenv and
# <repo>/target/js/node_modules exist (`cargo test` builds both) or TIDEBUS_INTEROP_PYTHON and
# TIDEBUS_INTEROP_NODE_PATH name others.
#
#   tests/jms/run.sh                      # every class
#   tests/jms/run.sh -Dgroups=smoke       # the smoke slice `cargo test` runs
#   tests/jms/run.sh -Dtest=BrowserTest   # one class (or Class#method, comma-separated)
#
# Arguments go to Maven as they are (so `-o` runs offline once ~/.m2 holds the pinned
# artifacts). Environment: TIDEBUS_BIN (the broker), TIDEBUS_JMS_BUILD_DIR (Maven's output,
# default <repo>/target/jms), TIDEBUS_JMS_KEEP=1 keeps the broker's directory (config, log)
# even when everything passed, TIDEBUS_JMS_TRACE=1 has Qpid JMS log every AMQP frame to each
# class's output file. Exit status: 0 when every test passed, 1 when one failed, 2 when the
# suite could not start.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${TIDEBUS_BIN:-$repo/target/release/tidebus}"
build_dir="${TIDEBUS_JMS_BUILD_DIR:-$repo/target/jms}"
tools="mvn java keytool"
keep=TIDEBUS_JMS_KEEP
# shellcheck source=../java/suite.sh
source "$repo/tests/java/suite.sh"

# TLS for azure-servicebus-jms, which builds amqps://HOST[:PORT] and nothing else: a
# `gen-cert` certificate for localhost, its CA in a Java trust store the test JVM is pointed at.
make_certificates

# In memory. Qpid JMS dials the plain listener, amqp://127.0.0.1:PORT; azure-servicebus-jms the
# TLS one on an ephemeral port (never 5671, which parallel suites may want). Anonymous clients
# are let in (most tests connect with SASL ANONYMOUS, as a local Qpid JMS setup does), and the
# emulator's policy in entities.toml is there for the tests that sign in with SASL PLAIN (as
# azure-servicebus-jms does) and for the SDKs InteropTest runs. The administration endpoint, on
# an ephemeral port and HTTPS with the same certificate, is where the topic consumer tests
# (SubscriptionTest, InteropTest) look for the subscriptions a JMS consumer makes; it takes
# requests without a signature, as allow_anonymous lets it.
{
    cat <<EOF
[broker]
durability = "memory"
allow_anonymous = true
idle_timeout = "60s"

[broker.tls]
listen = "127.0.0.1:0"
cert = "$work/certs/server.pem"
key = "$work/certs/server-key.pem"

[admin]
listen = "127.0.0.1:0"

EOF
    cat "$here/entities.toml"
} >"$work/tidebus.toml"

start_broker --admin-listen 127.0.0.1:0
tls="$(sed -n 's/^tls //p' "$work/ready")"
echo "run.sh: broker $bin (pid $broker_pid) on $amqp, TLS on $tls, administration https://$admin"

export TIDEBUS_AMQP_URL="amqp://$amqp"
# The host azure-servicebus-jms is given: the certificate's name and the TLS port.
export TIDEBUS_AMQPS_HOST="localhost:${tls##*:}"
# The administration endpoint (by the certificate's name) and the CA that signed its
# certificate, for the Python SDK's administration client (the JVM has the trust store).
export TIDEBUS_ADMIN_URL="https://localhost:${admin##*:}"
export TIDEBUS_ADMIN_CA="$work/certs/ca.pem"
# The SDKs for InteropTest, where `cargo test` prepares them (unless the caller named others).
if [[ -z "${TIDEBUS_INTEROP_PYTHON:-}" && -x "$repo/target/pyenv/bin/python" ]]; then
    export TIDEBUS_INTEROP_PYTHON="$repo/target/pyenv/bin/python"
fi
if [[ -z "${TIDEBUS_INTEROP_NODE_PATH:-}" && -d "$repo/target/js/node_modules" ]]; then
    export TIDEBUS_INTEROP_NODE_PATH="$repo/target/js/node_modules"
fi

run_maven \
    -DargLine="-Djavax.net.ssl.trustStore=$work/truststore.p12 -Djavax.net.ssl.trustStorePassword=tidebus -Djavax.net.ssl.trustStoreType=PKCS12" \
    "$@"
