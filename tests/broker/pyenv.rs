//! The Python virtualenv the pytest suites run in: `<target>/pyenv`, built from the pinned
//! `tests/python/requirements.txt`.
//!
//! Its stamp (see `prepared`) is the base interpreter and the requirements text: a new Python or
//! a changed pin rebuilds it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::prepared::{self, crate_root};

/// The requirements every suite installs, relative to the crate root.
const REQUIREMENTS: &str = "tests/python/requirements.txt";
/// Written inside the venv once the install succeeded.
const STAMP: &str = "tidebus-requirements.stamp";

/// A ready virtualenv.
pub struct PyEnv {
    dir: PathBuf,
}

impl PyEnv {
    /// The venv's interpreter; run tools as `python -m <tool>`.
    pub fn python(&self) -> PathBuf {
        if cfg!(windows) {
            self.dir.join("Scripts").join("python.exe")
        } else {
            self.dir.join("bin").join("python")
        }
    }
}

/// The venv with `tests/python/requirements.txt` installed, built or refreshed on first use.
///
/// Panics with the failing command's output if it cannot be built.
pub fn shared() -> &'static PyEnv {
    static ENV: OnceLock<Result<PyEnv, String>> = OnceLock::new();
    let build = || {
        ensure(
            &prepared::target_dir().join("pyenv"),
            &crate_root().join(REQUIREMENTS),
        )
    };
    match ENV.get_or_init(build) {
        Ok(env) => env,
        Err(why) => panic!("cannot prepare the Python virtualenv: {why}"),
    }
}

fn ensure(dir: &Path, requirements: &Path) -> Result<PyEnv, String> {
    let pinned = std::fs::read_to_string(requirements)
        .map_err(|e| format!("reading {}: {e}", requirements.display()))?;
    let base = base_python()?;
    let version = prepared::run(Command::new(&base).arg("--version"))?;
    let stamp = format!(
        "{} ({})\n{pinned}",
        String::from_utf8_lossy(&version.stdout).trim(),
        base.display()
    );
    let env = PyEnv {
        dir: dir.to_path_buf(),
    };
    prepared::ensure(dir, STAMP, &stamp, |dir| {
        prepared::run(Command::new(&base).args(["-m", "venv"]).arg(dir))?;
        prepared::run(
            Command::new(env.python())
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                    "-r",
                ])
                .arg(requirements),
        )?;
        Ok(())
    })?;
    Ok(env)
}

/// `TIDEBUS_PYTHON` if set, else the first of `python3`, `python` that runs.
fn base_python() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("TIDEBUS_PYTHON") {
        return Ok(PathBuf::from(path));
    }
    for name in ["python3", "python"] {
        if Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(PathBuf::from(name));
        }
    }
    Err("no `python3` or `python` on PATH; install Python 3.9+ or set TIDEBUS_PYTHON".into())
}
