//! The identifiers of a JMS selector and their values in an AMQP message, as Qpid JMS maps a
//! JMS message onto AMQP (so a selector reads what a Qpid JMS consumer would read from the
//! same message).
//!
//! JMS 2.0 §3.8.1.1: header field references are restricted to `JMSDeliveryMode`,
//! `JMSPriority`, `JMSMessageID`, `JMSTimestamp`, `JMSCorrelationID` and `JMSType`; names
//! starting `JMSX` are JMS-defined properties; any other name is a message property.
//! Identifiers are case-sensitive. The Qpid JMS sources (`qpid-jms-client`,
//! `org.apache.qpid.jms`) give each its AMQP field:
//!
//! * `JMSDeliveryMode`: `'PERSISTENT'` when header.durable is true, else `'NON_PERSISTENT'`
//!   (`message.JmsMessagePropertyIntercepter`, `AmqpJmsMessageFacade.isPersistent`,
//!   `AmqpHeader.isDurable`).
//! * `JMSPriority`: header.priority, 4 when absent, at most 9 (`AmqpHeader.getPriority`).
//! * `JMSMessageID`: properties.message-id as `AmqpMessageIdHelper.toMessageIdString`
//!   renders it (below), NULL when absent (`AmqpJmsMessageFacade.getMessageId`).
//! * `JMSTimestamp`: properties.creation-time in ms, 0 when absent (`getTimestamp`).
//! * `JMSCorrelationID`: properties.correlation-id as `toCorrelationIdString` renders it,
//!   NULL when absent (`getCorrelationId`).
//! * `JMSType`: properties.subject, NULL when absent (`getType`).
//! * `JMSExpiration`: properties.absolute-expiry-time in ms, 0 when absent
//!   (`getExpiration`).
//! * `JMSXGroupID`: properties.group-id (`getGroupId`).
//! * `JMSXGroupSeq`: properties.group-sequence as a Java int (wrapping past 2^31 - 1), 0 when
//!   absent (`getGroupSequence`).
//! * `JMSXUserID`: properties.user-id as UTF-8, NULL when empty, else the application
//!   property `JMSXUserID` (`getUserId`, and the intercepter's JMSX_USERID).
//! * `JMSXDeliveryCount`: the delivery count a receiver sees, plus 1 (`getDeliveryCount`).
//!
//! Ids: a string message-id without the `ID:` prefix is `ID:AMQP_NO_PREFIX:` followed by the
//! string; one whose `ID:` is followed by one of Qpid's type prefixes (`AMQP_NO_PREFIX:`,
//! `AMQP_STRING:`, `AMQP_UUID:`, `AMQP_ULONG:`, `AMQP_BINARY:`) is `ID:AMQP_STRING:` followed
//! by the string; any other is the string. A correlation-id string is itself but in the second
//! case. A ulong is `ID:AMQP_ULONG:` followed by its digits, a uuid `ID:AMQP_UUID:` followed by
//! its lower-case text, a binary `ID:AMQP_BINARY:` followed by its upper-case hex.
//!
//! `JMSExpiration` is not one of the six header fields a selector may name, but Qpid JMS's
//! own property intercepter reads it; a message sent with a header ttl and no
//! absolute-expiry-time has 0 here (Qpid JMS makes one up from the time it receives the
//! message). `JMSDestination`, `JMSReplyTo`, `JMSRedelivered` and `JMSDeliveryTime` are
//! refused: JMS does not allow them, and the broker would not read them as Qpid JMS does.

use std::borrow::Cow;

use super::eval::Scalar;
use super::view::{IdType, MessageView};

/// What an identifier of a JMS selector names, resolved when the selector is parsed.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum JmsIdentifier {
    /// `JMSDeliveryMode`.
    DeliveryMode,
    /// `JMSPriority`.
    Priority,
    /// `JMSMessageID`.
    MessageId,
    /// `JMSTimestamp`.
    Timestamp,
    /// `JMSCorrelationID`.
    CorrelationId,
    /// `JMSType`.
    Type,
    /// `JMSExpiration`.
    Expiration,
    /// `JMSXGroupID`.
    GroupId,
    /// `JMSXGroupSeq`.
    GroupSeq,
    /// `JMSXUserID`.
    UserId,
    /// `JMSXDeliveryCount`.
    DeliveryCount,
    /// Any other name: the application property of exactly that name.
    Property(Box<str>),
}

/// The names that map to a field of the AMQP message.
const MAPPED: [(&str, JmsIdentifier); 11] = [
    ("JMSDeliveryMode", JmsIdentifier::DeliveryMode),
    ("JMSPriority", JmsIdentifier::Priority),
    ("JMSMessageID", JmsIdentifier::MessageId),
    ("JMSTimestamp", JmsIdentifier::Timestamp),
    ("JMSCorrelationID", JmsIdentifier::CorrelationId),
    ("JMSType", JmsIdentifier::Type),
    ("JMSExpiration", JmsIdentifier::Expiration),
    ("JMSXGroupID", JmsIdentifier::GroupId),
    ("JMSXGroupSeq", JmsIdentifier::GroupSeq),
    ("JMSXUserID", JmsIdentifier::UserId),
    ("JMSXDeliveryCount", JmsIdentifier::DeliveryCount),
];

/// JMS header fields a selector cannot name (JMS 2.0 §3.8.1.1).
const REFUSED: [&str; 4] = [
    "JMSDestination",
    "JMSReplyTo",
    "JMSRedelivered",
    "JMSDeliveryTime",
];

/// Qpid JMS's prefixes after `ID:` that say how to turn an id string back into an AMQP id
/// (`AmqpMessageIdHelper`).
const TYPE_PREFIXES: [&str; 5] = [
    "AMQP_NO_PREFIX:",
    "AMQP_STRING:",
    "AMQP_UUID:",
    "AMQP_ULONG:",
    "AMQP_BINARY:",
];

/// JMS's message id prefix.
const ID_PREFIX: &str = "ID:";

impl JmsIdentifier {
    /// What `name` (case-sensitive) names, or why a selector cannot use it.
    pub(super) fn resolve(name: &str) -> Result<JmsIdentifier, String> {
        if let Some((_, identifier)) = MAPPED.iter().find(|(known, _)| *known == name) {
            return Ok(identifier.clone());
        }
        if REFUSED.contains(&name) {
            return Err(format!(
                "{name} cannot be used in a JMS selector (of the header fields, JMS allows \
                 JMSDeliveryMode, JMSPriority, JMSMessageID, JMSTimestamp, JMSCorrelationID \
                 and JMSType; this broker also reads JMSExpiration)"
            ));
        }
        Ok(JmsIdentifier::Property(name.into()))
    }

    /// The identifier's value in `view`'s message: NULL for a property it does not have.
    pub(super) fn value<'a>(&self, view: &'a MessageView) -> Scalar<'a> {
        let text = |field: &'a Option<String>| {
            field
                .as_deref()
                .map_or(Scalar::Null, |text| Scalar::Text(Cow::Borrowed(text)))
        };
        match self {
            JmsIdentifier::DeliveryMode => Scalar::Text(Cow::Borrowed(if view.durable {
                "PERSISTENT"
            } else {
                "NON_PERSISTENT"
            })),
            JmsIdentifier::Priority => Scalar::Int(i64::from(view.priority.unwrap_or(4).min(9))),
            JmsIdentifier::MessageId => id(view.message_id.as_deref(), view.message_id_type, true),
            JmsIdentifier::Timestamp => Scalar::Int(view.creation_time.unwrap_or(0)),
            JmsIdentifier::CorrelationId => id(
                view.correlation_id.as_deref(),
                view.correlation_id_type,
                false,
            ),
            JmsIdentifier::Type => text(&view.subject),
            JmsIdentifier::Expiration => Scalar::Int(view.absolute_expiry_time.unwrap_or(0)),
            JmsIdentifier::GroupId => text(&view.session_id),
            // Java's `intValue()` of the uint: the same bits as a signed int.
            #[allow(clippy::cast_possible_wrap)]
            JmsIdentifier::GroupSeq => {
                Scalar::Int(i64::from(view.group_sequence.unwrap_or(0) as i32))
            }
            JmsIdentifier::UserId => match view.user_id.as_deref() {
                Some(bytes) if !bytes.is_empty() => Scalar::Text(String::from_utf8_lossy(bytes)),
                _ => property(view, "JMSXUserID"),
            },
            JmsIdentifier::DeliveryCount => Scalar::Int(i64::from(view.delivery_count) + 1),
            JmsIdentifier::Property(name) => property(view, name),
        }
    }
}

/// The application property named exactly `name`.
fn property<'a>(view: &'a MessageView, name: &str) -> Scalar<'a> {
    view.application_properties
        .iter()
        .find(|(key, _)| key == name)
        .map_or(Scalar::Null, |(_, value)| Scalar::of(value))
}

/// A message-id (`message`) or correlation-id of type `kind`, held as `text` (see
/// [`IdType`]), as Qpid JMS renders it.
fn id(text: Option<&str>, kind: IdType, message: bool) -> Scalar<'_> {
    let Some(text) = text else {
        return Scalar::Null;
    };
    let rendered = match kind {
        IdType::String => match text.strip_prefix(ID_PREFIX) {
            None if message => Cow::Owned(format!("{ID_PREFIX}AMQP_NO_PREFIX:{text}")),
            Some(rest) if TYPE_PREFIXES.iter().any(|p| rest.starts_with(p)) => {
                Cow::Owned(format!("{ID_PREFIX}AMQP_STRING:{text}"))
            }
            _ => Cow::Borrowed(text),
        },
        IdType::Ulong => Cow::Owned(format!("{ID_PREFIX}AMQP_ULONG:{text}")),
        IdType::Uuid => Cow::Owned(format!("{ID_PREFIX}AMQP_UUID:{text}")),
        IdType::Binary => Cow::Owned(format!(
            "{ID_PREFIX}AMQP_BINARY:{}",
            text.to_ascii_uppercase()
        )),
    };
    Scalar::Text(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::value::Value;

    #[test]
    fn names_resolve_case_sensitively() {
        assert_eq!(
            JmsIdentifier::resolve("JMSPriority"),
            Ok(JmsIdentifier::Priority)
        );
        assert_eq!(
            JmsIdentifier::resolve("JMSpriority"),
            Ok(JmsIdentifier::Property("JMSpriority".into()))
        );
        assert!(JmsIdentifier::resolve("JMSReplyTo").is_err());
        let value = Value::Int(1);
        let view = MessageView {
            application_properties: vec![("a".into(), value.clone())],
            ..MessageView::default()
        };
        assert_eq!(property(&view, "a"), Scalar::of(&value));
        assert_eq!(property(&view, "A"), Scalar::Null);
    }
}
