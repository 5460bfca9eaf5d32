//! Mixed JMS and Service Bus SDK traffic (issue 55): the JMS suite's `InteropTest`
//! (`tests/jms`), run by `tests/jms/run.sh -Dtest=InteropTest` against the broker binary under
//! test. One broker; each test sends from one side and runs the other as a subprocess:
//! Qpid JMS's six message kinds read by the Python SDK (`tests/python/jms_interop.py`) and a
//! text and a bytes message by the JavaScript SDK (`tests/jms/interop.js`), and what each SDK
//! sends read by Qpid JMS.
//!
//! This driver prepares the SDKs as the Python and JavaScript suites do (the shared venv, the
//! lock file's `node_modules`) and names them to run.sh, so the tests run rather than skip.
//! Maven's output goes to `<target>/jms-interop` (apart from the smoke suite's, which may run
//! at the same time). Output and failure as in `runner`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::prepared::{self, crate_root};
use crate::{pyenv, runner};

/// The first run downloads azure-servicebus-jms and the suite's artifacts before it tests.
const RUN_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// JMS -> Python SDK (six kinds: body type and content, subject, correlation id, message id,
/// reply-to, to, time to live, priority, typed application properties, the JMS type
/// annotation), JMSXGroupID as the session a Python session receiver takes, Python SDK -> JMS (str, bytes, text/plain and value bodies, ids, subject,
/// properties), JMS -> JavaScript SDK (text and bytes), JavaScript SDK -> JMS (JSON string,
/// Buffer and value bodies, ids, subject, properties).
#[test]
fn jms_sdk_interop_suite() {
    let mut command = Command::new("bash");
    command
        .current_dir(crate_root())
        .args(["tests/jms/run.sh", "-Dtest=InteropTest"])
        .env(
            "TIDEBUS_JMS_BUILD_DIR",
            prepared::target_dir().join("jms-interop"),
        )
        .env("TIDEBUS_INTEROP_PYTHON", pyenv::shared().python())
        .env("TIDEBUS_INTEROP_NODE_PATH", node_modules());
    runner::run(
        "tests/jms/run.sh -Dtest=InteropTest",
        &mut command,
        RUN_DEADLINE,
        |code| match code {
            Some(1) => "interop tests failed",
            Some(2) => "the suite could not start (broker, JDK or Maven)",
            Some(_) => "run.sh error",
            None => "killed by a signal",
        },
    );
}

/// `<target>/js/node_modules`, installed from `tests/js/package-lock.json` on first use: the
/// same directory and stamp as `js.rs`'s, so whichever runs first installs it for both.
fn node_modules() -> &'static Path {
    const STAMP: &str = "tidebus-package-lock.stamp";
    static MODULES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let install = || {
        let dir = prepared::target_dir().join("js");
        let source = crate_root().join("tests/js");
        let read = |name: &str| {
            let path = source.join(name);
            std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
        };
        let (manifest, lock) = (read("package.json")?, read("package-lock.json")?);
        prepared::ensure(&dir, STAMP, &lock, |dir| {
            for (name, text) in [("package.json", &manifest), ("package-lock.json", &lock)] {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
            }
            prepared::run(Command::new("npm").current_dir(dir).args([
                "ci",
                "--no-audit",
                "--no-fund",
            ]))?;
            Ok(())
        })?;
        Ok(dir.join("node_modules"))
    };
    match MODULES.get_or_init(install) {
        Ok(dir) => dir,
        Err(why) => panic!("cannot install the JavaScript packages: {why}"),
    }
}
