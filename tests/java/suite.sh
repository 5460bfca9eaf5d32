# What the Maven suites' run.sh scripts (tests/java, tests/jms) share, sourced by them after they
# set `here`, `repo`, `bin`, `build_dir`, `tools` (the commands the suite needs) and `keep` (the
# name of the variable that keeps the broker's directory): the checks before a run, the
# broker's start and stop, and Maven's run with its summary.

reports="$build_dir/surefire-reports"

if [[ ! -x "$bin" ]]; then
    echo "run.sh: no broker binary at $bin (build it with \`cargo build --release\` or set TIDEBUS_BIN)" >&2
    exit 2
fi
for tool in $tools; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not on PATH (needs a JDK 17 and Maven)" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/tidebus-$(basename "$here")-XXXXXX")"
broker_pid=""

# Stops the broker this script started (by its pid, SIGTERM then, after 20 s, SIGKILL).
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

# Stops the broker and removes its directory unless a test failed or `$keep` is set.
cleanup() {
    local status=$?
    stop_broker
    if [[ $status -eq 0 && -z "${!keep:-}" ]]; then
        rm -rf "$work"
    else
        echo "run.sh: the broker's config and log are kept in $work" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A `gen-cert` certificate for localhost in $work/certs (server.pem, server-key.pem), and its CA
# in a Java trust store, $work/truststore.p12 (password `tidebus`), for the test JVM.
make_certificates() {
    "$bin" gen-cert --out "$work/certs" --host localhost --host 127.0.0.1 >/dev/null
    keytool -importcert -noprompt -alias tidebus-ca -file "$work/certs/ca.pem" \
        -keystore "$work/truststore.p12" -storetype PKCS12 -storepass tidebus >/dev/null 2>&1
}

# Starts the broker on $work/tidebus.toml with the extra arguments given and waits for its
# ready file: sets `amqp` (the plain address, its first line) and, when the broker serves one,
# `admin` (its `admin ADDR` line). Exits 2 when it does not come up within 30 s.
start_broker() {
    RUST_LOG="${RUST_LOG:-info}" "$bin" --config "$work/tidebus.toml" --listen 127.0.0.1:0 \
        --data-dir "$work/data" --ready-file "$work/ready" "$@" \
        >"$work/broker.log" 2>&1 </dev/null &
    broker_pid=$!
    local wants_admin=""
    [[ " $* " == *" --admin-listen "* ]] && wants_admin=1
    amqp="" admin=""
    for _ in $(seq 300); do
        if ! kill -0 "$broker_pid" 2>/dev/null; then
            echo "run.sh: the broker exited before it was ready; its log:" >&2
            cat "$work/broker.log" >&2
            broker_pid=""
            exit 2
        fi
        # Written atomically, the admin line last.
        if [[ -s "$work/ready" ]] && { [[ -z "$wants_admin" ]] || grep -q '^admin ' "$work/ready"; }; then
            amqp="$(head -n1 "$work/ready")"
            admin="$(sed -n 's/^admin //p' "$work/ready")"
            return
        fi
        sleep 0.1
    done
    echo "run.sh: the broker did not write its ready file within 30 s; its log:" >&2
    cat "$work/broker.log" >&2
    exit 2
}

# Runs Maven's tests with the arguments given, stops the broker, and prints the summary: a line
# per class and `N passed, N failed` last. Exits 1 unless every test passed.
run_maven() {
    rm -rf "$reports"
    local maven
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
    # Maven ends its output (stdout and stderr, merged above) with colour resets and no
    # newline: start the summary on a line of its own.
    echo
    # Summary.java reads the Surefire reports: a line per class, each failure with its
    # message, and the total last. It exits 1 when a test failed.
    java "$repo/tests/java/Summary.java" "$reports" || exit 1
    if [[ $maven -ne 0 ]]; then
        echo "run.sh: Maven exited with $maven although every reported test passed" >&2
        exit 1
    fi
}
