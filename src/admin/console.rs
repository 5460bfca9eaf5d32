//! The web console on the administration listener: three static files embedded in the binary
//! (`GET /`, `/$console/console.js`, `/$console/console.css`; they hold no data and need no
//! authorization), and the JSON API the page calls under `/$console/api/`, authorized as the
//! management API is:
//! - `GET entities`: every queue, topic and subscription with its counts;
//! - `GET messages?entity=&state=&from=&top=`: a page of peeked messages in one state
//!   (`active`, `scheduled`, `deferred`, or `deadletter`: the entity's dead-letter queue);
//! - `GET reasons?entity=`: the dead-letter reasons of the first 1,000 dead letters;
//! - `POST resubmit {entity, sequenceNumber}`: a dead letter back to its queue or
//!   subscription as a new arrival (inside the entity's actor: never lost, never doubled);
//! - `POST purge {entity}`: every message of its dead-letter queue deleted;
//! - `POST send {entity, body, contentType, messageId, subject, sessionId,
//!   applicationProperties}`: a test message, stored as a client's send is.
//!
//! The POST calls take JSON only and refuse another page's `Origin` (cross-site requests).

use std::collections::BTreeMap;

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Data, Properties};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol};
use http_body_util::Full;
use hyper::header::{HeaderName, CONTENT_TYPE, HOST, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value as Json};
use tokio::sync::mpsc;

use super::{api, peeked, respond, Admin};
use crate::config::Declaration;
use crate::entity::handle::{Command, EntityEvent, LaneId, Ticket};
use crate::entity::operation::{Answer, Operation};
use crate::message;
use crate::wire;

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// Most messages a page shows.
const MAX_TOP: usize = 100;
/// A page of messages ends once its JSON holds this many bytes (the message that passes it
/// is the last one shown).
const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Most messages one request peeks through looking for a state.
const MAX_SCAN: usize = 5_000;
/// Dead letters whose reasons are counted.
const REASONS_SCANNED: usize = 1_000;

/// Answers a console request: `path` is `/` or starts with `/$console/`.
pub async fn handle(admin: &Admin, request: Request<Bytes>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/") => respond(StatusCode::OK, "text/html; charset=utf-8", INDEX.into()),
        (&Method::GET, "/$console/console.js") => respond(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            SCRIPT.into(),
        ),
        (&Method::GET, "/$console/console.css") => {
            respond(StatusCode::OK, "text/css; charset=utf-8", STYLE.into())
        }
        _ => match path.strip_prefix("/$console/api/") {
            Some(call) => {
                if let Err(reason) = api::authorize(admin, &request, "") {
                    return failure(StatusCode::UNAUTHORIZED, &reason);
                }
                if let Err((status, reason)) = same_origin_json(&request) {
                    return failure(status, &reason);
                }
                let call = call.to_owned();
                match call_api(admin, &method, &call, request).await {
                    Ok(answer) => respond(StatusCode::OK, "application/json", answer),
                    Err((status, reason)) => failure(status, &reason),
                }
            }
            None => failure(StatusCode::NOT_FOUND, &format!("no console page at {path}")),
        },
    }
}

type Failure = (StatusCode, String);

/// A changing call (POST) must come from the console's own page: JSON (which a cross-site
/// form cannot send without a CORS preflight this server never grants) and, when the browser
/// names an `Origin`, the host it was sent to. Otherwise any web page a developer visits could
/// purge or fill a broker that lets anonymous clients in.
fn same_origin_json(request: &Request<Bytes>) -> Result<(), Failure> {
    if request.method() != Method::POST {
        return Ok(());
    }
    let header = |name: HeaderName| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    if !header(CONTENT_TYPE).starts_with("application/json") {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a console call sends Content-Type: application/json".into(),
        ));
    }
    let origin = header(ORIGIN);
    let host = header(HOST);
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    if !origin.is_empty() && !origin_host.eq_ignore_ascii_case(&host) {
        return Err((
            StatusCode::FORBIDDEN,
            format!("a console call from {origin} is refused: only the console's own page may change the broker"),
        ));
    }
    Ok(())
}

async fn call_api(
    admin: &Admin,
    method: &Method,
    call: &str,
    request: Request<Bytes>,
) -> Result<String, Failure> {
    if (method, call) != (&Method::GET, "messages") {
        return json_call(admin, method, call, request)
            .await
            .map(|answer| answer.to_string());
    }
    let query = api::query(request.uri().query().unwrap_or_default());
    let from = query.get("from").and_then(|n| n.parse().ok()).unwrap_or(0);
    let top = query
        .get("top")
        .and_then(|n| n.parse().ok())
        .unwrap_or(20)
        .clamp(1, MAX_TOP);
    let (entity, state) = (param(&query, "entity")?, param(&query, "state")?);
    messages(admin, &entity, &state, from, top).await
}

/// The query parameter `name`, which the call needs.
fn param(query: &BTreeMap<String, String>, name: &str) -> Result<String, Failure> {
    query
        .get(name)
        .cloned()
        .ok_or_else(|| bad(&format!("the query names no {name}")))
}

/// A console call whose answer is built as JSON (all but `messages`).
async fn json_call(
    admin: &Admin,
    method: &Method,
    call: &str,
    request: Request<Bytes>,
) -> Result<Json, Failure> {
    let query = api::query(request.uri().query().unwrap_or_default());
    match (method, call) {
        (&Method::GET, "entities") => Ok(entities(admin).await),
        (&Method::GET, "reasons") => reasons(admin, &param(&query, "entity")?).await,
        (&Method::POST, "resubmit" | "purge" | "send") => {
            let sent: Json = serde_json::from_slice(request.body())
                .map_err(|e| bad(&format!("the body is not JSON: {e}")))?;
            let entity = sent["entity"]
                .as_str()
                .ok_or_else(|| bad("the body names no entity"))?;
            match call {
                "resubmit" => {
                    let seq = sent["sequenceNumber"]
                        .as_i64()
                        .ok_or_else(|| bad("the body names no sequenceNumber"))?;
                    let path = dead_letter_path(entity);
                    match operate(admin, &path, Operation::Resubmit { seq }).await? {
                        Answer::Moved(moved) => Ok(json!({ "sequenceNumber": moved })),
                        _ => Ok(json!({})),
                    }
                }
                "purge" => match operate(admin, &dead_letter_path(entity), Operation::Purge).await?
                {
                    Answer::Purged(count) => Ok(json!({ "purged": count })),
                    _ => Ok(json!({})),
                },
                _ => send(admin, entity, &sent).await,
            }
        }
        _ => Err((
            StatusCode::NOT_FOUND,
            format!("{method} /$console/api/{call} is not a console call"),
        )),
    }
}

fn bad(reason: &str) -> Failure {
    (StatusCode::BAD_REQUEST, reason.to_owned())
}

fn failure(status: StatusCode, reason: &str) -> Response<Full<Bytes>> {
    respond(
        status,
        "application/json",
        json!({ "error": reason }).to_string(),
    )
}

fn dead_letter_path(entity: &str) -> String {
    format!("{entity}/$DeadLetterQueue")
}

async fn operate(admin: &Admin, path: &str, operation: Operation) -> Result<Answer, Failure> {
    admin
        .registry
        .operate(path, operation)
        .await
        .map_err(|refused| (api::registry_status(&refused), refused.to_string()))
}

/// Every queue, topic and subscription with its counts.
async fn entities(admin: &Admin) -> Json {
    let mut listed = Vec::new();
    for entry in admin.registry.entries() {
        let stats = api::stats(&entry).await;
        let counts = |main: LaneId| {
            let (own, dead) = (stats.lane(main), stats.lane(main.dead_letter_lane()));
            json!({
                "active": own.active,
                "scheduled": own.scheduled,
                "deferred": own.deferred,
                "deadLetter": dead.active + dead.deferred,
                "bytes": own.bytes + dead.bytes,
            })
        };
        let name = entry.declaration.name().to_owned();
        match &entry.declaration {
            Declaration::Queue(_) => listed.push(json!({
                "path": name,
                "kind": "queue",
                "counts": counts(LaneId::MAIN),
            })),
            Declaration::Topic(topic) => {
                let scheduled = stats.lane(LaneId::MAIN).scheduled;
                listed.push(json!({
                    "path": name,
                    "kind": "topic",
                    "counts": { "scheduled": scheduled },
                }));
                for subscription in &topic.subscriptions {
                    let Some(number) = entry.handle.subscription(&subscription.name) else {
                        continue;
                    };
                    let lane = LaneId {
                        subscription: number,
                        dead_letter: false,
                    };
                    listed.push(json!({
                        "path": format!("{name}/Subscriptions/{}", subscription.name),
                        "kind": "subscription",
                        "counts": counts(lane),
                    }));
                }
            }
        }
    }
    json!({ "entities": listed })
}

/// A page of `entity`'s messages in `state`, from sequence number `from` on, as JSON text:
/// each message is written out as soon as it is read, so the page holds its text only, at
/// most [`MAX_PAGE_BYTES`] and one message.
async fn messages(
    admin: &Admin,
    entity: &str,
    state: &str,
    from: i64,
    top: usize,
) -> Result<String, Failure> {
    let (path, wanted) = match state {
        "deadletter" => (dead_letter_path(entity), None),
        "active" => (entity.to_owned(), Some(0)),
        "deferred" => (entity.to_owned(), Some(1)),
        "scheduled" => (entity.to_owned(), Some(2)),
        other => {
            return Err(bad(&format!(
                "state {other:?} is none of active, scheduled, deferred, deadletter"
            )))
        }
    };
    let (mut shown, mut page, mut next, mut scanned) = (0, String::new(), from, 0);
    let mut more = true;
    while shown < top && page.len() < MAX_PAGE_BYTES && scanned < MAX_SCAN {
        let count = MAX_TOP;
        let operation = Operation::Peek {
            from: next,
            count,
            session: None,
        };
        let Answer::Peeked(batch) = operate(admin, &path, operation).await? else {
            break;
        };
        if batch.is_empty() {
            more = false;
            break;
        }
        scanned += batch.len();
        for encoded in batch {
            let Ok(message) = peeked::to_json(&encoded) else {
                continue;
            };
            let annotations = &message["annotations"];
            let seq = annotations[wire::annotation::SEQUENCE_NUMBER]
                .as_i64()
                .unwrap_or(next);
            next = seq + 1;
            let in_state = annotations[wire::annotation::MESSAGE_STATE]
                .as_i64()
                .unwrap_or(0);
            if wanted.is_none_or(|wanted| wanted == in_state) {
                if shown > 0 {
                    page.push(',');
                }
                page.push_str(&message.to_string());
                shown += 1;
            }
            if shown == top || page.len() >= MAX_PAGE_BYTES {
                break;
            }
        }
    }
    let next = json!(more.then_some(next));
    Ok(format!("{{\"messages\":[{page}],\"next\":{next}}}"))
}

/// How many of the first dead letters of `entity` carry each `DeadLetterReason`.
async fn reasons(admin: &Admin, entity: &str) -> Result<Json, Failure> {
    let path = dead_letter_path(entity);
    let (mut counted, mut next, mut reasons) = (0, 0, BTreeMap::<String, u64>::new());
    while counted < REASONS_SCANNED {
        let operation = Operation::Peek {
            from: next,
            count: MAX_TOP,
            session: None,
        };
        let Answer::Peeked(batch) = operate(admin, &path, operation).await? else {
            break;
        };
        if batch.is_empty() {
            break;
        }
        for encoded in batch.iter().take(REASONS_SCANNED - counted) {
            // Counted even when unreadable, so that this loop always ends.
            counted += 1;
            let Ok(message) = peeked::to_json(encoded) else {
                continue;
            };
            next = message["annotations"][wire::annotation::SEQUENCE_NUMBER]
                .as_i64()
                .map_or(next, |seq| seq + 1);
            let reason = message["applicationProperties"][wire::dead_letter::REASON]
                .as_str()
                .unwrap_or("(none)")
                .to_owned();
            *reasons.entry(reason).or_default() += 1;
        }
    }
    Ok(json!({
        "reasons": reasons,
        "counted": counted,
        "capped": counted >= REASONS_SCANNED,
    }))
}

/// Stores a test message in a queue or topic as a client's send would be.
async fn send(admin: &Admin, entity: &str, sent: &Json) -> Result<Json, Failure> {
    let text = |key: &str| {
        sent[key]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let properties = Properties {
        message_id: text("messageId").map(Into::into),
        subject: text("subject"),
        content_type: text("contentType").map(Symbol::from),
        group_id: text("sessionId"),
        ..Properties::default()
    };
    let mut application = ApplicationProperties::builder();
    if let Some(entries) = sent["applicationProperties"].as_object() {
        for (key, value) in entries {
            let value = match value {
                Json::String(s) => SimpleValue::String(s.clone()),
                Json::Bool(b) => SimpleValue::Bool(*b),
                Json::Number(n) => match n.as_i64() {
                    Some(n) => SimpleValue::Long(n),
                    None => SimpleValue::Double(n.as_f64().unwrap_or_default().into()),
                },
                _ => {
                    return Err(bad(&format!(
                        "application property {key:?} is not a string, number or boolean"
                    )))
                }
            };
            application = application.insert(key.as_str(), value);
        }
    }
    let body = sent["body"]
        .as_str()
        .unwrap_or_default()
        .as_bytes()
        .to_vec();
    let encode = |e: serde_amqp::Error| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut bytes = serde_amqp::to_vec(&properties).map_err(encode)?;
    bytes.extend(serde_amqp::to_vec(&application.build()).map_err(encode)?);
    bytes.extend(serde_amqp::to_vec(&Data(Binary::from(body))).map_err(encode)?);
    if bytes.len() as u64 > admin.max_message_size {
        return Err(bad("the message is larger than max_message_size"));
    }
    let entry = admin.registry.entry(entity).ok_or_else(|| {
        (
            StatusCode::NOT_FOUND,
            format!("no queue or topic {entity:?}"),
        )
    })?;
    let mut arrival = message::inspect(Bytes::from(bytes)).map_err(|e| bad(&e.to_string()))?;
    if entry.handle.rules_read_messages() {
        arrival.view = Some(Box::new(
            message::view(&arrival.bytes).map_err(|e| bad(&e.to_string()))?,
        ));
    }
    let (sink, mut events) = mpsc::unbounded_channel();
    let ticket = Ticket {
        link: 0,
        request: 0,
    };
    let command = Command::send(vec![arrival], Some(ticket), sink);
    let gone = || {
        (
            StatusCode::NOT_FOUND,
            format!("no queue or topic {entity:?}"),
        )
    };
    entry.handle.post(command).await.map_err(|_| gone())?;
    match events.recv().await.and_then(EntityEvent::into_sent) {
        Some((_, Ok(()))) => Ok(json!({ "sent": true })),
        Some((_, Err(refused))) => Err((api::entity_status(&refused), refused.to_string())),
        None => Err(gone()),
    }
}
