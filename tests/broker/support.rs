//! An in-process broker on an ephemeral loopback port, stopped when dropped.

use std::net::SocketAddr;
use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::FromBody;
use fe2o3_amqp::{Connection, Receiver, Session};
use tidebus::config::{Config, Durability, QueueConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Generous deadline for anything a test waits on.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Wall-clock milliseconds since the Unix epoch (the clock the broker stamps times with).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The next delivery on `receiver`; panics if none comes within [`DEADLINE`].
pub async fn next_delivery<T>(receiver: &mut Receiver) -> Delivery<T>
where
    for<'de> T: FromBody<'de> + Send,
{
    tokio::time::timeout(DEADLINE, receiver.recv::<T>())
        .await
        .expect("a message in time")
        .expect("recv")
}

/// A fe2o3-amqp connection to `addr` over a `TCP_NODELAY` stream.
pub async fn connect(addr: SocketAddr, max_frame_size: u32) -> ConnectionHandle<()> {
    let stream = TcpStream::connect(addr).await.expect("tcp");
    stream.set_nodelay(true).expect("nodelay");
    Connection::builder()
        .container_id("tidebus-test")
        .max_frame_size(max_frame_size)
        .open_with_stream(stream)
        .await
        .expect("open")
}

/// A connection to `addr` and one session on it.
pub async fn connect_session(addr: SocketAddr) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let mut connection = connect(addr, 65536).await;
    let session = Session::begin(&mut connection).await.expect("begin");
    (connection, session)
}

/// A running broker.
pub struct TestBroker {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// A memory-mode config with the given queues.
pub fn config_with_queues(names: &[&str]) -> Config {
    let mut config = Config::embedded_default();
    config.broker.durability = Durability::Memory;
    let template = config.queues[0].clone();
    config.queues = names
        .iter()
        .map(|name| QueueConfig {
            name: name.to_string(),
            ..template.clone()
        })
        .collect();
    config
}

impl TestBroker {
    /// Starts a broker with `config` on 127.0.0.1:0.
    pub async fn start(config: Config) -> Self {
        // Broker logs go to the test's captured output, shown only when it fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "tidebus=debug".into()),
            )
            .with_test_writer()
            .try_init();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            tidebus::run(config, listener, shutdown, move |a| {
                let _ = ready_tx.send(a);
            })
            .await
            .expect("broker run");
        });
        tokio::time::timeout(DEADLINE, ready_rx)
            .await
            .expect("ready in time")
            .expect("ready");
        Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the broker and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(DEADLINE, task)
                .await
                .expect("stopped in time")
                .expect("join");
        }
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
