//! Every Service Bus name the broker puts on or reads from the wire, in one place, and the
//! entity path of an address: a leaf every layer may use.

/// The entity path of an address: without `scheme://authority` and leading slashes.
pub fn entity_path(address: &str) -> &str {
    let path = match address.find("://") {
        Some(scheme_end) => {
            let rest = &address[scheme_end + 3..];
            rest.find('/').map_or("", |slash| &rest[slash..])
        }
        None => address,
    };
    path.trim_start_matches('/')
}

/// The namespace's name: what the administration API's `$namespaceinfo` reports, and what
/// Service Bus's messages name an entity under (`<namespace>:Topic:<topic>|...`).
pub const NAMESPACE: &str = "tidebus";

/// Message-annotation keys (amqp-dialect.md §5.1).
pub mod annotation {
    /// Sequence number of a stored message (long).
    pub const SEQUENCE_NUMBER: &str = "x-opt-sequence-number";
    /// When the message was accepted (timestamp).
    pub const ENQUEUED_TIME: &str = "x-opt-enqueued-time";
    /// When the delivery's lock ends (timestamp).
    pub const LOCKED_UNTIL: &str = "x-opt-locked-until";
    /// 0 active, 1 deferred, 2 scheduled (int).
    pub const MESSAGE_STATE: &str = "x-opt-message-state";
    /// The lock token, in the delivery annotations (uuid).
    pub const LOCK_TOKEN: &str = "x-opt-lock-token";
    /// On a forwarded message: the sequence number it was first given (long).
    pub const ENQUEUE_SEQUENCE_NUMBER: &str = "x-opt-enqueue-sequence-number";
    /// On a message forwarded from a dead-letter queue: the entity it was dead-lettered in.
    pub const DEAD_LETTER_SOURCE: &str = "x-opt-deadletter-source";
    /// On a message in a transfer lane: the queue or topic it is on its way to (string). The
    /// broker writes it and strips it again when the message reaches its destination.
    pub const TRANSFER_DESTINATION: &str = "x-opt-transfer-destination";
    /// On a forwarded message: how many forwarding moves it has taken (int). The broker
    /// writes it at each move and dead-letters a message that would take more than Service
    /// Bus's four.
    pub const TRANSFER_HOP_COUNT: &str = "x-opt-transfer-hop-count";
}

/// Send-via (amqp-dialect.md §10).
pub mod via {
    /// The link property of a sender attached to the via entity that names the queue or topic
    /// its messages are for (Java's `enableCrossEntityTransactions`, the older .NET SDK).
    pub const TRANSFER_DESTINATION_ADDRESS: &str = "com.microsoft:transfer-destination-address";
    /// The path suffix of an entity's transfer dead-letter queue.
    pub const TRANSFER_DEAD_LETTER_SUFFIX: &str = "/$Transfer/$DeadLetterQueue";
    /// The dead-letter reason of a transfer whose destination no longer exists.
    pub const DESTINATION_NOT_FOUND: &str = "TransferDestinationEntityNotFound";
    /// The dead-letter reason of a transfer its destination refused (full, or the message
    /// breaks one of its rules).
    pub const DESTINATION_REFUSED: &str = "TransferDestinationRefused";
}

/// Dead-lettering (amqp-dialect.md §5.2).
pub mod dead_letter {
    /// Application property with the reason (string).
    pub const REASON: &str = "DeadLetterReason";
    /// Application property with the description (string).
    pub const DESCRIPTION: &str = "DeadLetterErrorDescription";
    /// The broker's reason when the delivery count reached the limit.
    pub const MAX_DELIVERY_COUNT_EXCEEDED: &str = "MaxDeliveryCountExceeded";
    /// The broker's reason when a message's time to live ran out.
    pub const TTL_EXPIRED: &str = "TTLExpiredException";
    /// The description that goes with [`TTL_EXPIRED`].
    pub const TTL_EXPIRED_DESCRIPTION: &str = "The message expired and was dead lettered.";
    /// The broker's reason when a message would be forwarded more than four times (it goes to
    /// the transfer dead-letter queue of the entity that would forward it).
    pub const MAX_TRANSFER_HOP_COUNT_EXCEEDED: &str = "MaxTransferHopCountExceeded";
    /// The description that goes with [`MAX_TRANSFER_HOP_COUNT_EXCEEDED`] (Service Bus's).
    pub const MAX_TRANSFER_HOP_COUNT_EXCEEDED_DESCRIPTION: &str =
        "The maximum number of allowed hops when forwarding between queues has been exceeded. \
         This value is set to 4.";
    /// The error condition Service Bus clients put on a `rejected` outcome.
    pub const CONDITION: &str = "com.microsoft:dead-letter";
}

/// The names of temporary queues and topics (see `amqp::temporary`), which the broker makes.
pub mod temporary {
    /// What every temporary queue's and topic's name starts with. `$` is in no name a client
    /// or the config file may give an entity, so a temporary never takes a user's name, and
    /// what a crash leaves of one is known by its name at the next start.
    pub const PREFIX: &str = "$temp-";

    /// Whether `name` is a temporary entity's (names compare ignoring case).
    pub fn is_temporary(name: &str) -> bool {
        name.get(..PREFIX.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(PREFIX))
    }
}

/// Error conditions (amqp-dialect.md §11).
pub mod condition {
    /// The lock of a message expired or was lost.
    pub const MESSAGE_LOCK_LOST: &str = "com.microsoft:message-lock-lost";
    /// The broker failed.
    pub const INTERNAL_ERROR: &str = "amqp:internal-error";
    /// The operation is not allowed here.
    pub const NOT_ALLOWED: &str = "amqp:not-allowed";
    /// A malformed management request.
    pub const ARGUMENT_ERROR: &str = "com.microsoft:argument-error";
    /// An operation this version does not implement.
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
    /// No message with the given sequence number.
    pub const MESSAGE_NOT_FOUND: &str = "com.microsoft:message-not-found";
    /// The entity is full.
    pub const RESOURCE_LIMIT_EXCEEDED: &str = "amqp:resource-limit-exceeded";
    /// The broker cannot serve the request now (it is stopping); clients retry.
    pub const SERVER_BUSY: &str = "com.microsoft:server-busy";
    /// Something of that name exists already (a rule).
    pub const ENTITY_ALREADY_EXISTS: &str = "com.microsoft:entity-already-exists";
    /// The entity does not exist (any more).
    pub const NOT_FOUND: &str = "amqp:not-found";
    /// The session's lock expired or its receiver is gone.
    pub const SESSION_LOCK_LOST: &str = "com.microsoft:session-lock-lost";
    /// Another receiver holds the session.
    pub const SESSION_CANNOT_BE_LOCKED: &str = "com.microsoft:session-cannot-be-locked";
    /// The connection lacks the right (no valid token, or one without it).
    pub const UNAUTHORIZED_ACCESS: &str = "amqp:unauthorized-access";
    /// No session became available in time.
    pub const TIMEOUT: &str = "com.microsoft:timeout";
    /// A message (or a request) larger than the link takes; the JavaScript, Python and .NET
    /// SDKs raise `MessageSizeExceeded` for it, in a management response as in a detach.
    pub const MESSAGE_SIZE_EXCEEDED: &str = "amqp:link:message-size-exceeded";
    /// The transaction a request names is not known (never declared, or ended).
    pub const TRANSACTION_UNKNOWN_ID: &str = "amqp:transaction:unknown-id";
    /// The transaction a request names ran past its timeout and was rolled back.
    pub const TRANSACTION_TIMEOUT: &str = "amqp:transaction:timeout";
    /// The entity's status refuses the operation (Service Bus's `MessagingEntityDisabled`).
    pub const ENTITY_DISABLED: &str = "com.microsoft:entity-disabled";
}

#[cfg(test)]
mod tests {
    use super::{entity_path, temporary};

    #[test]
    fn strips_scheme_host_and_leading_slash() {
        assert_eq!(entity_path("amqps://ns.example:5671/queue.1"), "queue.1");
        assert_eq!(entity_path("amqp://localhost/q"), "q");
        assert_eq!(entity_path("/queue.1"), "queue.1");
        assert_eq!(entity_path("queue.1"), "queue.1");
        assert_eq!(entity_path("amqp://localhost"), "");
    }

    #[test]
    fn temporaries_are_known_by_their_prefix_in_any_case() {
        assert!(temporary::is_temporary("$temp-queue-tidebus-1-1"));
        assert!(temporary::is_temporary("$TEMP-Topic-x"));
        assert!(!temporary::is_temporary("temp-queue"));
        assert!(!temporary::is_temporary("$te"));
        assert!(!temporary::is_temporary("é$temp-"));
    }
}
