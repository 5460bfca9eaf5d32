//! What an entity does for a management request (amqp-dialect.md §7.3) and what it answers,
//! as entity-level values: the node layer reads requests into an [`Operation`] and writes an
//! [`Answer`] (or an [`EntityError`](crate::entity::handle::EntityError)) back onto the wire.

use bytes::Bytes;
use uuid::Uuid;

use crate::entity::terms::{ReceiveMode, Settlement};
use crate::entity::topic::Rule;
use crate::message::Arrival;

/// The most messages one `peek-message` returns, as in Service Bus.
pub const MAX_PEEK: usize = 250;

/// A `peek-message` answer ends with the message that brings its bytes to this many (so it
/// holds at least one message, whatever its size); the client peeks on from the last one.
pub const MAX_PEEK_BYTES: usize = 4 * 1024 * 1024;

/// The most messages one `batch-delete-messages` deletes (Service Bus Premium's limit; the
/// SDKs ask for 500 or 4,000).
pub const MAX_BATCH_DELETE: usize = 4_000;

/// A management operation the entity performs.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// `peek-message`.
    Peek {
        /// First sequence number to look at.
        from: i64,
        /// How many messages at most.
        count: usize,
        /// Only this session's messages (a session receiver's peek).
        session: Option<String>,
    },
    /// `renew-lock`.
    RenewLock {
        /// The locks to extend.
        tokens: Vec<Uuid>,
    },
    /// `receive-by-sequence-number` (deferred messages).
    ReceiveBySequence {
        /// The deferred messages to take.
        seqs: Vec<i64>,
        /// Locked, or deleted on receipt.
        mode: ReceiveMode,
        /// The session they belong to (a session receiver's request).
        session: Option<String>,
    },
    /// `schedule-message`: store messages until their `x-opt-scheduled-enqueue-time`.
    Schedule {
        /// The messages, each carrying its scheduled enqueue time.
        messages: Vec<Arrival>,
    },
    /// `cancel-scheduled-message`.
    CancelScheduled {
        /// The scheduled messages to delete.
        seqs: Vec<i64>,
    },
    /// `add-rule` on a subscription.
    AddRule {
        /// The rule, parsed.
        rule: Rule,
    },
    /// Replaces a subscription's rule of the same name in place (the administration API's
    /// rule update; no AMQP operation reads into it): its position and creation time stay.
    /// Answered with the rule as it now is, alone in [`Answer::Rules`].
    ReplaceRule {
        /// The new rule, parsed; its name says which rule it replaces (ignoring case).
        rule: Rule,
    },
    /// Moves a dead-lettered message back to its queue or subscription as a new arrival (the
    /// web console's resubmit; no AMQP operation reads into it): a new sequence number, enqueued
    /// now, delivery count 0, its dead-letter reason and description removed. Answered with
    /// [`Answer::Moved`].
    Resubmit {
        /// Its sequence number in the dead-letter queue.
        seq: i64,
    },
    /// Deletes every message of a dead-letter queue (the web console's purge; no AMQP
    /// operation reads into it). Answered with [`Answer::Purged`].
    Purge,
    /// `batch-delete-messages`: deletes up to `count` messages enqueued before `before_ms`.
    /// Answered with [`Answer::Deleted`].
    BatchDelete {
        /// At most this many (1 to [`MAX_BATCH_DELETE`]).
        count: usize,
        /// Only messages enqueued before this instant (ms since the Unix epoch).
        before_ms: i64,
        /// Only this session's messages, for a session receiver.
        session: Option<String>,
    },
    /// `remove-rule` on a subscription.
    RemoveRule {
        /// The rule's name.
        name: String,
    },
    /// `enumerate-rules` on a subscription.
    EnumerateRules {
        /// Rules to skip.
        skip: usize,
        /// Most rules to return.
        top: usize,
    },
    /// `update-disposition`.
    UpdateDisposition {
        /// The locks to settle.
        tokens: Vec<Uuid>,
        /// What to do with them.
        settlement: Settlement,
    },
    /// `renew-session-lock`.
    RenewSessionLock {
        /// The session.
        session: String,
    },
    /// `get-session-state`.
    GetSessionState {
        /// The session.
        session: String,
    },
    /// `set-session-state`.
    SetSessionState {
        /// The session.
        session: String,
        /// The new state; `None` clears it.
        state: Option<Bytes>,
    },
    /// `get-message-sessions`: the sessions with messages or state, or (`updated_after`)
    /// those whose state was set after a time.
    GetMessageSessions {
        /// Sessions to skip.
        skip: usize,
        /// Most sessions to return.
        top: usize,
        /// Only sessions whose state was set after this (ms since the Unix epoch).
        updated_after: Option<i64>,
    },
}

impl Operation {
    /// The session the operation acts on in a lane with sessions, which the caller's
    /// connection must hold.
    pub fn session(&self) -> Option<&str> {
        match self {
            Operation::RenewSessionLock { session }
            | Operation::GetSessionState { session }
            | Operation::SetSessionState { session, .. } => Some(session),
            Operation::ReceiveBySequence { session, .. } => session.as_deref(),
            _ => None,
        }
    }
}

/// What an entity answers a successful [`Operation`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Peeked messages, each whole and encoded as a delivery would carry it (none: nothing
    /// from that sequence number on).
    Peeked(Vec<Bytes>),
    /// The new lock expiries (ms since the Unix epoch), in the order of the tokens.
    Renewed(Vec<i64>),
    /// Deferred messages taken: each lock token (nil in receive-and-delete) and the whole
    /// encoded message.
    Received(Vec<(Uuid, Bytes)>),
    /// The sequence numbers of the scheduled messages, in order.
    Scheduled(Vec<i64>),
    /// A page of a subscription's rules (none: nothing past `skip`).
    Rules(Vec<Rule>),
    /// When the renewed session lock ends (ms since the Unix epoch).
    SessionLockedUntil(i64),
    /// A session's state (`None`: it has none).
    SessionState(Option<Bytes>),
    /// A page of session ids (none: nothing past `skip`), and the `skip` asked for.
    Sessions {
        /// Sessions skipped.
        skip: usize,
        /// The ids.
        ids: Vec<String>,
    },
    /// The sequence number a resubmitted message got.
    Moved(i64),
    /// How many messages a purge deleted.
    Purged(u64),
    /// How many messages a batch delete deleted.
    Deleted(usize),
    /// Done; nothing to return.
    Done,
}
