//! What the in-process benches share: the broker on a runtime of its own, their flags and
//! their client connections. Included by each bench with `mod support;`.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::Connection;
use tidebus::config::{Config, Durability};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Any error, for `?` across the fe2o3-amqp and tokio calls.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Wall-clock microseconds since the Unix epoch (the clock the broker stamps with).
pub fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
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
    runtime: Runtime,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tidebus::RunError>>,
    _data_dir: tempfile::TempDir,
}

impl BenchBroker {
    /// Starts it with the queues and topics that `entities` declares (`[[queues]]` and
    /// `[[topics]]` tables, read as a config file would be) and no others.
    pub fn start(durability: Durability, entities: &str) -> Result<Self, BoxError> {
        let declared = Config::parse(entities, "<bench entities>")?;
        let runtime = runtime("bench-broker")?;
        let mut config = Config::embedded_default();
        let data_dir = tempfile::tempdir()?;
        config.broker.durability = durability;
        config.broker.data_dir = data_dir.path().join("data");
        config.queues = declared.queues;
        config.topics = declared.topics;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async move {
            let _ = stopped.await;
        };
        let task = runtime.spawn(tidebus::run(config, listener, stopped, |_| {}));
        Ok(BenchBroker {
            addr,
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
