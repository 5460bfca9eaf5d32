//! Runs one pytest target in the shared venv against the real broker binary.
//!
//! Output and failure as in `runner`: any non-zero exit fails the test, including 5, "no tests
//! collected". `TIDEBUS_PYTEST_ARGS` appends arguments, e.g. `-k idle -x`.

use std::process::Command;
use std::time::Duration;

use crate::{prepared, pyenv, runner};

/// The whole pytest run is killed and failed after this long.
const RUN_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// Runs `python -m pytest <target> -q` from the crate root with `TIDEBUS_BIN` set; panics unless
/// pytest exits 0.
pub fn run(target: &str) {
    let extra = std::env::var("TIDEBUS_PYTEST_ARGS").unwrap_or_default();
    let mut command = Command::new(pyenv::shared().python());
    command
        .current_dir(prepared::crate_root())
        .args(["-m", "pytest", target, "-q"])
        .args(extra.split_whitespace())
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    runner::run(
        &format!("pytest {target}"),
        &mut command,
        RUN_DEADLINE,
        |code| match code {
            Some(1) => "tests failed",
            Some(5) => "no tests collected",
            Some(_) => "pytest error",
            None => "killed by a signal",
        },
    );
}
