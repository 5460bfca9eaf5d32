//! The words every part of an entity shares, below all of them: consumer and lock
//! references, settlements, receive modes, a session id, a delivery, and the errors an entity
//! answers with, with the one table of how Service Bus reports each ([`EntityError::status`]).
//! It imports nothing of the entity; [`crate::entity::handle`] hands these names on to the rest
//! of the broker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use fe2o3_amqp::types::primitives::SimpleValue;
use uuid::Uuid;

use crate::message::DeliveryStamp;
use crate::store::record::Record;
pub use crate::store::LaneId;
use crate::wire::condition;

/// A transaction's id, unique in the broker while it runs; its wire `txn-id` is these 8 bytes,
/// big-endian.
pub type TxnId = u64;

/// A session id (`properties.group-id`), shared by the lane's indexes.
pub type SessionId = Arc<str>;

/// Identifies one consumer (a client receiver link) across the whole broker: its link's id
/// in the low 48 bits, the partition of its entity it consumes from above them (a receiver of
/// a partitioned entity is one consumer per partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumerId(pub u64);

/// Bits of a consumer id below its partition.
const LINK_BITS: u32 = 48;

impl ConsumerId {
    /// The consumer of link `link` at partition `partition` of its entity.
    pub fn at(link: u64, partition: usize) -> ConsumerId {
        ConsumerId((link & ((1 << LINK_BITS) - 1)) | ((partition as u64) << LINK_BITS))
    }

    /// The id of its link.
    pub fn link(self) -> u64 {
        self.0 & ((1 << LINK_BITS) - 1)
    }

    /// The partition of its entity it consumes from (0 for an unpartitioned entity).
    pub fn partition(self) -> usize {
        usize::try_from(self.0 >> LINK_BITS).unwrap_or(usize::MAX)
    }
}

/// An opaque reference the caller attaches to a request and gets back with its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// The link the request came from.
    pub link: u64,
    /// The caller's number for the request (a delivery id for sends).
    pub request: u64,
}

/// How a consumer takes messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveMode {
    /// Messages are locked and stay until settled.
    PeekLock,
    /// Messages are deleted when sent (pre-settled transfers).
    ReceiveAndDelete,
    /// Messages are shown, not taken: a pre-settled copy of each, in sequence order, as a peek
    /// shows it (a receiver attached with `distribution-mode` copy: JMS's `QueueBrowser`).
    Browse,
}

/// What a session receiver asks for when it attaches (amqp-dialect.md §8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRequest {
    /// The session with this id.
    Named(String),
    /// The next available session, waiting up to `timeout_ms` for one.
    NextAvailable {
        /// How long to wait, in ms.
        timeout_ms: i64,
    },
}

/// Application properties to set on a message ("properties to modify", dead-letter reasons).
pub type Properties = Vec<(String, SimpleValue)>;

/// A settlement outcome as the entity understands it (design.md §3 Settle).
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// `accepted`: delete the message.
    Complete,
    /// `released`: unlock without counting a delivery.
    Release,
    /// `modified`: unlock, count a delivery, set these application properties.
    Abandon(Properties),
    /// `modified` with `undeliverable-here`: set aside, retrievable only by sequence number.
    Defer(Properties),
    /// `rejected`: move to the dead-letter queue with a reason and a description.
    DeadLetter {
        /// `DeadLetterReason`.
        reason: Option<String>,
        /// `DeadLetterErrorDescription`.
        description: Option<String>,
        /// Other application properties to set.
        properties: Properties,
    },
}

/// One message to settle: its sequence number and the lock token it was delivered under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRef {
    /// Sequence number of the message.
    pub seq: i64,
    /// The lock token of the delivery.
    pub token: Uuid,
}

/// Why an entity refused a request from a client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntityError {
    /// The lock of the message expired or was lost.
    /// (Service Bus's words, which the Go SDK's suite checks.)
    #[error(
        "The lock supplied is invalid. Either the lock expired, or the message has already \
         been removed from the queue"
    )]
    LockLost,
    /// The entity is shutting down or gone.
    #[error("the entity is not available")]
    Unavailable,
    /// The entity is full.
    #[error("the queue holds {size} bytes, its limit is {max}: the message does not fit")]
    QuotaExceeded {
        /// Bytes held now.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// No message in the state the operation needs (deferred, scheduled) has this number.
    #[error("no {1} message with sequence number {0} was found")]
    MessageNotFound(i64, &'static str),
    /// The entity was deleted (by the administration API, a reset, or after being idle for
    /// its `auto_delete_on_idle` time); its address no longer names it.
    #[error("the entity was deleted (by the administration API, a reset between tests, or after being idle for its auto_delete_on_idle time)")]
    Deleted,
    /// The entity's storage failed; it no longer acknowledges anything.
    #[error("the entity's storage failed: {0}")]
    Storage(String),
    /// The operation is not allowed on this entity.
    #[error("{0}")]
    NotAllowed(&'static str),
    /// The entity's status refuses the operation (Service Bus's wording): `operation` is
    /// `Some("Send")` or `Some("Receive")` when only that kind is disabled.
    #[error("Messaging entity '{entity}' is currently disabled{}.", operation.map(|o| format!(" for {o} operations")).unwrap_or_default())]
    Disabled {
        /// The entity's path (`q`, `t/subscriptions/s`).
        entity: String,
        /// The kind of operation disabled, when the other still works.
        operation: Option<&'static str>,
    },
    /// A rule name Service Bus would not take (the reason, not the name: it may be huge).
    #[error("the rule name is invalid: {0}")]
    InvalidRuleName(String),
    /// The topic holds as many filters of a kind as Service Bus allows.
    #[error("the topic already has {max} {kind} filters, Service Bus's limit per topic: remove one first")]
    FilterQuotaExceeded {
        /// `SQL` (true and false filters count as SQL filters) or `correlation`.
        kind: &'static str,
        /// The limit.
        max: usize,
    },
    /// A rule of that name exists already in the subscription, worded as Service Bus words
    /// it (the JavaScript SDK's suite matches `The messaging entity '.*ruleName' already
    /// exists.`), naming the rule by its path, `<namespace>:Topic:<topic>|<subscription>|<rule>`.
    #[error("The messaging entity '{subscription}|{rule}' already exists. To know more visit https://aka.ms/sbResourceMgrExceptions.")]
    RuleExists {
        /// The subscription as that path names it, `<namespace>:Topic:<topic>|<subscription>`:
        /// filled in by the entity's actor, which knows the names (the core leaves it empty).
        subscription: String,
        /// The rule's name as the request gave it.
        rule: String,
    },
    /// The subscription has no rule of that name (worded as Service Bus words it, which the
    /// JavaScript SDK reads as entity-not-found).
    #[error("The messaging entity 'Rules/{0}' could not be found: the subscription has no rule of that name.")]
    RuleNotFound(String),
    /// A message without a session id sent to an entity that requires sessions (Service
    /// Bus's wording).
    #[error("The SessionId was not set on a message, and it cannot be sent to the entity '{0}'. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.")]
    SessionIdMissing(String),
    /// A session id longer than Service Bus allows.
    #[error("The SessionId '{0}' is longer than 128 characters.")]
    SessionIdTooLong(String),
    /// Another receiver holds the session's lock.
    #[error(
        "The requested session '{0}' cannot be accepted. It may be locked by another receiver."
    )]
    SessionCannotBeLocked(String),
    /// The session's lock expired, or its receiver is gone.
    #[error(
        "The session lock has expired on the MessageSession '{0}'. Accept a new MessageSession."
    )]
    SessionLockLost(String),
    /// No session became available within the receiver's timeout.
    #[error("No session is available to accept: every session with messages is locked, or there is none.")]
    NoSessionAvailable,
    /// A receiver of an entity that requires sessions must accept a session, and one of an
    /// entity without sessions cannot.
    #[error("{0}")]
    SessionMismatch(String),
    /// A send a partitioned entity cannot place: a partition key that is not the session id,
    /// or a batch whose messages belong in different partitions (Service Bus's wording).
    #[error("{0}")]
    PartitionMismatch(String),
}

/// How Service Bus reports a refusal, the same on every surface the broker answers on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusalStatus {
    /// The HTTP status code: a `$management` response's `statusCode`, the administration API's
    /// answer.
    pub code: u16,
    /// The AMQP error condition: a management response's `errorCondition`, a rejected
    /// transfer's, a refused settlement's, a detached link's.
    pub condition: &'static str,
}

impl EntityError {
    /// The one table from an entity's refusal to Service Bus's status code and condition,
    /// which the `$management` node, the links and the administration API all answer with:
    /// the status codes its REST API documents (409 for a rule that exists, 404 for one
    /// missing, 403 for a quota, 503 when busy, 500 for its own failure, 400 for a request it
    /// will not take) and its AMQP conditions.
    pub fn status(&self) -> RefusalStatus {
        let (code, condition) = match self {
            EntityError::LockLost => (410, condition::MESSAGE_LOCK_LOST),
            EntityError::MessageNotFound(..) => (404, condition::MESSAGE_NOT_FOUND),
            EntityError::Deleted | EntityError::RuleNotFound(_) => (404, condition::NOT_FOUND),
            EntityError::QuotaExceeded { .. } | EntityError::FilterQuotaExceeded { .. } => {
                (403, condition::RESOURCE_LIMIT_EXCEEDED)
            }
            EntityError::InvalidRuleName(_) => (400, condition::ARGUMENT_ERROR),
            EntityError::Disabled { .. } => (400, condition::ENTITY_DISABLED),
            EntityError::NotAllowed(_)
            | EntityError::SessionIdMissing(_)
            | EntityError::SessionIdTooLong(_)
            | EntityError::SessionMismatch(_)
            | EntityError::PartitionMismatch(_) => (400, condition::NOT_ALLOWED),
            EntityError::Unavailable => (503, condition::SERVER_BUSY),
            EntityError::Storage(_) => (500, condition::INTERNAL_ERROR),
            EntityError::RuleExists { .. } => (409, condition::ENTITY_ALREADY_EXISTS),
            EntityError::SessionCannotBeLocked(_) => (410, condition::SESSION_CANNOT_BE_LOCKED),
            EntityError::SessionLockLost(_) => (410, condition::SESSION_LOCK_LOST),
            EntityError::NoSessionAvailable => (408, condition::TIMEOUT),
        };
        RefusalStatus { code, condition }
    }
}

/// One message handed to a consumer.
#[derive(Debug)]
pub struct Delivery {
    /// The consumer it is for.
    pub consumer: ConsumerId,
    /// Its sequence number.
    pub seq: i64,
    /// The lock token (peek-lock only).
    pub lock_token: Option<Uuid>,
    /// The message's record as it was delivered (to store it again if it is given back).
    pub record: Record,
    /// Its session, in a lane that requires sessions (to store it again if given back).
    pub session: Option<SessionId>,
    /// The stored message bytes (filled by the actor from the entity's log).
    pub bytes: Bytes,
    /// What the engine writes into the header and annotations on the way out.
    pub stamp: DeliveryStamp,
}

/// A topic's subscriptions by lower-cased name, with the number of each one's lane.
pub type Subscriptions = HashMap<String, u32>;

/// What a topic's actor shares with its handles: its subscriptions by name (the router and
/// the connections resolve subscription addresses with them), and whether its rules read the
/// messages sent to it.
#[derive(Debug, Default)]
pub struct TopicState {
    names: RwLock<Subscriptions>,
    /// A SQL or correlation filter, or an action, somewhere in its subscriptions: a
    /// connection then decodes what they read before it posts a send ([`Arrival::view`]),
    /// which the actor would otherwise do itself.
    rules_read: AtomicBool,
}

impl TopicState {
    /// A topic's state with these subscriptions; its rules are not known yet.
    pub fn new(names: Subscriptions) -> Self {
        Self {
            names: RwLock::new(names),
            rules_read: AtomicBool::new(false),
        }
    }

    /// The subscriptions by name (a panic while they were written does not hide them).
    pub fn names(&self) -> RwLockReadGuard<'_, Subscriptions> {
        self.names.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The subscriptions by name, to change.
    pub fn names_mut(&self) -> RwLockWriteGuard<'_, Subscriptions> {
        self.names.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the topic's rules read the messages sent to it.
    pub fn rules_read(&self) -> bool {
        self.rules_read.load(Ordering::Relaxed)
    }

    /// Notes whether the topic's rules read the messages sent to it (its actor, whenever its
    /// rules or subscriptions change).
    pub fn set_rules_read(&self, read: bool) {
        self.rules_read.store(read, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One refusal of each kind.
    fn one_of_each() -> Vec<EntityError> {
        vec![
            EntityError::LockLost,
            EntityError::Unavailable,
            EntityError::QuotaExceeded { size: 2, max: 1 },
            EntityError::MessageNotFound(7, "deferred"),
            EntityError::Deleted,
            EntityError::Storage("disk full".into()),
            EntityError::NotAllowed("no"),
            EntityError::Disabled {
                entity: "q".into(),
                operation: Some("Send"),
            },
            EntityError::InvalidRuleName("too long".into()),
            EntityError::FilterQuotaExceeded {
                kind: "SQL",
                max: 2000,
            },
            EntityError::RuleExists {
                subscription: "tidebus:Topic:t|s".into(),
                rule: "r".into(),
            },
            EntityError::RuleNotFound("r".into()),
            EntityError::SessionIdMissing("q".into()),
            EntityError::SessionIdTooLong("s".into()),
            EntityError::SessionCannotBeLocked("s".into()),
            EntityError::SessionLockLost("s".into()),
            EntityError::NoSessionAvailable,
            EntityError::SessionMismatch("accept a session".into()),
            EntityError::PartitionMismatch("another partition".into()),
        ]
    }

    #[test]
    fn every_refusal_is_an_http_error_status_with_an_amqp_condition() {
        for refused in one_of_each() {
            let status = refused.status();
            assert!((400..600).contains(&status.code), "{refused:?}: {status:?}");
            assert!(
                status.condition.starts_with("amqp:")
                    || status.condition.starts_with("com.microsoft:"),
                "{refused:?}: {status:?}"
            );
        }
    }

    /// The statuses Service Bus's REST API documents for the same refusals: Create Rule 409
    /// for a rule that exists, 403 for a quota, 404 for what is missing; Send Message 403 for a
    /// full entity and 500 for an internal error; 503 when the service is busy.
    #[test]
    fn refusals_take_the_status_service_bus_gives_them() {
        let status = |refused: EntityError| {
            let status = refused.status();
            (status.code, status.condition)
        };
        assert_eq!(
            status(EntityError::Storage("disk full".into())),
            (500, condition::INTERNAL_ERROR)
        );
        assert_eq!(
            status(EntityError::Unavailable),
            (503, condition::SERVER_BUSY)
        );
        assert_eq!(
            status(EntityError::QuotaExceeded { size: 2, max: 1 }),
            (403, condition::RESOURCE_LIMIT_EXCEEDED)
        );
        assert_eq!(
            status(EntityError::FilterQuotaExceeded {
                kind: "correlation",
                max: 100_000
            }),
            (403, condition::RESOURCE_LIMIT_EXCEEDED)
        );
        assert_eq!(
            status(EntityError::RuleExists {
                subscription: String::new(),
                rule: "r".into()
            }),
            (409, condition::ENTITY_ALREADY_EXISTS)
        );
        assert_eq!(
            status(EntityError::RuleNotFound("r".into())),
            (404, condition::NOT_FOUND)
        );
        assert_eq!(status(EntityError::Deleted), (404, condition::NOT_FOUND));
        assert_eq!(
            status(EntityError::MessageNotFound(7, "deferred")),
            (404, condition::MESSAGE_NOT_FOUND)
        );
        assert_eq!(
            status(EntityError::InvalidRuleName("too long".into())),
            (400, condition::ARGUMENT_ERROR)
        );
    }
}
