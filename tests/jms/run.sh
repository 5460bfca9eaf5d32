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
reports="$build_dir/surefire-reports"

if [[ ! -x "$bin" ]]; then
    echo "run.sh: no broker binary at $bin (build it with \`cargo build --release\` or set TIDEBUS_BIN)" >&2
    exit 2
fi
for tool in mvn java; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not on PATH (needs a JDK 17 and Maven)" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/tidebus-jms-XXXXXX")"
broker_pid=""

# Stops the broker this script started (by its pid, SIGTERM then, after 20 s, SIGKILL) and
# removes its directory unless a test failed or TIDEBUS_JMS_KEEP is set.
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
    if [[ $status -eq 0 && -z "${TIDEBUS_JMS_KEEP:-}" ]]; then
        rm -rf "$work"
    else
        echo "run.sh: the broker's config and log are kept in $work" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

RUST_LOG="${RUST_LOG:-info}" "$bin" --config "$work/tidebus.toml" --listen 127.0.0.1:0 \
    --data-dir "$work/data" --ready-file "$work/ready" \
    >"$work/broker.log" 2>&1 </dev/null &
broker_pid=$!

# The ready file (written atomically): the plain address on its first line.
amqp=""
for _ in $(seq 300); do
    if ! kill -0 "$broker_pid" 2>/dev/null; then
        echo "run.sh: the broker exited before it was ready; its log:" >&2
        cat "$work/broker.log" >&2
        broker_pid=""
        exit 2
    fi
    if [[ -s "$work/ready" ]]; then
        amqp="$(head -n1 "$work/ready")"
        break
    fi
    sleep 0.1
done
if [[ -z "$amqp" ]]; then
    echo "run.sh: the broker did not write its ready file within 30 s; its log:" >&2
    cat "$work/broker.log" >&2
    exit 2
fi
echo "run.sh: broker $bin (pid $broker_pid) on $amqp"

export TIDEBUS_AMQP_URL="amqp://$amqp"

rm -rf "$reports"
set +e
mvn -B -ntp -Dstyle.color=never -f "$here/pom.xml" -Dtidebus.buildDirectory="$build_dir" "$@" test 2>&1
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
# The Java suite's Summary.java reads the Surefire reports: a line per class, each failure with
# its message, and the total last. It exits 1 when a test failed.
java "$repo/tests/java/Summary.java" "$reports" || exit 1
if [[ $maven -ne 0 ]]; then
    echo "run.sh: Maven exited with $maven although every reported test passed" >&2
    exit 1
fi
