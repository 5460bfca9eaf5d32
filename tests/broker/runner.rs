//! Runs an external test runner (pytest, `node --test`, the Java suite's `run.sh`) against the real
//! broker binary.
//!
//! The runner's output is echoed line by line as it comes (live with `cargo test --
//! --nocapture`, shown by libtest when the test fails). Any non-zero exit fails the test.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::prepared::{crate_root, target_dir};

/// `mvn test` of the Maven project `project` (a folder of the crate holding its `pom.xml`), in
/// batch mode without colours, its output in `<target>/<build_dir>`, with `args` before the
/// goal.
pub fn maven_test(project: &str, build_dir: &str, args: &[&str]) -> Command {
    let mut command = Command::new("mvn");
    command
        .current_dir(crate_root())
        .args(["-B", "-ntp", "-Dstyle.color=never", "-f"])
        .arg(crate_root().join(project).join("pom.xml"))
        .arg(format!(
            "-Dtidebus.buildDirectory={}",
            target_dir().join(build_dir).display()
        ))
        .args(args)
        .arg("test");
    command
}

/// The first run of a Spring application downloads Spring Boot and the libraries it uses
/// before it tests.
const MAVEN_APP_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// Runs `command`, a [`maven_test`] of the application in `project`; panics as [`run`] does
/// unless the application's tests pass.
pub fn maven_app(project: &str, command: &mut Command) {
    run(
        &format!("mvn test ({project})"),
        command,
        MAVEN_APP_DEADLINE,
        |code| match code {
            Some(1) => "the application's test failed (or Maven could not resolve it)",
            Some(_) => "Maven error",
            None => "killed by a signal",
        },
    );
}

/// The first run of a Maven suite downloads its artifacts and Maven's plugins before it tests.
const MAVEN_SUITE_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// Runs the Maven suite `tests/<suite>/run.sh` (`java`, `jms`) with the arguments in
/// `TIDEBUS_<SUITE>_ARGS`, by default its smoke slice (`-Dgroups=smoke`), Maven's output in
/// `<target>/<suite>`; panics as [`run`] does, naming what run.sh's exit code means.
pub fn maven_suite(suite: &str) {
    let args = std::env::var(format!("TIDEBUS_{}_ARGS", suite.to_uppercase()))
        .unwrap_or_else(|_| "-Dgroups=smoke".into());
    let args: Vec<&str> = args.split_whitespace().collect();
    maven_suite_run(suite, &args, suite, &[]);
}

/// Runs the Maven suite `tests/<suite>/run.sh` with `args`, Maven's output in
/// `<target>/<build_dir>`, and `envs` added (how a driver names prepared SDKs to it); panics as
/// [`run`] does, naming what run.sh's exit code means.
pub fn maven_suite_run(suite: &str, args: &[&str], build_dir: &str, envs: &[(&str, &Path)]) {
    let script = format!("tests/{suite}/run.sh");
    let mut command = Command::new("bash");
    command
        .current_dir(crate_root())
        .arg(&script)
        .args(args)
        .env(
            format!("TIDEBUS_{}_BUILD_DIR", suite.to_uppercase()),
            target_dir().join(build_dir),
        )
        .envs(envs.iter().copied());
    run(
        &script,
        &mut command,
        MAVEN_SUITE_DEADLINE,
        |code| match code {
            Some(1) => "tests failed",
            Some(2) => "the suite could not start (broker, JDK or Maven)",
            Some(_) => "run.sh error",
            None => "killed by a signal",
        },
    );
}

/// How many trailing output lines the panic message repeats.
const TAIL_LINES: usize = 40;

/// Runs `command` with `TIDEBUS_BIN` set to the broker binary; panics unless it exits 0 within
/// `deadline` (then it is killed). `meaning` names an exit code (`None`: killed by a signal) in
/// the panic message, which starts with `label`.
pub fn run(
    label: &str,
    command: &mut Command,
    deadline: Duration,
    meaning: fn(Option<i32>) -> &'static str,
) {
    command
        .env("TIDEBUS_BIN", env!("CARGO_BIN_EXE_tidebus"))
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

    let until = Instant::now() + deadline;
    let mut output = Vec::new();
    loop {
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{shown} did not finish within {deadline:?}; killed it");
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
    let tail = output[output.len().saturating_sub(TAIL_LINES)..].join("\n");
    panic!(
        "{label}: {} ({status})\n{shown}\n--- last lines ---\n{tail}",
        meaning(status.code())
    );
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
