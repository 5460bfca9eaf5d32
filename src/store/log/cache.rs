//! The body cache: the bytes of recent messages kept in memory.

use bytes::Bytes;
use foldhash::HashMap as FastMap;

use crate::store::{Change, LaneId};

/// Bytes of messages kept in memory: every message in `memory` mode, the most recent ones
/// within a budget otherwise, so that a queue that keeps up never reads its own writes back.
#[derive(Debug)]
pub(super) struct BodyCache {
    pub(super) bodies: FastMap<(LaneId, i64), Bytes>,
    pub(super) bytes: usize,
    pub(super) budget: usize,
}

impl BodyCache {
    pub(super) fn apply(&mut self, lane: LaneId, change: &Change) {
        match change.bytes() {
            Some((seq, Some(body))) => {
                self.remove(lane, seq);
                if self.bytes + body.len() <= self.budget {
                    self.bytes += body.len();
                    self.bodies.insert((lane, seq), body.clone());
                }
            }
            Some((seq, None)) => self.remove(lane, seq),
            None => {}
        }
    }

    fn remove(&mut self, lane: LaneId, seq: i64) {
        if let Some(old) = self.bodies.remove(&(lane, seq)) {
            self.bytes -= old.len();
        }
    }

    pub(super) fn clear(&mut self) {
        self.bodies.clear();
        self.bytes = 0;
    }
}
