//! Scheduled messages waiting for their enqueue time (the timer wheel of design.md D2): held
//! by the queue or topic, not by its lanes; at activation each is numbered and enqueued again.

use std::collections::BTreeSet;

/// (due time, sequence number) of every scheduled message, earliest first.
#[derive(Debug, Default)]
pub struct Schedule {
    due: BTreeSet<(i64, i64)>,
}

impl Schedule {
    /// Adds a message due at `due_ms`.
    pub fn add(&mut self, due_ms: i64, seq: i64) {
        self.due.insert((due_ms, seq));
    }

    /// Removes a message (cancelled or activated).
    pub fn remove(&mut self, due_ms: i64, seq: i64) {
        self.due.remove(&(due_ms, seq));
    }

    /// The messages due by `now_ms`, earliest first, at most `limit` of them.
    pub fn due(&self, now_ms: i64, limit: usize) -> Vec<(i64, i64)> {
        self.due
            .iter()
            .take_while(|(due, _)| *due <= now_ms)
            .take(limit)
            .copied()
            .collect()
    }

    /// When the earliest message is due.
    pub fn next_due_ms(&self) -> Option<i64> {
        self.due.first().map(|(due, _)| *due)
    }

    /// Whether no message waits.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}
