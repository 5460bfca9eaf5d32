//! End-to-end throughput: an in-process broker, one fe2o3-amqp producer and one consumer.
//!
//! `cargo bench --bench throughput -- [--messages N] [--size BYTES] [--window N] [--credit N]
//! [--durability sync|interval|memory] [--fill-first] [--receive-and-delete]`
//!
//! The consumer is peek-lock and completes every message (the SDK default), or with
//! `--receive-and-delete` takes pre-settled deliveries.
//!
//! `--fill-first` sends everything before the consumer starts and prints the process's
//! resident memory with the whole backlog queued (broker and client share the process).
//!
//! The producer keeps `window` unsettled sends in flight; the consumer grants `credit` and
//! accepts every message (peek-lock, one disposition each). Prints send, receive and end-to-end
//! rates and the p50/p99 latency from send to receipt.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, Outcome};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Value};
use fe2o3_amqp::{Receiver, Sender, Session};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tidebus::config::Durability;

mod support;
use support::{connect, now_micros, BenchBroker, BoxError, Flags};

struct Args {
    durability: Durability,
    fill_first: bool,
    receive_and_delete: bool,
    messages: u64,
    size: usize,
    window: usize,
    credit: u32,
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
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// Sends every message; returns how many were accepted, the elapsed time and each send's round
/// trip (send to outcome) in µs.
async fn produce(
    addr: std::net::SocketAddr,
    args: &Args,
) -> Result<(u64, Duration, Vec<u64>), BoxError> {
    let mut connection = connect(addr, "bench-producer").await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut sender = Sender::attach(&mut session, "bench-sender", "bench").await?;
    let payload = vec![0xA5u8; args.size];
    let started = Instant::now();
    let mut inflight = FuturesUnordered::new();
    let mut accepted = 0;
    let mut round_trips = Vec::with_capacity(args.messages as usize);
    for id in 0..args.messages {
        let properties = ApplicationProperties::builder()
            .insert("id", SimpleValue::Long(id as i64))
            .insert("ts", SimpleValue::Long(now_micros()))
            .build();
        let message = Message::builder()
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

struct Received {
    unique: u64,
    duplicates: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    latencies_us: Vec<u64>,
}

async fn consume(addr: std::net::SocketAddr, args: &Args) -> Result<Received, BoxError> {
    let mut connection = connect(addr, "bench-consumer").await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut receiver = Receiver::builder()
        .name("bench-receiver")
        .source("bench")
        .credit_mode(CreditMode::Auto(args.credit))
        .sender_settle_mode(if args.receive_and_delete {
            SenderSettleMode::Settled
        } else {
            SenderSettleMode::Unsettled
        })
        .attach(&mut session)
        .await?;
    let mut seen = HashSet::with_capacity(args.messages as usize);
    let mut got = Received {
        unique: 0,
        duplicates: 0,
        first: None,
        last: None,
        latencies_us: Vec::with_capacity(args.messages as usize),
    };
    while got.unique < args.messages {
        let delivery =
            tokio::time::timeout(Duration::from_secs(30), receiver.recv::<Body<Value>>())
                .await
                .map_err(|_| format!("no message for 30 s after {} received", got.unique))??;
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
        if id.is_some_and(|id| seen.insert(id)) {
            got.unique += 1;
        } else {
            got.duplicates += 1;
        }
        got.first.get_or_insert(now);
        got.last = Some(now);
        if let Some(ts) = ts {
            got.latencies_us.push((now_micros() - ts).max(0) as u64);
        }
    }
    receiver.close().await?;
    session.end().await?;
    connection.close().await?;
    Ok(got)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index] as f64 / 1000.0
}

fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let broker = BenchBroker::start(args.durability, "bench")?;
    let addr = broker.addr;
    let client_runtime = support::runtime()?;
    let (sent, received) = client_runtime.block_on(async {
        let started = Instant::now();
        if args.fill_first {
            let sent = produce(addr, &args).await?;
            println!(
                "backlog:    {} messages queued, process RSS {:.1} MiB",
                sent.0,
                rss_mib()
            );
            return Ok::<_, BoxError>((sent, (consume(addr, &args).await?, started)));
        }
        let (sent, received) = tokio::join!(produce(addr, &args), consume(addr, &args));
        Ok::<_, BoxError>((sent?, (received?, started)))
    })?;
    let ((accepted, send_elapsed, mut round_trips), (mut got, started)) = (sent, received);
    round_trips.sort_unstable();
    broker.stop()?;

    let end_to_end = got.last.map_or(Duration::ZERO, |last| last - started);
    let receive_span = match (got.first, got.last) {
        (Some(first), Some(last)) => last - first,
        _ => Duration::ZERO,
    };
    got.latencies_us.sort_unstable();
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    println!(
        "throughput: messages={} size={} window={} credit={} durability={:?} consumer={}{}",
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
        if args.fill_first { " fill-first" } else { "" }
    );
    println!(
        "send:       accepted={accepted} elapsed={send_elapsed:.3?} rate={:.0} msg/s",
        rate(accepted, send_elapsed)
    );
    println!(
        "receive:    unique={} duplicates={} elapsed={receive_span:.3?} rate={:.0} msg/s",
        got.unique,
        got.duplicates,
        rate(got.unique, receive_span)
    );
    println!(
        "end-to-end: elapsed={end_to_end:.3?} rate={:.0} msg/s",
        rate(got.unique, end_to_end)
    );
    println!(
        "send rtt:   p50={:.3}ms p99={:.3}ms (send to outcome)",
        percentile(&round_trips, 0.50),
        percentile(&round_trips, 0.99)
    );
    println!(
        "latency:    p50={:.3}ms p99={:.3}ms",
        percentile(&got.latencies_us, 0.50),
        percentile(&got.latencies_us, 0.99)
    );
    if accepted != args.messages || got.unique != args.messages || got.duplicates != 0 {
        return Err("not every message arrived exactly once".into());
    }
    Ok(())
}
