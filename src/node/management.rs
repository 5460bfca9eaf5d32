//! Request/response nodes (amqp-dialect.md §2 and §7): reading a request message, the
//! `com.microsoft:*` management operations it asks for, and encoding the response with the
//! exact types the SDKs check (`statusCode` int, `errorCondition` symbol, string map keys).

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, MessageId, Properties};
use fe2o3_amqp::types::primitives::{Array, Binary, OrderedMap, SimpleValue, Timestamp, Value};
use uuid::Uuid;

use crate::auth::access::{Access, JWT_TOKEN_TYPE, SAS_TOKEN_TYPE};
use crate::clock;
use crate::config::Rights;
use crate::encoding;
use crate::entity::handle::{EntityError, Properties as AppProperties, ReceiveMode, Settlement};
use crate::entity::operation::{Answer, Operation, MAX_BATCH_DELETE, MAX_PEEK};
use crate::entity::topic::{LocalTimes, Rule};
use crate::filter::description;
use crate::message::{self, Arrival, MessageError};
use crate::node::response::{string_map, Response};
use crate::wire;

/// What a request message says, decoded once.
#[derive(Debug, Default)]
pub struct Request {
    /// `properties.message-id`, echoed as the response's `correlation-id`.
    pub message_id: Option<MessageId>,
    /// `properties.reply-to`: which receiver link gets the response.
    pub reply_to: Option<String>,
    /// Application property `operation`.
    pub operation: Option<String>,
    /// The other application properties (CBS reads `type` and `name` from them).
    pub application_properties: OrderedMap<String, SimpleValue>,
    /// The `amqp-value` body (a map for management requests).
    pub body: Value,
    /// Why part of the request did not decode, if it did not.
    pub malformed: Option<String>,
}

impl Request {
    /// Decodes the sections a request needs, skipping the others. What does not decode is
    /// noted in [`Request::malformed`] and the rest is kept, so that the answer can still
    /// carry the request's `message-id` and say what was wrong.
    pub fn decode(bytes: &Bytes) -> Request {
        let mut request = Request::default();
        if let Err(error) = request.read_sections(bytes) {
            request.malformed = Some(error.to_string());
        }
        request
    }

    /// Decodes what the complete leading sections of a request's first bytes say (the rest
    /// of a request too large to keep was not kept): its `message-id` and `reply-to`, enough
    /// to answer it.
    pub fn decode_head(head: &Bytes) -> Request {
        let mut end = 0;
        while let Ok(len) = encoding::value_len(head, end) {
            end += len;
        }
        Request::decode(&head.slice(..end))
    }

    fn read_sections(&mut self, bytes: &Bytes) -> Result<(), MessageError> {
        for section in message::scan_sections(bytes)? {
            let raw = &bytes[section.range.clone()];
            if matches!(section.code, 0x73 | 0x74 | 0x77) {
                // serde_amqp decodes these: every length and depth is checked first.
                encoding::check_value(raw, 0)?;
            }
            match section.code {
                0x73 => {
                    let properties: Properties = serde_amqp::from_slice(raw)
                        .map_err(|_| MessageError::Malformed("properties"))?;
                    self.message_id = properties.message_id;
                    self.reply_to = properties.reply_to;
                }
                0x74 => {
                    let app: ApplicationProperties = serde_amqp::from_slice(raw)
                        .map_err(|_| MessageError::Malformed("application-properties"))?;
                    if let Some(SimpleValue::String(operation)) = app.0.get("operation") {
                        self.operation = Some(operation.clone());
                    }
                    self.application_properties = app.0;
                }
                0x77 => {
                    let value: AmqpValue<Value> = serde_amqp::from_slice(raw)
                        .map_err(|_| MessageError::Malformed("amqp-value"))?;
                    self.body = value.0;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The 400 answer to a request that did not decode.
    fn refusal(&self) -> Option<Response> {
        self.malformed.as_ref().map(|why| {
            Response::error(
                400,
                wire::condition::ARGUMENT_ERROR,
                format!("the request does not decode: {why}"),
            )
        })
    }
}

/// Token types a `put-token` may carry (amqp-dialect.md §2.2).
const TOKEN_TYPES: [&str; 2] = [SAS_TOKEN_TYPE, JWT_TOKEN_TYPE];

/// The CBS answer to a request. A `put-token` is verified and kept by `access` (202), or
/// refused with 401 and the check that failed (404 for an audience naming no entity); one
/// without a string token, a known token type or an audience is refused with 400
/// `com.microsoft:argument-error`, naming what is wrong. `exists` says whether an audience's
/// path names an entity.
pub fn cbs(request: &Request, access: &mut Access, exists: impl Fn(&str) -> bool) -> Response {
    if let Some(refusal) = request.refusal() {
        return refusal;
    }
    if request.operation.as_deref() != Some("put-token") {
        return Response::error(
            501,
            wire::condition::NOT_IMPLEMENTED,
            format!(
                "CBS operation {:?} is not supported; only put-token is",
                request.operation
            ),
        );
    }
    let (kind, audience, token) = match put_token_fields(request) {
        Ok(fields) => fields,
        Err(problem) => return Response::error(400, wire::condition::ARGUMENT_ERROR, problem),
    };
    match access.put_token(audience, kind, &token, exists, clock::real_ms()) {
        Ok(_) => Response {
            status: 202,
            description: "Accepted".into(),
            condition: None,
            body: None,
        },
        Err(refusal) => {
            crate::metrics::broker().cbs_failures.inc();
            tracing::info!(status = refusal.status, description = %refusal.description, "put-token refused");
            let condition = match refusal.status {
                404 => wire::condition::NOT_FOUND,
                _ => wire::condition::UNAUTHORIZED_ACCESS,
            };
            Response::error(i32::from(refusal.status), condition, refusal.description)
        }
    }
}

/// The token type, audience and token of a `put-token` request, or what is wrong with it.
fn put_token_fields(request: &Request) -> Result<(&str, &str, String), String> {
    let text = |key: &str| match request.application_properties.get(key) {
        Some(SimpleValue::String(value)) => Some(value.as_str()),
        Some(SimpleValue::Symbol(value)) => Some(value.as_str()),
        _ => None,
    };
    let kind = match text("type") {
        Some(kind) if TOKEN_TYPES.contains(&kind) => kind,
        Some(kind) => {
            return Err(format!(
                "put-token: token type {kind:?} is not supported; expected one of {TOKEN_TYPES:?}"
            ))
        }
        None => return Err("put-token: the application property type must be a string".into()),
    };
    let audience = text("name")
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            "put-token: the application property name (the audience) must be a non-empty string"
                .to_owned()
        })?;
    let token = match &request.body {
        Value::String(token) if !token.is_empty() => token.clone(),
        Value::Binary(token) if !token.is_empty() => String::from_utf8_lossy(token).into_owned(),
        other => {
            return Err(format!(
                "put-token: the body must be the token as a non-empty string, not {}",
                value_kind(other)
            ))
        }
    };
    Ok((kind, audience, token))
}

/// The rights an operation needs (one of them is enough): settling, peeking, renewing and
/// session state are a receiver's (Listen), scheduling a sender's (Send), rules Manage.
pub fn rights_of(operation: &Operation) -> Rights {
    match operation {
        Operation::Schedule { .. } | Operation::CancelScheduled { .. } => Rights::SEND,
        Operation::AddRule { .. }
        | Operation::ReplaceRule { .. }
        | Operation::Resubmit { .. }
        | Operation::Purge
        | Operation::RemoveRule { .. }
        | Operation::EnumerateRules { .. } => Rights::MANAGE,
        Operation::Peek { .. }
        | Operation::RenewLock { .. }
        | Operation::ReceiveBySequence { .. }
        | Operation::BatchDelete { .. }
        | Operation::UpdateDisposition { .. }
        | Operation::RenewSessionLock { .. }
        | Operation::GetSessionState { .. }
        | Operation::SetSessionState { .. }
        | Operation::GetMessageSessions { .. } => Rights::LISTEN,
    }
}

/// The 401 answer to an operation the connection has no right to.
pub fn unauthorized(description: String) -> Response {
    Response::error(401, wire::condition::UNAUTHORIZED_ACCESS, description)
}

/// A value's AMQP type, for error descriptions.
fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::String(_) => "an empty string",
        Value::Binary(_) => "an empty binary",
        Value::Int(_) | Value::Long(_) | Value::Short(_) | Value::Byte(_) => "an integer",
        Value::Uint(_) | Value::Ulong(_) | Value::Ushort(_) | Value::Ubyte(_) => "an integer",
        Value::List(_) | Value::Array(_) => "a list",
        Value::Map(_) => "a map",
        Value::Symbol(_) => "a symbol",
        _ => "another type",
    }
}

/// The response to an operation the entity performed (amqp-dialect.md §7.3), or refused.
pub fn respond(result: Result<Answer, EntityError>) -> Response {
    let binary = |bytes: Bytes| Value::Binary(Binary::from(bytes.to_vec()));
    match result {
        Err(error) => Response::refusal(&error),
        Ok(Answer::Peeked(messages)) if messages.is_empty() => Response::no_content(),
        Ok(Answer::Peeked(messages)) => {
            let messages = messages
                .into_iter()
                .map(|message| string_map(vec![("message", binary(message))]))
                .collect();
            Response::ok(vec![("messages", Value::List(messages))])
        }
        Ok(Answer::Renewed(expirations)) => {
            let expirations = expirations
                .into_iter()
                .map(|until| Value::Timestamp(Timestamp::from_milliseconds(until)))
                .collect();
            Response::ok(vec![("expirations", Value::Array(Array(expirations)))])
        }
        Ok(Answer::Received(messages)) => {
            let messages = messages
                .into_iter()
                .map(|(token, message)| {
                    string_map(vec![
                        ("lock-token", Value::Uuid(token.into_bytes().into())),
                        ("message", binary(message)),
                    ])
                })
                .collect();
            Response::ok(vec![("messages", Value::List(messages))])
        }
        Ok(Answer::Scheduled(seqs)) => {
            let seqs = seqs.into_iter().map(Value::Long).collect();
            Response::ok(vec![("sequence-numbers", Value::Array(Array(seqs)))])
        }
        Ok(Answer::Rules(rules)) if rules.is_empty() => Response::no_content(),
        Ok(Answer::Rules(rules)) => {
            let rules = rules
                .iter()
                .map(|rule| {
                    let described =
                        description::described(&rule.name, &rule.description(), rule.created_ms);
                    string_map(vec![("rule-description", described)])
                })
                .collect();
            Response::ok(vec![("rules", Value::List(rules))])
        }
        Ok(Answer::SessionLockedUntil(until)) => Response::ok(vec![(
            "expiration",
            Value::Timestamp(Timestamp::from_milliseconds(until)),
        )]),
        Ok(Answer::SessionState(state)) => {
            Response::ok(vec![("session-state", state.map_or(Value::Null, binary))])
        }
        Ok(Answer::Sessions { ids, .. }) if ids.is_empty() => Response::no_content(),
        Ok(Answer::Sessions { skip, ids }) => {
            let ids = ids.into_iter().map(Value::String).collect();
            Response::ok(vec![
                ("skip", Value::Int(i32::try_from(skip).unwrap_or(i32::MAX))),
                ("sessions-ids", Value::Array(Array(ids))),
            ])
        }
        // Nothing deleted: 204 with message-not-found, which every SDK reads as 0.
        Ok(Answer::Deleted(0)) => Response::error(
            204,
            wire::condition::MESSAGE_NOT_FOUND,
            "no message enqueued before the given time was deleted",
        ),
        Ok(Answer::Deleted(count)) => Response::ok(vec![(
            "message-count",
            Value::Int(i32::try_from(count).unwrap_or(i32::MAX)),
        )]),
        // The console's operations never come through AMQP; nothing to add to the answer.
        Ok(Answer::Done | Answer::Moved(_) | Answer::Purged(_)) => Response::ok(Vec::new()),
    }
}

/// Reads a management request into an [`Operation`], or the response that refuses it.
///
/// # Errors
/// 501 for an operation this version does not implement, 400 for a malformed request.
pub fn parse(request: &Request) -> Result<Operation, Response> {
    if let Some(refusal) = request.refusal() {
        return Err(refusal);
    }
    let operation = request.operation.as_deref().unwrap_or_default();
    let body = match &request.body {
        Value::Map(map) => map,
        _ => return Err(Response::bad_request("the request body must be a map")),
    };
    match operation {
        "com.microsoft:peek-message" => Ok(Operation::Peek {
            from: long(body, "from-sequence-number")?,
            // Service Bus returns at most 250 per call; the SDKs ask again for more.
            count: usize::try_from(int(body, "message-count")?.max(0))
                .unwrap_or(0)
                .min(MAX_PEEK),
            session: optional_session(body)?,
        }),
        "com.microsoft:renew-lock" => Ok(Operation::RenewLock {
            tokens: uuids(body, "lock-tokens")?,
        }),
        "com.microsoft:receive-by-sequence-number" => Ok(Operation::ReceiveBySequence {
            seqs: longs(body, "sequence-numbers")?,
            mode: match field(body, "receiver-settle-mode") {
                Some(Value::Uint(0)) => ReceiveMode::ReceiveAndDelete,
                _ => ReceiveMode::PeekLock,
            },
            session: optional_session(body)?,
        }),
        "com.microsoft:batch-delete-messages" => Ok(Operation::BatchDelete {
            count: match usize::try_from(int(body, "message-count")?) {
                Ok(count @ 1..=MAX_BATCH_DELETE) => count,
                _ => {
                    return Err(Response::bad_request(format!(
                        "message-count must be from 1 to {MAX_BATCH_DELETE}"
                    )))
                }
            },
            before_ms: match field(body, "enqueued-time-utc") {
                Some(Value::Timestamp(at)) => at.milliseconds(),
                None | Some(Value::Null) => clock::now_ms(),
                Some(_) => return Err(missing("enqueued-time-utc", "a timestamp")),
            },
            session: optional_session(body)?,
        }),
        "com.microsoft:schedule-message" => Ok(Operation::Schedule {
            messages: scheduled_messages(body)?,
        }),
        "com.microsoft:cancel-scheduled-message" => Ok(Operation::CancelScheduled {
            seqs: longs(body, "sequence-numbers")?,
        }),
        "com.microsoft:add-rule" => Ok(Operation::AddRule {
            rule: added_rule(body)?,
        }),
        "com.microsoft:remove-rule" => Ok(Operation::RemoveRule {
            name: rule_name(body)?,
        }),
        "com.microsoft:enumerate-rules" => Ok(Operation::EnumerateRules {
            skip: usize::try_from(int(body, "skip")?.max(0)).unwrap_or(0),
            top: usize::try_from(int(body, "top")?.max(0)).unwrap_or(0),
        }),
        "com.microsoft:update-disposition" => Ok(Operation::UpdateDisposition {
            tokens: uuids(body, "lock-tokens")?,
            settlement: disposition(body)?,
        }),
        "com.microsoft:renew-session-lock" => Ok(Operation::RenewSessionLock {
            session: session(body)?,
        }),
        "com.microsoft:get-session-state" => Ok(Operation::GetSessionState {
            session: session(body)?,
        }),
        "com.microsoft:set-session-state" => Ok(Operation::SetSessionState {
            session: session(body)?,
            // An empty state clears it, as null does: the Go SDK sends its nil state as an
            // empty binary and reads back nil from Service Bus.
            state: match field(body, "session-state") {
                None | Some(Value::Null) => None,
                Some(Value::Binary(state)) if state.is_empty() => None,
                Some(Value::Binary(state)) if state.len() > MAX_SESSION_STATE_BYTES => {
                    return Err(Response::bad_request(format!(
                        "session-state holds {} bytes; Service Bus allows at most \
                         {MAX_SESSION_STATE_BYTES} (256 KB, one Standard message)",
                        state.len()
                    )))
                }
                Some(Value::Binary(state)) => Some(Bytes::from(state.to_vec())),
                Some(_) => return Err(missing("session-state", "a binary or null")),
            },
        }),
        "com.microsoft:get-message-sessions" => Ok(Operation::GetMessageSessions {
            skip: usize::try_from(int(body, "skip")?.max(0)).unwrap_or(0),
            top: usize::try_from(int(body, "top")?.max(0)).unwrap_or(0),
            updated_after: match field(body, "last-updated-time") {
                Some(Value::Timestamp(at)) if at.milliseconds() < DATE_TIME_MAX_MS => {
                    Some(at.milliseconds())
                }
                _ => None,
            },
        }),
        other => Err(Response::error(
            501,
            wire::condition::NOT_IMPLEMENTED,
            format!("the management operation '{other}' is not implemented by Tidebus"),
        )),
    }
}

/// The most bytes of session state (Service Bus Standard: the size of one message).
const MAX_SESSION_STATE_BYTES: usize = 256 * 1024;

/// .NET's `DateTime.MaxValue` in ms since the Unix epoch: as `last-updated-time` of
/// `get-message-sessions`, it asks for every session with messages or state.
const DATE_TIME_MAX_MS: i64 = 253_402_300_800_000;

/// The `session-id` of a session request: a string.
fn session(body: &OrderedMap<Value, Value>) -> Result<String, Response> {
    optional_session(body)?.ok_or_else(|| missing("session-id", "a string"))
}

/// The `session-id` a session receiver's request may carry.
fn optional_session(body: &OrderedMap<Value, Value>) -> Result<Option<String>, Response> {
    match field(body, "session-id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) => Ok(Some(id.clone())),
        Some(_) => Err(missing("session-id", "a string")),
    }
}

/// The `rule-name` of a rule request: a non-empty string.
fn rule_name(body: &OrderedMap<Value, Value>) -> Result<String, Response> {
    match field(body, "rule-name") {
        Some(Value::String(name)) if !name.is_empty() => Ok(name.clone()),
        _ => Err(missing("rule-name", "a non-empty string")),
    }
}

/// The rule an `add-rule` request describes (amqp-dialect.md §9.1), parsed once here.
fn added_rule(body: &OrderedMap<Value, Value>) -> Result<Rule, Response> {
    let name = rule_name(body)?;
    let Some(Value::Map(map)) = field(body, "rule-description") else {
        return Err(missing("rule-description", "a map"));
    };
    let described = description::read(map).map_err(Response::bad_request)?;
    Ok(Rule {
        name,
        filter: described.filter,
        action: described.action,
        created_ms: crate::clock::now_ms(),
        // AMQP timestamps are UTC.
        local_times: LocalTimes::default(),
    })
}

/// The settlement an `update-disposition` asks for (`defered` is the SDKs' spelling).
fn disposition(body: &OrderedMap<Value, Value>) -> Result<Settlement, Response> {
    let properties = match field(body, "properties-to-modify") {
        Some(Value::Map(map)) => map
            .iter()
            .filter_map(|(key, value)| match key {
                Value::String(key) => SimpleValue::try_from(value.clone())
                    .ok()
                    .filter(|value| !matches!(value, SimpleValue::Null))
                    .map(|value| (key.clone(), value)),
                _ => None,
            })
            .collect(),
        _ => AppProperties::new(),
    };
    let text = |key: &str| match field(body, key) {
        Some(Value::String(value)) => Some(value.clone()),
        _ => None,
    };
    match text("disposition-status").as_deref() {
        Some("completed") => Ok(Settlement::Complete),
        Some("abandoned") => Ok(Settlement::Abandon(properties)),
        Some("defered" | "deferred") => Ok(Settlement::Defer(properties)),
        Some("suspended") => Ok(Settlement::DeadLetter {
            reason: text("deadletter-reason"),
            description: text("deadletter-description"),
            properties,
        }),
        other => Err(Response::bad_request(format!(
            "disposition-status {other:?} is not one of completed, abandoned, defered, suspended"
        ))),
    }
}

/// The messages of a `schedule-message` request: each entry's `message` is a whole encoded
/// message that must carry its scheduled enqueue time.
fn scheduled_messages(body: &OrderedMap<Value, Value>) -> Result<Vec<Arrival>, Response> {
    let entries = elements(body, "messages")?;
    if entries.is_empty() {
        return Err(Response::bad_request("'messages' is empty"));
    }
    let mut messages = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let bytes = match entry {
            Value::Map(map) => match field(map, "message") {
                Some(Value::Binary(bytes)) => Bytes::from(bytes.to_vec()),
                _ => return Err(missing(&format!("messages[{index}].message"), "a binary")),
            },
            _ => return Err(missing(&format!("messages[{index}]"), "a map")),
        };
        let arrival = message::inspect(bytes).map_err(|error| {
            Response::bad_request(format!("messages[{index}].message is malformed: {error}"))
        })?;
        if arrival.scheduled_ms.is_none() {
            return Err(Response::bad_request(format!(
                "messages[{index}].message has no x-opt-scheduled-enqueue-time annotation"
            )));
        }
        messages.push(arrival);
    }
    Ok(messages)
}

/// A request body's field: keyed by a string as the SDKs send it, or by a symbol, which
/// Service Bus takes too.
fn field<'a>(map: &'a OrderedMap<Value, Value>, key: &str) -> Option<&'a Value> {
    map.get(&Value::String(key.to_string()))
        .or_else(|| map.get(&Value::Symbol(key.into())))
}

fn long(map: &OrderedMap<Value, Value>, key: &str) -> Result<i64, Response> {
    match field(map, key) {
        Some(Value::Long(v)) => Ok(*v),
        Some(Value::Int(v)) => Ok(i64::from(*v)),
        Some(Value::Ulong(v)) => i64::try_from(*v).map_err(|_| missing(key, "a long")),
        _ => Err(missing(key, "a long")),
    }
}

fn int(map: &OrderedMap<Value, Value>, key: &str) -> Result<i64, Response> {
    match field(map, key) {
        Some(Value::Int(v)) => Ok(i64::from(*v)),
        Some(Value::Long(v)) => Ok(*v),
        Some(Value::Uint(v)) => Ok(i64::from(*v)),
        _ => Err(missing(key, "an int")),
    }
}

fn elements<'a>(map: &'a OrderedMap<Value, Value>, key: &str) -> Result<&'a [Value], Response> {
    match field(map, key) {
        Some(Value::Array(Array(items))) | Some(Value::List(items)) => Ok(items),
        _ => Err(missing(key, "an array")),
    }
}

fn longs(map: &OrderedMap<Value, Value>, key: &str) -> Result<Vec<i64>, Response> {
    elements(map, key)?
        .iter()
        .map(|value| match value {
            Value::Long(v) => Ok(*v),
            _ => Err(missing(key, "an array of longs")),
        })
        .collect()
}

fn uuids(map: &OrderedMap<Value, Value>, key: &str) -> Result<Vec<Uuid>, Response> {
    elements(map, key)?
        .iter()
        .map(|value| match value {
            Value::Uuid(uuid) => Ok(Uuid::from_bytes(uuid.clone().into_inner())),
            _ => Err(missing(key, "an array of uuids")),
        })
        .collect()
}

fn missing(key: &str, what: &str) -> Response {
    Response::bad_request(format!("the request needs '{key}' as {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::sas::sign;
    use crate::auth::Policies;
    use crate::node::response::Style;
    use fe2o3_amqp::types::primitives::Symbol;
    use std::sync::Arc;

    fn request(operation: &str, body: Vec<(&str, Value)>) -> Request {
        Request {
            message_id: Some(MessageId::String("m1".into())),
            reply_to: None,
            operation: Some(operation.into()),
            body: string_map(body),
            ..Request::default()
        }
    }

    fn put_token(kind: Option<&str>, token: Value) -> Request {
        let mut properties = OrderedMap::new();
        if let Some(kind) = kind {
            properties.insert("type".to_string(), SimpleValue::String(kind.into()));
        }
        properties.insert("name".to_string(), SimpleValue::String("sb://h/q".into()));
        Request {
            operation: Some("put-token".into()),
            application_properties: properties,
            body: token,
            ..Request::default()
        }
    }

    #[test]
    fn a_request_that_does_not_decode_is_answered_400_with_its_message_id() {
        let mut bytes = serde_amqp::to_vec(&Properties {
            message_id: Some(MessageId::String("m7".into())),
            ..Properties::default()
        })
        .expect("properties");
        // application-properties that are a list, not a map.
        bytes.extend_from_slice(&[0x00, 0x53, 0x74, 0xc0, 0x01, 0x00]);
        let request = Request::decode(&Bytes::from(bytes));
        assert_eq!(request.message_id, Some(MessageId::String("m7".into())));
        let refused = parse(&request).expect_err("refused");
        assert_eq!(refused.status, 400);
        assert_eq!(refused.condition, Some(wire::condition::ARGUMENT_ERROR));
        assert_eq!(cbs(&request, &mut access(), |_| true).status, 400);
    }

    #[test]
    fn the_head_of_a_request_cut_short_names_it_and_its_reply_link() {
        let mut bytes = serde_amqp::to_vec(&Properties {
            message_id: Some(MessageId::String("m8".into())),
            reply_to: Some("replies".into()),
            ..Properties::default()
        })
        .expect("properties");
        let mut app = OrderedMap::new();
        app.insert(
            "operation".to_string(),
            SimpleValue::String("com.microsoft:schedule-message".into()),
        );
        bytes.extend(serde_amqp::to_vec(&ApplicationProperties(app)).expect("app"));
        let body = AmqpValue(Value::Binary(vec![7; 1000].into()));
        let whole = serde_amqp::to_vec(&body).expect("body");
        bytes.extend_from_slice(&whole[..100]);
        let head = Request::decode_head(&Bytes::from(bytes));
        assert_eq!(head.malformed, None, "the body cut short is left out");
        assert_eq!(head.message_id, Some(MessageId::String("m8".into())));
        assert_eq!(head.reply_to.as_deref(), Some("replies"));
        assert_eq!(
            head.operation.as_deref(),
            Some("com.microsoft:schedule-message")
        );
        assert_eq!(head.body, Value::Null);
        assert_eq!(
            Request::decode_head(&Bytes::from_static(&[0x00, 0x53])).message_id,
            None
        );
    }

    fn access() -> Access {
        let config = crate::config::Config::embedded_default();
        Access::new(Arc::new(Policies::from_config(&config)), None)
    }

    #[test]
    fn body_fields_keyed_by_symbols_read_like_strings() {
        let mut body = OrderedMap::new();
        body.insert(Value::Symbol("from-sequence-number".into()), Value::Long(3));
        body.insert(Value::Symbol("message-count".into()), Value::Int(2));
        let request = Request {
            operation: Some("com.microsoft:peek-message".into()),
            body: Value::Map(body),
            ..Request::default()
        };
        assert_eq!(
            parse(&request),
            Ok(Operation::Peek {
                from: 3,
                count: 2,
                session: None
            })
        );
    }

    #[test]
    fn cbs_verifies_tokens_and_refuses_malformed_requests_with_argument_error() {
        let token = || Value::String("SharedAccessSignature sr=x&sig=y".into());
        let mut access = access();
        for kind in ["jwt", "servicebus.windows.net:sastoken"] {
            let response = cbs(&put_token(Some(kind), token()), &mut access, |_| true);
            assert_eq!(response.status, 401, "{kind}");
            assert_eq!(
                response.condition,
                Some(wire::condition::UNAUTHORIZED_ACCESS)
            );
        }
        let expiry = u64::try_from(clock::now_ms() / 1000 + 3600).expect("positive");
        let signed = sign(
            "sb://h/q",
            "RootManageSharedAccessKey",
            b"SAS_KEY_VALUE",
            expiry,
        );
        let sas = Some("servicebus.windows.net:sastoken");
        let response = cbs(
            &put_token(sas, Value::String(signed.clone())),
            &mut access,
            |_| true,
        );
        assert_eq!(
            (response.status, response.description.as_str()),
            (202, "Accepted")
        );
        let response = cbs(&put_token(sas, Value::String(signed)), &mut access, |_| {
            false
        });
        assert_eq!(response.status, 404);
        assert_eq!(response.condition, Some(wire::condition::NOT_FOUND));
        for (request, says) in [
            (put_token(Some("jwt"), Value::Int(7)), "an integer"),
            (
                put_token(Some("no-such-type"), token()),
                "\"no-such-type\" is not supported",
            ),
            (put_token(None, token()), "type must be a string"),
            (
                put_token(Some("jwt"), Value::String(String::new())),
                "non-empty string",
            ),
        ] {
            let response = cbs(&request, &mut access, |_| true);
            assert_eq!(response.status, 400, "{says}");
            assert_eq!(response.condition, Some(wire::condition::ARGUMENT_ERROR));
            assert!(
                response.description.contains(says),
                "{}",
                response.description
            );
        }
    }

    #[test]
    fn parses_the_operations_the_sdks_send() {
        let peek = request(
            "com.microsoft:peek-message",
            vec![
                ("from-sequence-number", Value::Long(5)),
                ("message-count", Value::Int(10)),
            ],
        );
        assert_eq!(
            parse(&peek),
            Ok(Operation::Peek {
                from: 5,
                count: 10,
                session: None
            })
        );
        let token = Uuid::from_u128(42);
        let dispose = request(
            "com.microsoft:update-disposition",
            vec![
                ("disposition-status", Value::String("defered".into())),
                (
                    "lock-tokens",
                    Value::Array(Array(vec![Value::Uuid(token.into_bytes().into())])),
                ),
            ],
        );
        assert_eq!(
            parse(&dispose),
            Ok(Operation::UpdateDisposition {
                tokens: vec![token],
                settlement: Settlement::Defer(Vec::new())
            })
        );
    }

    #[test]
    fn refuses_unknown_and_malformed_requests_clearly() {
        let unknown = parse(&request("com.microsoft:no-such-operation", vec![]));
        let unknown = unknown.expect_err("refused");
        assert_eq!(
            (unknown.status, unknown.condition),
            (501, Some("amqp:not-implemented"))
        );
        let nameless = parse(&request("com.microsoft:add-rule", vec![])).expect_err("refused");
        assert_eq!(nameless.status, 400);
        assert!(
            nameless.description.contains("rule-name"),
            "{}",
            nameless.description
        );
        let sql = string_map(vec![("expression", Value::String("color = ".into()))]);
        let bad_sql = request(
            "com.microsoft:add-rule",
            vec![
                ("rule-name", Value::String("r".into())),
                ("rule-description", string_map(vec![("sql-filter", sql)])),
            ],
        );
        let bad_sql = parse(&bad_sql).expect_err("refused");
        assert_eq!(
            (bad_sql.status, bad_sql.condition),
            (400, Some("com.microsoft:argument-error"))
        );
        assert!(
            bad_sql.description.contains("position"),
            "{}",
            bad_sql.description
        );
        let bad = parse(&request("com.microsoft:renew-lock", vec![])).expect_err("refused");
        assert_eq!(bad.status, 400);
        assert!(
            bad.description.contains("lock-tokens"),
            "{}",
            bad.description
        );
        let state = |bytes: usize| {
            request(
                "com.microsoft:set-session-state",
                vec![
                    ("session-id", Value::String("s".into())),
                    ("session-state", Value::Binary(vec![0; bytes].into())),
                ],
            )
        };
        assert!(parse(&state(MAX_SESSION_STATE_BYTES)).is_ok());
        assert!(
            matches!(
                parse(&state(0)),
                Ok(Operation::SetSessionState { state: None, .. })
            ),
            "an empty state clears it"
        );
        let big = parse(&state(MAX_SESSION_STATE_BYTES + 1)).expect_err("refused");
        assert_eq!(big.status, 400);
        assert!(
            big.description.contains("at most 262144"),
            "{}",
            big.description
        );
        for count in [0, 4_001] {
            let delete = request(
                "com.microsoft:batch-delete-messages",
                vec![("message-count", Value::Int(count))],
            );
            let refused = parse(&delete).expect_err("refused");
            assert_eq!(
                refused.description, "message-count must be from 1 to 4000",
                "{count}"
            );
        }
    }

    #[test]
    fn encodes_the_status_with_the_types_the_sdks_check() {
        let bytes = Response::error(410, "com.microsoft:message-lock-lost", "gone")
            .encode(Some(MessageId::Ulong(7)), Style::Management);
        let request = Request::decode(&bytes);
        assert_eq!(request.malformed, None);
        assert_eq!(request.body, Value::Null);
        let sections = message::scan_sections(&bytes).expect("scan");
        let app: ApplicationProperties =
            serde_amqp::from_slice(&bytes[sections[1].range.clone()]).expect("app");
        assert_eq!(app.0.get("statusCode"), Some(&SimpleValue::Int(410)));
        assert_eq!(
            app.0.get("errorCondition"),
            Some(&SimpleValue::Symbol(Symbol::from(
                "com.microsoft:message-lock-lost"
            )))
        );
        let properties: Properties =
            serde_amqp::from_slice(&bytes[sections[0].range.clone()]).expect("props");
        assert_eq!(properties.correlation_id, Some(MessageId::Ulong(7)));
    }
}
