//! The sending side of a queue or topic (design.md D7): sequence numbers, enqueued times, the
//! size quota and the durability watermark.

use crate::entity::terms::EntityError;
use crate::store::record::NEVER;

/// What every message sent to one queue or topic passes through, once.
#[derive(Debug)]
pub struct Intake {
    next_seq: i64,
    /// Messages numbered from here on are not durable yet and must not be delivered: a
    /// receiver that saw a sequence number a crash then lost would see it reused.
    visible_below: i64,
    last_enqueued_ms: i64,
    max_size_bytes: u64,
    /// The entity's default time to live (a topic's; [`NEVER`] for a queue, whose lane
    /// holds its own), in ms.
    default_ttl_ms: i64,
}

impl Intake {
    /// An intake whose next message gets `next_seq` (at least 1) and an enqueued time no
    /// earlier than `last_enqueued_ms`; everything numbered before is durable.
    pub fn new(
        next_seq: i64,
        last_enqueued_ms: i64,
        max_size_bytes: u64,
        default_ttl_ms: i64,
    ) -> Self {
        let next_seq = next_seq.max(1);
        Intake {
            next_seq,
            visible_below: next_seq,
            last_enqueued_ms,
            max_size_bytes,
            default_ttl_ms,
        }
    }

    /// Applies a changed size limit and default time to live (an entity updated at run time);
    /// messages already stored keep their expiry.
    pub fn reconfigure(&mut self, max_size_bytes: u64, default_ttl_ms: i64) {
        self.max_size_bytes = max_size_bytes;
        self.default_ttl_ms = default_ttl_ms;
    }

    /// The sequence number the next message gets.
    pub fn next_seq(&self) -> i64 {
        self.next_seq
    }

    /// Takes the next sequence number.
    pub fn number(&mut self) -> i64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Makes messages numbered below `next_seq` deliverable: their writes are durable.
    pub fn reveal_up_to(&mut self, next_seq: i64) {
        self.visible_below = self.visible_below.max(next_seq);
    }

    /// Whether numbered messages wait for their durability point before they can be
    /// delivered.
    pub fn has_unrevealed(&self) -> bool {
        self.visible_below < self.next_seq
    }

    /// Refuses `adding` bytes when the entity already holds `held` and would go past its
    /// size limit.
    ///
    /// # Errors
    /// [`EntityError::QuotaExceeded`].
    pub fn admit(&self, held: u64, adding: u64) -> Result<(), EntityError> {
        if held.saturating_add(adding) > self.max_size_bytes {
            return Err(EntityError::QuotaExceeded {
                size: held,
                max: self.max_size_bytes,
            });
        }
        Ok(())
    }

    /// The enqueued time of messages accepted at `now_ms`: never earlier than the last one.
    pub fn enqueued_time(&mut self, now_ms: i64) -> i64 {
        self.last_enqueued_ms = now_ms.max(self.last_enqueued_ms);
        self.last_enqueued_ms
    }

    /// The time to live a message gets from the entity: its own, capped by the entity's
    /// default, or the default when it sets none ([`NEVER`]: unlimited).
    pub fn ttl_ms(&self, message_ttl_ms: Option<i64>) -> i64 {
        message_ttl_ms.map_or(self.default_ttl_ms, |ttl| ttl.min(self.default_ttl_ms))
    }
}

/// `enqueued + ttl`; [`NEVER`] when the time to live is unlimited.
pub fn expiry(enqueued_ms: i64, ttl_ms: i64) -> i64 {
    if ttl_ms == NEVER {
        NEVER
    } else {
        enqueued_ms.saturating_add(ttl_ms)
    }
}
