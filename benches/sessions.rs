//! Sessions: a backlog of `--sessions` × `--per-session` messages (1 KB, interleaved across
//! the sessions) in a queue that requires sessions, drained by `--receivers` concurrent
//! next-available session receivers, each on a connection of its own: it accepts the next
//! available session, receives and completes that session's messages (checking that they come
//! in the order they were sent), closes, and accepts the next. Then the same backlog in a
//! plain queue is drained by as many plain receivers, for comparison.
//!
//! `cargo bench --bench sessions -- [--sessions N] [--per-session M] [--receivers R]
//! [--size BYTES] [--durability sync|interval|memory]`
//!
//! Prints the fill rate, the drain's messages/s and sessions/s, the next-available accept
//! latency (attach to attach reply, p50/p99), the plain queue's drain rate and the ratio of
//! the two. Fails unless every message arrived exactly once and in order within its session.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::Fields;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, FilterSet, Message, Outcome, Properties, Source,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Value};
use fe2o3_amqp::{Receiver, Sender, Session};
use futures_util::future::try_join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tidebus::config::Durability;

// Everything but the send timestamps (`now_micros`) is used here.
#[allow(dead_code)]
mod support;
use support::{connect, percentile, BenchBroker, BoxError, Flags, Usage};

/// The queue that requires sessions, and the plain one.
const SESSION_QUEUE: &str = "sessions";
const PLAIN_QUEUE: &str = "plain";
/// How long a receiver waits for the next available session before it stops.
const ACCEPT_TIMEOUT_MS: u32 = 2_000;
/// Sends in flight while filling.
const WINDOW: usize = 100;

struct Args {
    durability: Durability,
    sessions: u64,
    per_session: u64,
    receivers: usize,
    size: usize,
}

impl Args {
    fn total(&self) -> u64 {
        self.sessions * self.per_session
    }
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        durability: Durability::Sync,
        sessions: 10_000,
        per_session: 10,
        receivers: 50,
        size: 1024,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "--sessions" => args.sessions = flags.number(&flag)?.max(1),
            "--per-session" => args.per_session = flags.number(&flag)?.max(1),
            "--receivers" => args.receivers = flags.number(&flag)?.max(1) as usize,
            "--size" => args.size = flags.number(&flag)? as usize,
            "--durability" => args.durability = flags.durability()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// Sends the backlog to `queue`: message `k` belongs to session `k % sessions` and is its
/// `k / sessions`-th. Returns how long it took.
async fn fill(addr: std::net::SocketAddr, args: &Args, queue: &str) -> Result<Duration, BoxError> {
    let mut connection = connect(addr, "bench-producer").await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut sender = Sender::attach(&mut session, "bench-sender", queue).await?;
    let payload = vec![0xA5u8; args.size];
    let started = Instant::now();
    let mut inflight = FuturesUnordered::new();
    for k in 0..args.total() {
        let message = Message::builder()
            .properties(
                Properties::builder()
                    .group_id(format!("session-{}", k % args.sessions))
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("index", SimpleValue::Long((k / args.sessions) as i64))
                    .build(),
            )
            .data(Binary::from(payload.clone()))
            .build();
        inflight.push(sender.send_batchable(message).await?);
        while inflight.len() >= WINDOW {
            check_accepted(inflight.next().await)?;
        }
    }
    while let Some(outcome) = inflight.next().await {
        check_accepted(Some(outcome))?;
    }
    let elapsed = started.elapsed();
    sender.close().await?;
    hang_up(session, connection, "the producer").await?;
    Ok(elapsed)
}

/// Ends a client's AMQP session and closes its connection; fails, naming `who`, when the
/// broker does not answer within 30 s.
async fn hang_up(
    mut session: SessionHandle<()>,
    mut connection: ConnectionHandle<()>,
    who: &str,
) -> Result<(), BoxError> {
    let answer = Duration::from_secs(30);
    tokio::time::timeout(answer, session.end())
        .await
        .map_err(|_| format!("{who}: end of session not answered in {answer:?}"))??;
    tokio::time::timeout(answer, connection.close())
        .await
        .map_err(|_| format!("{who}: close not answered in {answer:?}"))??;
    Ok(())
}

fn check_accepted<E: std::error::Error + Send + Sync + 'static>(
    outcome: Option<Result<Outcome, E>>,
) -> Result<(), BoxError> {
    match outcome {
        Some(Ok(Outcome::Accepted(_))) | None => Ok(()),
        Some(Ok(other)) => Err(format!("a send was not accepted: {other:?}").into()),
        Some(Err(error)) => Err(error.into()),
    }
}

/// What the receivers saw, together.
#[derive(Default)]
struct Drained {
    /// (session, index) of every message received.
    seen: Mutex<HashSet<(String, i64)>>,
    received: AtomicU64,
    duplicates: AtomicU64,
    sessions: AtomicU64,
    /// Next-available accept latencies, µs.
    accepts_us: Mutex<Vec<u64>>,
    /// When the last message arrived, since the drain started, µs.
    last_us: AtomicU64,
}

impl Drained {
    fn note(&self, session: String, index: i64, started: Instant) {
        let fresh = self.seen.lock().expect("seen").insert((session, index));
        let counter = if fresh {
            &self.received
        } else {
            &self.duplicates
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let at = started.elapsed().as_micros() as u64;
        self.last_us.fetch_max(at, Ordering::Relaxed);
    }
}

/// The session id and index of a received message.
fn session_and_index(message: &Message<Body<Value>>) -> (String, i64) {
    let session = message
        .properties
        .as_ref()
        .and_then(|p| p.group_id.clone())
        .unwrap_or_default();
    let index = match message
        .application_properties
        .as_ref()
        .and_then(|p| p.0.get("index"))
    {
        Some(SimpleValue::Long(index)) => *index,
        _ => -1,
    };
    (session, index)
}

/// One session receiver's loop: accept the next available session, take its messages in
/// order, close, again; stops when no session becomes available in time.
async fn drain_sessions(
    addr: std::net::SocketAddr,
    args: &Args,
    worker: usize,
    drained: Arc<Drained>,
    started: Instant,
) -> Result<(), BoxError> {
    let mut connection = connect(addr, &format!("bench-session-receiver-{worker}")).await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut filter = FilterSet::new();
    filter.insert(Symbol::from("com.microsoft:session-filter"), Value::Null);
    let mut properties = Fields::default();
    properties.insert(
        Symbol::from("com.microsoft:timeout"),
        Value::Uint(ACCEPT_TIMEOUT_MS),
    );
    for round in 0.. {
        if drained.received.load(Ordering::Relaxed) >= args.total() {
            break;
        }
        let asked = Instant::now();
        let attach = Receiver::builder()
            .name(format!("session-receiver-{worker}-{round}"))
            .source(
                Source::builder()
                    .address(SESSION_QUEUE)
                    .filter(filter.clone())
                    .build(),
            )
            .properties(properties.clone())
            .verify_incoming_source(false)
            .credit_mode(CreditMode::Auto(args.per_session as u32))
            .attach(&mut session);
        // The broker answers within the accept timeout: a session or a refusal.
        let answer = Duration::from_millis(u64::from(ACCEPT_TIMEOUT_MS)) + Duration::from_secs(30);
        let attached = tokio::time::timeout(answer, attach)
            .await
            .map_err(|_| format!("receiver {worker}: attach {round} not answered in {answer:?}"))?;
        let Ok(mut receiver) = attached else {
            break; // no session became available in time
        };
        drained
            .accepts_us
            .lock()
            .expect("accepts")
            .push(asked.elapsed().as_micros() as u64);
        drained.sessions.fetch_add(1, Ordering::Relaxed);
        let mut held: Option<String> = None;
        let mut previous = -1;
        for _ in 0..args.per_session {
            let delivery =
                tokio::time::timeout(Duration::from_secs(30), receiver.recv::<Body<Value>>())
                    .await
                    .map_err(|_| "a session receiver got no message for 30 s")??;
            let (id, index) = session_and_index(delivery.message());
            if held.get_or_insert_with(|| id.clone()) != &id || index <= previous {
                return Err(format!("{id} #{index} out of order (after #{previous})").into());
            }
            previous = index;
            tokio::time::timeout(Duration::from_secs(30), receiver.accept(&delivery))
                .await
                .map_err(|_| format!("receiver {worker}: accepting {id} #{index} took 30 s"))??;
            drained.note(id, index, started);
        }
        tokio::time::timeout(Duration::from_secs(30), receiver.close())
            .await
            .map_err(|_| format!("receiver {worker}: detach {round} not answered in 30 s"))??;
    }
    hang_up(session, connection, &format!("session receiver {worker}")).await?;
    Ok(())
}

/// One plain receiver: receives and completes until every message arrived.
async fn drain_plain(
    addr: std::net::SocketAddr,
    args: &Args,
    worker: usize,
    drained: Arc<Drained>,
    started: Instant,
) -> Result<(), BoxError> {
    let mut connection = connect(addr, &format!("bench-plain-receiver-{worker}")).await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut receiver = Receiver::builder()
        .name(format!("plain-receiver-{worker}"))
        .source(PLAIN_QUEUE)
        .credit_mode(CreditMode::Auto(args.per_session as u32))
        .attach(&mut session)
        .await?;
    while drained.received.load(Ordering::Relaxed) < args.total() {
        let next = receiver.recv::<Body<Value>>();
        let Ok(delivery) = tokio::time::timeout(Duration::from_millis(200), next).await else {
            continue; // the others may have taken the last ones
        };
        let delivery = delivery?;
        receiver.accept(&delivery).await?;
        let (id, index) = session_and_index(delivery.message());
        drained.note(id, index, started);
    }
    receiver.close().await?;
    hang_up(session, connection, &format!("plain receiver {worker}")).await?;
    Ok(())
}

/// The broker's CPU time since `before`, per message of `messages`, in µs.
fn broker_us_since(before: &Usage, messages: u64) -> Result<f64, BoxError> {
    let after = Usage::now()?;
    let broker = (after.process_us - before.process_us) - (after.client_us - before.client_us);
    Ok(broker / messages.max(1) as f64)
}

fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let entities = format!(
        "[[queues]]\nname = \"{SESSION_QUEUE}\"\nrequires_session = true\n\n{}",
        support::queue_toml(PLAIN_QUEUE)
    );
    let broker = BenchBroker::start(args.durability, &entities)?;
    let addr = broker.addr;
    let client = support::runtime(support::CLIENT_THREADS)?;
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    println!(
        "sessions: sessions={} per-session={} receivers={} size={} durability={:?}",
        args.sessions, args.per_session, args.receivers, args.size, args.durability
    );

    let filled = client.block_on(fill(addr, &args, SESSION_QUEUE))?;
    println!(
        "fill:      {} messages in {filled:.3?} ({:.0} msg/s)",
        args.total(),
        rate(args.total(), filled)
    );
    let sessions = Arc::new(Drained::default());
    let before = Usage::now()?;
    let started = Instant::now();
    client.block_on(try_join_all((0..args.receivers).map(|worker| {
        drain_sessions(addr, &args, worker, sessions.clone(), started)
    })))?;
    let session_cpu = broker_us_since(&before, args.total())?;
    let took = Duration::from_micros(sessions.last_us.load(Ordering::Relaxed));
    let received = sessions.received.load(Ordering::Relaxed);
    let accepted = sessions.sessions.load(Ordering::Relaxed);
    println!(
        "drain:     {received} messages, {accepted} sessions in {took:.3?}: {:.0} msg/s, {:.0} \
         sessions/s, every session in order",
        rate(received, took),
        rate(accepted, took)
    );
    let mut accepts = sessions.accepts_us.lock().expect("accepts").clone();
    accepts.sort_unstable();
    println!(
        "accept:    next available session p50={:.3}ms p99={:.3}ms ({} accepts)",
        percentile(&accepts, 0.50),
        percentile(&accepts, 0.99),
        accepts.len()
    );

    client.block_on(fill(addr, &args, PLAIN_QUEUE))?;
    let plain = Arc::new(Drained::default());
    let before = Usage::now()?;
    let started = Instant::now();
    client.block_on(try_join_all(
        (0..args.receivers).map(|worker| drain_plain(addr, &args, worker, plain.clone(), started)),
    ))?;
    let plain_cpu = broker_us_since(&before, args.total())?;
    let plain_took = Duration::from_micros(plain.last_us.load(Ordering::Relaxed));
    let plain_received = plain.received.load(Ordering::Relaxed);
    println!(
        "plain:     {plain_received} messages by {} plain receivers in {plain_took:.3?}: {:.0} \
         msg/s",
        args.receivers,
        rate(plain_received, plain_took)
    );
    println!(
        "ratio:     sessions drain at {:.0}% of the plain queue's rate",
        100.0 * rate(received, took) / rate(plain_received, plain_took).max(1e-9)
    );
    println!(
        "cpu:       broker {session_cpu:.1} µs per message drained through sessions, \
         {plain_cpu:.1} µs through the plain queue"
    );
    broker.stop()?;
    let duplicates =
        sessions.duplicates.load(Ordering::Relaxed) + plain.duplicates.load(Ordering::Relaxed);
    if received != args.total() || plain_received != args.total() || duplicates > 0 {
        return Err(format!(
            "not every message arrived exactly once: {received} and {plain_received} of {}, \
             {duplicates} duplicates",
            args.total()
        )
        .into());
    }
    Ok(())
}
