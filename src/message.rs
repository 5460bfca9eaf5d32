//! Message bytes without decoding bodies: a section scanner, the Service Bus batch unpacker and
//! the header/annotation splice applied on delivery (design.md D3).
//!
//! A stored message is the bytes the client sent, its sections put in AMQP's order when they
//! came in another. On delivery the broker writes the `header`, `delivery-annotations` and
//! `message-annotations` sections anew (the client's annotations kept, but for the keys the
//! broker sets) and passes every other section through byte for byte.

use std::ops::Range;

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{ApplicationProperties, MessageId, Properties};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use uuid::Uuid;

use crate::filter::{IdType, MessageView, SystemProperty, Value as FilterValue};

use crate::encoding::{
    byte_at, check_item, check_value, read_u32, read_u64, value_len, EncodingError,
};
use crate::wire::annotation;

/// Message annotations that only the broker writes, per delivery: a sender's are never passed
/// on (a received message sent again carries its old lock's end and its state).
const PER_DELIVERY_KEYS: [&str; 2] = [annotation::LOCKED_UNTIL, annotation::MESSAGE_STATE];
/// Delivery annotation carrying the lock token (Service Bus `x-opt-lock-token`).
const LOCK_TOKEN_KEY: &str = "x-opt-lock-token";
/// Message annotation asking for a scheduled enqueue (a timestamp).
const SCHEDULED_ENQUEUE_TIME_KEY: &str = "x-opt-scheduled-enqueue-time";
/// Message annotation of a JMS delivery delay (Qpid JMS: the absolute time, a long of ms since
/// the Unix epoch): a scheduled enqueue time unless the message names one itself.
const DELIVERY_TIME_KEY: &str = "x-opt-delivery-time";
/// Message annotation with the partition key (a string).
const PARTITION_KEY_KEY: &str = "x-opt-partition-key";
/// How a refusal names the session id a message carries.
const SESSION_ID_FIELD: &str = "properties.group-id (the SessionId)";
/// How a refusal names the partition key a message carries.
const PARTITION_KEY_FIELD: &str = "message annotation x-opt-partition-key (the PartitionKey)";
/// The most characters of a message id or partition key (Service Bus's quota).
pub const MAX_ID_CHARS: usize = 128;
/// Index of `message-id` in the properties list (AMQP 1.0 §3.2.4).
const MESSAGE_ID_FIELD: usize = 0;
/// Index of `absolute-expiry-time` in the properties list (AMQP 1.0 §3.2.4).
const ABSOLUTE_EXPIRY_TIME_FIELD: usize = 8;
/// Index of `group-id` (the Service Bus session id) in the properties list.
const GROUP_ID_FIELD: usize = 10;
/// Index of `creation-time` in the properties list.
const CREATION_TIME_FIELD: usize = 9;

/// Section descriptor codes (AMQP 1.0 §3.2).
mod code {
    pub const HEADER: u8 = 0x70;
    pub const DELIVERY_ANNOTATIONS: u8 = 0x71;
    pub const MESSAGE_ANNOTATIONS: u8 = 0x72;
    pub const PROPERTIES: u8 = 0x73;
    pub const APPLICATION_PROPERTIES: u8 = 0x74;
    pub const DATA: u8 = 0x75;
    pub const AMQP_SEQUENCE: u8 = 0x76;
    pub const AMQP_VALUE: u8 = 0x77;
    pub const FOOTER: u8 = 0x78;
}

/// The message format of an Azure Service Bus batch: one encoded message per `data` section.
pub const BATCH_MESSAGE_FORMAT: u32 = 0x8001_3700;

/// Why message bytes could not be understood.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageError {
    /// A value is malformed: it runs past the message, starts with an invalid type code, or
    /// nests too deep.
    #[error(transparent)]
    Encoding(#[from] EncodingError),
    /// A top-level value that is not a described message section.
    #[error("value at byte {0} is not a message section")]
    NotASection(usize),
    /// A section descriptor outside the message section range.
    #[error("unknown message section descriptor at byte {0}")]
    UnknownSection(usize),
    /// The header or message-annotations section does not decode.
    #[error("malformed {0} section")]
    Malformed(&'static str),
    /// An application-properties key that is not a string.
    #[error("application-properties keys must be strings; key {0} is not")]
    NonStringKey(usize),
    /// An application-properties key or value whose text is not valid Unicode.
    #[error("application-properties entry {0} holds text that is not valid Unicode")]
    NotUtf8(usize),
    /// An application-properties value that is a list, map, array or described value.
    #[error("application-properties values must be simple types; value {0} is not")]
    NotSimple(usize),
    /// A body section of another kind than the body before it, or a second `amqp-value`.
    #[error("body section at byte {0} does not continue the body before it (AMQP 1.0 §3.2: a body is one or more data sections, one or more amqp-sequence sections, or one amqp-value section)")]
    MixedBody(usize),
    /// A field Service Bus reads as text (the SessionId, the PartitionKey) that is neither
    /// null nor a string of valid Unicode.
    #[error("{0} must be a string of valid Unicode")]
    NotText(&'static str),
    /// A message id or partition key longer than Service Bus allows.
    #[error("{0} has {1} characters; Service Bus allows at most {MAX_ID_CHARS}")]
    TooLong(&'static str, usize),
    /// A message without any section.
    #[error("empty message")]
    Empty,
    /// A batch whose body holds something other than `data` sections.
    #[error("batch message section {0} is not a data section")]
    BatchNotData(usize),
}

/// One section of a message: its descriptor code and its byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Descriptor code (`0x70` header … `0x78` footer).
    pub code: u8,
    /// Where the whole section (descriptor included) lies.
    pub range: Range<usize>,
}

/// Splits message bytes into sections, checking that every value is well formed.
///
/// # Errors
/// Returns a [`MessageError`] naming the offset of the first malformed byte.
pub fn scan_sections(bytes: &[u8]) -> Result<Vec<Section>, MessageError> {
    let sections = sections(bytes).collect::<Result<Vec<_>, _>>()?;
    if sections.is_empty() {
        return Err(MessageError::Empty);
    }
    Ok(sections)
}

/// The sections of message bytes one by one, each checked to be well formed; after an error,
/// nothing more.
fn sections(bytes: &[u8]) -> impl Iterator<Item = Result<Section, MessageError>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        let section = section_code(bytes, at).and_then(|code| {
            let end = at + value_len(bytes, at)?;
            Ok(Section {
                code,
                range: at..end,
            })
        });
        at = match &section {
            Ok(section) => section.range.end,
            Err(_) => bytes.len(),
        };
        Some(section)
    })
}

/// Where a section belongs in AMQP's order (§3.2): header, delivery-annotations,
/// message-annotations, properties, application-properties, the body, footer.
fn rank(code: u8) -> usize {
    match code {
        code::DATA | code::AMQP_SEQUENCE | code::AMQP_VALUE => BODY_RANK,
        code::FOOTER => BODY_RANK + 1,
        other => usize::from(other - code::HEADER),
    }
}

/// The rank of every body section.
const BODY_RANK: usize = 5;

/// The message's sections in AMQP's order, as Service Bus reads them: in any order (the
/// Python SDK writes delivery-annotations after the footer), a later copy of a header,
/// annotations, properties or footer replacing an earlier one. `None` when the bytes are in
/// that order already, as every other client sends them. The body sections keep their order.
///
/// # Errors
/// A body that mixes kinds or holds two `amqp-value` sections: AMQP gives it no meaning.
fn in_amqp_order(bytes: &Bytes, sections: &[Section]) -> Result<Option<Bytes>, MessageError> {
    let mut body_kind = None;
    // Where the last copy of each section other than the body lies.
    let mut last = [None; BODY_RANK + 2];
    let mut ordered = true;
    let mut previous_rank = 0;
    for (index, section) in sections.iter().enumerate() {
        let rank = rank(section.code);
        if rank == BODY_RANK {
            if body_kind.is_some_and(|kind| kind != section.code || kind == code::AMQP_VALUE) {
                return Err(MessageError::MixedBody(section.range.start));
            }
            body_kind = Some(section.code);
        } else {
            ordered &= last[rank].is_none();
            last[rank] = Some(index);
        }
        ordered &= rank >= previous_rank;
        previous_rank = rank;
    }
    if ordered {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(bytes.len());
    for rank_wanted in 0..last.len() {
        for (index, section) in sections.iter().enumerate() {
            let rank = rank(section.code);
            if rank == rank_wanted && (rank == BODY_RANK || last[rank] == Some(index)) {
                out.extend_from_slice(&bytes[section.range.clone()]);
            }
        }
    }
    Ok(Some(Bytes::from(out)))
}

/// What the broker reads from a message as it arrives; the bytes themselves are kept as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// The encoded message as the client sent it, its sections in AMQP's order.
    pub bytes: Bytes,
    /// The message's time to live in milliseconds: `header.ttl`, or for one longer than a
    /// `uint` holds (`header.ttl` 2^32 - 1) `absolute-expiry-time` - `creation-time` (see
    /// [`time_to_live`]).
    pub ttl_ms: Option<i64>,
    /// Message annotation `x-opt-scheduled-enqueue-time`, in ms since the Unix epoch.
    pub scheduled_ms: Option<i64>,
    /// What a topic's rules read of the message ([`view`]); read only for topics.
    pub view: Option<Box<MessageView>>,
    /// `properties.group-id`: the message's session.
    pub session_id: Option<String>,
    /// `properties.message-id` as the sender encoded it, when the sender set one (duplicate
    /// detection keys on it).
    pub message_id: Option<Bytes>,
    /// Message annotation `x-opt-partition-key`: where a partitioned entity stores it.
    pub partition_key: Option<String>,
}

/// A stored message read again (a scheduled one activated, one forwarded): what [`inspect`]
/// reads, or the bytes alone should they no longer read (they did when stored).
pub fn stored_arrival(bytes: Bytes) -> Arrival {
    inspect(bytes.clone()).unwrap_or_else(|_| Arrival::bare(bytes))
}

impl Arrival {
    /// A message as nothing but its bytes: no time to live, schedule, view, session or id.
    pub fn bare(bytes: Bytes) -> Arrival {
        Arrival {
            bytes,
            ttl_ms: None,
            scheduled_ms: None,
            view: None,
            session_id: None,
            message_id: None,
            partition_key: None,
        }
    }
}

/// Checks a single message (sections scan; the header, the annotations and the properties
/// decode, so that the splice on delivery cannot fail later), puts its sections in AMQP's
/// order (see `in_amqp_order`) and reads what the broker needs.
///
/// # Errors
/// Returns the first problem found.
pub fn inspect(bytes: Bytes) -> Result<Arrival, MessageError> {
    let mut sections = scan_sections(&bytes)?;
    let bytes = match in_amqp_order(&bytes, &sections)? {
        Some(reordered) => {
            sections = scan_sections(&reordered)?;
            reordered
        }
        None => bytes,
    };
    let mut arrival = Arrival::bare(bytes);
    // Everything but the body is read again later (the splice, properties to modify, other
    // clients): it must be well formed to every depth. The sections read here are, item by
    // item, as they are read.
    let checked = Items::Checked;
    let mut header_ttl = None;
    let mut lifetime = None;
    // Where the footer has a string key: its constructor's offset in the message.
    let mut footer_string_keys = Vec::new();
    for section in &sections {
        let raw = &arrival.bytes[section.range.clone()];
        match section.code {
            code::HEADER => header_ttl = read_header(raw, checked)?.ttl,
            // Passed on to the receiver, so a map it must be (its keys as they come: Service
            // Bus reads them so).
            code::DELIVERY_ANNOTATIONS => {
                map_entries(raw, "delivery-annotations", checked)?;
            }
            code::MESSAGE_ANNOTATIONS => {
                for (key, value) in annotation_entries(raw, "message-annotations", checked)? {
                    match symbol_name(key) {
                        Some(name) if name == SCHEDULED_ENQUEUE_TIME_KEY.as_bytes() => {
                            arrival.scheduled_ms = read_time(value);
                        }
                        Some(name) if name == DELIVERY_TIME_KEY.as_bytes() => {
                            arrival.scheduled_ms = arrival.scheduled_ms.or(read_time(value));
                        }
                        Some(name) if name == PARTITION_KEY_KEY.as_bytes() => {
                            check_id_length(PARTITION_KEY_KEY, value)?;
                            // The Python SDK sends back a received message's partition key
                            // as binary (it reads strings as bytes): taken as its text.
                            arrival.partition_key = text_field(PARTITION_KEY_FIELD, value, true)?;
                        }
                        _ => {}
                    }
                }
            }
            code::PROPERTIES => {
                let fields = list_fields(raw, "properties", checked)?;
                if let Some(id) = fields.get(MESSAGE_ID_FIELD) {
                    check_id_length("message-id", id)?;
                }
                arrival.session_id = match fields.get(GROUP_ID_FIELD) {
                    Some(group_id) => text_field(SESSION_ID_FIELD, group_id, false)?,
                    None => None,
                };
                arrival.message_id = fields
                    .get(MESSAGE_ID_FIELD)
                    .filter(|id| **id != [0x40])
                    .map(|id| arrival.bytes.slice_ref(id));
                let time = |index: usize| fields.get(index).and_then(|raw| read_time(raw));
                lifetime = time(CREATION_TIME_FIELD).zip(time(ABSOLUTE_EXPIRY_TIME_FIELD));
            }
            code::APPLICATION_PROPERTIES => {
                // String keys and simple values only (AMQP 1.0 §3.2.5), as Service Bus takes.
                for (index, (key, value)) in map_entries(raw, "application-properties", checked)?
                    .into_iter()
                    .enumerate()
                {
                    if !matches!(key[0], 0xa1 | 0xb1) {
                        return Err(MessageError::NonStringKey(index));
                    }
                    if !is_valid_text(key) || !is_valid_text(value) {
                        return Err(MessageError::NotUtf8(index));
                    }
                    if matches!(
                        value[0],
                        0x00 | 0x45 | 0xc0 | 0xc1 | 0xd0 | 0xd1 | 0xe0 | 0xf0
                    ) {
                        return Err(MessageError::NotSimple(index));
                    }
                }
            }
            code::FOOTER => {
                check_value(raw, 0)?;
                // Annotations, keyed by symbols (AMQP 1.0 §3.2.10). The Java SDK writes its
                // footer's keys as strings and reads them back as symbols: Service Bus hands
                // them out as symbols, so they are stored so.
                if let Ok(entries) = map_entries(raw, "footer", Items::Measured) {
                    let start = section.range.start;
                    footer_string_keys.extend(
                        (entries.iter())
                            .filter(|(key, _)| matches!(key[0], 0xa1 | 0xb1))
                            .map(|(key, _)| {
                                start + (key.as_ptr() as usize - raw.as_ptr() as usize)
                            }),
                    );
                }
            }
            _ => {}
        }
    }
    if !footer_string_keys.is_empty() {
        arrival.bytes = with_symbol_keys(&arrival.bytes, &footer_string_keys);
    }
    arrival.ttl_ms = time_to_live(header_ttl, lifetime);
    if arrival.message_id.is_none() {
        arrival.bytes = with_assigned_message_id(&arrival.bytes, &sections)?;
    }
    Ok(arrival)
}

/// The message with the strings whose constructors lie at `at` turned into symbols of the
/// same text: `str8-utf8` and `str32-utf8` (0xa1, 0xb1) become `sym8` and `sym32` (0xa3,
/// 0xb3), which are laid out alike, so nothing moves.
fn with_symbol_keys(bytes: &Bytes, at: &[usize]) -> Bytes {
    let mut out = bytes.to_vec();
    for &offset in at {
        out[offset] += 2;
    }
    Bytes::from(out)
}

/// Refuses an id (an encoded value) that is a string of more than [`MAX_ID_CHARS`]
/// characters; ids of other types pass.
fn check_id_length(what: &'static str, encoded: &[u8]) -> Result<(), MessageError> {
    let chars = string_text(encoded)
        .and_then(|text| std::str::from_utf8(text).ok())
        .map_or(0, |text| text.chars().count());
    match chars > MAX_ID_CHARS {
        true => Err(MessageError::TooLong(what, chars)),
        false => Ok(()),
    }
}

/// The session id (`properties.group-id`) of a stored message, which [`inspect`] checked.
pub fn session_id(bytes: &[u8]) -> Option<String> {
    let sections = scan_sections(bytes).ok()?;
    let properties = sections.iter().find(|s| s.code == code::PROPERTIES)?;
    group_id(
        &list_fields(
            &bytes[properties.range.clone()],
            "properties",
            Items::Measured,
        )
        .ok()?,
    )
}

/// The `group-id` of a properties list's fields, when it is a string.
fn group_id(fields: &[&[u8]]) -> Option<String> {
    let text = string_text(fields.get(GROUP_ID_FIELD)?)?;
    std::str::from_utf8(text).ok().map(str::to_owned)
}

/// Unpacks a Service Bus batch (`message-format 0x80013700`): every `data` section of the
/// envelope holds one whole encoded message. Envelope header and properties are dropped.
///
/// # Errors
/// Fails when the envelope or any inner message is malformed; a batch is all or nothing.
pub fn unpack_batch(envelope: &Bytes) -> Result<Vec<Arrival>, MessageError> {
    let mut messages = Vec::new();
    for (index, section) in scan_sections(envelope)?.iter().enumerate() {
        match section.code {
            code::HEADER
            | code::DELIVERY_ANNOTATIONS
            | code::MESSAGE_ANNOTATIONS
            | code::PROPERTIES
            | code::APPLICATION_PROPERTIES
            | code::FOOTER => {}
            code::DATA => {
                messages.push(inspect(data_section_payload(envelope, section)?)?);
            }
            _ => return Err(MessageError::BatchNotData(index)),
        }
    }
    if messages.is_empty() {
        return Err(MessageError::Empty);
    }
    Ok(messages)
}

/// A message's time to live from `header.ttl` and its (`creation-time`,
/// `absolute-expiry-time`): the header's, unless that is the largest a `uint` holds
/// (2^32 - 1 ms, 49.7 days) and the two times are further apart. The SDKs send a longer time
/// to live that way (the JavaScript SDK's `toRheaMessage`, Java's since PR 11354); taking the
/// header alone would expire a 100-day message after 49.7 days.
fn time_to_live(header_ttl: Option<u32>, lifetime: Option<(i64, i64)>) -> Option<i64> {
    let ttl = i64::from(header_ttl?);
    match lifetime {
        Some((created, expires)) if ttl == i64::from(u32::MAX) => {
            Some(ttl.max(expires.saturating_sub(created)))
        }
        _ => Some(ttl),
    }
}

/// The broker's view of a delivery: what it writes into the header and the annotations.
#[derive(Debug, Clone)]
pub struct DeliveryStamp {
    /// Zero-based `header.delivery-count`.
    pub delivery_count: u32,
    /// Annotations the broker adds or overwrites (`x-opt-sequence-number` …).
    pub annotations: Vec<(&'static str, Value)>,
    /// The lock token, written as delivery annotation `x-opt-lock-token` (peek-lock only).
    pub lock_token: Option<uuid::Uuid>,
    /// A pre-settled (receive-and-delete) delivery: it carries an empty delivery-annotations
    /// map, as Service Bus sends it.
    pub presettled: bool,
    /// The effective time to live, written into `header.ttl` (absent: the header's is kept).
    pub ttl_ms: Option<u32>,
    /// When the message expires, written into `properties.absolute-expiry-time` when its
    /// sender set none (absent, or a sender's own: the properties are kept as sent, as
    /// Service Bus keeps them).
    pub expires_ms: Option<i64>,
}

/// Builds the outgoing message: a fresh header and message-annotations, then every section
/// after them untouched, in one buffer (a delivery is spliced for every message sent).
/// `prefix` is room for the sections written anew, kept by the caller between deliveries:
/// the message is then one allocation of its exact size.
///
/// # Errors
/// Fails only on bytes that [`inspect`] would have refused.
pub fn splice(
    stored: &Bytes,
    stamp: &DeliveryStamp,
    prefix: &mut Vec<u8>,
) -> Result<Bytes, MessageError> {
    let mut header = HeaderFields::default();
    let mut delivery_annotations: Vec<Entry> = Vec::new();
    let mut annotations: Vec<Entry> = Vec::new();
    // The first section the broker passes on (or the message's end), and a properties
    // section right there.
    let mut tail_start = stored.len();
    let mut properties = None;
    for section in sections(stored) {
        let section = section?;
        let raw = &stored[section.range.clone()];
        match section.code {
            code::HEADER => header = read_header(raw, Items::Measured)?,
            // Checked on arrival only since they are passed on: older stored messages may hold
            // ones that do not read, which are dropped rather than the message.
            code::DELIVERY_ANNOTATIONS => {
                delivery_annotations =
                    map_entries(raw, "delivery-annotations", Items::Measured).unwrap_or_default()
            }
            code::MESSAGE_ANNOTATIONS => {
                annotations = annotation_entries(raw, "message-annotations", Items::Measured)?
            }
            other => {
                tail_start = section.range.start;
                properties = (other == code::PROPERTIES).then_some(section.range);
                break;
            }
        }
    }
    if let Some(ttl) = stamp.ttl_ms {
        header.ttl = Some(ttl);
    }
    prefix.clear();
    let out = prefix;
    write_header(out, &header, stamp.delivery_count);
    // The sender's delivery annotations reach the receiver, as in Service Bus; a lock token
    // is only ever the broker's.
    delivery_annotations.retain(|(key, _)| symbol_name(key) != Some(LOCK_TOKEN_KEY.as_bytes()));
    if let Some(token) = stamp.lock_token {
        let mut value = [0x98; 17];
        value[1..].copy_from_slice(token.as_bytes());
        let entry = [(LOCK_TOKEN_KEY, AnnotationValue::Encoded(&value))];
        write_annotations(
            out,
            code::DELIVERY_ANNOTATIONS,
            entry,
            &delivery_annotations,
        )?;
    } else if stamp.presettled || !delivery_annotations.is_empty() {
        write_annotations(out, code::DELIVERY_ANNOTATIONS, [], &delivery_annotations)?;
    }
    // The client's own entries follow the broker's, but for the keys the broker sets, and
    // those that describe one delivery only (a received message sent again carries them).
    annotations.retain(|(key, _)| {
        let name = symbol_name(key);
        let ours = (stamp.annotations.iter().map(|(ours, _)| *ours)).chain(PER_DELIVERY_KEYS);
        !ours.into_iter().any(|ours| name == Some(ours.as_bytes()))
    });
    let ours = (stamp.annotations.iter()).map(|(key, value)| (*key, AnnotationValue::Value(value)));
    write_annotations(out, code::MESSAGE_ANNOTATIONS, ours, &annotations)?;
    if let Some(expires_ms) = stamp.expires_ms {
        let raw = properties.as_ref().map(|range| &stored[range.clone()]);
        if !sets_expiry(raw)? {
            write_properties_with_expiry(out, raw, expires_ms)?;
            if let Some(range) = properties {
                tail_start = range.end;
            }
        }
    }
    let tail = &stored[tail_start..];
    let mut whole = Vec::with_capacity(out.len() + tail.len());
    whole.extend_from_slice(out);
    whole.extend_from_slice(tail);
    // Exactly full, so it becomes `Bytes` without another allocation.
    Ok(Bytes::from(whole))
}

/// What the annotations written anew usually take: a restamped message's buffer is made this
/// much larger than the sections it keeps.
const SPLICED_PREFIX_ROOM: usize = 256;

/// The fields of an encoded list section (header, properties), each as its encoded bytes.
fn list_fields<'a>(
    section: &'a [u8],
    what: &'static str,
    items: Items,
) -> Result<Vec<&'a [u8]>, MessageError> {
    // list0, list8, list32.
    compound_items(section, what, [0x45, 0xc0, 0xd0], items)
}

/// How [`compound_items`] takes each item of a section: measured only (a stored message,
/// checked when it arrived), or checked to every depth (a message arriving), which makes a
/// walk of the whole section needless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Items {
    Measured,
    Checked,
}

/// One map entry as the encodings of its key and its value.
type Entry<'a> = (&'a [u8], &'a [u8]);

/// The entries of an encoded map section as (key, value) encodings.
fn map_entries<'a>(
    section: &'a [u8],
    what: &'static str,
    items: Items,
) -> Result<Vec<Entry<'a>>, MessageError> {
    // null (no entries), map8, map32.
    let items = compound_items(section, what, [0x40, 0xc1, 0xd1], items)?;
    if items.len() % 2 != 0 {
        return Err(MessageError::Malformed(what));
    }
    Ok(items
        .chunks_exact(2)
        .map(|pair| (pair[0], pair[1]))
        .collect())
}

/// The entries of an encoded annotations section as (key, value) encodings. Keys must be
/// symbols or ulongs (AMQP 1.0 §3.2.10); values are only measured, never decoded.
fn annotation_entries<'a>(
    section: &'a [u8],
    what: &'static str,
    items: Items,
) -> Result<Vec<Entry<'a>>, MessageError> {
    let entries = map_entries(section, what, items)?;
    match entries
        .iter()
        .all(|(key, _)| matches!(key[0], 0xa3 | 0xb3 | 0x80 | 0x53 | 0x44))
    {
        true => Ok(entries),
        false => Err(MessageError::Malformed(what)),
    }
}

/// The items of the list or map that follows a section's descriptor, each as its encoding.
/// `codes` are the constructors allowed: the empty one, the 8-bit one and the 32-bit one. A
/// count that does not fit the declared size, or items that do not fill it, are refused as
/// [`check_value`] refuses them.
fn compound_items<'a>(
    section: &'a [u8],
    what: &'static str,
    [empty, short, long]: [u8; 3],
    items_are: Items,
) -> Result<Vec<&'a [u8]>, MessageError> {
    let value_at = 1 + value_len(section, 1)?;
    let code = byte_at(section, value_at)?;
    let data_at = value_at + 1;
    let width = match code {
        _ if code == empty => return Ok(Vec::new()),
        _ if code == short => 1,
        _ if code == long => 4,
        _ => return Err(MessageError::Malformed(what)),
    };
    let (size, count) = match width {
        1 => (
            byte_at(section, data_at)?.into(),
            byte_at(section, data_at + 1)?.into(),
        ),
        _ => (
            read_u32(section, data_at)? as usize,
            read_u32(section, data_at + 4)? as usize,
        ),
    };
    let kind = if short == 0xc1 { "map" } else { "list" };
    let mismatch = |count| {
        MessageError::Encoding(EncodingError::CountMismatch {
            kind,
            at: data_at,
            count,
            size,
        })
    };
    if count > size || (kind == "map" && count % 2 != 0) {
        return Err(mismatch(count));
    }
    let mut at = data_at + 2 * width;
    let mut items = Vec::with_capacity(count.min(16));
    for _ in 0..count {
        if at >= section.len() {
            return Err(mismatch(count));
        }
        let len = match items_are {
            Items::Measured => value_len(section, at)?,
            Items::Checked => check_item(section, at)?,
        };
        items.push(&section[at..at + len]);
        at += len;
    }
    if at != section.len() {
        return Err(mismatch(count));
    }
    Ok(items)
}

/// Whether an encoded value, if it is text (a string, a symbol or a char), holds valid
/// Unicode, which decoding it later needs; other values pass.
fn is_valid_text(encoded: &[u8]) -> bool {
    let text = match encoded.first() {
        Some(0xa1 | 0xa3) => encoded.get(2..),
        Some(0xb1 | 0xb3) => encoded.get(5..),
        Some(0x73) => return read_u32(encoded, 1).ok().and_then(char::from_u32).is_some(),
        _ => return true,
    };
    text.is_some_and(|text| std::str::from_utf8(text).is_ok())
}

/// The name of an encoded symbol; `None` for anything else.
fn symbol_name(encoded: &[u8]) -> Option<&[u8]> {
    match encoded.first()? {
        0xa3 => encoded.get(2..),
        0xb3 => encoded.get(5..),
        _ => None,
    }
}

/// The format codes of symbols (short, long).
const SYMBOL_CODES: (u8, u8) = (0xa3, 0xb3);
/// The format codes of strings (short, long).
const STRING_CODES: (u8, u8) = (0xa1, 0xb1);

/// `name` encoded as a symbol or a string, by `codes`.
fn text(codes: (u8, u8), name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 5);
    write_text(&mut out, codes, name);
    out
}

/// Writes `name` as a symbol or a string, by `codes` (short, long).
fn write_text(out: &mut Vec<u8>, (short, long): (u8, u8), name: &str) {
    match u8::try_from(name.len()) {
        Ok(len) => out.extend_from_slice(&[short, len]),
        Err(_) => {
            out.push(long);
            out.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_be_bytes());
        }
    }
    out.extend_from_slice(name.as_bytes());
}

/// The text of an encoded string; `None` for anything else.
/// An encoded field read as text: `None` for null, the text of a string (or, when
/// `binary_too`, of a binary).
///
/// # Errors
/// [`MessageError::NotText`], naming the field as `what`, for any other value or text that is
/// not valid Unicode.
fn text_field(
    what: &'static str,
    encoded: &[u8],
    binary_too: bool,
) -> Result<Option<String>, MessageError> {
    let bytes = match encoded.first() {
        Some(0x40) => return Ok(None),
        Some(0xa0) if binary_too => encoded.get(2..),
        Some(0xb0) if binary_too => encoded.get(5..),
        _ => string_text(encoded),
    };
    bytes
        .and_then(|text| std::str::from_utf8(text).ok())
        .map(|text| Some(text.to_owned()))
        .ok_or(MessageError::NotText(what))
}

fn string_text(encoded: &[u8]) -> Option<&[u8]> {
    match encoded.first()? {
        0xa1 => encoded.get(2..),
        0xb1 => encoded.get(5..),
        _ => None,
    }
}

/// Writes a broker annotation value (the common kinds by hand, others through serde_amqp).
fn write_value(out: &mut Vec<u8>, value: &Value) -> Result<(), MessageError> {
    match value {
        Value::Long(long) => {
            out.push(0x81);
            out.extend_from_slice(&long.to_be_bytes());
        }
        Value::Timestamp(at) => {
            out.push(0x83);
            out.extend_from_slice(&at.milliseconds().to_be_bytes());
        }
        Value::Int(int) => {
            out.push(0x71);
            out.extend_from_slice(&int.to_be_bytes());
        }
        other => out.extend_from_slice(
            &serde_amqp::to_vec(other).map_err(|_| MessageError::Malformed("annotation"))?,
        ),
    }
    Ok(())
}

/// A timestamp or long annotation value (ms since the Unix epoch).
fn read_time(value: &[u8]) -> Option<i64> {
    match value.first()? {
        0x83 | 0x81 => Some(i64::from_be_bytes(value.get(1..9)?.try_into().ok()?)),
        0x55 => Some(i64::from(*value.get(1)? as i8)),
        _ => None,
    }
}

/// The value of an annotation the broker writes.
enum AnnotationValue<'a> {
    /// A value to encode.
    Value(&'a Value),
    /// A value encoded already.
    Encoded(&'a [u8]),
}

/// Writes an annotations section (symbol keys): the broker's entries, then the kept ones as
/// they were.
fn write_annotations<'a>(
    out: &mut Vec<u8>,
    section: u8,
    ours: impl IntoIterator<Item = (&'a str, AnnotationValue<'a>)>,
    kept: &[Entry],
) -> Result<(), MessageError> {
    write_map(out, section, SYMBOL_CODES, ours, kept)
}

/// Writes a map section: the broker's entries (keys encoded by `key_codes`), then the kept
/// ones as they were; as a map8 when it fits one, else a map32.
fn write_map<'a>(
    out: &mut Vec<u8>,
    section: u8,
    key_codes: (u8, u8),
    ours: impl IntoIterator<Item = (&'a str, AnnotationValue<'a>)>,
    kept: &[Entry],
) -> Result<(), MessageError> {
    out.extend_from_slice(&[0x00, 0x53, section, 0xd1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let map_at = out.len() - 9;
    let mut count = 2 * kept.len();
    for (key, value) in ours {
        count += 2;
        write_text(out, key_codes, key);
        match value {
            AnnotationValue::Encoded(encoded) => out.extend_from_slice(encoded),
            AnnotationValue::Value(value) => write_value(out, value)?,
        }
    }
    for (key, value) in kept {
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }
    let length = out.len() - map_at - 9;
    match (u8::try_from(length + 1), u8::try_from(count)) {
        (Ok(size), Ok(count)) => {
            out.splice(map_at..map_at + 9, [0xc1, size, count]);
        }
        _ => {
            let size = u32::try_from(length + 4).unwrap_or(u32::MAX);
            let count = u32::try_from(count).unwrap_or(u32::MAX);
            out[map_at + 1..map_at + 5].copy_from_slice(&size.to_be_bytes());
            out[map_at + 5..map_at + 9].copy_from_slice(&count.to_be_bytes());
        }
    }
    Ok(())
}

/// The fields of a message header the broker keeps (AMQP 1.0 §3.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct HeaderFields {
    durable: Option<bool>,
    priority: Option<u8>,
    ttl: Option<u32>,
    first_acquirer: Option<bool>,
}

/// Reads a header section, field by field with the types AMQP gives them.
fn read_header(section: &[u8], items: Items) -> Result<HeaderFields, MessageError> {
    let malformed = MessageError::Malformed("header");
    let fields = list_fields(section, "header", items)?;
    if fields.len() > 5 {
        return Err(malformed);
    }
    let field = |index: usize| fields.get(index).copied().unwrap_or(&[0x40]);
    let boolean = |raw: &[u8]| match raw {
        [0x40] => Ok(None),
        [0x42] | [0x56, 0x00] => Ok(Some(false)),
        [0x41] | [0x56, 0x01] => Ok(Some(true)),
        _ => Err(MessageError::Malformed("header")),
    };
    let uint = |raw: &[u8]| match raw {
        [0x40] => Ok(None),
        [0x43] => Ok(Some(0)),
        [0x52, small] => Ok(Some(u32::from(*small))),
        [0x70, a, b, c, d] => Ok(Some(u32::from_be_bytes([*a, *b, *c, *d]))),
        _ => Err(MessageError::Malformed("header")),
    };
    let priority = match field(1) {
        [0x40] => None,
        [0x50, priority] => Some(*priority),
        _ => return Err(malformed),
    };
    uint(field(4))?;
    Ok(HeaderFields {
        durable: boolean(field(0))?,
        priority,
        ttl: uint(field(2))?,
        first_acquirer: boolean(field(3))?,
    })
}

/// Whether a properties section (if any) sets `absolute-expiry-time`.
fn sets_expiry(section: Option<&[u8]>) -> Result<bool, MessageError> {
    let Some(raw) = section else {
        return Ok(false);
    };
    let fields = list_fields(raw, "properties", Items::Measured)?;
    Ok(fields
        .get(ABSOLUTE_EXPIRY_TIME_FIELD)
        .is_some_and(|field| *field != [0x40]))
}

/// Writes a properties section (the stored one, or an empty one) with `absolute-expiry-time`
/// set to `expires_ms`; every other field is kept byte for byte.
fn write_properties_with_expiry(
    out: &mut Vec<u8>,
    section: Option<&[u8]>,
    expires_ms: i64,
) -> Result<(), MessageError> {
    let mut timestamp = [0x83; 9];
    timestamp[1..].copy_from_slice(&expires_ms.to_be_bytes());
    write_properties_with(out, section, ABSOLUTE_EXPIRY_TIME_FIELD, &timestamp)
}

/// Writes a properties section (the stored one, or an empty one) with field `index` set to
/// the encoded `value`; every other field is kept byte for byte.
fn write_properties_with(
    out: &mut Vec<u8>,
    section: Option<&[u8]>,
    index: usize,
    value: &[u8],
) -> Result<(), MessageError> {
    let fields = properties_with(section, index, value)?;
    write_properties(out, &fields);
    Ok(())
}

/// The fields of a properties section (the stored one, or an empty one) with field `index`
/// set to the encoded `value`.
fn properties_with<'a>(
    section: Option<&'a [u8]>,
    index: usize,
    value: &'a [u8],
) -> Result<Vec<&'a [u8]>, MessageError> {
    let mut fields = match section {
        Some(raw) => list_fields(raw, "properties", Items::Measured)?,
        None => Vec::new(),
    };
    if fields.len() <= index {
        fields.resize(index + 1, &[0x40]);
    }
    fields[index] = value;
    Ok(fields)
}

/// Bytes of the properties section [`write_properties`] writes: descriptor, list32 header
/// (size and count), fields.
fn properties_len(fields: &[&[u8]]) -> usize {
    12 + fields.iter().map(|field| field.len()).sum::<usize>()
}

/// Writes a properties section of these encoded fields (as a list32).
fn write_properties(out: &mut Vec<u8>, fields: &[&[u8]]) {
    let length = properties_len(fields) - 8;
    out.reserve(length + 8);
    out.extend_from_slice(&[0x00, 0x53, code::PROPERTIES, 0xd0]);
    out.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(
        &u32::try_from(fields.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    for field in fields {
        out.extend_from_slice(field);
    }
}

/// The message with a `message-id`, for one whose sender set none, as Service Bus assigns one
/// (a GUID in 32 hex digits): the JavaScript SDK sends none, and keys its lock renewal by it.
fn with_assigned_message_id(bytes: &Bytes, sections: &[Section]) -> Result<Bytes, MessageError> {
    let mut id = [0xa1; 34];
    id[1] = 32;
    Uuid::new_v4().simple().encode_lower(&mut id[2..]);
    with_property_field(bytes, sections, MESSAGE_ID_FIELD, &id)
}

/// The message with one field of its properties section replaced by `value` (encoded); a
/// properties section is added where the message has none.
fn with_property_field(
    bytes: &Bytes,
    sections: &[Section],
    index: usize,
    value: &[u8],
) -> Result<Bytes, MessageError> {
    let (properties, replaced) = slot(sections, code::PROPERTIES, bytes.len());
    let raw = properties.map(|section| &bytes[section.range.clone()]);
    let fields = properties_with(raw, index, value)?;
    let length = bytes.len() - replaced.len() + properties_len(&fields);
    let mut out = Vec::with_capacity(length);
    out.extend_from_slice(&bytes[..replaced.start]);
    write_properties(&mut out, &fields);
    out.extend_from_slice(&bytes[replaced.end..]);
    // Exactly full, so it becomes `Bytes` without another allocation.
    Ok(Bytes::from(out))
}

/// The section of kind `code` with its range, or none and the empty range where AMQP's order
/// puts one (`end`: the message's length).
fn slot(sections: &[Section], code: u8, end: usize) -> (Option<&Section>, Range<usize>) {
    match sections.iter().find(|section| section.code == code) {
        Some(section) => (Some(section), section.range.clone()),
        None => {
            let at = (sections.iter())
                .find(|section| section.code > code)
                .map_or(end, |section| section.range.start);
            (None, at..at)
        }
    }
}

/// A stored message with message annotations added: each of `set` replaces the message's own
/// entry of that key, each of `kept` is added only where the message has none.
///
/// # Errors
/// When the stored message does not scan or its message-annotations do not read.
pub fn annotate(
    stored: &Bytes,
    set: &[(&'static str, Value)],
    kept: &[(&'static str, Value)],
) -> Result<Bytes, MessageError> {
    rewrite_annotations(stored, set, kept, &[])
}

/// A stored message without its message annotation `key` (unchanged when it has none).
///
/// # Errors
/// When the stored message does not scan or its message-annotations do not read.
pub fn without_annotation(stored: &Bytes, key: &str) -> Result<Bytes, MessageError> {
    if annotation_text(stored, key).is_none() {
        return Ok(stored.clone());
    }
    rewrite_annotations(stored, &[], &[], &[key])
}

/// The text (a string or a symbol) a stored message's message annotations hold under `key`.
pub fn annotation_text(stored: &[u8], key: &str) -> Option<String> {
    let value = annotation_value(stored, key)?;
    let text = string_text(value).or_else(|| symbol_name(value))?;
    std::str::from_utf8(text).ok().map(str::to_owned)
}

/// The whole number (an int or a long, as the broker writes them) a stored message's message
/// annotations hold under `key`.
pub fn annotation_number(stored: &[u8], key: &str) -> Option<i64> {
    let value = annotation_value(stored, key)?;
    match *value.first()? {
        0x71 => Some(i64::from(i32::from_be_bytes(
            value.get(1..5)?.try_into().ok()?,
        ))),
        0x54 => Some(i64::from(*value.get(1)? as i8)),
        _ => read_time(value),
    }
}

/// The encoded value a stored message's message annotations hold under `key`.
fn annotation_value<'a>(stored: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let sections = scan_sections(stored).ok()?;
    let section = sections
        .iter()
        .find(|section| section.code == code::MESSAGE_ANNOTATIONS)?;
    let entries = annotation_entries(
        &stored[section.range.clone()],
        "message-annotations",
        Items::Measured,
    )
    .ok()?;
    let (_, value) =
        (entries.into_iter()).find(|(own_key, _)| symbol_name(own_key) == Some(key.as_bytes()))?;
    Some(value)
}

/// [`annotate`], and every entry of `removed` dropped.
fn rewrite_annotations(
    stored: &Bytes,
    set: &[(&'static str, Value)],
    kept: &[(&'static str, Value)],
    removed: &[&str],
) -> Result<Bytes, MessageError> {
    let sections = scan_sections(stored)?;
    let (annotations, replaced) = slot(&sections, code::MESSAGE_ANNOTATIONS, stored.len());
    let mut own = match annotations {
        Some(section) => annotation_entries(
            &stored[section.range.clone()],
            "message-annotations",
            Items::Measured,
        )?,
        None => Vec::new(),
    };
    let has = |entries: &[Entry], key: &str| {
        entries
            .iter()
            .any(|(own_key, _)| symbol_name(own_key) == Some(key.as_bytes()))
    };
    let added: Vec<_> = (kept.iter())
        .filter(|(key, _)| !has(&own, key))
        .chain(set)
        .map(|(key, value)| (*key, AnnotationValue::Value(value)))
        .collect();
    own.retain(|(key, _)| {
        let name = symbol_name(key);
        let ours = set
            .iter()
            .map(|(ours, _)| *ours)
            .chain(removed.iter().copied());
        !ours.into_iter().any(|ours| name == Some(ours.as_bytes()))
    });
    let mut out = Vec::with_capacity(stored.len() + SPLICED_PREFIX_ROOM);
    out.extend_from_slice(&stored[..replaced.start]);
    write_annotations(&mut out, code::MESSAGE_ANNOTATIONS, added, &own)?;
    out.extend_from_slice(&stored[replaced.end..]);
    Ok(Bytes::from(out))
}

/// A stored message with a system property set (or cleared, `None`) by a topic rule's
/// action: the field of the properties section it lives in.
///
/// # Errors
/// When the stored message does not scan.
pub fn set_system_property(
    stored: &Bytes,
    property: SystemProperty,
    value: Option<&str>,
) -> Result<Bytes, MessageError> {
    let (index, codes) = match property {
        SystemProperty::MessageId => (MESSAGE_ID_FIELD, STRING_CODES),
        SystemProperty::To => (2, STRING_CODES),
        SystemProperty::Subject => (3, STRING_CODES),
        SystemProperty::ReplyTo => (4, STRING_CODES),
        SystemProperty::CorrelationId => (5, STRING_CODES),
        SystemProperty::ContentType => (6, SYMBOL_CODES),
        SystemProperty::SessionId => (GROUP_ID_FIELD, STRING_CODES),
        SystemProperty::ReplyToSessionId => (12, STRING_CODES),
    };
    let encoded = value.map_or_else(|| vec![0x40], |value| text(codes, value));
    with_property_field(stored, &scan_sections(stored)?, index, &encoded)
}

/// What a topic's rules read of a message (design.md D7): its system properties and its
/// application properties, decoded once in the connection task. The sections were checked
/// by [`inspect`].
///
/// # Errors
/// When the properties or application-properties section does not decode.
pub fn view(bytes: &Bytes) -> Result<MessageView, MessageError> {
    let mut view = MessageView::default();
    for section in scan_sections(bytes)? {
        let raw = &bytes[section.range.clone()];
        match section.code {
            code::HEADER => {
                let header = read_header(raw, Items::Measured)?;
                view.durable = header.durable.unwrap_or(false);
                view.priority = header.priority;
            }
            code::PROPERTIES => {
                let properties: Properties = serde_amqp::from_slice(raw)
                    .map_err(|_| MessageError::Malformed("properties"))?;
                (view.message_id, view.message_id_type) = id_text(properties.message_id);
                (view.correlation_id, view.correlation_id_type) =
                    id_text(properties.correlation_id);
                view.user_id = properties.user_id.map(|id| id.into_vec());
                view.creation_time = properties.creation_time.map(|t| t.milliseconds());
                view.absolute_expiry_time =
                    properties.absolute_expiry_time.map(|t| t.milliseconds());
                view.group_sequence = properties.group_sequence;
                view.to = properties.to;
                view.reply_to = properties.reply_to;
                view.subject = properties.subject;
                view.session_id = properties.group_id;
                view.reply_to_session_id = properties.reply_to_group_id;
                view.content_type = properties.content_type.map(|t| t.0);
            }
            code::APPLICATION_PROPERTIES => {
                let app: ApplicationProperties = serde_amqp::from_slice(raw)
                    .map_err(|_| MessageError::Malformed("application-properties"))?;
                view.application_properties = app
                    .0
                    .iter()
                    .map(|(key, value)| (key.clone(), FilterValue::from_simple(value)))
                    .collect();
            }
            _ => {}
        }
    }
    Ok(view)
}

/// A message or correlation id as text, the way Service Bus shows it, with its AMQP type.
fn id_text(id: Option<MessageId>) -> (Option<String>, IdType) {
    let (text, kind) = match id {
        None => return (None, IdType::String),
        Some(MessageId::String(text)) => (text, IdType::String),
        Some(MessageId::Ulong(number)) => (number.to_string(), IdType::Ulong),
        Some(MessageId::Uuid(uuid)) => {
            (Uuid::from_bytes(*uuid.as_inner()).to_string(), IdType::Uuid)
        }
        Some(MessageId::Binary(bytes)) => (
            bytes.iter().map(|b| format!("{b:02x}")).collect(),
            IdType::Binary,
        ),
    };
    (Some(text), kind)
}

/// Sets application properties of a stored message (Service Bus "properties to modify" and
/// dead-letter reasons), re-encoding only that section; every other section is kept byte for
/// byte. Without an application-properties section one is inserted where AMQP puts it.
///
/// # Errors
/// Fails only on bytes that [`inspect`] would have refused.
pub fn set_application_properties(
    stored: &Bytes,
    entries: &[(String, SimpleValue)],
) -> Result<Bytes, MessageError> {
    edit_application_properties(stored, entries, &[])
}

/// A stored message with application properties set (`entries`) and removed (`remove`, names
/// compared ignoring case, as a topic rule's `REMOVE` does); the client's other entries are
/// kept byte for byte.
///
/// # Errors
/// When the stored message does not scan, or a value does not encode.
pub fn edit_application_properties(
    stored: &Bytes,
    entries: &[(String, SimpleValue)],
    remove: &[String],
) -> Result<Bytes, MessageError> {
    if entries.is_empty() && remove.is_empty() {
        return Ok(stored.clone());
    }
    let sections = scan_sections(stored)?;
    let (existing, replaced) = slot(&sections, code::APPLICATION_PROPERTIES, stored.len());
    // The client's entries are kept byte for byte (never decoded), but for the keys set here.
    let mut kept = match existing {
        Some(section) => map_entries(
            &stored[section.range.clone()],
            "application-properties",
            Items::Measured,
        )?,
        None => Vec::new(),
    };
    kept.retain(|(key, _)| {
        let name = string_text(key);
        let removed = remove
            .iter()
            .any(|gone| name.is_some_and(|name| name.eq_ignore_ascii_case(gone.as_bytes())));
        !removed
            && !entries
                .iter()
                .any(|(ours, _)| name == Some(ours.as_bytes()))
    });
    let values: Vec<(&str, Value)> = entries
        .iter()
        .map(|(key, value)| (key.as_str(), Value::from(value.clone())))
        .collect();
    let ours = (values.iter()).map(|(key, value)| (*key, AnnotationValue::Value(value)));
    let mut encoded = Vec::new();
    write_map(
        &mut encoded,
        code::APPLICATION_PROPERTIES,
        STRING_CODES,
        ours,
        &kept,
    )?;
    let mut out = Vec::with_capacity(stored.len() + encoded.len());
    out.extend_from_slice(&stored[..replaced.start]);
    out.extend_from_slice(&encoded);
    out.extend_from_slice(&stored[replaced.end..]);
    Ok(Bytes::from(out))
}

/// Writes the header section with every field written out. serde_amqp drops trailing fields
/// that hold their default, and the Python SDK then reports `delivery_count` as `None`
/// instead of 0, so the broker writes all five itself.
fn write_header(out: &mut Vec<u8>, header: &HeaderFields, delivery_count: u32) {
    // Fields the sender left out stay null, as Service Bus delivers them; the delivery count
    // is always there.
    let boolean = |value: Option<bool>| match value {
        None => 0x40,
        Some(true) => 0x41,
        Some(false) => 0x42,
    };
    // described(0x70) list8 of 5 fields: its size (patched below) counts the count byte and
    // the fields.
    out.extend_from_slice(&[0x00, 0x53, code::HEADER, 0xc0, 0, 5]);
    let size_at = out.len() - 2;
    out.push(boolean(header.durable));
    match header.priority {
        Some(priority) => out.extend_from_slice(&[0x50, priority]),
        None => out.push(0x40),
    }
    match header.ttl {
        Some(ttl) => {
            out.push(0x70);
            out.extend_from_slice(&ttl.to_be_bytes());
        }
        None => out.push(0x40),
    }
    out.push(boolean(header.first_acquirer));
    out.push(0x70);
    out.extend_from_slice(&delivery_count.to_be_bytes());
    out[size_at] = u8::try_from(out.len() - size_at - 1).unwrap_or(u8::MAX);
}

/// The binary inside a `data` section, as a zero-copy slice.
fn data_section_payload(bytes: &Bytes, section: &Section) -> Result<Bytes, MessageError> {
    let start = section.range.start;
    let value_at = start + value_len(bytes, start + 1)? + 1;
    let (header_len, len) = match bytes.get(value_at) {
        Some(0xa0) => (2, byte_at(bytes, value_at + 1)? as usize),
        Some(0xb0) => (5, read_u32(bytes, value_at + 1)? as usize),
        _ => return Err(MessageError::Malformed("data")),
    };
    let from = value_at + header_len;
    if from + len > section.range.end {
        return Err(EncodingError::Truncated {
            at: value_at,
            len: section.range.end,
        }
        .into());
    }
    Ok(bytes.slice(from..from + len))
}

/// The section code of the described value at `at`.
fn section_code(bytes: &[u8], at: usize) -> Result<u8, MessageError> {
    if byte_at(bytes, at)? != 0x00 {
        return Err(MessageError::NotASection(at));
    }
    let code = match byte_at(bytes, at + 1)? {
        0x53 => u64::from(byte_at(bytes, at + 2)?),
        0x80 => read_u64(bytes, at + 2)?,
        0x44 => 0,
        0xa3 | 0xb3 => symbol_section_code(bytes, at + 1)?,
        _ => return Err(MessageError::UnknownSection(at)),
    };
    match u8::try_from(code) {
        Ok(code @ code::HEADER..=code::FOOTER) => Ok(code),
        _ => Err(MessageError::UnknownSection(at)),
    }
}

/// Section codes written as symbolic descriptors (`amqp:header:list` …).
fn symbol_section_code(bytes: &[u8], at: usize) -> Result<u64, MessageError> {
    let len = value_len(bytes, at)?;
    let skip = if bytes[at] == 0xa3 { 2 } else { 5 };
    let name = &bytes[at + skip..at + len];
    let code = match name {
        b"amqp:header:list" => code::HEADER,
        b"amqp:delivery-annotations:map" => code::DELIVERY_ANNOTATIONS,
        b"amqp:message-annotations:map" => code::MESSAGE_ANNOTATIONS,
        b"amqp:properties:list" => code::PROPERTIES,
        b"amqp:application-properties:map" => code::APPLICATION_PROPERTIES,
        b"amqp:data:binary" => code::DATA,
        b"amqp:amqp-sequence:list" => code::AMQP_SEQUENCE,
        b"amqp:amqp-value:*" => code::AMQP_VALUE,
        b"amqp:footer:map" => code::FOOTER,
        _ => return Err(MessageError::UnknownSection(at)),
    };
    Ok(u64::from(code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::messaging::annotations::OwnedKey;
    use fe2o3_amqp::types::messaging::{
        ApplicationProperties, Data, DeliveryAnnotations, Header, MessageAnnotations, Properties,
    };
    use fe2o3_amqp::types::primitives::Symbol;
    use fe2o3_amqp::types::primitives::{Binary, Timestamp};

    fn encode_message(body: &[u8]) -> Vec<u8> {
        let mut out = serde_amqp::to_vec(&Header {
            durable: true,
            delivery_count: 7,
            ..Header::default()
        })
        .expect("header");
        let props = Properties {
            message_id: Some("m1".to_string().into()),
            ..Properties::default()
        };
        out.extend(serde_amqp::to_vec(&props).expect("props"));
        let app = ApplicationProperties::builder().insert("k", 1i64).build();
        out.extend(serde_amqp::to_vec(&app).expect("app"));
        out.extend(serde_amqp::to_vec(&Data(Binary::from(body.to_vec()))).expect("data"));
        out
    }

    #[test]
    fn scans_all_sections_of_an_encoded_message() {
        let bytes = encode_message(b"hello");
        let codes: Vec<u8> = scan_sections(&bytes)
            .expect("scan")
            .iter()
            .map(|s| s.code)
            .collect();
        assert_eq!(codes, vec![0x70, 0x73, 0x74, 0x75]);
        let arrival = inspect(Bytes::from(bytes)).expect("valid");
        assert_eq!((arrival.ttl_ms, arrival.scheduled_ms), (None, None));
    }

    #[test]
    fn a_footer_keyed_by_strings_is_stored_keyed_by_symbols() {
        // The Java SDK's footer: string keys, read back as symbols (a cast that fails on a
        // string), as Service Bus hands them out.
        let mut bytes = encode_message(b"body");
        let footer: Vec<u8> = [0x00, 0x53, 0x78, 0xc1, 0x07, 0x02]
            .into_iter()
            .chain([0xa1, 0x01, b'k', 0xa1, 0x01, b'v'])
            .collect();
        let mut expected = bytes.clone();
        bytes.extend_from_slice(&footer);
        let arrival = inspect(Bytes::from(bytes)).expect("valid");
        expected.extend_from_slice(&[0x00, 0x53, 0x78, 0xc1, 0x07, 0x02]);
        expected.extend_from_slice(&[0xa3, 0x01, b'k', 0xa1, 0x01, b'v']);
        assert_eq!(
            arrival.bytes,
            Bytes::from(expected),
            "the key a symbol, the value kept"
        );
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert_eq!(scan_sections(&[0xff]), Err(MessageError::NotASection(0)));
        let bytes = encode_message(b"hello");
        assert!(matches!(
            scan_sections(&bytes[..bytes.len() - 1]),
            Err(MessageError::Encoding(EncodingError::Truncated { .. }))
        ));
        assert_eq!(scan_sections(&[]), Err(MessageError::Empty));
    }

    #[test]
    fn splice_replaces_header_and_annotations_and_keeps_the_rest() {
        let stored = Bytes::from(encode_message(b"body bytes"));
        let stamp = DeliveryStamp {
            delivery_count: 2,
            annotations: vec![
                ("x-opt-sequence-number", Value::Long(42)),
                (
                    "x-opt-enqueued-time",
                    Value::Timestamp(Timestamp::from_milliseconds(5)),
                ),
            ],
            lock_token: Some(uuid::Uuid::from_u128(7)),
            presettled: false,
            ttl_ms: None,
            expires_ms: None,
        };
        let whole = splice(&stored, &stamp, &mut Vec::new()).expect("splice");
        let sections = scan_sections(&whole).expect("scan");
        assert_eq!(
            sections.iter().map(|s| s.code).collect::<Vec<_>>(),
            vec![0x70, 0x71, 0x72, 0x73, 0x74, 0x75]
        );
        let header: Header = serde_amqp::from_slice(&whole[sections[0].range.clone()]).expect("h");
        assert_eq!(header.delivery_count, 2);
        assert!(header.durable, "other header fields survive");
        let ma: MessageAnnotations =
            serde_amqp::from_slice(&whole[sections[2].range.clone()]).expect("ma");
        let key = fe2o3_amqp::types::messaging::annotations::OwnedKey::from(
            fe2o3_amqp::types::primitives::Symbol::from("x-opt-sequence-number"),
        );
        assert_eq!(ma.0.get(&key), Some(&Value::Long(42)));
        assert!(whole.ends_with(b"body bytes"));
    }

    /// A delivery's stamp with an effective time to live of 2 s, expiring at 12 s.
    fn expiring_stamp() -> DeliveryStamp {
        DeliveryStamp {
            delivery_count: 0,
            annotations: Vec::new(),
            lock_token: None,
            presettled: false,
            ttl_ms: Some(2_000),
            expires_ms: Some(12_000),
        }
    }

    #[test]
    fn splice_writes_the_effective_ttl_and_the_expiry_time() {
        let stamp = expiring_stamp();
        let mut bare = serde_amqp::to_vec(&Header::default()).expect("h");
        bare.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        for (stored, codes) in [
            (encode_message(b"b"), vec![0x70, 0x72, 0x73, 0x74, 0x75]),
            (bare, vec![0x70, 0x72, 0x73, 0x75]),
        ] {
            let had_id = stored.windows(2).any(|w| w == b"m1");
            let whole = splice(&Bytes::from(stored), &stamp, &mut Vec::new()).expect("splice");
            let sections = scan_sections(&whole).expect("scan");
            assert_eq!(sections.iter().map(|s| s.code).collect::<Vec<_>>(), codes);
            let header: Header =
                serde_amqp::from_slice(&whole[sections[0].range.clone()]).expect("h");
            assert_eq!(header.ttl, Some(2_000));
            let props: Properties =
                serde_amqp::from_slice(&whole[sections[2].range.clone()]).expect("props");
            assert_eq!(
                props.absolute_expiry_time,
                Some(Timestamp::from_milliseconds(12_000))
            );
            assert_eq!(props.message_id.is_some(), had_id, "other fields kept");
        }
    }

    #[test]
    fn splice_keeps_an_expiry_time_the_sender_set() {
        let stamp = expiring_stamp();
        let sent = Properties {
            creation_time: Some(Timestamp::from_milliseconds(1_000)),
            absolute_expiry_time: Some(Timestamp::from_milliseconds(61_000)),
            ..Properties::default()
        };
        let mut stored = serde_amqp::to_vec(&Header::default()).expect("h");
        stored.extend(serde_amqp::to_vec(&sent).expect("p"));
        stored.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        let whole = splice(&Bytes::from(stored), &stamp, &mut Vec::new()).expect("splice");
        let sections = scan_sections(&whole).expect("scan");
        let header: Header = serde_amqp::from_slice(&whole[sections[0].range.clone()]).expect("h");
        assert_eq!(header.ttl, Some(2_000), "the effective time to live");
        let props: Properties =
            serde_amqp::from_slice(&whole[sections[2].range.clone()]).expect("props");
        assert_eq!(
            (props.creation_time, props.absolute_expiry_time),
            (sent.creation_time, sent.absolute_expiry_time),
            "the sender's times, as sent"
        );
    }

    #[test]
    fn a_time_to_live_past_a_uint_is_taken_from_the_expiry_time() {
        const DAYS_100: i64 = 100 * 86_400_000;
        let max = Some(u32::MAX);
        let sent = Some((5_000, 5_000 + DAYS_100));
        assert_eq!(time_to_live(max, sent), Some(DAYS_100));
        assert_eq!(time_to_live(max, None), Some(i64::from(u32::MAX)));
        assert_eq!(
            time_to_live(max, Some((5_000, 6_000))),
            Some(i64::from(u32::MAX)),
            "never shorter than the header's"
        );
        assert_eq!(
            time_to_live(Some(1_000), sent),
            Some(1_000),
            "a header that holds it wins"
        );
        assert_eq!(time_to_live(None, sent), None, "no header, no time to live");
        let mut bytes = serde_amqp::to_vec(&Header {
            ttl: max,
            ..Header::default()
        })
        .expect("h");
        bytes.extend(
            serde_amqp::to_vec(&Properties {
                creation_time: Some(Timestamp::from_milliseconds(5_000)),
                absolute_expiry_time: Some(Timestamp::from_milliseconds(5_000 + DAYS_100)),
                ..Properties::default()
            })
            .expect("p"),
        );
        bytes.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        assert_eq!(
            inspect(Bytes::from(bytes)).expect("valid").ttl_ms,
            Some(DAYS_100)
        );
    }

    #[test]
    fn inspect_reads_the_ttl_and_the_scheduled_enqueue_time() {
        let mut bytes = serde_amqp::to_vec(&Header {
            ttl: Some(5_000),
            ..Header::default()
        })
        .expect("h");
        let mut annotations = MessageAnnotations::default();
        annotations.0.insert(
            OwnedKey::from(Symbol::from(SCHEDULED_ENQUEUE_TIME_KEY)),
            Value::Timestamp(Timestamp::from_milliseconds(99)),
        );
        bytes.extend(serde_amqp::to_vec(&annotations).expect("ma"));
        bytes.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        let arrival = inspect(Bytes::from(bytes)).expect("valid");
        assert_eq!(
            (arrival.ttl_ms, arrival.scheduled_ms),
            (Some(5_000), Some(99))
        );
        let mut broken = serde_amqp::to_vec(&Header::default()).expect("h");
        broken.extend_from_slice(&[0x00, 0x53, 0x73, 0xc0, 0x02, 0x05, 0x40]);
        assert!(
            matches!(
                inspect(Bytes::from(broken)),
                Err(MessageError::Encoding(EncodingError::CountMismatch { .. }))
            ),
            "a properties list whose count overruns it is refused on arrival"
        );
    }

    #[test]
    fn a_jms_delivery_time_schedules_unless_the_message_names_its_enqueue_time() {
        let scheduled = |entries: &[(&str, Value)]| {
            let mut annotations = MessageAnnotations::default();
            for (key, value) in entries {
                annotations
                    .0
                    .insert(OwnedKey::from(Symbol::from(*key)), value.clone());
            }
            let mut bytes = serde_amqp::to_vec(&annotations).expect("ma");
            bytes.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
            inspect(Bytes::from(bytes)).expect("valid").scheduled_ms
        };
        let delivery = (DELIVERY_TIME_KEY, Value::Long(1_000));
        let enqueue = (
            SCHEDULED_ENQUEUE_TIME_KEY,
            Value::Timestamp(Timestamp::from_milliseconds(2_000)),
        );
        assert_eq!(scheduled(std::slice::from_ref(&delivery)), Some(1_000));
        assert_eq!(scheduled(&[delivery.clone(), enqueue.clone()]), Some(2_000));
        assert_eq!(scheduled(&[enqueue, delivery]), Some(2_000));
    }

    #[test]
    fn sets_application_properties_and_keeps_the_rest() {
        let stored = Bytes::from(encode_message(b"payload"));
        let entries = vec![
            (
                "DeadLetterReason".to_string(),
                SimpleValue::String("r".into()),
            ),
            ("k".to_string(), SimpleValue::Long(2)),
        ];
        let changed = set_application_properties(&stored, &entries).expect("set");
        let sections = scan_sections(&changed).expect("scan");
        let app: ApplicationProperties =
            serde_amqp::from_slice(&changed[sections[2].range.clone()]).expect("app");
        assert_eq!(
            app.0.get("k"),
            Some(&SimpleValue::Long(2)),
            "existing key overwritten"
        );
        assert_eq!(
            app.0.get("DeadLetterReason"),
            Some(&SimpleValue::String("r".into()))
        );
        assert!(changed.ends_with(b"payload"));
        // A message without application properties gets the section before its body.
        let mut bare = serde_amqp::to_vec(&Header::default()).expect("h");
        bare.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        let changed = set_application_properties(&Bytes::from(bare), &entries).expect("set");
        let codes: Vec<u8> = scan_sections(&changed)
            .expect("scan")
            .iter()
            .map(|s| s.code)
            .collect();
        assert_eq!(codes, vec![0x70, 0x74, 0x75]);
    }

    #[test]
    fn the_header_carries_every_field_even_a_zero_delivery_count() {
        let header = Header {
            ttl: Some(1000),
            ..Header::default()
        };
        let stored = serde_amqp::to_vec(&header).expect("h");
        let mut encoded = Vec::new();
        write_header(
            &mut encoded,
            &read_header(&stored, Items::Measured).expect("reads"),
            0,
        );
        assert_eq!(
            serde_amqp::from_slice::<Header>(&encoded).expect("decodes"),
            header
        );
        assert_eq!(encoded[5], 5, "five fields written");
        assert_eq!(&encoded[encoded.len() - 5..], &[0x70, 0, 0, 0, 0]);
    }

    /// Service Bus delivers the header fields a sender left out as null, not as their
    /// defaults (the Python SDK's own tests measure the delivered message: 333 bytes).
    #[test]
    fn header_fields_the_sender_left_out_stay_null() {
        let mut encoded = Vec::new();
        write_header(&mut encoded, &HeaderFields::default(), 2);
        assert_eq!(
            encoded,
            [0x00, 0x53, 0x70, 0xc0, 0x0a, 0x05, 0x40, 0x40, 0x40, 0x40, 0x70, 0, 0, 0, 2]
        );
        let sent = serde_amqp::to_vec(&Header {
            durable: false,
            priority: 4.into(),
            ttl: None,
            first_acquirer: false,
            delivery_count: 0,
        })
        .expect("h");
        let mut kept = Vec::new();
        write_header(
            &mut kept,
            &read_header(&sent, Items::Measured).expect("reads"),
            0,
        );
        let header: Header = serde_amqp::from_slice(&kept).expect("decodes");
        assert!(!header.durable);
        assert_eq!(u8::from(header.priority), 4);
    }

    #[test]
    fn a_presettled_delivery_carries_an_empty_delivery_annotations_map() {
        let stored = Bytes::from(encode_message(b"x"));
        let stamp = DeliveryStamp {
            delivery_count: 0,
            annotations: Vec::new(),
            lock_token: None,
            presettled: true,
            ttl_ms: None,
            expires_ms: None,
        };
        let prefix = splice(&stored, &stamp, &mut Vec::new()).expect("splice");
        let sections = scan_sections(&prefix).expect("scan");
        let annotations = sections
            .iter()
            .find(|section| section.code == code::DELIVERY_ANNOTATIONS)
            .expect("delivery-annotations");
        assert_eq!(
            &prefix[annotations.range.clone()],
            &[0x00, 0x53, 0x71, 0xc1, 0x01, 0x00]
        );
    }

    #[test]
    fn reads_every_header_field_as_serde_amqp_writes_it() {
        for header in [
            Header::default(),
            Header {
                durable: true,
                priority: 9.into(),
                ttl: Some(0),
                first_acquirer: true,
                delivery_count: 3,
            },
            Header {
                ttl: Some(70_000),
                ..Header::default()
            },
        ] {
            let read = read_header(&serde_amqp::to_vec(&header).expect("h"), Items::Checked)
                .expect("reads");
            let mut encoded = Vec::new();
            write_header(&mut encoded, &read, header.delivery_count);
            let back: Header = serde_amqp::from_slice(&encoded).expect("decodes");
            assert_eq!(back, header);
        }
        let wrong_type = [0x00, 0x53, 0x70, 0xc0, 0x03, 0x01, 0xa1, 0x00];
        assert_eq!(
            read_header(&wrong_type, Items::Checked),
            Err(MessageError::Malformed("header"))
        );
    }

    #[test]
    fn the_view_reads_the_header_and_properties_fields_jms_selectors_map() {
        let mut bytes = serde_amqp::to_vec(&Header {
            durable: true,
            priority: 7.into(),
            delivery_count: 3,
            ..Header::default()
        })
        .expect("header");
        let properties = Properties {
            message_id: Some(MessageId::Ulong(42)),
            correlation_id: Some(MessageId::Binary(Binary::from(vec![0xab, 0x01]))),
            user_id: Some(Binary::from(b"alice".to_vec())),
            creation_time: Some(Timestamp::from_milliseconds(1_000)),
            absolute_expiry_time: Some(Timestamp::from_milliseconds(61_000)),
            group_sequence: Some(5),
            ..Properties::default()
        };
        bytes.extend(serde_amqp::to_vec(&properties).expect("properties"));
        let read = view(&Bytes::from(bytes)).expect("a view");
        assert_eq!(
            (read.message_id.as_deref(), read.message_id_type),
            (Some("42"), IdType::Ulong)
        );
        assert_eq!(
            (read.correlation_id.as_deref(), read.correlation_id_type),
            (Some("ab01"), IdType::Binary)
        );
        assert!(read.durable);
        assert_eq!(read.priority, Some(7));
        assert_eq!(read.user_id.as_deref(), Some(&b"alice"[..]));
        assert_eq!(read.creation_time, Some(1_000));
        assert_eq!(read.absolute_expiry_time, Some(61_000));
        assert_eq!(read.group_sequence, Some(5));
        // The sender's delivery count is not the broker's: a routed copy was never delivered.
        assert_eq!(read.delivery_count, 0);
        let bare = view(&Bytes::from(encode_message(b"x"))).expect("a view");
        assert_eq!(bare.message_id_type, IdType::String);
        assert_eq!((bare.priority, bare.creation_time), (None, None));
        let ids = [
            (MessageId::String("s".into()), IdType::String),
            (
                MessageId::Uuid(Uuid::from_u128(1).into_bytes().into()),
                IdType::Uuid,
            ),
        ];
        for (id, kind) in ids {
            let properties = Properties {
                message_id: Some(id),
                ..Properties::default()
            };
            let bytes = Bytes::from(serde_amqp::to_vec(&properties).expect("properties"));
            assert_eq!(view(&bytes).expect("a view").message_id_type, kind);
        }
    }

    #[test]
    fn splice_keeps_the_clients_annotations_but_not_the_keys_the_broker_sets() {
        let mut annotations = MessageAnnotations::default();
        for (key, value) in [
            ("x-opt-sequence-number", Value::Long(1)),
            ("x-opt-partition-key", Value::String("p".into())),
            // An earlier delivery's, which a client sending a received message repeats.
            (
                "x-opt-locked-until",
                Value::Timestamp(Timestamp::from_milliseconds(5)),
            ),
        ] {
            annotations
                .0
                .insert(OwnedKey::from(Symbol::from(key)), value);
        }
        annotations.0.insert(OwnedKey::from(7u64), Value::Int(7));
        // The sender's delivery annotations, one of them a lock token of its own.
        let mut sent_delivery = DeliveryAnnotations::default();
        for (key, value) in [
            (
                LOCK_TOKEN_KEY,
                Value::Uuid(uuid::Uuid::from_u128(9).into_bytes().into()),
            ),
            ("delann_key", Value::String("delann_value".into())),
        ] {
            sent_delivery
                .0
                .insert(OwnedKey::from(Symbol::from(key)), value);
        }
        let mut stored = serde_amqp::to_vec(&sent_delivery).expect("da");
        stored.extend(serde_amqp::to_vec(&annotations).expect("ma"));
        stored.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        let stamp = DeliveryStamp {
            delivery_count: 0,
            annotations: vec![
                ("x-opt-sequence-number", Value::Long(42)),
                ("x-opt-message-state", Value::Int(0)),
            ],
            lock_token: Some(uuid::Uuid::from_u128(7)),
            presettled: false,
            ttl_ms: None,
            expires_ms: None,
        };
        let whole = splice(&Bytes::from(stored), &stamp, &mut Vec::new()).expect("splice");
        let sections = scan_sections(&whole).expect("scan");
        let delivery: DeliveryAnnotations =
            serde_amqp::from_slice(&whole[sections[1].range.clone()]).expect("da");
        assert_eq!(
            delivery
                .0
                .get(&OwnedKey::from(Symbol::from(LOCK_TOKEN_KEY))),
            Some(&Value::Uuid(uuid::Uuid::from_u128(7).into_bytes().into()))
        );
        assert_eq!(
            delivery.0.get(&OwnedKey::from(Symbol::from("delann_key"))),
            Some(&Value::String("delann_value".into()))
        );
        assert_eq!(delivery.0.len(), 2, "{delivery:?}");
        let spliced: MessageAnnotations =
            serde_amqp::from_slice(&whole[sections[2].range.clone()]).expect("ma");
        let get = |key: &str| spliced.0.get(&OwnedKey::from(Symbol::from(key)));
        assert_eq!(spliced.0.len(), 4, "{spliced:?}");
        assert_eq!(get("x-opt-sequence-number"), Some(&Value::Long(42)));
        assert_eq!(get("x-opt-message-state"), Some(&Value::Int(0)));
        assert_eq!(get("x-opt-partition-key"), Some(&Value::String("p".into())));
        assert_eq!(spliced.0.get(&OwnedKey::from(7u64)), Some(&Value::Int(7)));
    }

    #[test]
    fn inspect_refuses_message_ids_and_partition_keys_over_128_characters() {
        let with_id = |id: &str| {
            let props = Properties {
                message_id: Some(id.to_string().into()),
                ..Properties::default()
            };
            Bytes::from(serde_amqp::to_vec(&props).expect("props"))
        };
        assert!(inspect(with_id(&"é".repeat(128))).is_ok());
        assert_eq!(
            inspect(with_id(&"é".repeat(129))).map(|a| a.bytes),
            Err(MessageError::TooLong("message-id", 129))
        );
        let mut annotations = MessageAnnotations::default();
        annotations.0.insert(
            OwnedKey::from(Symbol::from(PARTITION_KEY_KEY)),
            Value::String("k".repeat(129)),
        );
        let mut bytes = serde_amqp::to_vec(&annotations).expect("ma");
        bytes.extend_from_slice(&with_id("m"));
        assert_eq!(
            inspect(Bytes::from(bytes)).map(|a| a.bytes),
            Err(MessageError::TooLong(PARTITION_KEY_KEY, 129))
        );
    }

    #[test]
    fn text_fields_are_null_or_strings_of_valid_unicode() {
        assert_eq!(text_field(SESSION_ID_FIELD, &[0x40], false), Ok(None));
        assert_eq!(
            text_field(SESSION_ID_FIELD, b"\xa1\x02id", false),
            Ok(Some("id".into()))
        );
        assert_eq!(
            text_field(PARTITION_KEY_FIELD, b"\xa0\x02id", true),
            Ok(Some("id".into())),
            "a binary where binary is taken"
        );
        for encoded in [
            &b"\x53\x07"[..],
            b"\xa1\x02\xff\xfe",
            b"\xa3\x02id",
            b"\xa0\x02id",
        ] {
            assert_eq!(
                text_field(PARTITION_KEY_FIELD, encoded, false),
                Err(MessageError::NotText(PARTITION_KEY_FIELD)),
                "{encoded:?}"
            );
        }
        assert_eq!(
            text_field(PARTITION_KEY_FIELD, b"\xa0\x02\xff\xfe", true),
            Err(MessageError::NotText(PARTITION_KEY_FIELD))
        );
    }

    #[test]
    fn annotate_sets_replaces_and_keeps_message_annotations() {
        let plain = Bytes::from(encode_message(b"x"));
        let once = annotate(
            &plain,
            &[("x-opt-deadletter-source", Value::String("q".into()))],
            &[("x-opt-enqueue-sequence-number", Value::Long(7))],
        )
        .expect("annotate");
        let twice = annotate(
            &once,
            &[("x-opt-deadletter-source", Value::String("q2".into()))],
            &[("x-opt-enqueue-sequence-number", Value::Long(9))],
        )
        .expect("annotate again");
        let sections = scan_sections(&twice).expect("scan");
        let codes: Vec<u8> = sections.iter().map(|section| section.code).collect();
        assert_eq!(codes, [0x70, 0x72, 0x73, 0x74, 0x75]);
        let annotations: MessageAnnotations =
            serde_amqp::from_slice(&twice[sections[1].range.clone()]).expect("ma");
        let get = |key: &str| annotations.0.get(&OwnedKey::from(Symbol::from(key)));
        assert_eq!(annotations.0.len(), 2, "{annotations:?}");
        assert_eq!(
            get("x-opt-deadletter-source"),
            Some(&Value::String("q2".into()))
        );
        assert_eq!(get("x-opt-enqueue-sequence-number"), Some(&Value::Long(7)));
        assert!(inspect(twice).is_ok());
    }

    #[test]
    fn an_annotation_is_read_as_text_and_stripped_leaving_the_others() {
        let plain = Bytes::from(encode_message(b"x"));
        assert_eq!(annotation_text(&plain, "x-opt-transfer-destination"), None);
        let marked = annotate(
            &plain,
            &[("x-opt-transfer-destination", Value::String("orders".into()))],
            &[("x-opt-enqueue-sequence-number", Value::Long(7))],
        )
        .expect("annotate");
        assert_eq!(
            annotation_text(&marked, "x-opt-transfer-destination").as_deref(),
            Some("orders")
        );
        let stripped = without_annotation(&marked, "x-opt-transfer-destination").expect("strip");
        assert_eq!(
            annotation_text(&stripped, "x-opt-transfer-destination"),
            None
        );
        let sections = scan_sections(&stripped).expect("scan");
        let annotations: MessageAnnotations =
            serde_amqp::from_slice(&stripped[sections[1].range.clone()]).expect("ma");
        assert_eq!(annotations.0.len(), 1, "{annotations:?}");
        assert!(inspect(stripped).is_ok());
        assert_eq!(
            without_annotation(&plain, "x-opt-transfer-destination").expect("same"),
            plain
        );
    }

    #[test]
    fn inspect_refuses_application_properties_keyed_by_anything_but_strings() {
        let mut bytes = vec![
            0x00, 0x53, 0x74, 0xc1, 0x06, 0x02, 0x54, 0x01, 0xa1, 0x01, b'v',
        ];
        bytes.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x01, b'x']);
        assert_eq!(
            inspect(Bytes::from(bytes.clone())),
            Err(MessageError::NonStringKey(0))
        );
        let mut good = vec![
            0x00, 0x53, 0x74, 0xc1, 0x07, 0x02, 0xa1, 0x01, b'k', 0xa1, 0x01, b'v',
        ];
        good.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x01, b'x']);
        assert!(inspect(Bytes::from(good)).is_ok());
    }

    #[test]
    fn inspect_puts_sections_in_amqp_order_and_refuses_mixed_bodies() {
        let header = [0x00, 0x53, 0x70, 0x45];
        let data = [0x00, 0x53, 0x75, 0xa0, 0x00];
        let footer = [0x00, 0x53, 0x78, 0xc1, 0x01, 0x00];
        let delivery_annotations = [0x00, 0x53, 0x71, 0xc1, 0x01, 0x00];
        // properties {message-id: "m"}: with none the broker would assign one.
        let properties = [0x00, 0x53, 0x73, 0xc0, 0x04, 0x01, 0xa1, 0x01, b'm'];
        let inspected = |parts: &[&[u8]]| inspect(Bytes::from(parts.concat())).map(|a| a.bytes);
        // As the Python SDK writes a message with delivery annotations: after the footer.
        assert_eq!(
            inspected(&[&header, &properties, &data, &footer, &delivery_annotations]),
            Ok(Bytes::from(
                [
                    &header[..],
                    &delivery_annotations,
                    &properties,
                    &data,
                    &footer
                ]
                .concat()
            ))
        );
        // A header after the body goes before it; of two headers the later one counts, as
        // Service Bus reads them.
        let priority_header = [0x00, 0x53, 0x70, 0xc0, 0x04, 0x02, 0x40, 0x50, 0x07];
        assert_eq!(
            inspected(&[&header, &properties, &data, &data, &priority_header]),
            Ok(Bytes::from(
                [&priority_header[..], &properties, &data, &data].concat()
            ))
        );
        // In order already: untouched.
        assert_eq!(
            inspected(&[&header, &properties, &data, &data, &footer]),
            Ok(Bytes::from(
                [&header[..], &properties, &data, &data, &footer].concat()
            ))
        );
        let value = [0x00, 0x53, 0x77, 0x40];
        let sequence = [0x00, 0x53, 0x76, 0x45];
        for (body, at) in [
            (&[&data[..], &value][..], 5),
            (&[&sequence[..], &data], 4),
            (&[&value[..], &value], 4),
            (&[&data[..], &footer, &sequence], 11),
        ] {
            assert_eq!(
                inspected(body),
                Err(MessageError::MixedBody(at)),
                "{body:?}"
            );
        }
        // Delivery annotations are passed on, so they must be a map (keyed as they come).
        let string_keyed = [0x00, 0x53, 0x71, 0xc1, 0x05, 0x02, 0xa1, 0x01, b'k', 0x40];
        assert!(inspected(&[&string_keyed, &properties, &data]).is_ok());
        let a_list = [0x00, 0x53, 0x71, 0x45];
        assert_eq!(
            inspected(&[&a_list, &data]),
            Err(MessageError::Malformed("delivery-annotations"))
        );
        // application-properties {"k": []} (a list0 value).
        let list_value = [0x00, 0x53, 0x74, 0xc1, 0x05, 0x02, 0xa1, 0x01, b'k', 0x45];
        assert_eq!(
            inspect(Bytes::copy_from_slice(&list_value)),
            Err(MessageError::NotSimple(0))
        );
        // application-properties as a list0 rather than a map.
        assert!(inspect(Bytes::copy_from_slice(&[0x00, 0x53, 0x74, 0x45])).is_err());
    }

    /// Postmortem of the first fuzz run of the message codec (`tests/fuzz`, target
    /// `message`): `inspect` only measured the sections it did not read, so it accepted
    /// application properties that `set_application_properties` then could not decode (a
    /// list, an odd map, a str32 claiming 4 GiB that serde_amqp allocated), sections out of
    /// order, and 74,724 nested descriptors that overflowed the stack. Every such input is now
    /// refused on arrival, or gets through every later step.
    #[test]
    fn fuzz_findings_are_refused_or_get_through_every_later_step() {
        let mut findings: Vec<Vec<u8>> = [
            &[0x00, 0x53, 0x74, 0x45][..],
            &[0x00, 0x53, 0x74, 0xc1, 0x01, 0x01],
            &[
                0x00, 0x53, 0x74, 0xc1, 0x07, 0x04, 0xa1, 0x00, 0xc1, 0x00, 0x40, 0x40,
            ],
            &[
                0x00, 0x53, 0x74, 0xc1, 0x08, 0x02, 0xa1, 0x00, 0xb0, 0xff, 0xff, 0xff, 0xff,
            ],
            &[0x00, 0x53, 0x75, 0xa0, 0x00, 0x00, 0x53, 0x70, 0x45],
            &[0x00, 0x53, 0x74, 0x53, 0x71],
            &[
                0x00, 0x53, 0x74, 0xc1, 0x1c, 0x08, 0xa1, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                0x00, 0x1f, 0x79, 0x2d, 0x61, 0x6e, 0x6e, 0x6f, 0xc1, 0x00, 0x53, 0x70, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x00, 0x00,
            ],
            &[0x00, 0x53, 0x78, 0x53, 0x71, 0x00, 0x53, 0x71, 0x41],
            &[
                0x00, 0x53, 0x74, 0xc1, 0x11, 0x01, 0x00, 0x00, 0x00, 0x76, 0x6c, 0x61, 0x67, 0x38,
                0x06, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55,
            ],
            &[
                0x00, 0x53, 0x74, 0xc1, 0x24, 0x0f, 0xa1, 0x00, 0xf0, 0x53, 0x00, 0x77, 0xd2, 0x00,
                0x00, 0x24, 0x07, 0xb1, 0x00, 0x00, 0x00, 0x00, 0xa3, 0x0f, 0x61, 0x6d, 0x71, 0x70,
                0x3a, 0x66, 0x6f, 0x6f, 0x74, 0x65, 0x72, 0x3a, 0x6d, 0x61, 0x70, 0x61, 0x2d,
            ],
        ]
        .iter()
        .map(|bytes| bytes.to_vec())
        .collect();
        // A described array of nulls as a property value: set_application_properties wrote
        // it back as an array serde_amqp cannot read.
        findings.push(vec![
            0x00, 0x53, 0x74, 0xc1, 0x0b, 0x02, 0xa1, 0x01, 0x61, 0x00, 0x53, 0x00, 0xe0, 0x02,
            0x02, 0x40,
        ]);
        // Delivery-annotations after the body (a forged x-opt-lock-token would pass through),
        // and properties after application-properties.
        findings.push(vec![0x00, 0x53, 0x75, 0xa0, 0x00, 0x00, 0x53, 0x71, 0x40]);
        findings.push(vec![
            0x00, 0x53, 0x74, 0xc1, 0x01, 0x00, 0x00, 0x53, 0x73, 0x45,
        ]);
        // The second run: an application-properties key that is not UTF-8.
        findings.push(vec![
            0x00, 0x53, 0x74, 0xc1, 0x07, 0x02, 0xa1, 0x01, 0x87, 0xa1, 0x01, b'v', 0x00, 0x53,
            0x75, 0xa0, 0x01, b'x',
        ]);
        // The third run: a char value that is no Unicode scalar (0x03a17472).
        findings.push(vec![
            0x00, 0x53, 0x74, 0xc1, 0x09, 0x02, 0xa1, 0x01, b'b', 0x73, 0x03, 0xa1, 0x74, 0x72,
            0x00, 0x53, 0x77, 0x40,
        ]);
        // The fifth: a boolean byte of 5, which serde_amqp refuses; the client's entries are no
        // longer decoded when properties are set.
        findings.push(vec![
            0x00, 0x53, 0x74, 0xc1, 0x06, 0x02, 0xa1, 0x01, b'l', 0x56, 0x05, 0x00, 0x53, 0x77,
            0x40,
        ]);
        // The fourth run: application properties whose value is null.
        findings.push(vec![0x00, 0x53, 0x74, 0x40, 0x00, 0x53, 0x77, 0x40]);
        let mut deep = vec![0x00, 0x53, 0x75];
        deep.resize(3 + 74_724, 0x00);
        findings.push(deep);
        let stamp = DeliveryStamp {
            delivery_count: 1,
            annotations: vec![("x-opt-sequence-number", Value::Long(1))],
            lock_token: Some(uuid::Uuid::nil()),
            presettled: false,
            ttl_ms: Some(1000),
            expires_ms: Some(5),
        };
        for bytes in findings {
            let bytes = Bytes::from(bytes);
            if inspect(bytes.clone()).is_ok() {
                splice(&bytes, &stamp, &mut Vec::new()).expect("what inspect accepts splices");
                set_application_properties(&bytes, &[("k".into(), SimpleValue::Int(1))])
                    .expect("what inspect accepts takes properties");
            }
        }
    }

    #[test]
    fn a_message_without_a_message_id_is_given_one_and_one_with_an_id_is_kept() {
        let message_id = |bytes: &Bytes| {
            let sections = scan_sections(bytes).expect("scan");
            let properties = sections
                .iter()
                .find(|section| section.code == code::PROPERTIES)
                .expect("properties");
            serde_amqp::from_slice::<Properties>(&bytes[properties.range.clone()])
                .expect("properties decode")
                .message_id
        };
        // No properties at all: a section is added before the body.
        let bare = Bytes::from(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        let given = inspect(bare).expect("valid").bytes;
        let Some(fe2o3_amqp::types::messaging::MessageId::String(id)) = message_id(&given) else {
            panic!("no string id assigned")
        };
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        // Properties without an id: the id is set, the other fields kept.
        let mut partial = serde_amqp::to_vec(&Properties {
            subject: Some("s".into()),
            ..Properties::default()
        })
        .expect("p");
        partial.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).expect("d"));
        let given = inspect(Bytes::from(partial)).expect("valid").bytes;
        assert!(matches!(
            message_id(&given),
            Some(fe2o3_amqp::types::messaging::MessageId::String(_))
        ));
        // An id set by the sender: the bytes are kept as sent.
        let sent = Bytes::from(encode_message(b"x"));
        assert_eq!(inspect(sent.clone()).expect("valid").bytes, sent);
    }

    #[test]
    fn inspect_refuses_annotations_keyed_by_anything_but_symbols_and_ulongs() {
        // message-annotations { "k" (a string): null }
        let bytes = [0x00, 0x53, 0x72, 0xc1, 0x05, 0x02, 0xa1, 0x01, b'k', 0x40];
        assert_eq!(
            inspect(Bytes::copy_from_slice(&bytes)),
            Err(MessageError::Malformed("message-annotations"))
        );
    }

    #[test]
    fn unpacks_a_batch_into_its_data_sections() {
        let first = encode_message(b"one");
        let second = encode_message(b"two");
        let mut envelope = Vec::new();
        envelope.extend(serde_amqp::to_vec(&Data(Binary::from(first.clone()))).expect("d"));
        envelope.extend(serde_amqp::to_vec(&Data(Binary::from(second.clone()))).expect("d"));
        let messages: Vec<Bytes> = unpack_batch(&Bytes::from(envelope))
            .expect("batch")
            .into_iter()
            .map(|arrival| arrival.bytes)
            .collect();
        assert_eq!(messages, vec![Bytes::from(first), Bytes::from(second)]);
    }
}
