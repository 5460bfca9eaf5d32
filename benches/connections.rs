//! Many concurrent connections against the real `tidebus` binary, started as a child process.
//!
//! `cargo bench --bench connections -- --connections 5000 [--messages-per-connection M]
//! [--size BYTES] [--durability sync|interval|memory]` (defaults 5000, 2, 256, memory)
//!
//! Opens N connections (at most 200 opening at once), each with a session, a sender and a
//! peek-lock receiver on one queue, and holds all of them open. Then every connection sends M
//! messages (each waits for its accepted outcome) and receives M (accepting each); as the
//! receivers compete on the queue, the ids of all messages received are checked: each sent
//! message must arrive exactly once. Then all connections close.
//!
//! Prints the time to open all connections, the send+receive time and rate, the close time,
//! and the broker's VmRSS, VmHWM and open file descriptors idle, with all connections open,
//! after the traffic and after the close; then "ok", or "FAILED" and a non-zero exit.
//! The broker's `max_connections` is set to N + 100, and the soft `RLIMIT_NOFILE` is raised
//! to the hard limit (the broker inherits it).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, Outcome};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Value};
use fe2o3_amqp::{Receiver, Sender, Session};
use tidebus::config::Durability;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

// Only the flags and `connect` are used here, not the in-process broker.
#[allow(dead_code)]
mod support;
use support::{connect, BoxError, ChildBroker, Flags};

/// Connections in their handshake at once, so the listen backlog is never overrun.
const OPENING_AT_ONCE: usize = 200;
/// How long one connection may take to open, or to wait for its next message.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
const QUEUE: &str = "bench";

struct Args {
    connections: u64,
    messages: u64,
    size: usize,
    durability: &'static str,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        connections: 5000,
        messages: 2,
        size: 256,
        durability: "memory",
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "--connections" => args.connections = flags.number(&flag)?,
            "--messages-per-connection" => args.messages = flags.number(&flag)?,
            "--size" => args.size = flags.number(&flag)? as usize,
            "--durability" => {
                args.durability = match flags.durability()? {
                    Durability::Sync => "sync",
                    Durability::Interval => "interval",
                    Durability::Memory => "memory",
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the new soft limit.
fn raise_fd_limit() -> Result<u64, BoxError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls only read or write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
    }
    Ok(limit.rlim_cur)
}

/// One client connection with its session and links.
struct Client {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
    sender: Sender,
    receiver: Receiver,
}

async fn open(addr: SocketAddr, index: u64, credit: u32) -> Result<Client, BoxError> {
    let mut connection = connect(addr, &format!("bench-{index}")).await?;
    let mut session = Session::begin(&mut connection).await?;
    let sender = Sender::attach(&mut session, format!("sender-{index}"), QUEUE).await?;
    let mut receiver = Receiver::builder()
        .name(format!("receiver-{index}"))
        .source(QUEUE)
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await?;
    // As much credit as it will receive, so that all receivers together take every message.
    receiver.set_credit(credit).await?;
    Ok(Client {
        connection,
        session,
        sender,
        receiver,
    })
}

/// Sends `messages` messages with ids `index * messages ..` and receives as many (from any
/// sender); returns the ids received.
async fn traffic(
    client: &mut Client,
    index: u64,
    messages: u64,
    payload: &[u8],
) -> Result<Vec<u64>, BoxError> {
    let send = async {
        for id in index * messages..(index + 1) * messages {
            let message = Message::builder()
                .application_properties(
                    ApplicationProperties::builder()
                        .insert("id", SimpleValue::Long(id as i64))
                        .build(),
                )
                .data(Binary::from(payload.to_vec()))
                .build();
            match client.sender.send(message).await? {
                Outcome::Accepted(_) => {}
                other => return Err(format!("message {id}: {other:?}").into()),
            }
        }
        Ok::<_, BoxError>(())
    };
    let receive = async {
        let mut ids = Vec::with_capacity(messages as usize);
        while (ids.len() as u64) < messages {
            let received = ids.len();
            let delivery =
                tokio::time::timeout(STEP_TIMEOUT, client.receiver.recv::<Body<Value>>())
                    .await
                    .map_err(|_| format!("no message for {STEP_TIMEOUT:?} after {received}"))??;
            client.receiver.accept(&delivery).await?;
            let id = delivery
                .message()
                .application_properties
                .as_ref()
                .and_then(|properties| properties.0.get("id"));
            match id {
                Some(SimpleValue::Long(id)) => ids.push(*id as u64),
                other => return Err(format!("a message without a valid id: {other:?}").into()),
            }
        }
        Ok::<_, BoxError>(ids)
    };
    let (sent, received) = tokio::join!(send, receive);
    sent?;
    received
}

async fn close(client: Client) -> Result<(), BoxError> {
    let Client {
        mut connection,
        mut session,
        sender,
        receiver,
    } = client;
    sender.close().await?;
    receiver.close().await?;
    session.end().await?;
    connection.close().await?;
    Ok(())
}

/// Counts the errors of a phase and keeps the first few for the report.
#[derive(Default)]
struct Errors {
    count: usize,
    first: Vec<String>,
}

impl Errors {
    fn add(&mut self, index: u64, error: impl std::fmt::Display) {
        self.count += 1;
        if self.first.len() < 5 {
            self.first.push(format!("connection {index}: {error}"));
        }
    }

    fn check(&self, phase: &str) -> Result<(), BoxError> {
        if self.count == 0 {
            return Ok(());
        }
        for error in &self.first {
            println!("  {error}");
        }
        Err(format!("{} connections failed to {phase}", self.count).into())
    }
}

async fn bench(broker: &ChildBroker, args: &Args) -> Result<(), BoxError> {
    let n = args.connections;
    let rate = |count: u64, took: Duration| count as f64 / took.as_secs_f64().max(1e-9);

    // Open all, at most OPENING_AT_ONCE at a time, and hold them.
    let started = Instant::now();
    let opening = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    let credit = u32::try_from(args.messages)?;
    let mut tasks = JoinSet::new();
    for index in 0..n {
        let (opening, addr) = (opening.clone(), broker.addr);
        tasks.spawn(async move {
            let _permit = opening.acquire_owned().await;
            let opened = tokio::time::timeout(STEP_TIMEOUT, open(addr, index, credit)).await;
            (
                index,
                opened.unwrap_or_else(|_| Err("open timed out".into())),
            )
        });
    }
    let mut clients = Vec::with_capacity(n as usize);
    let mut errors = Errors::default();
    while let Some(joined) = tasks.join_next().await {
        match joined? {
            (index, Ok(client)) => clients.push((index, client)),
            (index, Err(error)) => errors.add(index, error),
        }
    }
    let took = started.elapsed();
    println!(
        "open:    {} of {n} connections open at once, opened in {took:.2?} ({:.0} connections/s)",
        clients.len(),
        rate(clients.len() as u64, took)
    );
    println!("broker:  {} with all connections open", broker.memory());
    errors.check("open")?;

    // Every connection sends and receives.
    let payload: Arc<[u8]> = vec![0xA5u8; args.size].into();
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (index, mut client) in clients {
        let (payload, messages) = (payload.clone(), args.messages);
        tasks.spawn(async move {
            let ids = traffic(&mut client, index, messages, &payload).await;
            (index, client, ids)
        });
    }
    let total = n * args.messages;
    let mut times_received = vec![0u32; total as usize];
    let mut clients = Vec::with_capacity(n as usize);
    let mut errors = Errors::default();
    while let Some(joined) = tasks.join_next().await {
        let (index, client, ids) = joined?;
        clients.push((index, client));
        match ids {
            Ok(ids) => {
                for id in ids {
                    match times_received.get_mut(id as usize) {
                        Some(times) => *times += 1,
                        None => errors.add(index, format!("received unknown id {id}")),
                    }
                }
            }
            Err(error) => errors.add(index, error),
        }
    }
    let took = started.elapsed();
    let lost = times_received.iter().filter(|&&times| times == 0).count();
    let duplicated = times_received.iter().filter(|&&times| times > 1).count();
    println!(
        "traffic: {total} messages of {} bytes sent and received in {took:.2?} ({:.0} msg/s), \
         {lost} lost, {duplicated} duplicated",
        args.size,
        rate(total, took)
    );
    println!("broker:  {} after the traffic", broker.memory());
    errors.check("send and receive")?;
    if lost + duplicated > 0 {
        return Err(format!("{lost} messages lost, {duplicated} duplicated").into());
    }

    // Close all.
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (index, client) in clients {
        tasks.spawn(async move { (index, close(client).await) });
    }
    let mut errors = Errors::default();
    while let Some(joined) = tasks.join_next().await {
        if let (index, Err(error)) = joined? {
            errors.add(index, error);
        }
    }
    println!(
        "close:   {n} connections closed in {:.2?}",
        started.elapsed()
    );
    println!("broker:  {} after all closed", broker.settled_memory());
    errors.check("close")
}

fn run() -> Result<(), BoxError> {
    let args = parse_args()?;
    let fd_limit = raise_fd_limit()?;
    println!(
        "connections: {} × {} messages of {} bytes, durability {}, fd limit {fd_limit}",
        args.connections, args.messages, args.size, args.durability
    );
    let broker = ChildBroker::start(&format!(
        "[broker]\ndurability = \"{}\"\nmax_connections = {}\nallow_anonymous = true\n\n{}",
        args.durability,
        args.connections + 100,
        support::queue_toml(QUEUE)
    ))?;
    println!("broker:  {} idle", broker.memory());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(bench(&broker, &args));
    drop(runtime);
    if result.is_err() {
        println!("--- broker log, last 20 lines ---\n{}", broker.log_tail(20));
    }
    result
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("FAILED: {error}");
            ExitCode::FAILURE
        }
    }
}
