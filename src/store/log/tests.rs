//! sled's entity log takes the conformance suite (`store/conformance.rs`): a crash cuts its
//! commit after any of its sled operations, and its bookkeeping of chunks and shared bodies
//! must agree with its tree.

use std::path::Path;
use std::time::Instant;

use super::*;
use crate::store::conformance::{conformance_suite, TestableLog};
use crate::store::keys::{prefix, seq_of, Kind, BODIES_PREFIX};
use crate::store::log::compaction::COMPACT_BELOW_ONE_IN;

conformance_suite!(EntityLog);

impl TestableLog for EntityLog {
    fn open(dir: &Path) -> Self {
        // sled's I/O threads can hold a dropped database's file lock for a moment: a reopen
        // right after a drop waits until it is free.
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let db = loop {
            match sled::Config::new().path(dir).flush_every_ms(None).open() {
                Ok(db) => break db,
                Err(error) if Instant::now() < deadline && error.to_string().contains("lock") => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(error) => panic!("open: {error}"),
            }
        };
        let tree = db.open_tree("e").expect("tree");
        // No cache: every read comes from the tree.
        EntityLog::new(Some(db), Some(tree), "e".into(), 0)
    }

    /// A step is one sled operation of the planned write, or its whole batch.
    fn commit_torn(mut self, kept: usize) -> Result<usize, StoreError> {
        let changes = std::mem::take(&mut self.staged);
        let moves = std::mem::take(&mut self.staged_moves);
        let mut ops = self.plan(changes, moves)?;
        let steps = if ops.atomic { 1 } else { ops.list.len() };
        ops.list.truncate(kept);
        ops.apply(self.tree.as_ref().expect("a stored log"))?;
        Ok(steps)
    }

    fn shared_bodies(&self) -> Vec<i64> {
        self.shared.keys().copied().collect()
    }

    /// No departures without their chunk, no shared bodies unknown or unused.
    fn audit(&self, moment: &str) {
        let tree = self.tree.as_ref().expect("a stored log");
        for (lane, chunks) in &self.chunks {
            let orphans = tree
                .scan_prefix(prefix(Kind::Departures, *lane))
                .filter_map(Result::ok)
                .filter(|(key, _)| !chunks.stored.contains_key(&seq_of(key)))
                .count();
            assert_eq!(orphans, 0, "{moment}: departures of a removed chunk remain");
        }
        let on_disk: Vec<i64> = tree
            .scan_prefix([BODIES_PREFIX])
            .map(|item| seq_of(&item.expect("read").0))
            .collect();
        assert_eq!(
            on_disk,
            self.shared_bodies(),
            "{moment}: shared bodies unknown"
        );
        assert!(
            self.shared.values().all(|bodies| bodies.refs > 0),
            "{moment}: unused shared bodies"
        );
    }

    /// No chunk is left holding so few of its messages that compaction moves them.
    fn audit_compacted(&self) {
        for chunks in self.chunks.values() {
            for (first, chunk) in &chunks.stored {
                let (live, count) = (chunk.departures.live(), chunk.departures.count());
                assert!(
                    live * COMPACT_BELOW_ONE_IN > count,
                    "chunk {first}: {live} of {count}"
                );
            }
        }
    }
}
