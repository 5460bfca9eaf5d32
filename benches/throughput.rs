//! End-to-end throughput: an in-process broker, one fe2o3-amqp producer, and one consumer for
//! the queue or for each subscription of a topic.
//!
//! `cargo bench --bench throughput -- [--messages N] [--size BYTES] [--window N] [--credit N]
//! [--durability sync|interval|memory] [--fill-first] [--receive-and-delete] [--topic N]
//! [--tls] [--websocket] [--dedup] [--forward] [--child] [--partitions N] [--producers N] [--consumers N]`
//!
//! The producer sends to the entity `bench`: a queue, or with `--topic N` a topic with N
//! subscriptions `sub-1` .. `sub-N`, each with the default rule (`$Default`, the true filter),
//! declared in the TOML the bench gives the broker. One consumer, on a connection of its own,
//! receives from the queue or from each subscription (`bench/Subscriptions/sub-i`), and each
//! must get every message exactly once.
//!
//! Every message carries a distinct `message-id`. With `--dedup` the queue or topic requires
//! duplicate detection (a one-hour window, so that every id of the run stays in it), and the
//! bench also prints what a window holding a million ids costs in memory.
//!
//! With `--forward` the queue forwards every message to a second queue, `bench-out`, which the
//! consumer reads: the cost of one auto-forwarding hop.
//!
//! With `--partitions N` the queue or topic has N partitions (design.md D9). `--producers N`
//! sends with N producers at once, each on its own connection and with its own window, each
//! sending its share of the messages; `--consumers N` receives each queue or subscription with
//! N consumers at once, each on its own connection, which together must get every message
//! exactly once (a partitioned entity is how one hot queue uses more than one core; a load of
//! one producer and one consumer cannot show it).
//!
//! With `--child` the broker is the real `tidebus` binary, started as a child process with the
//! same entities, and the CPU figure is the child's own (`/proc/<pid>/stat`, all its threads),
//! whatever the client costs: the figure to compare with other brokers. It does not combine
//! with `--tls`.
//!
//! With `--tls` every client connects over TLS (a `gen-cert` certificate for `localhost`,
//! verified), to the broker's TLS listener. With `--websocket` every client connects over a
//! WebSocket to the plain listener (fe2o3-amqp-ws, subprotocol `amqp`); with `--child` its CPU
//! figure is the one to hold against plain TCP's.
//!
//! The consumers are peek-lock and complete every message (the SDK default), or with
//! `--receive-and-delete` take pre-settled deliveries.
//!
//! `--fill-first` sends everything before the consumers start and prints the process's
//! resident memory with the whole backlog queued (broker and client share the process).
//!
//! The producer keeps `window` unsettled sends in flight; each consumer grants `credit` and
//! accepts every message (peek-lock, one disposition each). Prints the send (publish) rate,
//! each consumer's receive rate, the end-to-end rate, the p50/p99 latency from send to receipt,
//! and per published message:
//! - the broker's CPU time (user + system, µs): the whole process's, from `/proc/self/stat`
//!   (threads that ended included), minus the client's threads', from
//!   `/proc/self/task/<tid>/stat`: the client runtime's (`bench-client`) and the main thread,
//!   which drives the producer and the consumers. Clock-tick resolution (10 ms on Linux); the
//!   whole process's figure is printed too. The kernel charges most loopback TCP work to the
//!   sending thread, so each side's figure holds part of the other's receiving.
//! - the bytes written to disk: the process's `write_bytes` minus `cancelled_write_bytes` from
//!   `/proc/self/io` (counted per page as the broker dirties the page cache; the file system's
//!   journal is not included). Only the broker writes files.
//!
//! Both span the run, from before the clients connect until the last consumer is done; the
//! broker's start and stop are left out.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, Outcome, Properties};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Value};
use fe2o3_amqp::{Receiver, Sender, Session};
use futures_util::future::try_join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tidebus::config::Durability;
use tidebus::entity::duplicates::{digest, Duplicates};

#[allow(dead_code)]
mod support;
use support::{
    connect, connect_tls, connect_websocket, now_micros, percentile, BenchBroker, BoxError,
    ChildBroker, Flags, TlsEndpoint, Usage,
};

/// Where the clients connect.
#[derive(Clone)]
enum Dial {
    Plain(std::net::SocketAddr),
    Tls(TlsEndpoint),
    WebSocket(std::net::SocketAddr),
}

impl Dial {
    async fn open(&self, name: &str) -> Result<ConnectionHandle<()>, BoxError> {
        match self {
            Dial::Plain(addr) => connect(*addr, name).await,
            Dial::Tls(endpoint) => connect_tls(endpoint, name).await,
            Dial::WebSocket(addr) => connect_websocket(*addr, name).await,
        }
    }
}

/// The queue or topic the producer sends to.
const ENTITY: &str = "bench";
/// The queue `bench` forwards to with `--forward`.
const FORWARD_TARGET: &str = "bench-out";

struct Args {
    durability: Durability,
    fill_first: bool,
    receive_and_delete: bool,
    messages: u64,
    size: usize,
    window: usize,
    credit: u32,
    /// Subscriptions of the topic sent to; `None`: send to a queue.
    topic: Option<u64>,
    /// Whether the clients connect over TLS.
    tls: bool,
    /// Whether the clients connect over WebSockets (to the plain listener).
    websocket: bool,
    /// Whether the queue or topic detects duplicates.
    dedup: bool,
    /// Whether the queue forwards to [`FORWARD_TARGET`], where the consumer reads.
    forward: bool,
    /// Whether the broker is the `tidebus` binary as a child process.
    child: bool,
    /// Partitions of the queue or topic; `None`: not partitioned.
    partitions: Option<u64>,
    /// Producers sending at once.
    producers: u64,
    /// Consumers of each queue or subscription at once.
    consumers: u64,
}

impl Args {
    /// The broker's entities, as TOML: the queue, or the topic and its subscriptions (which,
    /// declared without rules, get `$Default`).
    fn entities(&self) -> String {
        let dedup = match self.dedup {
            true => {
                "requires_duplicate_detection = true\n\
                     duplicate_detection_history_time_window = \"1h\"\n"
            }
            false => "",
        };
        let partitions = self
            .partitions
            .map(|count| format!("partitions = {count}\n"))
            .unwrap_or_default();
        let dedup = format!("{dedup}{partitions}");
        let Some(subscriptions) = self.topic else {
            let queue = format!("{}{dedup}", support::queue_toml(ENTITY));
            return match self.forward {
                true => format!(
                    "{queue}forward_to = \"{FORWARD_TARGET}\"\n{}",
                    support::queue_toml(FORWARD_TARGET)
                ),
                false => queue,
            };
        };
        let mut toml = format!("[[topics]]\nname = \"{ENTITY}\"\n{dedup}");
        for n in 1..=subscriptions {
            toml.push_str(&format!("[[topics.subscriptions]]\nname = \"sub-{n}\"\n"));
        }
        toml
    }

    /// The addresses the consumers receive from, one consumer each.
    fn sources(&self) -> Vec<String> {
        match self.topic {
            None if self.forward => vec![FORWARD_TARGET.to_owned()],
            None => vec![ENTITY.to_owned()],
            Some(subscriptions) => (1..=subscriptions)
                .map(|n| format!("{ENTITY}/Subscriptions/sub-{n}"))
                .collect(),
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        durability: Durability::Sync,
        fill_first: false,
        receive_and_delete: false,
        messages: 100_000,
        size: 1024,
        window: 100,
        credit: 200,
        topic: None,
        tls: false,
        websocket: false,
        dedup: false,
        forward: false,
        child: false,
        partitions: None,
        producers: 1,
        consumers: 1,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "--messages" => args.messages = flags.number(&flag)?,
            "--size" => args.size = flags.number(&flag)? as usize,
            "--window" => args.window = flags.number(&flag)?.max(1) as usize,
            "--credit" => args.credit = flags.number(&flag)?.max(1) as u32,
            "--durability" => args.durability = flags.durability()?,
            "--fill-first" => args.fill_first = true,
            "--receive-and-delete" => args.receive_and_delete = true,
            "--topic" => args.topic = Some(flags.number(&flag)?.max(1)),
            "--tls" => args.tls = true,
            "--websocket" => args.websocket = true,
            "--dedup" => args.dedup = true,
            "--forward" => args.forward = true,
            "--child" => args.child = true,
            "--partitions" => args.partitions = Some(flags.number(&flag)?.clamp(1, 16)),
            "--producers" => args.producers = flags.number(&flag)?.max(1),
            "--consumers" => args.consumers = flags.number(&flag)?.max(1),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.child && args.tls {
        return Err(
            "--child runs the binary's plain listener; it does not combine with --tls".into(),
        );
    }
    if args.websocket && args.tls {
        return Err(
            "--websocket runs over the plain listener; it does not combine with --tls".into(),
        );
    }
    if args.forward && args.topic.is_some() {
        return Err("--forward forwards a queue; it does not combine with --topic".into());
    }
    Ok(args)
}

/// Sends every message with `args.producers` producers at once, each its share of the ids;
/// returns how many were accepted, the elapsed time and each send's round trip in µs.
async fn produce(dial: &Dial, args: &Args) -> Result<(u64, Duration, Vec<u64>), BoxError> {
    let started = Instant::now();
    let shares = (0..args.producers).map(|producer| {
        let ids = producer * args.messages / args.producers
            ..(producer + 1) * args.messages / args.producers;
        produce_ids(dial, args, ids)
    });
    let mut accepted = 0;
    let mut round_trips = Vec::with_capacity(args.messages as usize);
    for (count, _, trips) in try_join_all(shares).await? {
        accepted += count;
        round_trips.extend(trips);
    }
    Ok((accepted, started.elapsed(), round_trips))
}

/// Sends the messages numbered `ids` on a connection of its own; returns how many were
/// accepted, the elapsed time and each send's round trip (send to outcome) in µs.
async fn produce_ids(
    dial: &Dial,
    args: &Args,
    ids: std::ops::Range<u64>,
) -> Result<(u64, Duration, Vec<u64>), BoxError> {
    let mut connection = dial.open("bench-producer").await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut sender = Sender::attach(&mut session, "bench-sender", ENTITY).await?;
    let payload = vec![0xA5u8; args.size];
    let started = Instant::now();
    let mut inflight = FuturesUnordered::new();
    let mut accepted = 0;
    let mut round_trips = Vec::with_capacity(ids.clone().count());
    for id in ids {
        let properties = ApplicationProperties::builder()
            .insert("id", SimpleValue::Long(id as i64))
            .insert("ts", SimpleValue::Long(now_micros()))
            .build();
        let message = Message::builder()
            .properties(Properties::builder().message_id(format!("m-{id}")).build())
            .application_properties(properties)
            .data(Binary::from(payload.clone()))
            .build();
        let sent_at = Instant::now();
        let outcome = sender.send_batchable(message).await?;
        inflight.push(async move { (outcome.await, sent_at.elapsed()) });
        while inflight.len() >= args.window {
            if let Some((Ok(Outcome::Accepted(_)), took)) = inflight.next().await {
                accepted += 1;
                round_trips.push(took.as_micros() as u64);
            }
        }
    }
    while let Some((outcome, took)) = inflight.next().await {
        if let Ok(Outcome::Accepted(_)) = outcome {
            accepted += 1;
            round_trips.push(took.as_micros() as u64);
        }
    }
    let elapsed = started.elapsed();
    sender.close().await?;
    session.end().await?;
    connection.close().await?;
    Ok((accepted, elapsed, round_trips))
}

/// Resident memory of this process, in MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The resident memory a duplicate-detection window holding a million distinct ids takes
/// (measured around building one, at its fullest: the index just grown).
fn window_memory() -> (usize, f64) {
    const IDS: usize = 1_000_000;
    let before = rss_mib();
    let mut window = Duplicates::new(3_600_000, Vec::new(), 0);
    for n in 0..IDS {
        window.accept(
            digest(format!("m-{n}").as_bytes()),
            n as i64,
            (n / 1000) as i64,
        );
        if n % 1000 == 999 {
            // The broker takes the window's changes every turn, into its log.
            window.take_changes();
        }
    }
    let after = rss_mib();
    assert_eq!(window.len(), IDS);
    (IDS, after - before)
}

struct Received {
    /// The address received from.
    source: String,
    unique: u64,
    duplicates: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    latencies_us: Vec<u64>,
}

impl Received {
    /// Nothing received from `source` yet, with room for `expected` latencies.
    fn new(source: &str, expected: usize) -> Self {
        Received {
            source: source.to_owned(),
            unique: 0,
            duplicates: 0,
            first: None,
            last: None,
            latencies_us: Vec::with_capacity(expected),
        }
    }
}

/// What the consumers of one source received between them.
struct Tally {
    seen: std::sync::Mutex<HashSet<i64>>,
    /// Set once every message came.
    done: tokio::sync::watch::Sender<bool>,
}

/// Receives from `source` with `args.consumers` consumers at once until every message came
/// once; fails after 30 s without one.
async fn consume(dial: &Dial, args: &Args, source: &str) -> Result<Received, BoxError> {
    let tally = Tally {
        seen: std::sync::Mutex::new(HashSet::with_capacity(args.messages as usize)),
        done: tokio::sync::watch::channel(false).0,
    };
    let consumers = (0..args.consumers).map(|_| consume_one(dial, args, source, &tally));
    let mut got = Received::new(source, args.messages as usize);
    for one in try_join_all(consumers).await? {
        got.unique += one.unique;
        got.duplicates += one.duplicates;
        got.first = got.first.into_iter().chain(one.first).min();
        got.last = got.last.into_iter().chain(one.last).max();
        got.latencies_us.extend(one.latencies_us);
    }
    Ok(got)
}

/// One consumer of `source`, on a connection of its own, until `tally` has every message.
async fn consume_one(
    dial: &Dial,
    args: &Args,
    source: &str,
    tally: &Tally,
) -> Result<Received, BoxError> {
    let mut connection = dial.open(&format!("bench-consumer {source}")).await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut receiver = Receiver::builder()
        .name("bench-receiver")
        .source(source)
        .credit_mode(CreditMode::Auto(args.credit))
        .sender_settle_mode(if args.receive_and_delete {
            SenderSettleMode::Settled
        } else {
            SenderSettleMode::Unsettled
        })
        .attach(&mut session)
        .await?;
    let mut got = Received::new(source, 0);
    let mut done = tally.done.subscribe();
    loop {
        let delivery = tokio::select! {
            _ = done.wait_for(|done| *done) => break,
            delivery = tokio::time::timeout(Duration::from_secs(30), receiver.recv::<Body<Value>>()) => delivery,
        };
        let delivery = delivery.map_err(|_| {
            format!(
                "{source}: no message for 30 s after {} received here",
                got.unique
            )
        })??;
        let now = Instant::now();
        let properties = delivery.message().application_properties.as_ref();
        let field = |key: &str| match properties.and_then(|p| p.0.get(key)) {
            Some(SimpleValue::Long(v)) => Some(*v),
            _ => None,
        };
        let (id, ts) = (field("id"), field("ts"));
        // For a pre-settled delivery this sends nothing, but fe2o3-amqp refreshes its credit
        // only when a delivery is disposed.
        receiver.accept(&delivery).await?;
        let total = {
            let mut seen = tally.seen.lock().expect("tally");
            match id.is_some_and(|id| seen.insert(id)) {
                true => got.unique += 1,
                false => got.duplicates += 1,
            }
            seen.len() as u64
        };
        got.first.get_or_insert(now);
        got.last = Some(now);
        if let Some(ts) = ts {
            got.latencies_us.push((now_micros() - ts).max(0) as u64);
        }
        if total >= args.messages {
            tally.done.send_replace(true);
        }
    }
    receiver.close().await?;
    session.end().await?;
    connection.close().await?;
    Ok(got)
}

/// The broker under load: in this process, or the binary as a child.
enum Broker {
    InProcess(BenchBroker),
    Child(ChildBroker),
}

impl Broker {
    fn start(args: &Args) -> Result<Self, BoxError> {
        if !args.child {
            let broker = BenchBroker::start_with(args.durability, &args.entities(), args.tls)?;
            return Ok(Broker::InProcess(broker));
        }
        let durability = match args.durability {
            Durability::Sync => "sync",
            Durability::Interval => "interval",
            Durability::Memory => "memory",
        };
        let config = format!(
            "[broker]\nallow_anonymous = true\ndurability = \"{durability}\"\n\n{}",
            args.entities()
        );
        Ok(Broker::Child(ChildBroker::start(&config)?))
    }

    fn dial(&self) -> Dial {
        match self {
            Broker::InProcess(broker) => match &broker.tls {
                Some(endpoint) => Dial::Tls(endpoint.clone()),
                None => Dial::Plain(broker.addr),
            },
            Broker::Child(child) => Dial::Plain(child.addr),
        }
    }

    /// The child's CPU time so far, in µs, and the bytes it wrote; `None` in process.
    fn child_usage(&self) -> Result<Option<(f64, Option<u64>)>, BoxError> {
        match self {
            Broker::InProcess(_) => Ok(None),
            Broker::Child(child) => child.usage().map(Some),
        }
    }

    fn stop(self) -> Result<(), BoxError> {
        match self {
            Broker::InProcess(broker) => broker.stop(),
            Broker::Child(child) => {
                drop(child);
                Ok(())
            }
        }
    }
}

fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let broker = Broker::start(&args)?;
    let dial = match broker.dial() {
        Dial::Plain(addr) if args.websocket => Dial::WebSocket(addr),
        dial => dial,
    };
    let sources = args.sources();
    let client_runtime = support::runtime(support::CLIENT_THREADS)?;
    let before = Usage::now()?;
    let child_before = broker.child_usage()?;
    let started = Instant::now();
    let (sent, received) = client_runtime.block_on(async {
        let consumers = try_join_all(sources.iter().map(|source| consume(&dial, &args, source)));
        if args.fill_first {
            let sent = produce(&dial, &args).await?;
            println!(
                "backlog:    {} messages queued, process RSS {:.1} MiB",
                sent.0,
                rss_mib()
            );
            return Ok::<_, BoxError>((sent, consumers.await?));
        }
        let (sent, received) = tokio::join!(produce(&dial, &args), consumers);
        Ok::<_, BoxError>((sent?, received?))
    })?;
    let after = Usage::now()?;
    let child_after = broker.child_usage()?;
    let (accepted, send_elapsed, mut round_trips) = sent;
    round_trips.sort_unstable();
    broker.stop()?;

    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    println!(
        "throughput: messages={} size={} window={} credit={} durability={:?} consumer={}{} {}{}",
        args.messages,
        args.size,
        args.window,
        args.credit,
        args.durability,
        if args.receive_and_delete {
            "receive-and-delete"
        } else {
            "peek-lock"
        },
        if args.fill_first { " fill-first" } else { "" },
        match args.topic {
            None => "queue".to_owned(),
            Some(n) => format!("topic with {n} subscriptions"),
        },
        match (args.tls, args.websocket) {
            (true, _) => " over TLS",
            (_, true) => " over WebSockets",
            _ => "",
        }
    );
    if args.child {
        println!("broker:     the tidebus binary as a child process");
    }
    if args.dedup {
        println!("dedup:      duplicate detection on, every id distinct");
    }
    if args.forward {
        println!("forward:    {ENTITY} forwards to {FORWARD_TARGET}, where the consumer reads");
    }
    println!(
        "load:       {} producer(s), {} consumer(s) per source, {}",
        args.producers,
        args.consumers,
        args.partitions.map_or_else(
            || "not partitioned".to_owned(),
            |n| format!("{n} partitions")
        )
    );
    println!(
        "send:       accepted={accepted} elapsed={send_elapsed:.3?} rate={:.0} msg/s",
        rate(accepted, send_elapsed)
    );
    for got in &received {
        let receive_span = match (got.first, got.last) {
            (Some(first), Some(last)) => last - first,
            _ => Duration::ZERO,
        };
        println!(
            "receive:    unique={} duplicates={} elapsed={receive_span:.3?} rate={:.0} msg/s ({})",
            got.unique,
            got.duplicates,
            rate(got.unique, receive_span),
            got.source
        );
    }
    let everywhere = received.iter().map(|got| got.unique).min().unwrap_or(0);
    let end_to_end = received
        .iter()
        .filter_map(|got| got.last)
        .max()
        .map_or(Duration::ZERO, |last| last - started);
    println!(
        "end-to-end: elapsed={end_to_end:.3?} rate={:.0} msg/s (received by every consumer)",
        rate(everywhere, end_to_end)
    );
    println!(
        "send rtt:   p50={:.3}ms p99={:.3}ms (send to outcome)",
        percentile(&round_trips, 0.50),
        percentile(&round_trips, 0.99)
    );
    if args.durability != Durability::Memory {
        let (floor_p50, floor_p99) = support::disk_floor()?;
        println!(
            "disk floor: p50={floor_p50:.3}ms p99={floor_p99:.3}ms (one 4 KiB O_DSYNC write); send rtt p50 = {:.2} x floor",
            percentile(&round_trips, 0.50) / floor_p50.max(1e-6)
        );
    }
    let mut latencies: Vec<u64> = received
        .iter()
        .flat_map(|got| got.latencies_us.iter().copied())
        .collect();
    latencies.sort_unstable();
    println!(
        "latency:    p50={:.3}ms p99={:.3}ms",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99)
    );
    let published = accepted.max(1) as f64;
    let process_us = after.process_us - before.process_us;
    let mut written = (before.written, after.written);
    match (child_before, child_after) {
        (Some((cpu_before, written_before)), Some((cpu_after, written_after))) => {
            written = (written_before, written_after);
            println!(
                "cpu:        broker {:.1} µs per published message (the child process; this one {:.1} µs)",
                (cpu_after - cpu_before) / published,
                process_us / published
            )
        }
        _ => println!(
            "cpu:        broker {:.1} µs per published message (whole process {:.1} µs)",
            (process_us - (after.client_us - before.client_us)) / published,
            process_us / published
        ),
    }
    match written {
        (Some(before), Some(after)) => println!(
            "disk:       {:.0} bytes written per published message ({:.1} MiB in all)",
            after.saturating_sub(before) as f64 / published,
            after.saturating_sub(before) as f64 / (1024.0 * 1024.0)
        ),
        _ => println!("disk:       unknown (/proc/self/io cannot be read)"),
    }
    if args.dedup {
        let (ids, mib) = window_memory();
        println!("dedup:      a window of {ids} ids takes {mib:.1} MiB (resident)");
    }
    let exactly_once = received
        .iter()
        .all(|got| got.unique == args.messages && got.duplicates == 0);
    if accepted != args.messages || !exactly_once {
        return Err("not every message arrived exactly once at every consumer".into());
    }
    Ok(())
}
