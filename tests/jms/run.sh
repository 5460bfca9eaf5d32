#!/usr/bin/env bash
# The JMS suite in one command: starts the broker from $TIDEBUS_BIN (default: the release build)
# on an ephemeral loopback port, runs the JUnit classes of tests/jms (Qpid JMS) with Maven
# against it, stops the broker it started, and prints per class passed/failed/skipped, then the
# total as its last line: `N passed, N failed`.
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
tools="mvn java"
keep=TIDEBUS_JMS_KEEP
# shellcheck source=../java/suite.sh
source "$repo/tests/java/suite.sh"

# In memory, plain AMQP only: Qpid JMS dials amqp://127.0.0.1:PORT. Anonymous clients are let
# in (most tests connect with SASL ANONYMOUS, as a local Qpid JMS setup does), and the
# emulator's policy in entities.toml is there for the tests that sign in with SASL PLAIN (as
# azure-servicebus-jms does with a connection string). No administration endpoint: nothing
# here uses it.
{
    cat <<EOF
[broker]
durability = "memory"
allow_anonymous = true
idle_timeout = "60s"

[admin]
listen = ""

EOF
    cat "$here/entities.toml"
} >"$work/tidebus.toml"

start_broker
echo "run.sh: broker $bin (pid $broker_pid) on $amqp"

export TIDEBUS_AMQP_URL="amqp://$amqp"

run_maven "$@"
