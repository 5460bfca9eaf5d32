//! Suites with the official Azure Service Bus SDK for JavaScript (`@azure/service-bus`), run by
//! `node --test` against the real broker binary.
//!
//! The SDK comes from `tests/js/package-lock.json`: `<target>/js` receives `package.json` and
//! the lock file, and `npm ci` installs `node_modules` there once per machine (the lock file's
//! text is the stamp, see `prepared`). The test files stay in `tests/js` and find the SDK
//! through `NODE_PATH`, so they are CommonJS (`require`; ESM `import` ignores `NODE_PATH`).
//! Output and failure as in `runner`. `TIDEBUS_NODE_TEST_ARGS` appends arguments, e.g.
//! `--test-name-pattern=dead`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::prepared::{self, crate_root};
use crate::runner;

/// Where `package.json` and `package-lock.json` live, relative to the crate root.
const PACKAGE_DIR: &str = "tests/js";
/// Written in `<target>/js` once `npm ci` succeeded.
const STAMP: &str = "tidebus-package-lock.stamp";
/// One `node --test` run is killed and failed after this long.
const RUN_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// Send, receive and settle: batches, receive modes, complete / abandon / defer / dead-letter,
/// the dead-letter queue, max delivery count, lock renewal, peek, and the errors the SDK maps
/// (entity not found, message too large).
#[test]
fn azure_sdk_suite() {
    run("tests/js/sdk.test.js");
}

/// Locks running out: lock lost on a late complete or renew, and a closed receiver's locks
/// holding until they expire.
#[test]
fn azure_sdk_locks_suite() {
    run("tests/js/locks.test.js");
}

/// Time: scheduled messages (schedule, cancel, peek) and time to live (the message's and the
/// entity's default).
#[test]
fn azure_sdk_time_suite() {
    run("tests/js/time.test.js");
}

/// Deferral and dead-lettering on a queue, a subscription and a session-enabled subscription:
/// what counts as a delivery (a deferral does, a dead-lettering does not), the deferred state.
#[test]
fn azure_sdk_deferral_suite() {
    run("tests/js/deferral.test.js");
}

/// Topics: the rule manager (create, list, delete rules at run time), SQL and correlation
/// filters with actions picking and shaping the copies, a subscription's own dead-letter queue.
#[test]
fn azure_sdk_topics_suite() {
    run("tests/js/topics.test.js");
}

/// Sessions: `acceptSession` and `acceptNextSession`, order within a session, session state
/// and lock renewal, `SessionCannotBeLocked`, the timeout with no session available, sends
/// without a session id, a lapsed session lock (`SessionLockLost`), a session-enabled
/// subscription.
#[test]
fn azure_sdk_sessions_suite() {
    run("tests/js/sessions.test.js");
}

/// Partitioned queues and topics: sends spread over partitions, partition keys and sessions in
/// one partition, next-available sessions in every partition, peek across partitions,
/// schedule, deferral, renewal and dead-lettering by number and token, a rule added at run time
/// filtering every partition.
#[test]
fn azure_sdk_partitions_suite() {
    run("tests/js/partitions.test.js");
}

/// Security: the emulator's connection string with anonymous clients refused, a wrong key
/// refused (`UnauthorizedAccess`), and the SDK over TLS trusting a `gen-cert` CA through
/// `NODE_EXTRA_CA_CERTS`.
#[test]
fn security_suite() {
    run("tests/js/security.test.js");
}

/// AMQP over WebSockets (`webSocketOptions` with the `ws` package; the SDK then always dials
/// wss): to the TLS port, and to a `websocket_listen` listener on 443 with no port in the
/// connection string; CBS, settlement, peek, schedule and cancel, a session and its state over
/// each.
#[test]
fn azure_sdk_websockets_suite() {
    run("tests/js/websockets.test.js");
}

/// The administration client over HTTPS: create, describe, runtime counts, list, conflicts,
/// missing entities, delete.
#[test]
fn admin_suite() {
    run("tests/js/admin.test.js");
}

/// The web console in headless Chromium (Debian's package, driven by `playwright-core`): it
/// lists the entities, peeks a message, resubmits a dead letter (then the SDK receives it),
/// purges a dead-letter queue, sends a test message, and asks for a key when anonymous clients
/// are refused. Screenshots go to `<target>/console/`.
#[test]
fn console_suite() {
    let browser = chromium();
    let screenshots = prepared::target_dir().join("console");
    std::fs::create_dir_all(&screenshots).expect("screenshot directory");
    run_with(
        "tests/js/console.test.js",
        &[
            ("TIDEBUS_CHROMIUM", browser),
            ("TIDEBUS_SCREENSHOTS", &screenshots),
        ],
    );
}

/// Where Chromium is: Debian's `chromium` package, installed with apt-get when absent (the
/// tests run as root on the project's machines). Panics saying why when it cannot be.
fn chromium() -> &'static Path {
    const BROWSER: &str = "/usr/bin/chromium";
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        if Path::new(BROWSER).exists() {
            return Ok(());
        }
        let install = || {
            prepared::run(
                Command::new("apt-get")
                    .args(["install", "-y", "chromium"])
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            )
        };
        if install().is_err() {
            prepared::run(Command::new("apt-get").arg("update"))?;
            install()?;
        }
        Ok(())
    });
    match installed {
        Ok(()) => Path::new(BROWSER),
        Err(why) => panic!(
            "the console test needs Chromium at {BROWSER} and it could not be installed \
             (apt-get install chromium): {why}"
        ),
    }
}

/// Runs `node --test <file>` from the crate root; panics unless it exits 0.
fn run(file: &str) {
    run_with(file, &[]);
}

/// [`run`] with `env` added to node's environment.
fn run_with(file: &str, env: &[(&str, &Path)]) {
    let extra = std::env::var("TIDEBUS_NODE_TEST_ARGS").unwrap_or_default();
    let mut command = Command::new("node");
    command
        .current_dir(crate_root())
        .args(["--test", "--test-reporter=spec"])
        .args(extra.split_whitespace())
        .arg(file)
        .env("NODE_PATH", node_modules())
        .envs(env.iter().copied());
    runner::run(
        &format!("node --test {file}"),
        &mut command,
        RUN_DEADLINE,
        |code| match code {
            Some(1) => "tests failed",
            Some(_) => "node error",
            None => "killed by a signal",
        },
    );
}

/// `<target>/js/node_modules`, installed from the lock file on first use (once per test
/// binary, whichever test asks first).
///
/// Panics with the failing command's output if it cannot be installed.
pub fn node_modules() -> &'static Path {
    static MODULES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match MODULES.get_or_init(|| install(&prepared::target_dir().join("js"))) {
        Ok(dir) => dir,
        Err(why) => panic!("cannot install the JavaScript packages: {why}"),
    }
}

fn install(dir: &Path) -> Result<PathBuf, String> {
    let source = crate_root().join(PACKAGE_DIR);
    let read = |name: &str| {
        let path = source.join(name);
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
    };
    let (manifest, lock) = (read("package.json")?, read("package-lock.json")?);
    prepared::ensure(dir, STAMP, &lock, |dir| {
        for (name, text) in [("package.json", &manifest), ("package-lock.json", &lock)] {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
        prepared::run(
            Command::new(npm)
                .current_dir(dir)
                .args(["ci", "--no-audit", "--no-fund"]),
        )?;
        Ok(())
    })?;
    Ok(dir.join("node_modules"))
}

/// `[testing] reset` between two tests: nothing of the first left (active, scheduled and
/// dead-lettered messages, a subscription's copies), numbering from 1 again; the controlled
/// clock firing a day's schedule and time to live, a lock and idleness on an advance, kept by
/// a reset, refusing bad and backward moves.
#[test]
fn testing_suite() {
    run("tests/js/testing.test.js");
}
