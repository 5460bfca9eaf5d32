//! The real `tidebus` binary as a child process, for crashes (`kill -9`) and graceful stops
//! (SIGTERM). Its log goes to a file that is printed when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::powercut_fs::{say_skipped, Cut, PowerCutFs};
use crate::support::DEADLINE;

/// A broker process on a free loopback port.
pub struct ChildBroker {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// Where its TLS listener is, if the config has one.
    pub tls_addr: Option<std::net::SocketAddr>,
    /// Where its administration endpoint is, unless the config turns it off.
    pub admin_addr: Option<std::net::SocketAddr>,
    child: Option<Child>,
    log: PathBuf,
}

impl ChildBroker {
    /// Starts the binary with `config` (TOML text) on `data_dir` and waits until it is ready.
    pub fn start(dir: &Path, config: &str) -> Self {
        Self::spawn(dir, config, None, &[])
    }

    /// Like [`ChildBroker::start`], but a process that exits before it is ready (e.g. because a
    /// listener's address is taken) is an `Err` with its exit status and log, not a panic.
    pub fn try_start(dir: &Path, config: &str) -> Result<Self, String> {
        Self::try_launch(dir, &dir.join("data"), config, None, &[])
    }

    /// Like [`ChildBroker::start`], with `env` added to the process's environment.
    pub fn start_with_env(dir: &Path, config: &str, env: &[(&str, &Path)]) -> Self {
        Self::spawn(dir, config, None, env)
    }

    /// Like [`ChildBroker::start`], but no file the process writes may grow past
    /// `max_file_bytes` (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored): a write past it fails as on a
    /// full disk.
    pub fn start_with_full_disk_at(dir: &Path, config: &str, max_file_bytes: u64) -> Self {
        Self::spawn(dir, config, Some(max_file_bytes), &[])
    }

    /// Like [`ChildBroker::start`], with the database in `data` instead of `dir/data`.
    pub fn start_with_data(dir: &Path, data: &Path, config: &str) -> Self {
        Self::launch(dir, data, config, None, &[])
    }

    fn spawn(dir: &Path, config: &str, max_file_bytes: Option<u64>, env: &[(&str, &Path)]) -> Self {
        Self::launch(dir, &dir.join("data"), config, max_file_bytes, env)
    }

    fn launch(
        dir: &Path,
        data: &Path,
        config: &str,
        max_file_bytes: Option<u64>,
        env: &[(&str, &Path)],
    ) -> Self {
        Self::try_launch(dir, data, config, max_file_bytes, env).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_launch(
        dir: &Path,
        data: &Path,
        config: &str,
        max_file_bytes: Option<u64>,
        env: &[(&str, &Path)],
    ) -> Result<Self, String> {
        let config_path = dir.join("tidebus.toml");
        std::fs::write(&config_path, config).expect("write config");
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let log = dir.join(format!(
            "broker-{}.log",
            STARTS.fetch_add(1, Ordering::Relaxed)
        ));
        let log_file = std::fs::File::create(&log).expect("log file");
        // `TIDEBUS_BIN` runs another build (e.g. an older one, to see a test fail on it).
        let binary = std::env::var_os("TIDEBUS_BIN")
            .map_or_else(|| env!("CARGO_BIN_EXE_tidebus").into(), PathBuf::from);
        let mut command = Command::new(binary);
        if let Some(limit) = max_file_bytes {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the closure only makes two async-signal-safe
            // system calls.
            unsafe {
                command.pre_exec(move || {
                    let rlimit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) != 0
                        || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = command
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--admin-listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data)
            .arg("--ready-file")
            .arg(&ready)
            .env("RUST_LOG", "tidebus=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn tidebus");
        let mut broker = ChildBroker {
            addr: "127.0.0.1:0".parse().expect("addr"),
            tls_addr: None,
            admin_addr: None,
            child: Some(child),
            log,
        };
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                // The plain listener's address is the first line, the TLS one's `tls ADDR`.
                if let Some(Ok(addr)) = text.lines().next().map(str::parse) {
                    broker.addr = addr;
                    let line = |prefix: &str| {
                        text.lines()
                            .find_map(|line| line.strip_prefix(prefix))
                            .and_then(|addr| addr.parse().ok())
                    };
                    broker.tls_addr = line("tls ");
                    broker.admin_addr = line("admin ");
                    return Ok(broker);
                }
            }
            if let Some(status) = broker.child_mut().try_wait().expect("try_wait") {
                return Err(format!(
                    "tidebus exited with {status} before it was ready:\n{}",
                    broker.log_text()
                ));
            }
            assert!(
                started.elapsed() < DEADLINE,
                "tidebus not ready in time:\n{}",
                broker.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The broker's resident memory now and at its peak (`VmRSS`, `VmHWM`), in KiB.
    pub fn memory_kib(&self) -> (u64, u64) {
        let pid = self.child.as_ref().expect("running").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("running")
    }

    /// The broker's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("kill -9");
        child.wait().expect("reap");
    }

    /// SIGHUP (a reload request).
    pub fn hang_up(&mut self) {
        let pid = self.child_mut().id();
        let status = Command::new("kill")
            .arg("-HUP")
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -HUP failed");
    }

    /// SIGTERM, and the exit status within the deadline.
    pub fn terminate(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            if started.elapsed() > DEADLINE {
                let _ = child.kill();
                panic!("tidebus did not exit after SIGTERM:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildBroker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- tidebus log ---\n{}", self.log_text());
        }
    }
}

/// Where a crash test's broker keeps its data, and what a crash does to it: a test written
/// against it runs as a `kill -9` test and as a power-cut test alike.
pub struct Disk {
    /// The config, logs and ready file; the data too, unless the power can be cut.
    dir: tempfile::TempDir,
    power: Option<(PowerCutFs, Cut)>,
}

impl Disk {
    /// An ordinary directory: a crash is `kill -9`, and what the broker wrote stays in the page
    /// cache.
    pub fn plain() -> Disk {
        Disk {
            dir: tempfile::tempdir().expect("tempdir"),
            power: None,
        }
    }

    /// The data on a file system that forgets what was not synced ([`PowerCutFs`]): a crash is
    /// `kill -9`, then `cut`. `None`, said loudly, where FUSE cannot be used: `test` is skipped.
    pub fn cutting_power(test: &str, cut: Cut) -> Option<Disk> {
        match PowerCutFs::mount() {
            Ok(fs) => Some(Disk {
                dir: tempfile::tempdir().expect("tempdir"),
                power: Some((fs, cut)),
            }),
            Err(reason) => {
                say_skipped(test, &reason);
                None
            }
        }
    }

    /// The directory of the config, logs and ready file (never cut).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Starts a broker with `config` on this disk.
    pub fn start(&self, config: &str) -> ChildBroker {
        match &self.power {
            None => ChildBroker::start(self.dir.path(), config),
            Some((fs, _)) => {
                ChildBroker::start_with_data(self.dir.path(), &fs.path().join("data"), config)
            }
        }
    }

    /// SIGTERM, a clean exit, and then the power cut if this disk has one.
    pub fn stop(&self, broker: ChildBroker) {
        let status = broker.terminate();
        assert!(status.success(), "exit status after SIGTERM: {status}");
        self.cut();
    }

    /// Files synced on this disk so far (0 without a power cut: nothing counts them).
    pub fn file_syncs(&self) -> u64 {
        self.power
            .as_ref()
            .map_or(0, |(fs, _)| fs.sync_counts().file_syncs)
    }

    /// `kill -9`, and then the power cut if this disk has one.
    pub fn crash(&self, broker: ChildBroker) {
        broker.kill9();
        self.cut();
    }

    fn cut(&self) {
        if let Some((fs, cut)) = &self.power {
            let report = fs.cut_power(*cut);
            println!("power cut ({cut:?}): {report:?}, {:?}", fs.sync_counts());
        }
    }
}
