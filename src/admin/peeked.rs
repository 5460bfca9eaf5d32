//! A peeked message as the web console shows it: JSON with its broker annotations, system
//! and application properties, and its body (base64 of the `data` sections, or the AMQP value
//! or sequence as JSON). Each section is decoded as a generic AMQP value; nothing here trusts
//! the bytes further than `message::scan_sections` checked them.
//!
//! What one message shows is bounded, since a decoded value can take 50 times its encoding (a
//! null is one byte on the wire): at most [`MAX_DECODED`] bytes of sections other than `data`
//! are decoded, in message order, and at most [`MAX_DATA_SHOWN`] bytes of `data`. What is left
//! out is named in `truncated`.

use base64::Engine;
use serde_amqp::primitives::OrderedMap;
use serde_amqp::Value;
use serde_json::{json, Map, Value as Json};

use crate::message::scan_sections;

/// The names of the properties section's fields, in order (AMQP 1.0 §3.2.4).
const PROPERTIES: [&str; 13] = [
    "messageId",
    "userId",
    "to",
    "subject",
    "replyTo",
    "correlationId",
    "contentType",
    "contentEncoding",
    "absoluteExpiryTime",
    "creationTime",
    "sessionId",
    "groupSequence",
    "replyToSessionId",
];

/// The names of the header's fields, in order (AMQP 1.0 §3.2.1).
const HEADER: [&str; 5] = [
    "durable",
    "priority",
    "ttl",
    "firstAcquirer",
    "deliveryCount",
];

/// Most encoded bytes of a message's sections other than `data` that are decoded and shown.
pub const MAX_DECODED: usize = 64 * 1024;
/// Most bytes of a message's `data` sections shown.
pub const MAX_DATA_SHOWN: usize = 256 * 1024;
/// Most sections left out that are named one by one (the rest are counted).
const MAX_NAMED: usize = 16;

/// The console's view of one encoded message: `{header, annotations, properties,
/// applicationProperties, bodyKind, body}` where `body` is base64 for `data`, JSON otherwise,
/// and `truncated` (only when something is left out) names what is not shown.
///
/// # Errors
/// When the bytes do not split into sections or a section does not decode.
pub fn to_json(bytes: &[u8]) -> Result<Json, String> {
    let sections = scan_sections(bytes).map_err(|e| e.to_string())?;
    let mut out = Map::new();
    let mut data = Vec::new();
    let mut data_bytes = 0;
    let mut sequence = Vec::new();
    let mut truncated = Vec::new();
    let mut skipped = 0;
    let mut decoded = 0;
    for section in sections {
        let encoded = &bytes[section.range.clone()];
        if section.code != 0x75 {
            if decoded + encoded.len() > MAX_DECODED {
                skipped += 1;
                if truncated.len() < MAX_NAMED {
                    truncated.push(json!(format!(
                        "section 0x{:02x} of {} bytes (at most {MAX_DECODED} bytes of \
                         sections are shown)",
                        section.code,
                        encoded.len()
                    )));
                }
                continue;
            }
            decoded += encoded.len();
        }
        let value: Value = serde_amqp::from_slice(encoded)
            .map_err(|e| format!("section 0x{:02x}: {e}", section.code))?;
        let Value::Described(described) = value else {
            return Err(format!("section 0x{:02x} is not described", section.code));
        };
        let inner = described.value;
        match section.code {
            0x70 => {
                out.insert("header".into(), named_fields(&inner, &HEADER));
            }
            0x72 => {
                out.insert("annotations".into(), json_of(&inner));
            }
            0x73 => {
                out.insert("properties".into(), named_fields(&inner, &PROPERTIES));
            }
            0x74 => {
                out.insert("applicationProperties".into(), json_of(&inner));
            }
            0x75 => {
                if let Value::Binary(bytes) = inner {
                    data_bytes += bytes.len();
                    let room = MAX_DATA_SHOWN.saturating_sub(data.len());
                    data.extend_from_slice(&bytes[..room.min(bytes.len())]);
                }
            }
            0x76 => {
                if let Value::List(items) = &inner {
                    sequence.extend(items.iter().map(json_of));
                }
            }
            0x77 => {
                out.insert("bodyKind".into(), json!("value"));
                out.insert("body".into(), json_of(&inner));
            }
            _ => {}
        }
    }
    if !sequence.is_empty() {
        out.insert("bodyKind".into(), json!("sequence"));
        out.insert("body".into(), Json::Array(sequence));
    } else if !out.contains_key("body") {
        out.insert("bodyKind".into(), json!("data"));
        out.insert(
            "body".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(&data)),
        );
    }
    if skipped > truncated.len() {
        truncated.push(json!(format!(
            "{} more sections",
            skipped - truncated.len()
        )));
    }
    if data_bytes > data.len() {
        truncated.push(json!(format!(
            "data after its first {} of {data_bytes} bytes",
            data.len()
        )));
    }
    if !truncated.is_empty() {
        out.insert("truncated".into(), Json::Array(truncated));
    }
    Ok(Json::Object(out))
}

/// A described list's fields by name (absent and null ones left out).
fn named_fields(list: &Value, names: &[&str]) -> Json {
    let mut out = Map::new();
    if let Value::List(items) = list {
        for (name, item) in names.iter().zip(items) {
            if !matches!(item, Value::Null) {
                out.insert((*name).to_owned(), json_of(item));
            }
        }
    }
    Json::Object(out)
}

/// An AMQP value as JSON: numbers as numbers, timestamps as ms since the Unix epoch, binary
/// as base64, UUIDs and symbols as text, maps as objects keyed by their keys' text.
fn json_of(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Ubyte(n) => json!(n),
        Value::Ushort(n) => json!(n),
        Value::Uint(n) => json!(n),
        Value::Ulong(n) => json!(n),
        Value::Byte(n) => json!(n),
        Value::Short(n) => json!(n),
        Value::Int(n) => json!(n),
        Value::Long(n) => json!(n),
        Value::Float(n) => json!(n.into_inner()),
        Value::Double(n) => json!(n.into_inner()),
        Value::Char(c) => json!(c.to_string()),
        Value::Timestamp(t) => json!(t.milliseconds()),
        Value::Uuid(u) => json!(uuid::Uuid::from_bytes(*u.as_inner()).to_string()),
        Value::Binary(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::String(s) => json!(s),
        Value::Symbol(s) => json!(s.0),
        Value::List(items) => Json::Array(items.iter().map(json_of).collect()),
        Value::Array(items) => Json::Array(items.0.iter().map(json_of).collect()),
        Value::Map(map) => map_json(map),
        Value::Described(described) => json_of(&described.value),
        other => json!(format!("{other:?}")),
    }
}

fn map_json(map: &OrderedMap<Value, Value>) -> Json {
    let mut out = Map::new();
    for (key, value) in map.iter() {
        let key = match json_of(key) {
            Json::String(text) => text,
            other => other.to_string(),
        };
        out.insert(key, json_of(value));
    }
    Json::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Data, Properties};
    use fe2o3_amqp::types::primitives::Binary;

    #[test]
    fn a_message_reads_back_with_its_properties_and_body() {
        let properties = Properties {
            message_id: Some("id-1".to_string().into()),
            subject: Some("greeting".into()),
            ..Properties::default()
        };
        let application = ApplicationProperties::builder()
            .insert("colour", "red")
            .insert("count", 3i64)
            .build();
        let mut bytes = serde_amqp::to_vec(&properties).expect("properties");
        bytes.extend(serde_amqp::to_vec(&application).expect("application properties"));
        bytes.extend(serde_amqp::to_vec(&Data(Binary::from(b"hello".to_vec()))).expect("data"));
        let shown = to_json(&bytes).expect("reads");
        assert_eq!(shown["properties"]["messageId"], "id-1");
        assert_eq!(shown["properties"]["subject"], "greeting");
        assert_eq!(shown["applicationProperties"]["colour"], "red");
        assert_eq!(shown["applicationProperties"]["count"], 3);
        assert_eq!(shown["bodyKind"], "data");
        assert_eq!(shown["body"], "aGVsbG8=");
        assert!(to_json(b"\x00garbage").is_err());
    }

    /// A megabyte of nulls in amqp-sequence sections used to become 46 MiB of JSON; a
    /// megabyte of small sections past the budget is named in a few lines.
    #[test]
    fn what_a_message_shows_is_bounded_and_the_rest_named() {
        let nulls = fe2o3_amqp::types::messaging::AmqpSequence(vec![Value::Null; 65_000]);
        let mut bytes = Vec::new();
        for _ in 0..15 {
            bytes.extend(serde_amqp::to_vec(&nulls).expect("sequence"));
        }
        let shown = to_json(&bytes).expect("reads");
        assert_eq!(shown["bodyKind"], "sequence");
        // The first section fits the budget; the other 14 are named instead.
        assert_eq!(shown["body"].as_array().expect("a list").len(), 65_000);
        let truncated = shown["truncated"].as_array().expect("named");
        assert_eq!(truncated.len(), 14);
        assert!(shown.to_string().len() < 400_000);

        let small = serde_amqp::to_vec(&fe2o3_amqp::types::messaging::AmqpSequence(vec![
            Value::Null;
            10
        ]))
        .expect("sequence");
        let many = small.repeat(1_000_000 / small.len());
        let shown = to_json(&many).expect("reads");
        let truncated = shown["truncated"].as_array().expect("named");
        assert_eq!(truncated.len(), MAX_NAMED + 1);
        assert!(truncated[MAX_NAMED]
            .as_str()
            .expect("text")
            .ends_with("more sections"));
        assert!(shown.to_string().len() < 400_000);

        let big = serde_amqp::to_vec(&Data(Binary::from(vec![b'x'; 300_000]))).expect("data");
        let shown = to_json(&big).expect("reads");
        let body = shown["body"].as_str().expect("base64");
        assert_eq!(body.len(), MAX_DATA_SHOWN / 3 * 4 + 4);
        assert_eq!(
            shown["truncated"][0],
            "data after its first 262144 of 300000 bytes"
        );
    }
}
