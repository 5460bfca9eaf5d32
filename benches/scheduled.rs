//! Scheduled-message activation: an in-process broker, one fe2o3-amqp sender that schedules
//! every message for one due instant, one receiver that collects them as they activate.
//!
//! `cargo bench --bench scheduled -- [--messages N] [--lead SECONDS] [--size BYTES]
//! [--window N] [--credit N] [--durability sync|interval|memory]`
//!
//! Every message carries the message annotation `x-opt-scheduled-enqueue-time` = the same
//! instant, `--lead` seconds (default 10) after the start. The sender keeps `--window` unsettled
//! sends in flight; sending must end before the due instant, or the result measures the sends
//! rather than the activation (a warning says so). The receiver is receive-and-delete
//! (pre-settled deliveries: this measures activation, not settlement) with `--credit` credit,
//! attached from the start. It checks that every message arrived exactly once and prints:
//!
//! * activation lateness: the broker's `x-opt-enqueued-time` minus the due instant;
//! * receive lateness: local receipt time minus the due instant;
//! * the time from the due instant until the last message arrived;
//! * activation throughput: messages / (last enqueued time - first enqueued time);
//! * whether all of them were activated within 2 s of the due instant (the aim).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Message, MessageAnnotations, Outcome,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use fe2o3_amqp::{Receiver, Sender, Session};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tidebus::config::Durability;

// Not `percentile`: lateness can be negative, so this bench has its own quantiles.
#[allow(dead_code)]
mod support;
use support::{connect, now_micros, BenchBroker, BoxError, Flags};

/// The annotation that schedules a message (set by the sender).
const SCHEDULED_ENQUEUE_TIME: &str = "x-opt-scheduled-enqueue-time";
/// The annotation with the broker's enqueued (activation) time (read by the receiver).
const ENQUEUED_TIME: &str = "x-opt-enqueued-time";
/// The queue the bench uses.
const QUEUE: &str = "bench";
/// The aim: every message activated within this long after the due instant.
const AIM_MS: i64 = 2_000;
/// The receiver gives up when no message came for this long after the due instant.
const STALL: Duration = Duration::from_secs(30);

/// Command-line settings.
struct Args {
    /// Durability mode of the broker.
    durability: Durability,
    /// Messages to schedule.
    messages: u64,
    /// Seconds from the start to the due instant.
    lead: u64,
    /// Body size in bytes.
    size: usize,
    /// Unsettled sends in flight.
    window: usize,
    /// Receiver credit.
    credit: u32,
}

/// Parses the flags of the usage line; `--bench` (passed by `cargo bench`) is ignored.
fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        durability: Durability::Sync,
        messages: 100_000,
        lead: 10,
        size: 1024,
        window: 100,
        credit: 5_000,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag() {
        match flag.as_str() {
            "--messages" => args.messages = flags.number(&flag)?,
            "--lead" => args.lead = flags.number(&flag)?,
            "--size" => args.size = flags.number(&flag)? as usize,
            "--window" => args.window = flags.number(&flag)?.max(1) as usize,
            "--credit" => args.credit = flags.number(&flag)?.max(1) as u32,
            "--durability" => args.durability = flags.durability()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// Schedules every message for `due_ms`; returns how many were accepted and the wall-clock
/// time (µs) the last outcome arrived.
async fn produce(addr: SocketAddr, args: &Args, due_ms: i64) -> Result<(u64, i64), BoxError> {
    let mut connection = connect(addr, "bench-scheduler").await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut sender = Sender::attach(&mut session, "bench-sender", QUEUE).await?;
    let payload = vec![0xA5u8; args.size];
    let mut inflight = FuturesUnordered::new();
    let mut accepted = 0;
    for id in 0..args.messages {
        let message = Message::builder()
            .message_annotations(
                MessageAnnotations::builder()
                    .insert(
                        SCHEDULED_ENQUEUE_TIME,
                        Value::Timestamp(Timestamp::from_milliseconds(due_ms)),
                    )
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("id", SimpleValue::Long(id as i64))
                    .build(),
            )
            .data(Binary::from(payload.clone()))
            .build();
        inflight.push(sender.send_batchable(message).await?);
        while inflight.len() >= args.window {
            if let Some(Ok(Outcome::Accepted(_))) = inflight.next().await {
                accepted += 1;
            }
        }
    }
    while let Some(outcome) = inflight.next().await {
        if let Ok(Outcome::Accepted(_)) = outcome {
            accepted += 1;
        }
    }
    let finished = now_micros();
    sender.close().await?;
    session.end().await?;
    connection.close().await?;
    Ok((accepted, finished))
}

/// What the receiver saw.
struct Received {
    /// Distinct message ids received.
    unique: u64,
    /// Receipts of an id already seen, or without an id.
    duplicates: u64,
    /// Per message: the broker's enqueued time, ms since the epoch.
    enqueued_ms: Vec<i64>,
    /// Per message: the local receipt time, µs since the epoch.
    received_us: Vec<i64>,
}

/// Receives until every message arrived; fails when none came for [`STALL`] (counted from
/// the due instant while it is ahead).
async fn consume(addr: SocketAddr, args: &Args, due_ms: i64) -> Result<Received, BoxError> {
    let mut connection = connect(addr, "bench-activation").await?;
    let mut session = Session::begin(&mut connection).await?;
    let mut receiver = Receiver::builder()
        .name("bench-receiver")
        .source(QUEUE)
        .credit_mode(CreditMode::Auto(args.credit))
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await?;
    let enqueued_key = OwnedKey::from(Symbol::from(ENQUEUED_TIME));
    let mut seen = HashSet::with_capacity(args.messages as usize);
    let mut got = Received {
        unique: 0,
        duplicates: 0,
        enqueued_ms: Vec::with_capacity(args.messages as usize),
        received_us: Vec::with_capacity(args.messages as usize),
    };
    while got.unique < args.messages {
        let until_due = Duration::from_micros((due_ms * 1000 - now_micros()).max(0) as u64);
        let delivery = tokio::time::timeout(until_due + STALL, receiver.recv::<Body<Value>>())
            .await
            .map_err(|_| format!("no message for {STALL:?} after {} received", got.unique))??;
        got.received_us.push(now_micros());
        let message = delivery.message();
        let id = match message
            .application_properties
            .as_ref()
            .and_then(|p| p.0.get("id"))
        {
            Some(SimpleValue::Long(id)) => Some(*id),
            _ => None,
        };
        match message
            .message_annotations
            .as_ref()
            .and_then(|a| a.0.get(&enqueued_key))
        {
            Some(Value::Timestamp(t)) => got.enqueued_ms.push(t.milliseconds()),
            other => {
                return Err(format!("{ENQUEUED_TIME} missing or not a timestamp: {other:?}").into())
            }
        }
        // Sends nothing for a pre-settled delivery, but fe2o3-amqp refreshes its credit only
        // when a delivery is disposed.
        receiver.accept(&delivery).await?;
        if id.is_some_and(|id| seen.insert(id)) {
            got.unique += 1;
        } else {
            got.duplicates += 1;
        }
    }
    receiver.close().await?;
    session.end().await?;
    connection.close().await?;
    Ok(got)
}

/// The `p` quantile (0..=1) of sorted values.
fn quantile(sorted: &[i64], p: f64) -> i64 {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
        .copied()
        .unwrap_or(0)
}

/// `p50=… p99=… max=…` of sorted values, in ms with `scale` units per ms.
fn spread(sorted: &[i64], scale: f64) -> String {
    let ms = |v: i64| v as f64 / scale;
    format!(
        "p50={:.1}ms p99={:.1}ms max={:.1}ms",
        ms(quantile(sorted, 0.50)),
        ms(quantile(sorted, 0.99)),
        ms(sorted.last().copied().unwrap_or(0))
    )
}

/// Starts the broker, runs the sender and the receiver together, prints the figures; fails
/// unless every message arrived exactly once.
fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let broker = BenchBroker::start(args.durability, &support::queue_toml(QUEUE))?;
    let addr = broker.addr;

    let due_ms = now_micros() / 1000 + (args.lead * 1000) as i64;
    let client_runtime = support::runtime(support::CLIENT_THREADS)?;
    let ((accepted, sent_at_us), got) = client_runtime.block_on(async {
        let (sent, received) =
            tokio::join!(produce(addr, &args, due_ms), consume(addr, &args, due_ms));
        Ok::<_, BoxError>((sent?, received?))
    })?;
    broker.stop()?;

    let due_us = due_ms * 1000;
    let mut activation: Vec<i64> = got.enqueued_ms.iter().map(|t| t - due_ms).collect();
    let mut receipt: Vec<i64> = got.received_us.iter().map(|t| t - due_us).collect();
    activation.sort_unstable();
    receipt.sort_unstable();
    let span_ms = match (got.enqueued_ms.iter().min(), got.enqueued_ms.iter().max()) {
        (Some(first), Some(last)) => last - first,
        _ => 0,
    };
    let early = activation.iter().filter(|&&late| late < 0).count();
    let within_aim = early == 0 && activation.last().is_some_and(|&late| late <= AIM_MS);

    println!(
        "scheduled: messages={} size={} lead={}s window={} credit={} durability={:?} \
         consumer=receive-and-delete",
        args.messages, args.size, args.lead, args.window, args.credit, args.durability
    );
    let sent_before_due_ms = (due_us - sent_at_us) as f64 / 1000.0;
    println!(
        "send:       accepted={accepted}, done {sent_before_due_ms:.0}ms before the due instant"
    );
    if sent_at_us > due_us {
        println!(
            "warning:    sending ended after the due instant: the figures include send time; \
             use a larger --lead"
        );
    }
    println!(
        "received:   unique={} duplicates={}",
        got.unique, got.duplicates
    );
    println!(
        "activation: lateness {} (enqueued - due)",
        spread(&activation, 1.0)
    );
    println!(
        "receive:    lateness {} (receipt - due)",
        spread(&receipt, 1000.0)
    );
    println!(
        "last:       {:.1}ms after the due instant",
        receipt.last().copied().unwrap_or(0) as f64 / 1000.0
    );
    if span_ms > 0 {
        println!(
            "throughput: {:.0} msg/s activated ({} messages in {span_ms}ms of enqueued times)",
            got.unique as f64 * 1000.0 / span_ms as f64,
            got.unique
        );
    } else {
        println!("throughput: every message has the same enqueued millisecond");
    }
    println!(
        "aim:        {} ({early} activated before the due instant; aim: all within {AIM_MS}ms after it)",
        if within_aim { "met" } else { "MISSED" }
    );
    if accepted != args.messages || got.unique != args.messages || got.duplicates != 0 {
        return Err("not every message arrived exactly once".into());
    }
    Ok(())
}
