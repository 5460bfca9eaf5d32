//! The Service Bus ATOM/XML documents: entity descriptions, feeds, errors, written the way the
//! Python and JavaScript administration clients parse them, and the descriptions they send,
//! read by element name in any order (the SDKs order and prefix them differently).
//!
//! What the SDKs need (checked against both): an unprefixed `entry` with an absolute `id`
//! (the JS client takes the entity's name from it, with `Subscriptions` capitalised), a
//! `title`, `CountDetails` with exactly one namespace attribute, no nil elements.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use quick_xml::events::Event;
use quick_xml::Reader;

use crate::config::{parse_duration, PolicyConfig, QueueConfig, SubscriptionConfig, TopicConfig};
use crate::entity::handle::{EntityStats, LaneId};
use crate::entity::queue::LaneCounts;

/// The Service Bus description namespace.
const CONNECT: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
/// The namespace of `CountDetails`'s children.
const COUNTS: &str = "http://schemas.microsoft.com/netservices/2011/06/servicebus";
/// .NET's `TimeSpan.MaxValue`, what Service Bus writes for "never".
pub const NEVER: &str = "P10675199DT2H48M5.4775807S";
/// Days from which a duration reads as "never" (`TimeSpan.MaxValue` is 10,675,199 days).
const NEVER_DAYS: u64 = 10_675_199;

/// What an entity holds, summed the way Service Bus reports it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Receivable messages of the main queue.
    pub active: u64,
    /// Messages in its dead-letter queue.
    pub dead_letter: u64,
    /// Scheduled messages.
    pub scheduled: u64,
    /// Deferred messages (counted in `MessageCount`).
    pub deferred: u64,
    /// Bytes of every message.
    pub bytes: u64,
    /// Messages of the main queue waiting to be forwarded (counted here, not as active).
    pub transfer: u64,
    /// Messages of its dead-letter queue waiting to be forwarded (counted here, not as
    /// dead-lettered).
    pub transfer_dead_letter: u64,
}

impl Counts {
    /// The counts of a main lane and its dead-letter lane.
    pub fn of(main: LaneCounts, dead_letter: LaneCounts) -> Counts {
        Counts {
            active: main.active,
            dead_letter: dead_letter.active + dead_letter.deferred,
            scheduled: main.scheduled,
            deferred: main.deferred,
            bytes: main.bytes + dead_letter.bytes,
            transfer: 0,
            transfer_dead_letter: 0,
        }
    }

    /// The counts of a queue or subscription whose main lane forwards (`to`) and whose
    /// dead-letter lane does (`dead_letters`): their messages wait to be transferred.
    pub fn forwarding(mut self, to: bool, dead_letters: bool) -> Counts {
        if to {
            self.transfer = std::mem::take(&mut self.active);
        }
        if dead_letters {
            self.transfer_dead_letter = std::mem::take(&mut self.dead_letter);
        }
        self
    }

    /// These counts with a queue's or topic's transfer lanes (send-via) added: the transfers
    /// waiting to move, and those in its transfer dead-letter queue.
    pub fn with_transfers(mut self, stats: &EntityStats) -> Counts {
        let (lane, dead) = (
            stats.lane(LaneId::TRANSFER),
            stats.lane(LaneId::TRANSFER_DEAD_LETTER),
        );
        self.transfer += lane.active;
        self.transfer_dead_letter += dead.active + dead.deferred;
        self
    }

    fn total(&self) -> u64 {
        self.active
            + self.dead_letter
            + self.scheduled
            + self.deferred
            + self.transfer
            + self.transfer_dead_letter
    }
}

/// Times of an entity, in ms since the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub struct Times {
    /// `CreatedAt`.
    pub created_ms: i64,
    /// `UpdatedAt`.
    pub updated_ms: i64,
    /// `AccessedAt`; `None` for an entity no client has used.
    pub accessed_ms: Option<i64>,
}

/// An ISO 8601 duration as .NET writes it (`PT1M`, `P14D`, `PT1.5S`), or [`NEVER`].
pub fn duration(value: Option<Duration>) -> String {
    let Some(value) = value else {
        return NEVER.to_owned();
    };
    let total = value.as_secs();
    let (days, hours, minutes, seconds) = (
        total / 86_400,
        total / 3_600 % 24,
        total / 60 % 60,
        total % 60,
    );
    let mut out = String::from("P");
    if days > 0 {
        let _ = write!(out, "{days}D");
    }
    let millis = value.subsec_millis();
    if hours + minutes + seconds > 0 || millis > 0 || days == 0 {
        out.push('T');
        if hours > 0 {
            let _ = write!(out, "{hours}H");
        }
        if minutes > 0 {
            let _ = write!(out, "{minutes}M");
        }
        if seconds > 0 || millis > 0 || (hours == 0 && minutes == 0) {
            match millis {
                0 => {
                    let _ = write!(out, "{seconds}S");
                }
                _ => {
                    let fraction = format!("{millis:03}");
                    let _ = write!(out, "{seconds}.{}S", fraction.trim_end_matches('0'));
                }
            }
        }
    }
    out
}

/// What Service Bus writes for a time that has not come yet (.NET's `DateTime.MinValue`):
/// `AccessedAt` before a client uses the entity.
const NO_TIME: &str = "0001-01-01T00:00:00Z";

/// A time as .NET writes it, `2024-05-01T10:00:00.123Z`.
pub fn time(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

/// Escapes text for an XML element or attribute.
fn escape(text: &str) -> String {
    quick_xml::escape::escape(text).into_owned()
}

/// An XML document being written.
#[derive(Default)]
struct Xml(String);

impl Xml {
    fn element(&mut self, name: &str, value: impl std::fmt::Display) {
        let _ = write!(self.0, "<{name}>{}</{name}>", escape(&value.to_string()));
    }

    /// A forwarding target, written only when set (Service Bus leaves out unset targets), as
    /// Service Bus writes it: an address as the client gave it (`https://<namespace>/<name>`
    /// from the Go client stays so), a name as its address in the namespace
    /// (`sb://<namespace>/<name>`).
    fn forward(&mut self, name: &str, namespace: &str, target: &Option<String>) {
        match target {
            Some(address) if address.contains("://") => self.element(name, address),
            Some(target) => self.element(name, format!("{namespace}/{target}")),
            None => {}
        }
    }

    /// An entity's shared access policies as Service Bus describes them, keys included (the
    /// administration API answers only a `Manage` credential), and without the
    /// `CreatedTime` and `ModifiedTime` Service Bus leaves out of an entity's rules (the Go
    /// client compares the rules it sent with those it reads back).
    fn authorization_rules(&mut self, policies: &[PolicyConfig]) {
        self.0.push_str("<AuthorizationRules>");
        for policy in policies {
            self.0.push_str(
                "<AuthorizationRule i:type=\"SharedAccessAuthorizationRule\">\
                 <ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue><Rights>",
            );
            for right in policy.rights.access_rights() {
                self.element("AccessRights", right);
            }
            self.0.push_str("</Rights>");
            self.element("KeyName", &policy.name);
            self.element("PrimaryKey", policy.key.text());
            let secondary = policy.secondary_key.as_ref().map_or("", |key| key.text());
            self.element("SecondaryKey", secondary);
            self.0.push_str("</AuthorizationRule>");
        }
        self.0.push_str("</AuthorizationRules>");
    }

    fn counts(&mut self, counts: &Counts) {
        let _ = write!(self.0, "<CountDetails xmlns:d2p1=\"{COUNTS}\">");
        for (name, value) in [
            ("ActiveMessageCount", counts.active),
            ("DeadLetterMessageCount", counts.dead_letter),
            ("ScheduledMessageCount", counts.scheduled),
            ("TransferMessageCount", counts.transfer),
            (
                "TransferDeadLetterMessageCount",
                counts.transfer_dead_letter,
            ),
        ] {
            let _ = write!(self.0, "<d2p1:{name}>{value}</d2p1:{name}>");
        }
        self.0.push_str("</CountDetails>");
    }

    fn times(&mut self, times: &Times) {
        self.element("CreatedAt", time(times.created_ms));
        self.element("UpdatedAt", time(times.updated_ms));
        let accessed = times.accessed_ms.map_or_else(|| NO_TIME.to_owned(), time);
        self.element("AccessedAt", accessed);
    }

    /// `UserMetadata`, written only when the entity has some (the SDKs then read none, as
    /// from Service Bus).
    fn user_metadata(&mut self, user_metadata: &Option<String>) {
        if let Some(text) = user_metadata {
            self.element("UserMetadata", text);
        }
    }

    /// `MaxMessageSizeInKilobytes`, at the api-versions that have it.
    fn max_message_size(&mut self, max_message_kib: Option<u64>) {
        if let Some(kib) = max_message_kib {
            self.element("MaxMessageSizeInKilobytes", kib);
        }
    }

    fn open(&mut self, description: &str) {
        self.0.push_str(&opening(description));
    }
}

/// The start tag of a description element, with the namespaces the SDKs expect.
pub fn opening(description: &str) -> String {
    format!(
        "<{description} xmlns=\"{CONNECT}\" xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\">"
    )
}

/// A queue's `QueueDescription`; its forwarding targets are addressed in `namespace`
/// (`sb://<host>`). `max_message_kib` is `None` at an api-version without
/// `MaxMessageSizeInKilobytes`.
pub fn queue(
    queue: &QueueConfig,
    counts: &Counts,
    times: &Times,
    max_message_kib: Option<u64>,
    namespace: &str,
) -> String {
    let mut xml = Xml::default();
    xml.open("QueueDescription");
    xml.element("LockDuration", duration(Some(queue.lock_duration)));
    xml.element("MaxSizeInMegabytes", queue.max_size_in_megabytes);
    xml.element(
        "RequiresDuplicateDetection",
        queue.requires_duplicate_detection,
    );
    xml.element("RequiresSession", queue.requires_session);
    xml.element(
        "DefaultMessageTimeToLive",
        duration(queue.default_message_time_to_live),
    );
    xml.element(
        "DeadLetteringOnMessageExpiration",
        queue.dead_lettering_on_message_expiration,
    );
    xml.element(
        "DuplicateDetectionHistoryTimeWindow",
        duration(Some(queue.duplicate_detection_history_time_window)),
    );
    xml.element("MaxDeliveryCount", queue.max_delivery_count);
    xml.element("EnableBatchedOperations", queue.enable_batched_operations);
    xml.element("SizeInBytes", counts.bytes);
    xml.element("MessageCount", counts.total());
    xml.element("IsAnonymousAccessible", false);
    xml.authorization_rules(&queue.shared_access_policies);
    xml.element("Status", queue.status.service_bus_name());
    xml.forward("ForwardTo", namespace, &queue.forward_to);
    xml.user_metadata(&queue.user_metadata);
    xml.times(times);
    xml.element("SupportOrdering", true);
    xml.counts(counts);
    xml.element("AutoDeleteOnIdle", duration(queue.auto_delete_on_idle));
    xml.element("EnablePartitioning", queue.partitions.is_some());
    xml.element("EntityAvailabilityStatus", "Available");
    xml.forward(
        "ForwardDeadLetteredMessagesTo",
        namespace,
        &queue.forward_dead_lettered_messages_to,
    );
    xml.element("EnableExpress", queue.enable_express);
    xml.max_message_size(max_message_kib);
    xml.0.push_str("</QueueDescription>");
    xml.0
}

/// A topic's `TopicDescription`, with its SQL and correlation filters counted across its
/// subscriptions; `max_message_kib` as for [`queue`].
pub fn topic(
    topic: &TopicConfig,
    counts: &Counts,
    times: &Times,
    max_message_kib: Option<u64>,
    (sql_filters, correlation_filters): (usize, usize),
) -> String {
    let mut xml = Xml::default();
    xml.open("TopicDescription");
    xml.element(
        "DefaultMessageTimeToLive",
        duration(topic.default_message_time_to_live),
    );
    xml.element("MaxSizeInMegabytes", topic.max_size_in_megabytes);
    xml.element(
        "RequiresDuplicateDetection",
        topic.requires_duplicate_detection,
    );
    xml.element(
        "DuplicateDetectionHistoryTimeWindow",
        duration(Some(topic.duplicate_detection_history_time_window)),
    );
    xml.element("EnableBatchedOperations", topic.enable_batched_operations);
    xml.element("SizeInBytes", counts.bytes);
    xml.element("FilteringMessagesBeforePublishing", false);
    xml.element("IsAnonymousAccessible", false);
    xml.authorization_rules(&topic.shared_access_policies);
    xml.element("Status", topic.status.service_bus_name());
    xml.user_metadata(&topic.user_metadata);
    xml.times(times);
    xml.element("SupportOrdering", topic.support_ordering);
    xml.counts(counts);
    xml.element("SubscriptionCount", topic.subscriptions.len());
    xml.element("SqlFilterCount", sql_filters);
    xml.element("CorrelationFilterCount", correlation_filters);
    xml.element("AutoDeleteOnIdle", duration(topic.auto_delete_on_idle));
    xml.element("EnablePartitioning", topic.partitions.is_some());
    xml.element("EntityAvailabilityStatus", "Available");
    xml.element("EnableSubscriptionPartitioning", false);
    xml.element("EnableExpress", topic.enable_express);
    xml.max_message_size(max_message_kib);
    xml.0.push_str("</TopicDescription>");
    xml.0
}

/// A subscription's `SubscriptionDescription`; its forwarding targets are addressed in
/// `namespace` (`sb://<host>`).
pub fn subscription(
    subscription: &SubscriptionConfig,
    counts: &Counts,
    times: &Times,
    namespace: &str,
) -> String {
    let mut xml = Xml::default();
    xml.open("SubscriptionDescription");
    xml.element("LockDuration", duration(Some(subscription.lock_duration)));
    xml.element("RequiresSession", subscription.requires_session);
    xml.element(
        "DefaultMessageTimeToLive",
        duration(subscription.default_message_time_to_live),
    );
    xml.element(
        "DeadLetteringOnMessageExpiration",
        subscription.dead_lettering_on_message_expiration,
    );
    xml.element(
        "DeadLetteringOnFilterEvaluationExceptions",
        subscription.dead_lettering_on_filter_evaluation_exceptions,
    );
    xml.element("MessageCount", counts.total());
    xml.element("MaxDeliveryCount", subscription.max_delivery_count);
    xml.element(
        "EnableBatchedOperations",
        subscription.enable_batched_operations,
    );
    xml.element("Status", subscription.status.service_bus_name());
    xml.forward("ForwardTo", namespace, &subscription.forward_to);
    xml.user_metadata(&subscription.user_metadata);
    xml.times(times);
    xml.counts(counts);
    xml.element(
        "AutoDeleteOnIdle",
        duration(subscription.auto_delete_on_idle),
    );
    xml.forward(
        "ForwardDeadLetteredMessagesTo",
        namespace,
        &subscription.forward_dead_lettered_messages_to,
    );
    xml.element("EntityAvailabilityStatus", "Available");
    xml.0.push_str("</SubscriptionDescription>");
    xml.0
}

/// `NamespaceInfo` for `$namespaceinfo`.
pub fn namespace_info(name: &str, created_ms: i64) -> String {
    let mut xml = Xml::default();
    xml.open("NamespaceInfo");
    xml.element("CreatedTime", time(created_ms));
    xml.element("MessagingSKU", "Standard");
    xml.element("ModifiedTime", time(created_ms));
    xml.element("Name", name);
    xml.element("NamespaceType", "Messaging");
    xml.0.push_str("</NamespaceInfo>");
    xml.0
}

/// What Service Bus answers a `GET` of a queue or topic that does not exist with (status
/// 200): an empty feed titled "Publicly Listed Services". The SDKs read it as absent (the
/// Go SDK by that title), and the Java SDK's own live test `getTopicDoesNotExist` expects
/// the 200.
pub fn no_such_entity(now_ms: i64) -> String {
    format!(
        "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title type=\"text\">Publicly Listed \
         Services</title><subtitle type=\"text\">This is the list of publicly-listed services \
         currently available.</subtitle><id>uuid:{};id=1</id><updated>{}</updated>\
         <generator>Service Bus 1.1</generator></feed>",
        uuid::Uuid::new_v4(),
        time(now_ms)
    )
}

/// An Atom `entry` around `content`, with `id` the entity's absolute URL.
pub fn entry(id: &str, title: &str, updated_ms: i64, content: &str) -> String {
    format!(
        "<entry xmlns=\"http://www.w3.org/2005/Atom\">{}",
        entry_body(id, title, updated_ms, content)
    )
}

fn entry_body(id: &str, title: &str, updated_ms: i64, content: &str) -> String {
    let (id, title, updated) = (escape(id), escape(title), time(updated_ms));
    format!(
        "<id>{id}</id><title type=\"text\">{title}</title><published>{updated}</published>\
         <updated>{updated}</updated><author><name>tidebus</name></author>\
         <link rel=\"self\" href=\"{id}\"/><content type=\"application/xml\">{content}</content>\
         </entry>"
    )
}

/// An Atom `feed` of `entries` (each `(id, title, updated_ms, content)`); `next` is the URL
/// of the next page, when there is one (the Python client follows a feed's second link).
pub fn feed(
    title: &str,
    self_url: &str,
    next: Option<&str>,
    now_ms: i64,
    entries: &[(String, String, i64, String)],
) -> String {
    let mut out = format!(
        "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title type=\"text\">{}</title>\
         <id>{}</id><updated>{}</updated><link rel=\"self\" href=\"{}\"/>",
        escape(title),
        escape(self_url),
        time(now_ms),
        escape(self_url)
    );
    if let Some(next) = next {
        let _ = write!(out, "<link rel=\"next\" href=\"{}\"/>", escape(next));
    }
    for (id, title, updated_ms, content) in entries {
        out.push_str("<entry>");
        out.push_str(&entry_body(id, title, *updated_ms, content));
    }
    out.push_str("</feed>");
    out
}

/// The error document Service Bus answers with.
pub fn error(status: u16, detail: &str) -> String {
    format!(
        "<Error><Code>{status}</Code><Detail>{}</Detail></Error>",
        escape(detail)
    )
}

/// An XML element as read: its local name, attributes by local name, text and children.
#[derive(Debug, Default, Clone)]
pub struct Element {
    /// The local name (prefixes dropped: the SDKs write different ones).
    pub name: String,
    /// Attributes by local name (`i:type` is `type`).
    pub attributes: BTreeMap<String, String>,
    /// The text directly inside it.
    pub text: String,
    /// Child elements, in order.
    pub children: Vec<Element>,
}

impl Element {
    /// The first child called `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|child| child.name == name)
    }

    /// The first element called `name`, this one or below it (depth first).
    pub fn find(&self, name: &str) -> Option<&Element> {
        if self.name == name {
            return Some(self);
        }
        self.children.iter().find_map(|child| child.find(name))
    }

    /// The first element whose name ends with `suffix`, this one or below it.
    fn find_ending(&self, suffix: &str) -> Option<&Element> {
        if self.name.ends_with(suffix) {
            return Some(self);
        }
        self.children
            .iter()
            .find_map(|child| child.find_ending(suffix))
    }
}

/// Most elements nested in a request body.
const MAX_DEPTH: usize = 32;
/// Most elements in a request body (a description has about 30).
const MAX_ELEMENTS: usize = 4096;
/// Most attributes on one element (quick-xml's own duplicate check is quadratic in them).
const MAX_ATTRIBUTES: usize = 32;

/// Reads an XML document into its root element, in time linear in its length.
///
/// # Errors
/// Why it is not XML, nests deeper than 32 elements, holds more than 4,096 elements, or an
/// element has more than 32 attributes (of two with one local name, the last is kept).
pub fn parse(body: &[u8]) -> Result<Element, String> {
    let mut reader = Reader::from_reader(body);
    reader.config_mut().trim_text(true);
    let mut stack: Vec<Element> = vec![Element::default()];
    let mut elements = 0;
    let mut buffer = Vec::new();
    let local = |name: &[u8]| {
        let name = String::from_utf8_lossy(name).into_owned();
        name.rsplit(':').next().unwrap_or_default().to_owned()
    };
    loop {
        let event = reader
            .read_event_into(&mut buffer)
            .map_err(|e| format!("the body is not XML: {e}"))?;
        let empty = matches!(event, Event::Empty(_));
        match event {
            Event::Start(start) | Event::Empty(start) => {
                elements += 1;
                if elements > MAX_ELEMENTS {
                    return Err(format!("the body holds more than {MAX_ELEMENTS} elements"));
                }
                let mut element = Element {
                    name: local(start.name().as_ref()),
                    ..Element::default()
                };
                for (index, attribute) in start.attributes().with_checks(false).enumerate() {
                    if index == MAX_ATTRIBUTES {
                        return Err(format!(
                            "an element has more than {MAX_ATTRIBUTES} attributes"
                        ));
                    }
                    let attribute = attribute.map_err(|e| format!("an attribute: {e}"))?;
                    let value = attribute
                        .unescape_value()
                        .map_err(|e| format!("an attribute: {e}"))?
                        .into_owned();
                    element
                        .attributes
                        .insert(local(attribute.key.as_ref()), value);
                }
                if empty {
                    stack.last_mut().expect("a root").children.push(element);
                } else {
                    if stack.len() > MAX_DEPTH {
                        return Err(format!("the body nests deeper than {MAX_DEPTH} elements"));
                    }
                    stack.push(element);
                }
            }
            Event::Text(text) => {
                let text = text.unescape().map_err(|e| format!("text: {e}"))?;
                stack.last_mut().expect("a root").text.push_str(&text);
            }
            Event::End(_) => {
                let element = stack.pop().expect("balanced: quick-xml checks end tags");
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => return Err("the body closes more elements than it opens".into()),
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buffer.clear();
    }
    if stack.len() != 1 {
        return Err("the body ends inside an element".into());
    }
    Ok(stack.pop().expect("the root"))
}

/// A description a client sent: the name of its element (`QueueDescription`, ...) and its
/// children's text by local name.
#[derive(Debug, Default)]
pub struct Sent {
    /// The description's element name.
    pub kind: String,
    /// Each child element's text, by local name (children of children are not kept).
    pub fields: BTreeMap<String, String>,
    /// Its `AuthorizationRules`, when it has the element.
    pub authorization_rules: Option<Vec<SentRule>>,
}

/// One `AuthorizationRule` of a description, as sent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SentRule {
    /// `KeyName`.
    pub key_name: String,
    /// `PrimaryKey` (empty when left out).
    pub primary_key: String,
    /// `SecondaryKey` (empty when left out).
    pub secondary_key: String,
    /// Each `AccessRights` of `Rights`.
    pub rights: Vec<String>,
}

impl SentRule {
    /// The rule an `AuthorizationRule` element describes.
    fn read(element: &Element) -> SentRule {
        let text = |name: &str| element.child(name).map_or("", |e| e.text.trim()).to_owned();
        let rights = element
            .child("Rights")
            .map_or(&[][..], |r| r.children.as_slice());
        SentRule {
            key_name: text("KeyName"),
            primary_key: text("PrimaryKey"),
            secondary_key: text("SecondaryKey"),
            rights: rights
                .iter()
                .map(|right| right.text.trim().to_owned())
                .collect(),
        }
    }
}

/// Reads the entity description inside an Atom entry's `content`.
///
/// # Errors
/// A description of what does not read.
pub fn read_description(body: &[u8]) -> Result<Sent, String> {
    let root = parse(body)?;
    let description = root
        .find_ending("Description")
        .ok_or("the body holds no entity description")?;
    let authorization_rules = (description.child("AuthorizationRules"))
        .map(|rules| rules.children.iter().map(SentRule::read).collect());
    Ok(Sent {
        kind: description.name.clone(),
        fields: description
            .children
            .iter()
            .map(|child| (child.name.clone(), child.text.clone()))
            .collect(),
        authorization_rules,
    })
}

/// An ISO 8601 duration a client sent; `None` for "never" (10,675,199 days or more).
///
/// # Errors
/// Why it does not read.
pub fn read_duration(text: &str) -> Result<Option<Duration>, String> {
    // .NET's seconds may carry 7 fractional digits; whole milliseconds are enough here.
    let trimmed = match text.split_once('.') {
        Some((whole, fraction)) if fraction.ends_with('S') => {
            let digits: String = fraction.trim_end_matches('S').chars().take(3).collect();
            format!("{whole}.{digits}S")
        }
        _ => text.to_owned(),
    };
    let duration = parse_duration(&trimmed)?;
    Ok((duration.as_secs() / 86_400 < NEVER_DAYS).then_some(duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_and_write_as_dotnet_does() {
        for (text, value) in [
            ("PT1M", Duration::from_secs(60)),
            ("PT30S", Duration::from_secs(30)),
            ("P14D", Duration::from_secs(14 * 86_400)),
            ("P1DT2H3M4S", Duration::from_secs(93_784)),
            ("PT1.5S", Duration::from_millis(1500)),
        ] {
            assert_eq!(duration(Some(value)), text);
            assert_eq!(read_duration(text), Ok(Some(value)), "{text}");
        }
        assert_eq!(duration(None), NEVER);
        assert_eq!(read_duration(NEVER), Ok(None));
        assert_eq!(read_duration("P10675199DT2H48M5.477539S"), Ok(None));
        assert!(read_duration("soon").is_err());
    }

    #[test]
    fn descriptions_read_by_local_name_in_any_order_and_prefix() {
        let python = br#"<?xml version='1.0' encoding='utf-8'?>
<ns0:entry xmlns:ns0="http://www.w3.org/2005/Atom" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><ns0:content type="application/xml"><QueueDescription><MaxDeliveryCount>4</MaxDeliveryCount><LockDuration>PT30S</LockDuration><CountDetails><d2p1:ActiveMessageCount xmlns:d2p1="x">3</d2p1:ActiveMessageCount></CountDetails><UserMetadata /></QueueDescription></ns0:content></ns0:entry>"#;
        let sent = read_description(python).expect("reads");
        assert_eq!(sent.kind, "QueueDescription");
        assert_eq!(sent.fields["MaxDeliveryCount"], "4");
        assert_eq!(sent.fields["LockDuration"], "PT30S");
        assert_eq!(sent.fields["UserMetadata"], "");
        assert!(
            !sent.fields.contains_key("ActiveMessageCount"),
            "children of children"
        );
        let js = br#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-24T06:29:18.790Z</updated><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"/></content></entry>"#;
        let sent = read_description(js).expect("reads");
        assert_eq!(sent.kind, "QueueDescription");
        assert!(sent.fields.is_empty());
        assert!(read_description(b"<entry/>").is_err());
        assert!(read_description(b"<a><b></a>").is_err());
    }

    /// 111,000 attributes on one element cost 9 s of a runtime worker in quick-xml's
    /// duplicate check; they are refused after the 32nd now.
    #[test]
    fn attributes_and_elements_are_bounded() {
        let attributes: String = (0..111_000).map(|n| format!(" x{n:05}=\"\"")).collect();
        let body = format!("<entry><content><QueueDescription{attributes}/></content></entry>");
        assert_eq!(
            parse(body.as_bytes()).map(|_| ()),
            Err("an element has more than 32 attributes".to_owned())
        );
        let fine: String = (0..32).map(|n| format!(" x{n}=\"\"")).collect();
        assert!(parse(format!("<a{fine}/>").as_bytes()).is_ok());
        let many = format!("<a>{}</a>", "<b/>".repeat(MAX_ELEMENTS));
        assert_eq!(
            parse(many.as_bytes()).map(|_| ()),
            Err("the body holds more than 4096 elements".to_owned())
        );
    }

    /// UserMetadata only when set, MaxMessageSizeInKilobytes only at the api-versions that
    /// have it: the SDKs read what is left out as unset.
    #[test]
    fn optional_properties_are_written_only_when_they_have_a_value() {
        let config = crate::config::Config::parse(
            "[broker]\nallow_anonymous = true\n[[queues]]\nname = \"q\"\n\
             user_metadata = \"<mine>\"\n[[queues]]\nname = \"plain\"\n",
            "t.toml",
        )
        .expect("valid");
        let times = Times {
            created_ms: 0,
            updated_ms: 0,
            accessed_ms: None,
        };
        let counts = Counts::default();
        let noted = queue(&config.queues[0], &counts, &times, Some(256), "sb://h");
        assert!(
            noted.contains("<UserMetadata>&lt;mine&gt;</UserMetadata>"),
            "{noted}"
        );
        assert!(noted.contains("<MaxMessageSizeInKilobytes>256</MaxMessageSizeInKilobytes>"));
        let plain = queue(&config.queues[1], &counts, &times, None, "sb://h");
        assert!(!plain.contains("UserMetadata"), "{plain}");
        assert!(!plain.contains("MaxMessageSizeInKilobytes"), "{plain}");
    }

    /// The `QueueDescription` of the first queue `queues` (config file text) declares, created
    /// and updated at the epoch, last accessed at `accessed_ms`, in namespace `sb://h`.
    fn first_queue(queues: &str, accessed_ms: Option<i64>) -> String {
        let text = format!("[broker]\nallow_anonymous = true\n{queues}");
        let config = crate::config::Config::parse(&text, "t.toml").expect("valid");
        let times = Times {
            created_ms: 0,
            updated_ms: 0,
            accessed_ms,
        };
        queue(
            &config.queues[0],
            &Counts::default(),
            &times,
            None,
            "sb://h",
        )
    }

    /// `AccessedAt` is Service Bus's zero date until a client uses the entity, then when it
    /// last did (the Go client's suite expects the zero date on a fresh entity).
    #[test]
    fn accessed_at_is_the_zero_date_until_a_client_uses_the_entity() {
        let accessed = |accessed_ms| first_queue("[[queues]]\nname = \"q\"\n", accessed_ms);
        let fresh = accessed(None);
        assert!(
            fresh.contains("<AccessedAt>0001-01-01T00:00:00Z</AccessedAt>"),
            "{fresh}"
        );
        let used = accessed(Some(1_700_000_000_123));
        assert!(
            used.contains("<AccessedAt>2023-11-14T22:13:20.123Z</AccessedAt>"),
            "{used}"
        );
    }

    /// A forwarding target reads back as Service Bus writes it: an address as given (the Go
    /// client sends `https://`), a name as its `sb://` address in the namespace dialled.
    #[test]
    fn forwarding_targets_are_written_back_as_given() {
        let described = first_queue(
            "[[queues]]\nname = \"q\"\nforward_to = \"https://ns.example/out\"\n\
             forward_dead_lettered_messages_to = \"out\"\n[[queues]]\nname = \"out\"\n",
            None,
        );
        for element in [
            "<ForwardTo>https://ns.example/out</ForwardTo>",
            "<ForwardDeadLetteredMessagesTo>sb://h/out</ForwardDeadLetteredMessagesTo>",
        ] {
            assert!(described.contains(element), "{element} in {described}");
        }
    }

    /// An entity's authorization rules read back as Service Bus writes them: rights, name
    /// and keys, without `CreatedTime` or `ModifiedTime` (the Go client compares the rules it
    /// sent with those it reads back).
    #[test]
    fn authorization_rules_carry_no_times() {
        let described = first_queue(
            "[[queues]]\nname = \"q\"\n[[queues.shared_access_policies]]\nname = \"writer\"\n\
             key = \"k\"\nrights = [\"Send\"]\n",
            None,
        );
        assert!(
            described.contains(
                "<Rights><AccessRights>Send</AccessRights></Rights><KeyName>writer</KeyName>"
            ),
            "{described}"
        );
        assert!(!described.contains("CreatedTime"), "{described}");
        assert!(!described.contains("ModifiedTime"), "{described}");
    }
}
