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
tools="mvn java keytool"
keep=TIDEBUS_JAVA_KEEP
# shellcheck source=suite.sh
source "$here/suite.sh"

# TLS for the administration endpoint (the SDK's administration client speaks HTTPS only): a
# `gen-cert` certificate, its CA in a Java trust store the test JVM is pointed at.
make_certificates

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
start_broker --admin-listen 127.0.0.1:0 --testing reset,clock,exposed
echo "run.sh: broker $bin (pid $broker_pid) on $amqp, administration https://$admin"

key="SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
export TIDEBUS_CONNECTION_STRING="Endpoint=sb://localhost:${amqp##*:};$key;UseDevelopmentEmulator=true"
# The SDK keeps only the host of an administration endpoint (it always dials HTTPS on 443):
# the tests put TIDEBUS_ADMIN_PORT back into each request's URL.
export TIDEBUS_ADMIN_CONNECTION_STRING="Endpoint=sb://localhost:${admin##*:}/;$key"
export TIDEBUS_ADMIN_PORT="${admin##*:}"

run_maven \
    -DargLine="-Djavax.net.ssl.trustStore=$work/truststore.p12 -Djavax.net.ssl.trustStorePassword=tidebus -Djavax.net.ssl.trustStoreType=PKCS12" \
    "$@"
