//! Recovery time: stores N records in one entity's log, closes the store, and times opening
//! it again and reading every record back (what the broker does at start).
//!
//! `cargo bench --bench recovery -- [--messages N] [--size BYTES]` (default 1,000,000 × 1 KB)

use std::time::Instant;

use bytes::Bytes;
use tidebus::config::{Config, Durability};
use tidebus::store::record::{MessageState, Record, NEVER};
use tidebus::store::{Change, LaneId, Log, Store};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let mut messages: i64 = 1_000_000;
    let mut size: usize = 1024;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--messages" => messages = args.next().ok_or("--messages N")?.parse()?,
            "--size" => size = args.next().ok_or("--size BYTES")?.parse()?,
            "--bench" => {}
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let dir = tempfile::tempdir()?;
    let mut config = Config::embedded_default().broker;
    config.durability = Durability::Sync;
    config.data_dir = dir.path().join("data");
    let body = Bytes::from(vec![0x5Au8; size]);
    let started = Instant::now();
    {
        let store = Store::open(&config)?;
        let mut log = store.log("bench")?;
        let mut seq = 1;
        while seq <= messages {
            let end = (seq + 1000).min(messages + 1);
            let mut changes: Vec<(LaneId, Change)> = (seq..end)
                .map(|s| {
                    let put = Change::Put {
                        seq: s,
                        record: Record {
                            state: MessageState::Active,
                            delivery_count: 0,
                            enqueued_ms: 1_700_000_000_000 + s,
                            size: size as u32,
                            expires_ms: NEVER,
                            scheduled_ms: 0,
                        },
                        body: body.clone(),
                    };
                    (LaneId::MAIN, put)
                })
                .collect();
            changes.push((LaneId::MAIN, Change::NextSeq(end)));
            log.write(changes)?;
            seq = end;
        }
        store.flush_blocking()?;
    }
    println!(
        "write:    {messages} messages of {size} bytes in {:.2?}",
        started.elapsed()
    );
    let started = Instant::now();
    let store = Store::open(&config)?;
    let recovered = store.log("bench")?.recover(LaneId::MAIN)?;
    let elapsed = started.elapsed();
    println!(
        "recovery: {} messages, next sequence number {}, in {elapsed:.2?}",
        recovered.records.len(),
        recovered.next_seq
    );
    if recovered.records.len() as i64 != messages {
        return Err("recovery lost messages".into());
    }
    Ok(())
}
