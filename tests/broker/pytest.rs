//! Runs one pytest target in the shared venv against the real broker binary.
//!
//! pytest's output is echoed line by line as it comes (live with `cargo test -- --nocapture`,
//! shown by libtest when the test fails). Any non-zero exit fails the test, including 5, "no
//! tests collected". `TIDEBUS_PYTEST_ARGS` appends arguments, e.g. `-k idle -x`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::pyenv;

/// The whole pytest run is killed and failed after this long.
const RUN_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How many trailing output lines the panic message repeats.
const TAIL_LINES: usize = 40;

/// Runs `python -m pytest <target> -q` from the crate root with `TIDEBUS_BIN` set; panics unless
/// pytest exits 0.
pub fn run(target: &str) {
    let python = pyenv::shared().python();
    let extra = std::env::var("TIDEBUS_PYTEST_ARGS").unwrap_or_default();
    let mut command = Command::new(&python);
    command
        .current_dir(pyenv::crate_root())
        .args(["-m", "pytest", target, "-q"])
        .args(extra.split_whitespace())
        .env("TIDEBUS_BIN", env!("CARGO_BIN_EXE_tidebus"))
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{command:?}");
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));

    let (lines, received) = mpsc::channel();
    let readers = [
        child.stdout.take().map(|out| forward(out, lines.clone())),
        child.stderr.take().map(|err| forward(err, lines.clone())),
    ];
    drop(lines);

    let deadline = Instant::now() + RUN_DEADLINE;
    let mut output = Vec::new();
    loop {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{shown} did not finish within {RUN_DEADLINE:?}; killed it");
        }
        match received.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => {
                println!("{line}");
                output.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    for reader in readers.into_iter().flatten() {
        let _ = reader.join();
    }
    let status = child
        .wait()
        .unwrap_or_else(|e| panic!("waiting for {shown}: {e}"));
    if status.success() {
        return;
    }
    let meaning = match status.code() {
        Some(1) => "tests failed",
        Some(5) => "no tests collected",
        Some(_) => "pytest error",
        None => "killed by a signal",
    };
    let tail = output[output.len().saturating_sub(TAIL_LINES)..].join("\n");
    panic!("pytest {target}: {meaning} ({status})\n{shown}\n--- last lines ---\n{tail}");
}

/// Sends each line of `stream` to `lines` from a new thread, until EOF. Reads on even if the
/// receiver is gone, so the child never blocks on a full pipe.
fn forward(
    stream: impl Read + Send + 'static,
    lines: mpsc::Sender<String>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            let text = String::from_utf8_lossy(&line)
                .trim_end_matches(['\r', '\n'])
                .to_string();
            let _ = lines.send(text);
            line.clear();
        }
    })
}
