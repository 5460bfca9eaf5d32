//! Directories under the target dir that are built once per machine from pinned inputs (the
//! Python virtualenv, the JavaScript `node_modules`).
//!
//! Each carries a stamp: the text it was built from (the pinned file, the tool's version). A
//! matching stamp means nothing to do; any difference means delete and rebuild. The stamp is
//! written last, so an interrupted build is redone. Across processes (two `cargo test`s, or
//! nextest's process per test) a lock file next to the directory serialises the
//! check-and-build; within one process the caller keeps the result in a `OnceLock`.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// How long to wait for another process that is building the same directory.
const LOCK_WAIT: Duration = Duration::from_secs(20 * 60);
/// A lock file this old with no live owner we can check is abandoned.
const LOCK_STALE_AFTER: Duration = Duration::from_secs(30 * 60);

/// The crate root: tests run from here and resolve their paths against it.
pub fn crate_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `CARGO_TARGET_DIR` if set (relative to the crate root if relative), else `<crate>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => crate_root().join(dir),
        _ => crate_root().join("target"),
    }
}

/// Makes `dir` hold what `build` puts there from `stamp`'s inputs, unless its file `stamp_name`
/// already reads `stamp`. `build` gets an empty, existing `dir`.
///
/// # Errors
///
/// What `build` returned, or why the lock, the directory or the stamp could not be handled.
pub fn ensure(
    dir: &Path,
    stamp_name: &str,
    stamp: &str,
    build: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    let parent = dir.parent().unwrap_or(dir);
    fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;

    let _lock = LockFile::acquire(dir.with_extension("lock"))?;
    let stamp_path = dir.join(stamp_name);
    if fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp) {
        return Ok(());
    }
    eprintln!("prepared: building {}", dir.display());
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| format!("removing stale {}: {e}", dir.display()))?;
    }
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    build(dir)?;
    fs::write(&stamp_path, stamp).map_err(|e| format!("writing {}: {e}", stamp_path.display()))?;
    eprintln!("prepared: {} ready", dir.display());
    Ok(())
}

/// Runs `command` to completion; an error carries its exit status and output.
pub fn run(command: &mut Command) -> Result<Output, String> {
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
                        eprintln!("prepared: taking over abandoned lock {}", path.display());
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
