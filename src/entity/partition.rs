//! Where one actor sits among its entity's partitions (design.md D9), and how its inner
//! numbers and lock tokens look to clients.
//!
//! Inside an actor every message has a position: its lanes, its log and its store keys use
//! nothing else. Positions start at 1 and only grow, so the store's big-endian keys keep
//! their order for ever. What a client sees is the sequence number: an unpartitioned entity's
//! is the position itself (its 63-bit range cannot run out: 2^63 messages at a million a
//! second take 292,000 years); a partition's is its partition id in the top 16 bits above the
//! position's low 48 bits, so it rolls over to 0 every 2^48 messages while positions go on.
//! A number that comes back from a client is read as the most recent position it can mean.
//!
//! A partition's lock tokens carry its id in their last two bytes (the lanes leave them zero),
//! so that a token alone says which partition holds the lock. [`Routing`] picks the partition
//! a send goes to.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use uuid::Uuid;

use crate::entity::operation::{Answer, Operation};
use crate::entity::terms::EntityError;
use crate::message::Arrival;

use crate::message::DeliveryStamp;
use crate::wire::annotation;

/// Bits of a partition's sequence number below its partition id.
pub const NUMBER_BITS: u32 = 48;
/// The low bits of a partition's sequence number: the position's.
const NUMBER_MASK: i64 = (1 << NUMBER_BITS) - 1;

/// One actor's place: alone (an unpartitioned entity), or partition `id` of its entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Partition(Option<u16>);

impl Partition {
    /// The actor of an unpartitioned entity.
    pub const ALONE: Partition = Partition(None);

    /// Partition `id` of a partitioned entity.
    pub fn numbered(id: u16) -> Partition {
        Partition(Some(id))
    }

    /// Its id (0 for an unpartitioned entity's actor).
    pub fn id(self) -> u16 {
        self.0.unwrap_or(0)
    }

    /// The sequence number clients see for the message at `position`.
    pub fn visible(self, position: i64) -> i64 {
        match self.0 {
            None => position,
            Some(id) => (i64::from(id) << NUMBER_BITS) | (position & NUMBER_MASK),
        }
    }

    /// The position a sequence number a client sent stands for: the most recent position
    /// below `next` (the next position to be given) that shows as `visible`; `None` when
    /// the number is another partition's or no position shows as it.
    pub fn position(self, visible: i64, next: i64) -> Option<i64> {
        let Some(id) = self.0 else {
            return (visible > 0 && visible < next).then_some(visible);
        };
        if visible >> NUMBER_BITS != i64::from(id) {
            return None;
        }
        let last = next - 1;
        let mut position = (last & !NUMBER_MASK) | (visible & NUMBER_MASK);
        if position > last {
            position -= 1 << NUMBER_BITS;
        }
        (position > 0).then_some(position)
    }

    /// The position a peek from sequence number `from` starts at, in a lane whose oldest
    /// message is at `oldest`: the messages whose numbers are `from` or above in the oldest
    /// epoch, then everything after them in log order. `None`: nothing of this partition
    /// (`from` is a later partition's).
    pub fn peek_start(self, from: i64, oldest: i64) -> Option<i64> {
        let Some(id) = self.0 else {
            return Some(from);
        };
        match (from >> NUMBER_BITS).cmp(&i64::from(id)) {
            std::cmp::Ordering::Less => Some(0),
            std::cmp::Ordering::Greater => None,
            std::cmp::Ordering::Equal => Some((oldest & !NUMBER_MASK) | (from & NUMBER_MASK)),
        }
    }

    /// A lock token as clients see it: with this partition's id in its last two bytes.
    pub fn mark(self, token: Uuid) -> Uuid {
        match self.0 {
            None => token,
            Some(id) => {
                let mut bytes = *token.as_bytes();
                bytes[14..].copy_from_slice(&id.to_be_bytes());
                Uuid::from_bytes(bytes)
            }
        }
    }

    /// A lock token a client sent back, as the lanes know it.
    pub fn unmark(self, token: Uuid) -> Uuid {
        match self.0 {
            None => token,
            Some(_) => {
                let mut bytes = *token.as_bytes();
                bytes[14..].fill(0);
                Uuid::from_bytes(bytes)
            }
        }
    }

    /// Writes what a client sees into a delivery's stamp: its sequence number and token.
    pub fn restamp(self, stamp: &mut DeliveryStamp, position: i64) {
        if self.0.is_none() {
            return;
        }
        for (name, value) in &mut stamp.annotations {
            if *name == annotation::SEQUENCE_NUMBER {
                *value = fe2o3_amqp::types::primitives::Value::Long(self.visible(position));
            }
        }
        stamp.lock_token = stamp.lock_token.map(|token| self.mark(token));
    }
}

impl Partition {
    /// A client's management operation as this partition's lanes take it: its sequence
    /// numbers as positions (`next`: the lane's next position; `oldest`: its oldest
    /// message's). `None`: it asks nothing of this partition (a peek from a later
    /// partition's number).
    ///
    /// # Errors
    /// [`EntityError::MessageNotFound`] for a number no position of this partition shows as.
    pub fn to_positions(
        self,
        operation: Operation,
        next: i64,
        oldest: i64,
    ) -> Result<Option<Operation>, EntityError> {
        if self.0.is_none() {
            return Ok(Some(operation));
        }
        let position = |seq: i64, kind: &'static str| {
            self.position(seq, next)
                .ok_or(EntityError::MessageNotFound(seq, kind))
        };
        let all = |seqs: Vec<i64>, kind: &'static str| -> Result<Vec<i64>, EntityError> {
            seqs.into_iter().map(|seq| position(seq, kind)).collect()
        };
        Ok(Some(match operation {
            Operation::Peek {
                from,
                count,
                session,
            } => match self.peek_start(from, oldest) {
                Some(from) => Operation::Peek {
                    from,
                    count,
                    session,
                },
                None => return Ok(None),
            },
            Operation::ReceiveBySequence {
                seqs,
                mode,
                session,
            } => Operation::ReceiveBySequence {
                seqs: all(seqs, "deferred")?,
                mode,
                session,
            },
            Operation::CancelScheduled { seqs } => Operation::CancelScheduled {
                seqs: all(seqs, "scheduled")?,
            },
            Operation::Resubmit { seq } => Operation::Resubmit {
                seq: position(seq, "unlocked dead-lettered")?,
            },
            operation => operation,
        }))
    }

    /// An operation's result as clients see it: sequence numbers visible and lock tokens
    /// marked, in its answer and in a refusal naming a message.
    ///
    /// # Errors
    /// The refusal it was given.
    pub fn to_visible(self, result: Result<Answer, EntityError>) -> Result<Answer, EntityError> {
        if self.0.is_none() {
            return result;
        }
        let answer = result.map_err(|error| match error {
            EntityError::MessageNotFound(seq, kind) => {
                EntityError::MessageNotFound(self.visible(seq), kind)
            }
            error => error,
        })?;
        Ok(match answer {
            Answer::Received(messages) => Answer::Received(
                messages
                    .into_iter()
                    .map(|(token, bytes)| (self.mark(token), bytes))
                    .collect(),
            ),
            Answer::Scheduled(numbers) => {
                Answer::Scheduled(numbers.into_iter().map(|n| self.visible(n)).collect())
            }
            Answer::Moved(seq) => Answer::Moved(self.visible(seq)),
            answer => answer,
        })
    }
}

/// The partition a sequence number belongs to.
pub fn of_number(visible: i64) -> usize {
    usize::try_from(visible >> NUMBER_BITS).unwrap_or(usize::MAX)
}

/// The partition a lock token belongs to.
pub fn of_token(token: Uuid) -> usize {
    let bytes = token.as_bytes();
    usize::from(u16::from_be_bytes([bytes[14], bytes[15]]))
}

/// The partition of `count` that a session id or partition key goes to: the same one for
/// the same key, in every process and version (FNV-1a, not the standard library's hasher,
/// whose output may change).
pub fn of_key(key: &[u8], count: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    usize::try_from(hash % count.max(1) as u64).unwrap_or(0)
}

/// What a partitioned entity's handles share to route its sends.
#[derive(Debug, Default)]
pub struct Routing {
    /// The partition the next send without a key goes to (modulo their number).
    turn: AtomicUsize,
    /// Whether a message id picks the partition (the entity detects duplicates, which each
    /// partition does for the ids it holds).
    by_message_id: AtomicBool,
    /// The entity's `auto_delete_on_idle` in ms; 0: none.
    auto_delete_ms: AtomicI64,
}

impl Routing {
    /// Routing for an entity that detects duplicates (or not) and deletes itself after
    /// `auto_delete_ms` idle (or never).
    pub fn new(by_message_id: bool, auto_delete_ms: Option<i64>) -> Routing {
        let routing = Routing::default();
        routing.set(by_message_id, auto_delete_ms);
        routing
    }

    /// Takes changed settings (the entity was updated).
    pub fn set(&self, by_message_id: bool, auto_delete_ms: Option<i64>) {
        self.by_message_id.store(by_message_id, Ordering::Relaxed);
        self.auto_delete_ms
            .store(auto_delete_ms.unwrap_or(0), Ordering::Relaxed);
    }

    /// The partition (of `count`) a batch of messages goes to.
    ///
    /// # Errors
    /// [`EntityError::PartitionMismatch`] when a message's partition key is not its session
    /// id, or the batch's messages belong in different partitions.
    pub fn partition_of(&self, messages: &[Arrival], count: usize) -> Result<usize, EntityError> {
        let by_message_id = self.by_message_id.load(Ordering::Relaxed);
        let mut chosen = None;
        for message in messages {
            if let (Some(session), Some(key)) = (&message.session_id, &message.partition_key) {
                if session != key {
                    return Err(EntityError::PartitionMismatch(format!(
                        "The PartitionKey '{key}' of the message is not its SessionId \
                         '{session}': when both are set, they must be identical."
                    )));
                }
            }
            let key = match (
                &message.session_id,
                &message.partition_key,
                &message.message_id,
            ) {
                (Some(session), _, _) => Some(session.as_bytes()),
                (None, Some(key), _) => Some(key.as_bytes()),
                (None, None, Some(id)) if by_message_id => Some(&id[..]),
                _ => None,
            };
            let Some(key) = key else { continue };
            let partition = of_key(key, count);
            if chosen.is_some_and(|chosen| chosen != partition) {
                let what = match by_message_id {
                    true => "SessionId, PartitionKey, or MessageId is not supported for an entity with partitioning and duplicate detection enabled.",
                    false => "SessionId or PartitionKey is not supported for an entity with partitioning enabled.",
                };
                return Err(EntityError::PartitionMismatch(format!(
                    "Batching brokered messages with distinct {what}"
                )));
            }
            chosen = Some(partition);
        }
        Ok(chosen.unwrap_or_else(|| self.turn.fetch_add(1, Ordering::Relaxed) % count))
    }

    /// The entity's `auto_delete_on_idle` in ms, if it has one.
    pub fn auto_delete_ms(&self) -> Option<i64> {
        Some(self.auto_delete_ms.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: i64 = 1 << NUMBER_BITS;

    #[test]
    fn operations_and_answers_cross_between_visible_numbers_and_positions() {
        use crate::entity::terms::ReceiveMode;
        let two = Partition::numbered(2);
        let receive = |seqs| Operation::ReceiveBySequence {
            seqs,
            mode: ReceiveMode::PeekLock,
            session: None,
        };
        let Ok(Some(Operation::ReceiveBySequence { seqs, .. })) =
            two.to_positions(receive(vec![two.visible(5), two.visible(7)]), 10, 1)
        else {
            panic!("this partition's numbers are its positions");
        };
        assert_eq!(seqs, [5, 7]);
        let other = Partition::numbered(3).visible(5);
        assert!(matches!(
            two.to_positions(receive(vec![other]), 10, 1),
            Err(EntityError::MessageNotFound(seq, "deferred")) if seq == other
        ));
        let peek = |from| Operation::Peek {
            from,
            count: 1,
            session: None,
        };
        assert!(
            matches!(two.to_positions(peek(other), 10, 1), Ok(None)),
            "a peek from a later partition's number asks nothing here"
        );
        assert!(matches!(
            Partition::ALONE.to_positions(receive(vec![99]), 10, 1),
            Ok(Some(Operation::ReceiveBySequence { seqs, .. })) if seqs == [99]
        ));

        let refused = two.to_visible(Err(EntityError::MessageNotFound(5, "scheduled")));
        assert!(
            matches!(refused, Err(EntityError::MessageNotFound(seq, _)) if seq == two.visible(5))
        );
        let token = Uuid::from_u128(0xabcd_0000);
        let Ok(Answer::Received(received)) =
            two.to_visible(Ok(Answer::Received(vec![(token, bytes::Bytes::new())])))
        else {
            panic!("received");
        };
        assert_eq!(received[0].0, two.mark(token));
        assert!(matches!(
            two.to_visible(Ok(Answer::Scheduled(vec![5]))),
            Ok(Answer::Scheduled(numbers)) if numbers == [two.visible(5)]
        ));
    }

    #[test]
    fn an_unpartitioned_entity_shows_its_positions() {
        let alone = Partition::ALONE;
        assert_eq!(alone.visible(42), 42);
        assert_eq!(alone.position(42, 43), Some(42));
        assert_eq!(alone.position(43, 43), None, "not given yet");
        assert_eq!(alone.position(0, 43), None);
        assert_eq!(alone.peek_start(7, 1), Some(7));
        let token = Uuid::new_v4();
        assert_eq!(alone.mark(token), token);
    }

    #[test]
    fn a_partition_number_carries_its_id_above_48_bits_and_rolls_over() {
        let third = Partition::numbered(3);
        assert_eq!(third.visible(5), (3 << 48) | 5);
        assert_eq!(third.visible(LIMIT - 1), (3 << 48) | (LIMIT - 1));
        assert_eq!(third.visible(LIMIT), 3 << 48, "rolled over to 0");
        assert_eq!(third.visible(LIMIT + 2), (3 << 48) | 2);
        assert_eq!(of_number(third.visible(LIMIT + 2)), 3);
    }

    #[test]
    fn a_number_stands_for_the_most_recent_position_that_shows_as_it() {
        let first = Partition::numbered(1);
        let next = LIMIT + 3; // positions up to LIMIT + 2 were given
        let before = first.visible(LIMIT - 2);
        let after = first.visible(LIMIT + 1);
        assert_eq!(first.position(before, next), Some(LIMIT - 2));
        assert_eq!(first.position(after, next), Some(LIMIT + 1));
        assert_eq!(first.position(first.visible(LIMIT + 5), next), Some(5));
        assert_eq!(
            first.position(Partition::numbered(2).visible(1), next),
            None
        );
        assert_eq!(first.position(first.visible(9), 5), None, "never given");
    }

    #[test]
    fn a_peek_starts_in_the_oldest_epoch_and_skips_other_partitions() {
        let first = Partition::numbered(1);
        let oldest = LIMIT - 2;
        assert_eq!(
            first.peek_start(0, oldest),
            Some(0),
            "an earlier partition's number"
        );
        assert_eq!(
            first.peek_start(2 << 48, oldest),
            None,
            "a later partition's"
        );
        assert_eq!(
            first.peek_start(1 << 48, oldest),
            Some(0),
            "from 0: everything"
        );
        assert_eq!(
            first.peek_start(first.visible(LIMIT - 1), oldest),
            Some(LIMIT - 1)
        );
    }

    #[test]
    fn tokens_carry_their_partition_and_come_back_as_the_lanes_made_them() {
        let mut bytes = *Uuid::new_v4().as_bytes();
        bytes[14..].fill(0);
        let token = Uuid::from_bytes(bytes);
        let marked = Partition::numbered(9).mark(token);
        assert_eq!(of_token(marked), 9);
        assert_eq!(Partition::numbered(9).unmark(marked), token);
    }

    #[test]
    fn keys_spread_and_always_land_in_the_same_partition() {
        assert_eq!(of_key(b"session-1", 16), of_key(b"session-1", 16));
        assert_eq!(of_key(b"anything", 1), 0);
        let used: std::collections::HashSet<usize> = (0..200)
            .map(|i| of_key(format!("key-{i}").as_bytes(), 4))
            .collect();
        assert_eq!(used.len(), 4);
        // Fixed for ever (FNV-1a): a session's messages are found in the same partition
        // after an upgrade.
        assert_eq!(of_key(b"", 16), 0xcbf2_9ce4_8422_2325 % 16);
        assert_eq!(of_key(b"a", 1 << 20), 0xaf63_dc4c_8601_ec8c % (1 << 20));
    }
}
