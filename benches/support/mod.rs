//! What the benches share: the broker on a runtime of its own or as a child process, their
//! flags and their client connections. Included by each bench with `mod support;`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::Connection;
use tidebus::config::{Config, Durability};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// Any error, for `?` across the fe2o3-amqp and tokio calls.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Wall-clock microseconds since the Unix epoch (the clock the broker stamps with).
pub fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The `p` quantile (0 to 1) of sorted µs values, in ms; 0 for none.
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index] as f64 / 1000.0
}

/// Synchronous 4 KiB writes the disk floor is measured over.
const FLOOR_WRITES: usize = 200;

/// The disk's floor for a durable acknowledgement: the p50 and p99, in ms, of one 4 KiB write
/// appended with `O_DSYNC` to a new file in a temporary directory (as `dd bs=4k oflag=dsync`
/// does), on the file system the benches' brokers keep their data on. No durable send can be
/// acknowledged faster than its data reaches stable storage.
pub fn disk_floor() -> Result<(f64, f64), BoxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir()?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DSYNC)
        .open(dir.path().join("floor"))?;
    let block = [0x5a_u8; 4096];
    let mut times: Vec<u64> = (0..FLOOR_WRITES)
        .map(|_| {
            let started = Instant::now();
            std::io::Write::write_all(&mut file, &block)?;
            Ok(started.elapsed().as_micros() as u64)
        })
        .collect::<Result<_, std::io::Error>>()?;
    times.sort_unstable();
    Ok((percentile(&times, 0.50), percentile(&times, 0.99)))
}

/// A two-thread runtime, for the broker or for the clients (each gets its own, as two
/// processes would). Its threads, workers and blocking ones, are called `name`, and idle
/// blocking threads stay an hour, so that a bench can tell the two apart by thread in
/// `/proc/self/task` for as long as it runs.
pub fn runtime(name: &str) -> Result<Runtime, BoxError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .thread_keep_alive(Duration::from_secs(3600))
        .enable_all()
        .build()?)
}

/// The name of the client runtime's threads (see [`runtime`]).
pub const CLIENT_THREADS: &str = "bench-client";

/// The TOML declaration of one queue named `name`, every setting at its default (the
/// embedded default's `queue.1` but for its name).
pub fn queue_toml(name: &str) -> String {
    format!("[[queues]]\nname = \"{name}\"\n")
}

/// Opens an AMQP connection to the bench broker over a `TCP_NODELAY` stream.
pub async fn connect(addr: SocketAddr, name: &str) -> Result<ConnectionHandle<()>, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(Connection::builder()
        .container_id(name)
        .open_with_stream(stream)
        .await?)
}

/// Opens an AMQP connection to the bench broker over a WebSocket (`ws://ADDR/$servicebus/websocket`,
/// the OASIS subprotocol `amqp`) on a `TCP_NODELAY` stream.
pub async fn connect_websocket(
    addr: SocketAddr,
    name: &str,
) -> Result<ConnectionHandle<()>, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let url = format!("ws://{addr}/$servicebus/websocket");
    let socket = fe2o3_amqp_ws::WebSocketStream::connect_with_stream(url, stream).await?;
    Ok(Connection::builder()
        .container_id(name)
        .open_with_stream(socket)
        .await?)
}

/// The broker's TLS listener and a connector that trusts the CA its certificate came from.
#[derive(Clone)]
pub struct TlsEndpoint {
    /// Where the TLS listener is.
    pub addr: SocketAddr,
    connector: TlsConnector,
}

/// Opens an AMQP connection to the bench broker over TLS (host name `localhost`, verified
/// against the bench CA) on a `TCP_NODELAY` stream.
pub async fn connect_tls(
    endpoint: &TlsEndpoint,
    name: &str,
) -> Result<ConnectionHandle<()>, BoxError> {
    let stream = TcpStream::connect(endpoint.addr).await?;
    stream.set_nodelay(true)?;
    let server = ServerName::try_from("localhost")?;
    let stream = endpoint.connector.connect(server, stream).await?;
    Ok(Connection::builder()
        .container_id(name)
        .open_with_stream(stream)
        .await?)
}

/// The command line, read as `--flag [value]` pairs; `--bench` (passed by `cargo bench`) is
/// skipped.
pub struct Flags(std::iter::Skip<std::env::Args>);

impl Flags {
    /// This process's flags.
    pub fn from_env() -> Self {
        Flags(std::env::args().skip(1))
    }

    /// The next flag name.
    pub fn next_flag(&mut self) -> Option<String> {
        self.0.by_ref().find(|flag| flag != "--bench")
    }

    /// The number that follows `flag`.
    pub fn number(&mut self, flag: &str) -> Result<u64, String> {
        self.0
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("{flag} needs a number"))
    }

    /// The durability mode that follows `--durability`.
    pub fn durability(&mut self) -> Result<Durability, String> {
        match self.0.next().as_deref() {
            Some("sync") => Ok(Durability::Sync),
            Some("interval") => Ok(Durability::Interval),
            Some("memory") => Ok(Durability::Memory),
            _ => Err("--durability takes sync, interval or memory".into()),
        }
    }
}

/// The broker under test: the embedded default config with the bench's own entities in place
/// of the default's, a data dir in a temporary directory, on 127.0.0.1 and a runtime of its
/// own (threads called `bench-broker`).
pub struct BenchBroker {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its TLS listener, when started with one.
    pub tls: Option<TlsEndpoint>,
    runtime: Runtime,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tidebus::RunError>>,
    _data_dir: tempfile::TempDir,
}

impl BenchBroker {
    /// Starts it with the queues and topics that `entities` declares (`[[queues]]` and
    /// `[[topics]]` tables, read as a config file would be) and no others.
    pub fn start(durability: Durability, entities: &str) -> Result<Self, BoxError> {
        Self::start_with(durability, entities, false)
    }

    /// As [`BenchBroker::start`], with a TLS listener beside the plain one when `tls` is
    /// set: a `gen-cert` certificate for `localhost`, generated into the data directory.
    pub fn start_with(durability: Durability, entities: &str, tls: bool) -> Result<Self, BoxError> {
        // Only the entities are taken; the broker keys are the embedded default's.
        let declared = Config::parse(
            &format!("[broker]\nallow_anonymous = true\n{entities}"),
            "<bench entities>",
        )?;
        let runtime = runtime("bench-broker")?;
        let mut config = Config::embedded_default();
        let data_dir = tempfile::tempdir()?;
        config.broker.durability = durability;
        config.broker.data_dir = data_dir.path().join("data");
        config.queues = declared.queues;
        config.topics = declared.topics;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let mut listeners = tidebus::Listeners::from(listener);
        let mut endpoint = None;
        if tls {
            let certificates = data_dir.path().join("certs");
            tidebus::transport::tls::generate_dev_certificates(
                &["localhost".to_owned()],
                &certificates,
            )?;
            let tls_config = tidebus::config::TlsConfig {
                listen: "127.0.0.1:0".parse()?,
                cert: certificates.join("server.pem"),
                key: certificates.join("server-key.pem"),
            };
            let tls_listener = runtime.block_on(TcpListener::bind(tls_config.listen))?;
            endpoint = Some(TlsEndpoint {
                addr: tls_listener.local_addr()?,
                connector: trusting(&certificates.join("ca.pem"))?,
            });
            listeners.tls = Some((
                tls_listener,
                tidebus::transport::tls::acceptor(&tls_config)?,
            ));
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async move {
            let _ = stopped.await;
        };
        let task = runtime.spawn(tidebus::run(config, listeners, stopped, |_| {}));
        Ok(BenchBroker {
            addr,
            tls: endpoint,
            runtime,
            stop,
            task,
            _data_dir: data_dir,
        })
    }

    /// Stops it gracefully and waits until it has.
    pub fn stop(self) -> Result<(), BoxError> {
        let _ = self.stop.send(());
        self.runtime.block_on(self.task)??;
        Ok(())
    }
}

/// A TLS connector that trusts the CA in the PEM file `ca` only.
fn trusting(ca: &Path) -> Result<TlsConnector, BoxError> {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca)? {
        roots.add(certificate?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// CPU time and storage writes of this process so far, read from `/proc` (clock-tick
/// resolution: 10 ms on Linux).
pub struct Usage {
    /// User + system CPU of the whole process, threads that ended included, in µs.
    pub process_us: f64,
    /// User + system CPU of the client's threads, in µs: the client runtime's
    /// ([`CLIENT_THREADS`]) and the main thread, which drives the clients. The rest is the
    /// broker's.
    pub client_us: f64,
    /// `write_bytes - cancelled_write_bytes` of `/proc/self/io`; `None` where it cannot be
    /// read.
    pub written: Option<u64>,
}

impl Usage {
    /// The figures now.
    pub fn now() -> Result<Usage, BoxError> {
        let tick_us = tick_us();
        let main = std::process::id().to_string();
        let mut client_ticks = 0;
        for task in std::fs::read_dir("/proc/self/task")? {
            let task = task?.path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            let is_main = task.file_name().is_some_and(|tid| *tid == *main);
            if is_main || name.trim_end() == CLIENT_THREADS {
                client_ticks += cpu_ticks(&task.join("stat"))?;
            }
        }
        Ok(Usage {
            process_us: cpu_ticks(Path::new("/proc/self/stat"))? as f64 * tick_us,
            client_us: client_ticks as f64 * tick_us,
            written: written_bytes(Path::new("/proc/self/io")),
        })
    }
}

/// The length of a clock tick (the unit of CPU times in `/proc`), in µs.
fn tick_us() -> f64 {
    // SAFETY: sysconf only reads a system setting.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1e6 / ticks_per_second.max(1) as f64
}

/// utime + stime, in clock ticks, of a `stat` file of `/proc`.
fn cpu_ticks(stat: &Path) -> Result<u64, BoxError> {
    let text = std::fs::read_to_string(stat)?;
    // The fields after the command name, which is in parentheses and may hold anything,
    // start at the third: utime and stime are the 14th and 15th.
    let after_name = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, BoxError> {
        let value = fields.get(n - 3).ok_or("short stat line")?;
        Ok(value.parse()?)
    };
    Ok(field(14)? + field(15)?)
}

/// Bytes this process had written to storage so far, those it dirtied and then truncated away
/// before writeback left out.
fn written_bytes(io: &Path) -> Option<u64> {
    let io = std::fs::read_to_string(io).ok()?;
    let field = |key: &str| {
        io.lines()
            .find_map(|line| line.strip_prefix(key)?.trim().parse::<u64>().ok())
    };
    Some(field("write_bytes:")?.saturating_sub(field("cancelled_write_bytes:")?))
}

/// The `tidebus` binary as a child process; killed (by its PID) when dropped.
pub struct ChildBroker {
    /// Where its plain AMQP listener is.
    pub addr: SocketAddr,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// How long the child broker may take to start.
const CHILD_START_TIMEOUT: Duration = Duration::from_secs(60);

impl ChildBroker {
    /// Starts the binary with `config` (TOML) on ephemeral loopback ports and a data directory
    /// of its own, and waits until it is ready.
    pub fn start(config: &str) -> Result<Self, BoxError> {
        let dir = tempfile::tempdir()?;
        let config_path = dir.path().join("tidebus.toml");
        std::fs::write(&config_path, config)?;
        let ready = dir.path().join("ready");
        let log = dir.path().join("broker.log");
        let child = Command::new(env!("CARGO_BIN_EXE_tidebus"))
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--admin-listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--ready-file")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let mut broker = ChildBroker {
            addr: "127.0.0.1:0".parse()?,
            child,
            log,
            _dir: dir,
        };
        let started = Instant::now();
        loop {
            if let Some(addr) = std::fs::read_to_string(&ready)
                .ok()
                // The plain listener's address is the first line.
                .and_then(|text| text.lines().next()?.parse().ok())
            {
                broker.addr = addr;
                return Ok(broker);
            }
            if let Some(status) = broker.child.try_wait()? {
                return Err(
                    format!("tidebus exited with {status}:\n{}", broker.log_tail(20)).into(),
                );
            }
            if started.elapsed() > CHILD_START_TIMEOUT {
                return Err(format!("tidebus not ready in time:\n{}", broker.log_tail(20)).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The broker's resident memory, its peak and its open file descriptors.
    pub fn memory(&self) -> String {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let mib = |key: &str| {
            status
                .lines()
                .find(|line| line.starts_with(key))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map_or(f64::NAN, |kb| kb / 1024.0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count());
        format!(
            "VmRSS {:.1} MiB, VmHWM {:.1} MiB, {fds} fds",
            mib("VmRSS:"),
            mib("VmHWM:")
        )
    }

    /// The last `lines` lines of the broker's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The broker's memory once it has had the time to give freed memory back (one
    /// trimmer interval and a second) and its figures stopped changing (same for 1 s).
    pub fn settled_memory(&self) -> String {
        let started = Instant::now();
        let patience = tidebus::trimmer::TRIM_INTERVAL + Duration::from_secs(1);
        let limit = patience + Duration::from_secs(5);
        let (mut last, mut since) = (self.memory(), Instant::now());
        while (started.elapsed() < patience || since.elapsed() < Duration::from_secs(1))
            && started.elapsed() < limit
        {
            std::thread::sleep(Duration::from_millis(200));
            let now = self.memory();
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        last
    }
}

impl ChildBroker {
    /// The broker's CPU time so far (user + system of all its threads), in µs, and the bytes
    /// it wrote (as [`Usage::written`]).
    pub fn usage(&self) -> Result<(f64, Option<u64>), BoxError> {
        let proc = PathBuf::from(format!("/proc/{}", self.child.id()));
        let cpu_us = cpu_ticks(&proc.join("stat"))? as f64 * tick_us();
        Ok((cpu_us, written_bytes(&proc.join("io"))))
    }
}

impl Drop for ChildBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
