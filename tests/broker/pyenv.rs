//! The Python virtualenv the pytest suites run in: `<target>/pyenv`, built from the pinned
//! `tests/python/requirements.txt`.
//!
//! The venv carries a stamp: the base interpreter and the requirements text it was built from.
//! A matching stamp means nothing to do; any difference means delete and rebuild. The stamp is
//! written last, so an interrupted build is redone. Within one test process a `OnceLock` builds
//! it once; across processes (two `cargo test`s, or nextest's process per test) a lock file
//! next to the venv serialises the check-and-build.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// The requirements every suite installs, relative to the crate root.
const REQUIREMENTS: &str = "tests/python/requirements.txt";
/// Written inside the venv once the install succeeded.
const STAMP: &str = "tidebus-requirements.stamp";
/// How long to wait for another process that is building the venv.
const LOCK_WAIT: Duration = Duration::from_secs(20 * 60);
/// A lock file this old with no live owner we can check is abandoned.
const LOCK_STALE_AFTER: Duration = Duration::from_secs(30 * 60);

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

/// The crate root: tests run from here and resolve their paths against it.
pub fn crate_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv with `tests/python/requirements.txt` installed, built or refreshed on first use.
///
/// Panics with the failing command's output if it cannot be built.
pub fn shared() -> &'static PyEnv {
    static ENV: OnceLock<Result<PyEnv, String>> = OnceLock::new();
    let build = || {
        ensure(
            &target_dir().join("pyenv"),
            &crate_root().join(REQUIREMENTS),
        )
    };
    match ENV.get_or_init(build) {
        Ok(env) => env,
        Err(why) => panic!("cannot prepare the Python virtualenv: {why}"),
    }
}

/// `CARGO_TARGET_DIR` if set (relative to the crate root if relative), else `<crate>/target`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => crate_root().join(dir),
        _ => crate_root().join("target"),
    }
}

fn ensure(dir: &Path, requirements: &Path) -> Result<PyEnv, String> {
    let pinned = fs::read_to_string(requirements)
        .map_err(|e| format!("reading {}: {e}", requirements.display()))?;
    let base = base_python()?;
    let version = run(Command::new(&base).arg("--version"))?;
    let stamp = format!(
        "{} ({})\n{pinned}",
        String::from_utf8_lossy(&version.stdout).trim(),
        base.display()
    );
    let parent = dir.parent().unwrap_or(dir);
    fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;

    let _lock = LockFile::acquire(dir.with_extension("lock"))?;
    let env = PyEnv {
        dir: dir.to_path_buf(),
    };
    if fs::read_to_string(dir.join(STAMP)).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(env);
    }
    eprintln!(
        "pyenv: building {} from {}",
        dir.display(),
        requirements.display()
    );
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| format!("removing stale {}: {e}", dir.display()))?;
    }
    run(Command::new(&base).args(["-m", "venv"]).arg(dir))?;
    run(Command::new(env.python())
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
        ])
        .arg(requirements))?;
    let stamp_path = dir.join(STAMP);
    fs::write(&stamp_path, &stamp).map_err(|e| format!("writing {}: {e}", stamp_path.display()))?;
    eprintln!("pyenv: ready");
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

/// Runs `command` to completion; an error carries its exit status and output.
fn run(command: &mut Command) -> Result<Output, String> {
    let shown = format!("{command:?}");
    let output = command
        .output()
        .map_err(|e| format!("{shown}: cannot start: {e}"))?;
    if output.status.success() {
        return Ok(output);
    }
    Err(format!(
        "{shown} failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// An exclusive lock between processes: a file created with `create_new`, holding the owner's
/// pid, removed on drop. A lock whose owner is gone (a killed build) is taken over.
struct LockFile {
    path: PathBuf,
}

impl LockFile {
    fn acquire(path: PathBuf) -> Result<LockFile, String> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    // Best effort: without a pid the lock is judged by its age alone.
                    let _ = writeln!(file, "{}", std::process::id());
                    return Ok(LockFile { path });
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    if is_abandoned(&path) {
                        eprintln!("pyenv: taking over abandoned lock {}", path.display());
                        let _ = fs::remove_file(&path);
                        continue;
                    }
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "{} is still held after {LOCK_WAIT:?}; remove it if no build runs",
                            path.display()
                        ));
                    }
                    thread::sleep(Duration::from_millis(250));
                }
                Err(e) => return Err(format!("creating {}: {e}", path.display())),
            }
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// True if the lock's owner is known to be dead (Linux: no `/proc/<pid>`), or the lock is older
/// than `LOCK_STALE_AFTER`. A lock that vanished meanwhile is not abandoned: just retry.
fn is_abandoned(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false;
    };
    if let Ok(pid) = text.trim().parse::<u32>() {
        if Path::new("/proc/self").exists() {
            return !Path::new("/proc").join(pid.to_string()).exists();
        }
    }
    let age = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok());
    age.is_some_and(|age| age > LOCK_STALE_AFTER)
}
