//! What filters and actions read of a message: its system properties and its application
//! properties, and how `sys.` and application property names are matched.

use super::value::Value;

/// The parts of a message a filter or an action can read, extracted once per message by the
/// connection task. AMQP ids that are uuids, ulongs or binaries come as their string form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageView {
    /// `sys.MessageId`: properties.message-id.
    pub message_id: Option<String>,
    /// `sys.CorrelationId`: properties.correlation-id.
    pub correlation_id: Option<String>,
    /// `sys.To`: properties.to.
    pub to: Option<String>,
    /// `sys.ReplyTo`: properties.reply-to.
    pub reply_to: Option<String>,
    /// `sys.Label` (or `sys.Subject`): properties.subject.
    pub subject: Option<String>,
    /// `sys.SessionId`: properties.group-id.
    pub session_id: Option<String>,
    /// `sys.ReplyToSessionId`: properties.reply-to-group-id.
    pub reply_to_session_id: Option<String>,
    /// `sys.ContentType`: properties.content-type.
    pub content_type: Option<String>,
    /// The application-properties section, in message order. Names are matched
    /// case-insensitively; the first match wins.
    pub application_properties: Vec<(String, Value)>,
    /// The AMQP type of properties.message-id, which [`MessageView::message_id`] holds as
    /// text (JMS renders each type differently).
    pub message_id_type: IdType,
    /// The AMQP type of properties.correlation-id.
    pub correlation_id_type: IdType,
    /// header.durable (`false` when absent, as AMQP defaults it).
    pub durable: bool,
    /// header.priority, `None` when absent (AMQP's default is 4).
    pub priority: Option<u8>,
    /// properties.user-id, as sent.
    pub user_id: Option<Vec<u8>>,
    /// properties.creation-time, in ms since the Unix epoch.
    pub creation_time: Option<i64>,
    /// properties.absolute-expiry-time, in ms since the Unix epoch.
    pub absolute_expiry_time: Option<i64>,
    /// properties.group-sequence.
    pub group_sequence: Option<u32>,
    /// How many times the broker delivered this copy before: what a receiver sees as the
    /// header's delivery-count. A message being routed to subscriptions has had none (the
    /// sender's header does not count: the broker writes its own).
    pub delivery_count: u32,
}

/// The AMQP type of a message-id or correlation-id, which [`MessageView`] holds as text: a
/// string as it is, a ulong in decimal, a uuid hyphenated in lower case, a binary in lower-case
/// hex.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IdType {
    /// An AMQP `string` (and the type of an absent id).
    #[default]
    String,
    /// An AMQP `ulong`.
    Ulong,
    /// An AMQP `uuid`.
    Uuid,
    /// An AMQP `binary`.
    Binary,
}

impl MessageView {
    /// The value of a system property (`None` when the message does not carry it).
    #[must_use]
    pub fn system(&self, property: SystemProperty) -> Option<&str> {
        let field = match property {
            SystemProperty::MessageId => &self.message_id,
            SystemProperty::CorrelationId => &self.correlation_id,
            SystemProperty::To => &self.to,
            SystemProperty::ReplyTo => &self.reply_to,
            SystemProperty::Subject => &self.subject,
            SystemProperty::SessionId => &self.session_id,
            SystemProperty::ReplyToSessionId => &self.reply_to_session_id,
            SystemProperty::ContentType => &self.content_type,
        };
        field.as_deref()
    }

    /// The first application property whose name equals `name` case-insensitively.
    #[must_use]
    pub fn application_property(&self, name: &str) -> Option<&Value> {
        self.application_entry(name).map(|(_, value)| value)
    }

    /// The first application property named `name` (case-insensitively), with its name as
    /// the message spells it.
    pub(super) fn application_entry(&self, name: &str) -> Option<(&str, &Value)> {
        self.application_properties
            .iter()
            .find(|(key, _)| names_equal(key, name))
            .map(|(key, value)| (key.as_str(), value))
    }
}

/// A system property filters and actions can read and actions can set: the string-valued
/// properties of the AMQP properties section that Service Bus exposes as `sys.` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SystemProperty {
    /// `sys.MessageId`.
    MessageId,
    /// `sys.CorrelationId`.
    CorrelationId,
    /// `sys.To`.
    To,
    /// `sys.ReplyTo`.
    ReplyTo,
    /// `sys.Label`, also accepted as `sys.Subject` (the name in the current SDKs).
    Subject,
    /// `sys.SessionId`.
    SessionId,
    /// `sys.ReplyToSessionId`.
    ReplyToSessionId,
    /// `sys.ContentType`.
    ContentType,
}

/// The supported system properties under their Service Bus names (matched case-insensitively).
const SUPPORTED: [(&str, SystemProperty); 9] = [
    ("MessageId", SystemProperty::MessageId),
    ("CorrelationId", SystemProperty::CorrelationId),
    ("To", SystemProperty::To),
    ("ReplyTo", SystemProperty::ReplyTo),
    ("Label", SystemProperty::Subject),
    ("Subject", SystemProperty::Subject),
    ("SessionId", SystemProperty::SessionId),
    ("ReplyToSessionId", SystemProperty::ReplyToSessionId),
    ("ContentType", SystemProperty::ContentType),
];

/// Service Bus message properties ("Messages, payloads, and serialization") this broker does
/// not offer to filters and actions: they are not strings, or not known when a message is
/// routed to its subscriptions.
const UNSUPPORTED: [&str; 15] = [
    "DeadLetterSource",
    "DeliveryCount",
    "EnqueuedSequenceNumber",
    "EnqueuedTimeUtc",
    "ExpiresAtUtc",
    "ForcePersistence",
    "LockedUntilUtc",
    "LockToken",
    "PartitionKey",
    "ScheduledEnqueueTimeUtc",
    "SequenceNumber",
    "Size",
    "State",
    "TimeToLive",
    "ViaPartitionKey",
];

impl SystemProperty {
    /// The Service Bus name, as written after `sys.`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SystemProperty::MessageId => "MessageId",
            SystemProperty::CorrelationId => "CorrelationId",
            SystemProperty::To => "To",
            SystemProperty::ReplyTo => "ReplyTo",
            SystemProperty::Subject => "Label",
            SystemProperty::SessionId => "SessionId",
            SystemProperty::ReplyToSessionId => "ReplyToSessionId",
            SystemProperty::ContentType => "ContentType",
        }
    }

    /// The system property written `sys.{name}`, or why there is none.
    pub(super) fn resolve(name: &str) -> Result<SystemProperty, String> {
        if let Some((_, property)) = SUPPORTED.iter().find(|(known, _)| names_equal(known, name)) {
            return Ok(*property);
        }
        let supported = "sys.MessageId, sys.CorrelationId, sys.To, sys.ReplyTo, sys.Label, \
                         sys.SessionId, sys.ReplyToSessionId and sys.ContentType";
        if let Some(known) = UNSUPPORTED.iter().find(|known| names_equal(known, name)) {
            Err(format!(
                "system property sys.{known} is not supported by this broker (only {supported})"
            ))
        } else {
            Err(format!(
                "unknown system property sys.{name} (supported: {supported})"
            ))
        }
    }
}

/// Whether two property names are equal case-insensitively, without allocating: Service Bus
/// property names are case-insensitive (SQL filter syntax, "Considerations").
pub(super) fn names_equal(left: &str, right: &str) -> bool {
    // Most names that differ differ in their first character; two ASCII first characters
    // that differ (ignoring case) settle it without looking further.
    if let (Some(&l), Some(&r)) = (left.as_bytes().first(), right.as_bytes().first()) {
        if l.is_ascii() && r.is_ascii() && !l.eq_ignore_ascii_case(&r) {
            return false;
        }
    }
    left.eq_ignore_ascii_case(right)
        || (!(left.is_ascii() && right.is_ascii())
            && left
                .chars()
                .flat_map(char::to_lowercase)
                .eq(right.chars().flat_map(char::to_lowercase)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_case_insensitively_also_beyond_ascii() {
        assert!(names_equal("Region", "rEGION"));
        assert!(names_equal("Größe", "GRÖßE"));
        assert!(names_equal("ÉTAT", "état"));
        assert!(!names_equal("region", "regions"));
        assert!(!names_equal("état", "etat"));
    }

    #[test]
    fn application_properties_are_found_by_any_case_first_match_wins() {
        let view = MessageView {
            application_properties: vec![
                ("Color".into(), Value::String("red".into())),
                ("color".into(), Value::String("blue".into())),
            ],
            ..MessageView::default()
        };
        assert_eq!(
            view.application_property("COLOR"),
            Some(&Value::String("red".into()))
        );
        assert_eq!(
            view.application_entry("color").map(|(key, _)| key),
            Some("Color")
        );
        assert_eq!(view.application_property("size"), None);
    }

    #[test]
    fn system_names_resolve_case_insensitively_with_label_and_subject() {
        assert_eq!(
            SystemProperty::resolve("label"),
            Ok(SystemProperty::Subject)
        );
        assert_eq!(
            SystemProperty::resolve("SUBJECT"),
            Ok(SystemProperty::Subject)
        );
        assert_eq!(
            SystemProperty::resolve("messageid"),
            Ok(SystemProperty::MessageId)
        );
        for property in SUPPORTED.map(|(_, property)| property) {
            assert_eq!(SystemProperty::resolve(property.name()), Ok(property));
        }
    }

    #[test]
    fn unsupported_and_unknown_system_names_say_so() {
        let unsupported = SystemProperty::resolve("deliverycount").unwrap_err();
        assert!(unsupported.starts_with("system property sys.DeliveryCount is not supported"));
        let unknown = SystemProperty::resolve("Colour").unwrap_err();
        assert!(unknown.starts_with("unknown system property sys.Colour"));
    }
}
