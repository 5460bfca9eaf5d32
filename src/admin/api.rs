//! Administration requests to registry operations: `$namespaceinfo`, the `$Resources` feeds,
//! and each queue's, topic's and subscription's description with its runtime counts; queues,
//! topics, subscriptions and rules are created, updated (`If-Match: *`) and deleted here.
//!
//! Paths are percent-decoded and their keywords (`$Resources/Queues`, `Subscriptions`,
//! `Rules`) compared ignoring case: the Python client writes them lower-case, the JS client
//! capitalised.

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::Full;
use hyper::ext::ReasonPhrase;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST, IF_MATCH};
use hyper::{Method, Request, Response, StatusCode};
use percent_encoding::percent_decode_str;
use tokio::sync::oneshot;

use super::atom::{self, Counts, Times};
use super::rules;
use super::{respond as xml, Admin};
use crate::auth::path_covers;
use crate::auth::sas::Token;
use crate::clock::now_ms;
use crate::config::forwarding;
use crate::config::SERVICE_BUS_PARTITIONS;
use crate::config::{
    Declaration, EntityStatus, PolicyConfig, QueueConfig, Rights, SecretKey, SubscriptionConfig,
    TopicConfig,
};
use crate::entity::handle::{Command, EntityError, EntityStats, LaneId};
use crate::entity::operation::{Answer, Operation};
use crate::entity::registry::{Entry, RegistryError};
use crate::entity::topic::Rule;
use crate::store::EntityTimes;
use crate::wire;

/// Entries per feed page when the client names no `$top`.
const DEFAULT_TOP: usize = 100;

/// What a path names.
enum Target {
    Namespace,
    Queues,
    Topics,
    Entity(String),
    Subscriptions(String),
    Subscription(String, String),
    Rules(Subscription),
    Rule(Subscription, String),
}

/// A topic's subscription, by names.
struct Subscription {
    topic: String,
    name: String,
}

impl Subscription {
    fn at(topic: String, name: &str) -> Subscription {
        Subscription {
            topic,
            name: name.to_owned(),
        }
    }

    /// Its path as the JS client reads names from ids.
    fn path(&self) -> String {
        format!("{}/Subscriptions/{}", self.topic, self.name)
    }
}

/// The 503 answer on a connection over the connection limit.
pub fn busy() -> Response<Full<Bytes>> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the broker serves as many connections as max_connections allows".into(),
    )
}

/// Answers one request.
pub async fn handle(admin: &Admin, request: Request<Bytes>) -> Response<Full<Bytes>> {
    let path = percent_decode_str(request.uri().path())
        .decode_utf8_lossy()
        .trim_matches('/')
        .to_owned();
    let query = query(request.uri().query().unwrap_or_default());
    match credential(admin, &request, &path) {
        Err(detail) => return error(StatusCode::UNAUTHORIZED, detail),
        Ok(Grant::WithoutManage) => return without_manage(admin, request.method(), &target(&path)),
        Ok(Grant::Manage) => {}
    }
    let base = base_url(admin, &request);
    let api_version = query
        .get("api-version")
        .cloned()
        .unwrap_or_else(|| "2021-05".to_owned());
    let page = Page {
        skip: query.get("$skip").and_then(|n| n.parse().ok()).unwrap_or(0),
        top: query
            .get("$top")
            .and_then(|n| n.parse().ok())
            .unwrap_or(DEFAULT_TOP),
    };
    let namespace = format!("sb://{}", host(&request));
    let urls = Urls {
        base,
        namespace,
        api_version,
    };
    let method = request.method().clone();
    let updating = request.headers().contains_key(IF_MATCH);
    match (method, target(&path)) {
        (Method::GET, Target::Namespace) => {
            let name = namespace_name(host(&request));
            let content = atom::namespace_info(&name, admin.started_ms);
            entry_response(
                StatusCode::OK,
                &urls.of("$namespaceinfo"),
                &name,
                admin.started_ms,
                &content,
            )
        }
        (Method::GET, Target::Queues) => {
            list(admin, &urls, "Queues", page, |entry| {
                matches!(entry.declaration, Declaration::Queue(_))
            })
            .await
        }
        (Method::GET, Target::Topics) => {
            list(admin, &urls, "Topics", page, |entry| {
                matches!(entry.declaration, Declaration::Topic(_))
            })
            .await
        }
        (Method::GET, Target::Entity(name)) => match admin.registry.entry(&name) {
            Some(entry) => {
                let (title, content, updated) = describe(admin, &urls, &entry).await;
                entry_response(StatusCode::OK, &urls.of(&title), &title, updated, &content)
            }
            None => xml(
                StatusCode::OK,
                "application/atom+xml;type=feed;charset=utf-8",
                atom::no_such_entity(now_ms()),
            ),
        },
        (Method::GET, Target::Subscription(topic, name)) => {
            match subscription(admin, &urls, &topic, &name).await {
                Some((title, content, updated)) => {
                    let id = urls.of(&format!("{topic}/Subscriptions/{title}"));
                    entry_response(StatusCode::OK, &id, &title, updated, &content)
                }
                None => not_found(&format!("{topic}/Subscriptions/{name}")),
            }
        }
        (Method::GET, Target::Subscriptions(topic)) => {
            list_subscriptions(admin, &urls, &topic, page).await
        }
        (Method::PUT, Target::Entity(name)) if updating => {
            update(admin, &urls, &name, request.body()).await
        }
        (Method::PUT, Target::Entity(name)) => create(admin, &urls, &name, request.body()).await,
        (Method::DELETE, Target::Entity(name)) => match admin.registry.delete(&name).await {
            Ok(()) => empty_ok(),
            Err(refused) => refusal(&refused, &name),
        },
        (Method::GET, Target::Rules(subscription)) => {
            list_rules(admin, &urls, &subscription, page).await
        }
        (Method::GET, Target::Rule(subscription, name)) => {
            get_rule(admin, &urls, &subscription, &name).await
        }
        (Method::PUT, Target::Rule(subscription, name)) if updating => {
            update_rule(admin, &urls, &subscription, &name, request.body()).await
        }
        (Method::PUT, Target::Rule(subscription, name)) => {
            create_rule(admin, &urls, &subscription, &name, request.body()).await
        }
        (Method::DELETE, Target::Rule(subscription, name)) => {
            let operation = Operation::RemoveRule { name: name.clone() };
            match manage(admin, &subscription, operation).await {
                Ok(_) => empty_ok(),
                Err(refused) => refused,
            }
        }
        (Method::PUT, Target::Subscription(topic, name)) if updating => {
            update_subscription(admin, &urls, &topic, &name, request.body()).await
        }
        (Method::PUT, Target::Subscription(topic, name)) => {
            create_subscription(admin, &urls, &topic, &name, request.body()).await
        }
        (Method::DELETE, Target::Subscription(topic, name)) => {
            match admin.registry.remove_subscription(&topic, &name).await {
                Ok(()) => empty_ok(),
                Err(refused) => refusal(&refused, &format!("{topic}/Subscriptions/{name}")),
            }
        }
        (method, _) => error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} is not an operation on /{path}"),
        ),
    }
}

/// A page of a feed.
#[derive(Clone, Copy)]
struct Page {
    skip: usize,
    top: usize,
}

/// The absolute URLs the answers carry: clients take entity names from them.
struct Urls {
    base: String,
    /// `sb://<host the client dialled>`: where the namespace's entities are addressed.
    namespace: String,
    api_version: String,
}

impl Urls {
    fn of(&self, path: &str) -> String {
        format!("{}/{path}?api-version={}", self.base, self.api_version)
    }

    /// Whether descriptions at this api-version carry `MaxMessageSizeInKilobytes`: it came
    /// with 2021-05, and Service Bus leaves it out of older versions' descriptions (a client
    /// at 2017-04 sends back what it read, and Service Bus refuses the property there).
    fn has_max_message_size(&self) -> bool {
        // api-versions are dates (`2017-04`, `2021-05`): they compare as text.
        self.api_version.as_str() >= MAX_MESSAGE_SIZE_API_VERSION
    }

    fn page(&self, path: &str, skip: usize, top: usize) -> String {
        format!(
            "{}/{path}?$skip={skip}&$top={top}&api-version={}",
            self.base, self.api_version
        )
    }
}

/// What a (decoded, trimmed) path names.
fn target(path: &str) -> Target {
    let lower = path.to_ascii_lowercase();
    match lower.as_str() {
        "$namespaceinfo" => return Target::Namespace,
        "$resources/queues" => return Target::Queues,
        "$resources/topics" => return Target::Topics,
        _ => {}
    }
    let segments: Vec<&str> = path.split('/').collect();
    let keyword = |index: usize, word: &str| {
        segments
            .get(index)
            .is_some_and(|segment| segment.eq_ignore_ascii_case(word))
    };
    let n = segments.len();
    let joined = |end: usize| segments[..end].join("/");
    // `<topic>/Subscriptions/<sub>/Rules` and `.../Rules/<rule>`.
    if n >= 4 && keyword(n - 1, "rules") && keyword(n - 3, "subscriptions") {
        let subscription = Subscription::at(joined(n - 3), segments[n - 2]);
        return Target::Rules(subscription);
    }
    if n >= 5 && keyword(n - 2, "rules") && keyword(n - 4, "subscriptions") {
        let subscription = Subscription::at(joined(n - 4), segments[n - 3]);
        return Target::Rule(subscription, segments[n - 1].to_owned());
    }
    if n >= 2 && keyword(n - 1, "subscriptions") {
        return Target::Subscriptions(joined(n - 1));
    }
    if n >= 3 && keyword(n - 2, "subscriptions") {
        return Target::Subscription(joined(n - 2), segments[n - 1].to_owned());
    }
    Target::Entity(path.to_owned())
}

/// The query's parameters, percent-decoded (the JS client encodes `$skip` as `%24skip`).
pub(super) fn query(text: &str) -> BTreeMap<String, String> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| {
            let decode = |text: &str| percent_decode_str(text).decode_utf8_lossy().into_owned();
            (decode(key), decode(value))
        })
        .collect()
}

/// `https://<host the client dialled>`.
fn base_url(admin: &Admin, request: &Request<Bytes>) -> String {
    let scheme = if admin.https { "https" } else { "http" };
    format!("{scheme}://{}", host(request))
}

/// The namespace's name as Service Bus gives it: the first label of the host the client
/// dialled (`ns` of `ns.servicebus.windows.net`, `localhost` of `localhost:443`); for an IP
/// address, which names no namespace, the broker's own name.
fn namespace_name(host: &str) -> String {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    if name.is_empty() || name.parse::<std::net::IpAddr>().is_ok() {
        return wire::NAMESPACE.to_owned();
    }
    name.split('.').next().unwrap_or(name).to_owned()
}

/// The host (and port) the client dialled, from its `Host` header.
fn host(request: &Request<Bytes>) -> &str {
    request
        .headers()
        .get(HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("localhost")
}

/// Checks the request's `Authorization`: a shared access signature of a policy with Manage
/// whose resource covers the path; no header passes only when anonymous clients are allowed.
pub(super) fn authorize(admin: &Admin, request: &Request<Bytes>, path: &str) -> Result<(), String> {
    match credential(admin, request, path)? {
        Grant::Manage => Ok(()),
        Grant::WithoutManage => Err(MANAGE_REQUIRED.into()),
    }
}

/// What a request's valid credential grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// Manage (or no credential, where anonymous clients are allowed): every operation.
    Manage,
    /// Send or Listen only: no administration operation, answered as [`without_manage`] says.
    WithoutManage,
}

/// The refusal of a credential without Manage where no operation is named.
const MANAGE_REQUIRED: &str =
    "Unauthorized access. 'Manage' claim(s) are required to perform this operation.";

/// Checks the request's `Authorization`: a shared access signature of a policy whose resource
/// covers the path, and whether it grants Manage; no header passes only when anonymous
/// clients are allowed.
///
/// # Errors
/// Why the credential is not valid here: missing, malformed, signed with no policy's key,
/// expired, or for another resource.
fn credential(admin: &Admin, request: &Request<Bytes>, path: &str) -> Result<Grant, String> {
    let Some(header) = request.headers().get(AUTHORIZATION) else {
        return match admin.policies.allow_anonymous() {
            true => Ok(Grant::Manage),
            false => Err("the request has no Authorization header; send a \
                          SharedAccessSignature of a policy with the Manage right"
                .into()),
        };
    };
    let text = header.to_str().unwrap_or_default();
    let token = Token::parse(text).map_err(|e| e.to_string())?;
    let principal = admin.policies.verify(&token).ok_or_else(|| {
        format!(
            "the signature does not verify with the key of a policy named {:?}",
            token.key_name
        )
    })?;
    let expiry_ms = i64::try_from(token.expiry)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    if expiry_ms <= crate::clock::real_ms() {
        return Err(token.expired());
    }
    let (resource, path) = (token.resource_path(), path.to_ascii_lowercase());
    if !path_covers(&resource, &path) || !principal.reaches(&path) {
        return Err(format!(
            "the token's resource '{resource}' does not cover '{path}'"
        ));
    }
    match principal.rights.grants_any_of(Rights::MANAGE) {
        true => Ok(Grant::Manage),
        false => Ok(Grant::WithoutManage),
    }
}

/// The answer to a request whose credential lacks Manage, in Service Bus's words: reading a
/// queue or topic that does not exist is 404 (the SDKs read it as absent, and Service Bus
/// reveals no more), reading one that does or listing them 401 "Manage,EntityRead claims
/// required", creating, updating or deleting one 401 naming `EntityWrite` or `EntityDelete`
/// whether it exists or not; a subscription's or rule's operation 401 naming the operation,
/// whether it exists or not. Nothing is read or changed.
fn without_manage(admin: &Admin, method: &Method, target: &Target) -> Response<Full<Bytes>> {
    const READ: &str = "Manage,EntityRead claims required for this operation.";
    let operation = match (method, target) {
        (&Method::GET, Target::Entity(name)) if admin.registry.entry(name).is_none() => {
            return not_found(name)
        }
        (&Method::GET, Target::Namespace | Target::Queues | Target::Topics | Target::Entity(_)) => {
            return unauthorized(READ)
        }
        (&Method::PUT, Target::Entity(_)) => {
            return unauthorized("Authorization failed for specified action: Manage,EntityWrite.")
        }
        (&Method::DELETE, Target::Entity(_)) => {
            return unauthorized("Authorization failed for specified action: Manage,EntityDelete.")
        }
        (&Method::GET, Target::Subscription(..)) => "GetSubscription",
        (&Method::GET, Target::Subscriptions(_)) => "EnumerateSubscriptions",
        (&Method::PUT, Target::Subscription(..)) => "CreateOrUpdateSubscription",
        (&Method::DELETE, Target::Subscription(..)) => "DeleteSubscription",
        (&Method::GET, Target::Rule(..)) => "GetRule",
        (&Method::GET, Target::Rules(_)) => "EnumerateRules",
        (&Method::PUT, Target::Rule(..)) => "CreateOrUpdateRule",
        (&Method::DELETE, Target::Rule(..)) => "DeleteRule",
        _ => return unauthorized(MANAGE_REQUIRED),
    };
    unauthorized(&format!(
        "SubCode=40100: Unauthorized : Unauthorized access for '{operation}' operation: it \
         needs the 'Manage' claim."
    ))
}

/// A 401 whose status line carries `detail` as well, as Service Bus's do (the Go client shows
/// the status line; for a subscription's operations Service Bus sends nothing else).
fn unauthorized(detail: &str) -> Response<Full<Bytes>> {
    let mut response = error(StatusCode::UNAUTHORIZED, detail.to_owned());
    if let Ok(reason) = ReasonPhrase::try_from(detail.as_bytes()) {
        response.extensions_mut().insert(reason);
    }
    response
}

/// What an entity's actor reports (empty when it has gone meanwhile).
pub(super) async fn stats(entry: &Entry) -> EntityStats {
    let (reply, answer) = oneshot::channel();
    if entry
        .handle
        .post(Command::Describe { reply })
        .await
        .is_err()
    {
        return EntityStats::default();
    }
    answer.await.unwrap_or_default()
}

/// The creation and update times of an entity or subscription (this process's start for one
/// the registry no longer knows: it went meanwhile), with when a client last used it: a queue
/// or topic not yet (`None`), a subscription at the latest when it was created (as Service
/// Bus counts it).
fn times(
    admin: &Admin,
    entity: &str,
    subscription: Option<&str>,
    accessed_ms: Option<i64>,
) -> Times {
    let times = admin.registry.times(entity, subscription);
    let times = times.unwrap_or(EntityTimes::created(admin.started_ms));
    let accessed_ms = match subscription {
        Some(_) => accessed_ms.max(Some(times.created_ms)),
        None => accessed_ms,
    };
    Times {
        created_ms: times.created_ms,
        updated_ms: times.updated_ms,
        accessed_ms,
    }
}

/// The entity's title, description and update time.
async fn describe(admin: &Admin, urls: &Urls, entry: &Entry) -> (String, String, i64) {
    let stats = stats(entry).await;
    let times = times(admin, entry.declaration.name(), None, stats.accessed_ms);
    let kib = (urls.has_max_message_size()).then_some(admin.max_message_size / 1024);
    let content = match &entry.declaration {
        Declaration::Queue(queue) => {
            let counts = Counts::of(stats.lane(LaneId::MAIN), stats.lane(LaneId::DEAD_LETTER))
                .forwarding(
                    queue.forward_to.is_some(),
                    queue.forward_dead_lettered_messages_to.is_some(),
                )
                .with_transfers(&stats);
            atom::queue(queue, &counts, &times, kib, &urls.namespace)
        }
        Declaration::Topic(topic) => {
            let main = stats.lane(LaneId::MAIN);
            let counts = Counts {
                scheduled: main.scheduled,
                bytes: stats.lanes.iter().map(|(_, counts)| counts.bytes).sum(),
                ..Counts::default()
            }
            .with_transfers(&stats);
            atom::topic(topic, &counts, &times, kib, stats.filters)
        }
    };
    (
        entry.declaration.name().to_owned(),
        content,
        times.updated_ms,
    )
}

/// A subscription's title, description and update time.
async fn subscription(
    admin: &Admin,
    urls: &Urls,
    topic: &str,
    name: &str,
) -> Option<(String, String, i64)> {
    let entry = admin.registry.entry(topic)?;
    let Declaration::Topic(declaration) = &entry.declaration else {
        return None;
    };
    let config = declaration
        .subscriptions
        .iter()
        .find(|subscription| subscription.name.eq_ignore_ascii_case(name))?;
    let number = entry.handle.subscription(name)?;
    let stats = stats(&entry).await;
    let main = LaneId {
        subscription: number,
        dead_letter: false,
    };
    let counts = Counts::of(stats.lane(main), stats.lane(main.dead_letter_lane())).forwarding(
        config.forward_to.is_some(),
        config.forward_dead_lettered_messages_to.is_some(),
    );
    let times = times(admin, topic, Some(name), stats.accessed_ms);
    let content = atom::subscription(config, &counts, &times, &urls.namespace);
    Some((config.name.clone(), content, times.updated_ms))
}

/// A feed of the queues or topics (`keep` picks them).
async fn list(
    admin: &Admin,
    urls: &Urls,
    title: &str,
    page: Page,
    keep: impl Fn(&Entry) -> bool,
) -> Response<Full<Bytes>> {
    let all: Vec<Entry> = admin.registry.entries().into_iter().filter(keep).collect();
    let mut entries = Vec::new();
    for entry in all.iter().skip(page.skip).take(page.top) {
        let (name, content, updated) = describe(admin, urls, entry).await;
        entries.push((urls.of(&name), name, updated, content));
    }
    feed(
        urls,
        &format!("$Resources/{title}"),
        title,
        page,
        all.len(),
        &entries,
    )
}

/// A feed of a topic's subscriptions.
async fn list_subscriptions(
    admin: &Admin,
    urls: &Urls,
    topic: &str,
    page: Page,
) -> Response<Full<Bytes>> {
    let Some(entry) = admin.registry.entry(topic) else {
        return not_found(topic);
    };
    let Declaration::Topic(declaration) = &entry.declaration else {
        return not_found(topic);
    };
    let names: Vec<&str> = declaration
        .subscriptions
        .iter()
        .map(|subscription| subscription.name.as_str())
        .filter(|name| entry.handle.subscription(name).is_some())
        .collect();
    let mut entries = Vec::new();
    for name in names.iter().skip(page.skip).take(page.top) {
        if let Some((title, content, updated)) = subscription(admin, urls, topic, name).await {
            let id = urls.of(&format!("{topic}/Subscriptions/{title}"));
            entries.push((id, title, updated, content));
        }
    }
    let path = format!("{topic}/Subscriptions");
    feed(urls, &path, "Subscriptions", page, names.len(), &entries)
}

fn feed(
    urls: &Urls,
    path: &str,
    title: &str,
    page: Page,
    total: usize,
    entries: &[(String, String, i64, String)],
) -> Response<Full<Bytes>> {
    let next_skip = page.skip.saturating_add(page.top);
    let next = (next_skip < total).then(|| urls.page(path, next_skip, page.top));
    let body = atom::feed(
        title,
        &urls.page(path, page.skip, page.top),
        next.as_deref(),
        now_ms(),
        entries,
    );
    xml(
        StatusCode::OK,
        "application/atom+xml;type=feed;charset=utf-8",
        body,
    )
}

/// Updates a queue or topic from the description in the request's body (`If-Match: *`): the
/// properties it sets change, the others keep their values.
async fn update(admin: &Admin, urls: &Urls, name: &str, body: &[u8]) -> Response<Full<Bytes>> {
    let Some(entry) = admin.registry.entry(name) else {
        return not_found(name);
    };
    let changed = match atom::read_description(body)
        .and_then(|sent| within_api_version(urls, sent))
        .and_then(|sent| within_message_size(admin, sent))
    {
        Ok(sent) => apply(entry.declaration.clone(), &sent),
        Err(detail) => Err(detail),
    };
    let changed = match changed {
        Ok(changed) => changed,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    if size_and_partitions(&entry.declaration).1 != size_and_partitions(&changed).1 {
        let kind = match &changed {
            Declaration::Queue(_) => "Queue",
            Declaration::Topic(_) => "Topic",
        };
        let detail = format!(
            "Partitioning cannot be changed for {kind}. Delete the {} and create it again \
             to change it.",
            kind.to_lowercase()
        );
        return error(StatusCode::BAD_REQUEST, detail);
    }
    if let (Declaration::Queue(before), Declaration::Queue(after)) = (&entry.declaration, &changed)
    {
        if before.requires_session != after.requires_session {
            return unchangeable("RequiresSession", "Queue");
        }
    }
    let updated = match admin.registry.check_forwarding(&changed) {
        Ok(()) => admin.registry.update(&changed).await,
        Err(refused) => Err(refused),
    };
    if let Err(refused) = updated {
        return refusal(&refused, name);
    }
    match admin.registry.entry(name) {
        Some(entry) => {
            let (title, content, updated) = describe(admin, urls, &entry).await;
            entry_response(StatusCode::OK, &urls.of(&title), &title, updated, &content)
        }
        None => not_found(name),
    }
}

/// Creates a queue or topic from the description in the request's body.
async fn create(admin: &Admin, urls: &Urls, name: &str, body: &[u8]) -> Response<Full<Bytes>> {
    let declaration = match atom::read_description(body)
        .and_then(|sent| within_api_version(urls, sent))
        .and_then(|sent| within_message_size(admin, sent))
        .and_then(|sent| declaration(name, &sent))
    {
        Ok(declaration) => declaration,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    if let Err(refused) = admin.registry.check_forwarding(&declaration) {
        return refusal(&refused, name);
    }
    match admin.registry.create_off_runtime(&declaration, false).await {
        Ok(_) => {}
        Err(refused) => return refusal(&refused, name),
    }
    match admin.registry.entry(name) {
        Some(entry) => {
            let (title, content, updated) = describe(admin, urls, &entry).await;
            entry_response(
                StatusCode::CREATED,
                &urls.of(&title),
                &title,
                updated,
                &content,
            )
        }
        None => not_found(name),
    }
}

/// Properties the broker keeps but a client cannot set: read back by the Python client on
/// update, ignored (`AuthorizationRules` is read apart, as the entity's policies).
const READ_ONLY: [&str; 11] = [
    "SizeInBytes",
    "MessageCount",
    "CreatedAt",
    "UpdatedAt",
    "AccessedAt",
    "CountDetails",
    "SubscriptionCount",
    "SqlFilterCount",
    "CorrelationFilterCount",
    "EntityAvailabilityStatus",
    "AuthorizationRules",
];

/// Properties for what Tidebus does not do, with the only values it accepts (a JS or Python
/// client sends some of them at their defaults).
const OFF_ONLY: [(&str, &[&str]); 3] = [
    ("EnableSubscriptionPartitioning", &["false"]),
    ("FilteringMessagesBeforePublishing", &["false"]),
    ("IsAnonymousAccessible", &["false"]),
];

/// Properties accepted whatever their value, because they change nothing Tidebus does: the
/// message size limit is the broker's.
const IGNORED: [&str; 1] = ["MaxMessageSizeInKilobytes"];

/// Whether a property a client sent changes nothing: read-only, ignored, or for what Tidebus
/// does not do and at its off value.
///
/// # Errors
/// A property for what Tidebus does not do, asking for it.
fn passed_over(property: &str, value: &str) -> Result<bool, String> {
    if READ_ONLY.contains(&property) || IGNORED.contains(&property) {
        return Ok(true);
    }
    match OFF_ONLY.iter().find(|(known, _)| *known == property) {
        None => Ok(false),
        Some((_, allowed)) if allowed.iter().any(|a| a.eq_ignore_ascii_case(value)) => Ok(true),
        Some((_, allowed)) => Err(format!(
            "{property} = {value:?} is not supported; Tidebus accepts only {allowed:?}"
        )),
    }
}

/// The first api-version whose descriptions may carry `MaxMessageSizeInKilobytes`.
const MAX_MESSAGE_SIZE_API_VERSION: &str = "2021-05";

/// A client's description, unless it carries a property its api-version does not have:
/// `MaxMessageSizeInKilobytes` before 2021-05, which Service Bus refuses.
///
/// # Errors
/// The property and the api-version, named.
fn within_api_version(urls: &Urls, sent: atom::Sent) -> Result<atom::Sent, String> {
    if !urls.has_max_message_size() && sent.fields.contains_key("MaxMessageSizeInKilobytes") {
        return Err(format!(
            "MaxMessageSizeInKilobytes is not a property of api-version {}; it needs \
             {MAX_MESSAGE_SIZE_API_VERSION} or later",
            urls.api_version
        ));
    }
    Ok(sent)
}

/// A client's description, unless its `MaxMessageSizeInKilobytes` is more than the broker
/// takes (`broker.max_message_size`): every entity has the broker's limit, read back as that
/// property; a size at or under it is accepted and changes nothing.
///
/// # Errors
/// The size asked for and the broker's, named.
fn within_message_size(admin: &Admin, sent: atom::Sent) -> Result<atom::Sent, String> {
    let limit = admin.max_message_size / 1024;
    if let Some(asked) = sent.fields.get("MaxMessageSizeInKilobytes") {
        let asked: u64 = number(asked)?;
        if asked > limit {
            return Err(format!(
                "MaxMessageSizeInKilobytes = {asked} is more than this broker takes: its \
                 entities hold messages up to {limit} KB (broker.max_message_size)"
            ));
        }
    }
    Ok(sent)
}

/// The declaration a client's description asks for, validated as a config entry would be.
fn declaration(name: &str, sent: &atom::Sent) -> Result<Declaration, String> {
    let table = match sent.kind.as_str() {
        "QueueDescription" => "queues",
        "TopicDescription" => "topics",
        other => return Err(format!("{other} cannot be created at /{name}")),
    };
    let base = format!(
        "[[{table}]]\nname = {}\n",
        toml::Value::String(name.to_owned())
    );
    let defaults = Declaration::parse(&base, "the request").map_err(|e| e.to_string())?;
    apply(defaults, sent)
}

/// `declaration` with the properties of a client's description applied, validated as a config
/// entry would be.
fn apply(mut declaration: Declaration, sent: &atom::Sent) -> Result<Declaration, String> {
    let expected = match declaration {
        Declaration::Queue(_) => "QueueDescription",
        Declaration::Topic(_) => "TopicDescription",
    };
    if sent.kind != expected {
        return Err(format!(
            "{} describes another kind of entity than '{}'",
            sent.kind,
            declaration.name()
        ));
    }
    // A description replaces the last: a forwarding target it leaves out is removed (the
    // SDKs leave it out to turn forwarding off), as in Service Bus.
    // So is UserMetadata (the SDKs leave it out when it is unset).
    match &mut declaration {
        Declaration::Queue(queue) => {
            (queue.forward_to, queue.forward_dead_lettered_messages_to) = (None, None);
            queue.user_metadata = None;
        }
        Declaration::Topic(topic) => topic.user_metadata = None,
    }
    let before = size_and_partitions(&declaration);
    let fields = sent.fields.iter().map(|(p, v)| (p.as_str(), v.as_str()));
    set_each(fields, |property, value| match &mut declaration {
        Declaration::Queue(queue) => set_queue(queue, property, value),
        Declaration::Topic(topic) => set_topic(topic, property, value),
    })?;
    if let (size, Some(partitions)) = size_and_partitions(&declaration) {
        let sent_size = sent.fields.get("MaxSizeInMegabytes").map(|_| size);
        let size = partitioned_size(sent_size, before, partitions);
        match &mut declaration {
            Declaration::Queue(queue) => queue.max_size_in_megabytes = size,
            Declaration::Topic(topic) => topic.max_size_in_megabytes = size,
        }
    }
    // Rules a description leaves out stay; those it holds replace them.
    if let Some(rules) = &sent.authorization_rules {
        let policies = rules.iter().map(policy).collect::<Result<Vec<_>, _>>()?;
        match &mut declaration {
            Declaration::Queue(queue) => queue.shared_access_policies = policies,
            Declaration::Topic(topic) => topic.shared_access_policies = policies,
        }
    }
    validated(&declaration)
}

/// An entity's size in megabytes and its partitions.
fn size_and_partitions(declaration: &Declaration) -> (u64, Option<u16>) {
    match declaration {
        Declaration::Queue(queue) => (queue.max_size_in_megabytes, queue.partitions),
        Declaration::Topic(topic) => (topic.max_size_in_megabytes, topic.partitions),
    }
}

/// The shared access policy an `AuthorizationRule` describes; a key left out is made, 32
/// bytes in base64 as Service Bus's keys are.
///
/// # Errors
/// A right that is not `Manage`, `Send` or `Listen`, or none.
fn policy(rule: &atom::SentRule) -> Result<PolicyConfig, String> {
    let mut rights = Rights::NONE;
    for name in &rule.rights {
        let right = Rights::named(name).ok_or_else(|| {
            format!(
                "AuthorizationRule '{}': {name:?} is not one of Manage, Send, Listen",
                rule.key_name
            )
        })?;
        rights = rights.union(right);
    }
    let key = |sent: &str| match sent.is_empty() {
        true => SecretKey::from(made_key().as_str()),
        false => SecretKey::from(sent),
    };
    Ok(PolicyConfig {
        name: rule.key_name.clone(),
        key: key(&rule.primary_key),
        secondary_key: Some(key(&rule.secondary_key)),
        rights,
    })
}

/// A new shared access key: 32 bytes in base64, as Service Bus's keys are: two random (v4)
/// uuids, so 244 of its bits are random.
fn made_key() -> String {
    use base64::Engine;
    let bytes = [
        uuid::Uuid::new_v4().into_bytes(),
        uuid::Uuid::new_v4().into_bytes(),
    ]
    .concat();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Sets each property a client sent with `set` (`false`: no such property), passing over
/// those that change nothing.
///
/// # Errors
/// A property `set` does not know or refuses, named with its value.
fn set_each<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    mut set: impl FnMut(&str, &str) -> Result<bool, String>,
) -> Result<(), String> {
    for (property, value) in fields {
        if passed_over(property, value)? {
            continue;
        }
        match set(property, value) {
            Ok(true) => {}
            Ok(false) => return Err(format!("{property} is not a property Tidebus supports")),
            Err(reason) => return Err(format!("{property} = {}: {reason}", shown(value))),
        }
    }
    Ok(())
}

/// Characters of a refused value an error shows.
const SHOWN_CHARS: usize = 40;

/// A value as an error shows it: quoted, cut after 40 characters.
fn shown(value: &str) -> String {
    match value.char_indices().nth(SHOWN_CHARS) {
        Some((end, _)) => format!("{:?}...", &value[..end]),
        None => format!("{value:?}"),
    }
}

/// `UserMetadata` as sent; empty clears it.
///
/// # Errors
/// Its length, when it is longer than Service Bus allows.
fn user_metadata(value: &str) -> Result<Option<String>, String> {
    crate::config::user_metadata(value.to_owned())
}

/// A declaration put back through the config's validation, so that what the API creates or
/// changes obeys the file's bounds.
///
/// # Errors
/// What the config file would refuse, naming the key.
fn validated(declaration: &Declaration) -> Result<Declaration, String> {
    Declaration::parse(&declaration.to_toml(), "the request")
        .map_err(|e| e.to_string().replace("the request", "the description"))
}

fn boolean(value: &str) -> Result<bool, String> {
    value
        .to_ascii_lowercase()
        .parse()
        .map_err(|_| "expected true or false".to_owned())
}

fn number<T: std::str::FromStr>(value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| "expected a whole number".to_owned())
}

/// An entity status by its Service Bus name (which ones an entity may have, the config's
/// validation says).
fn status(value: &str) -> Result<EntityStatus, String> {
    EntityStatus::from_service_bus_name(value)
        .ok_or_else(|| "expected Active, Disabled, SendDisabled or ReceiveDisabled".to_owned())
}

/// The partitions `EnablePartitioning` asks for: an entity partitioned already keeps its
/// count, a new one gets Service Bus Standard's 16.
fn partitioning(partitions: Option<u16>, value: &str) -> Result<Option<u16>, String> {
    Ok(match boolean(value)? {
        true => partitions.or(Some(SERVICE_BUS_PARTITIONS)),
        false => None,
    })
}

/// A partitioned entity's size from the `MaxSizeInMegabytes` a description sent (`None`: it
/// sent none), as Service Bus reads it: each partition's size, so the entity holds as many
/// times that; a size equal to what the entity holds already (a description read back and
/// sent again) stays. `before` is the entity's size and partitions before the description.
fn partitioned_size(sent: Option<u64>, before: (u64, Option<u16>), partitions: u16) -> u64 {
    let (size, before_partitions) = before;
    match sent {
        Some(sent) if sent == size && before_partitions == Some(partitions) => sent,
        Some(sent) => sent.saturating_mul(u64::from(partitions)),
        None if before_partitions.is_none() => size.saturating_mul(u64::from(partitions)),
        None => size,
    }
}

/// A duplicate-detection history window (bounded by the config's validation).
fn history_window(value: &str) -> Result<std::time::Duration, String> {
    atom::read_duration(value)?.ok_or_else(|| "the window cannot last forever".to_owned())
}

/// Applies one property to a queue; `false` when a queue has no such property.
fn set_queue(queue: &mut QueueConfig, property: &str, value: &str) -> Result<bool, String> {
    match property {
        "LockDuration" => {
            queue.lock_duration = atom::read_duration(value)?.ok_or("a lock cannot last forever")?
        }
        "MaxSizeInMegabytes" => queue.max_size_in_megabytes = number(value)?,
        "EnablePartitioning" => queue.partitions = partitioning(queue.partitions, value)?,
        "RequiresSession" => queue.requires_session = boolean(value)?,
        "DefaultMessageTimeToLive" => {
            queue.default_message_time_to_live = atom::read_duration(value)?
        }
        "DeadLetteringOnMessageExpiration" => {
            queue.dead_lettering_on_message_expiration = boolean(value)?
        }
        "MaxDeliveryCount" => queue.max_delivery_count = number(value)?,
        "AutoDeleteOnIdle" => queue.auto_delete_on_idle = atom::read_duration(value)?,
        "RequiresDuplicateDetection" => queue.requires_duplicate_detection = boolean(value)?,
        "EnableExpress" => queue.enable_express = boolean(value)?,
        "EnableBatchedOperations" => queue.enable_batched_operations = boolean(value)?,
        "SupportOrdering" if !boolean(value)? => {
            return Err("a queue always keeps its order; Tidebus accepts only true".into())
        }
        "SupportOrdering" => {}
        "DuplicateDetectionHistoryTimeWindow" => {
            queue.duplicate_detection_history_time_window = history_window(value)?
        }
        "ForwardTo" => queue.forward_to = forward_target(value),
        "ForwardDeadLetteredMessagesTo" => {
            queue.forward_dead_lettered_messages_to = forward_target(value)
        }
        "Status" => queue.status = status(value)?,
        "UserMetadata" => queue.user_metadata = user_metadata(value)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Applies one property to a subscription; `false` when a subscription has no such property.
fn set_subscription(
    subscription: &mut SubscriptionConfig,
    property: &str,
    value: &str,
) -> Result<bool, String> {
    match property {
        "LockDuration" => {
            subscription.lock_duration =
                atom::read_duration(value)?.ok_or("a lock cannot last forever")?
        }
        "RequiresSession" => subscription.requires_session = boolean(value)?,
        "EnableBatchedOperations" => subscription.enable_batched_operations = boolean(value)?,
        "DefaultMessageTimeToLive" => {
            subscription.default_message_time_to_live = atom::read_duration(value)?
        }
        "DeadLetteringOnMessageExpiration" => {
            subscription.dead_lettering_on_message_expiration = boolean(value)?
        }
        "DeadLetteringOnFilterEvaluationExceptions" => {
            subscription.dead_lettering_on_filter_evaluation_exceptions = boolean(value)?
        }
        "MaxDeliveryCount" => subscription.max_delivery_count = number(value)?,
        "AutoDeleteOnIdle" => subscription.auto_delete_on_idle = atom::read_duration(value)?,
        "ForwardTo" => subscription.forward_to = forward_target(value),
        "ForwardDeadLetteredMessagesTo" => {
            subscription.forward_dead_lettered_messages_to = forward_target(value)
        }
        "Status" => subscription.status = status(value)?,
        "UserMetadata" => subscription.user_metadata = user_metadata(value)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// A forwarding target as a client sends it, kept so (Service Bus writes it back as given): a
/// name, or the SDKs' full address (`sb://namespace/name` from the Python and JavaScript
/// clients, `https://namespace/name` from the Go client); empty for none.
fn forward_target(value: &str) -> Option<String> {
    forwarding::target(Some(value.to_owned()))
}

/// Applies one property to a topic; `false` when a topic has no such property.
fn set_topic(topic: &mut TopicConfig, property: &str, value: &str) -> Result<bool, String> {
    match property {
        "MaxSizeInMegabytes" => topic.max_size_in_megabytes = number(value)?,
        "EnablePartitioning" => topic.partitions = partitioning(topic.partitions, value)?,
        "DefaultMessageTimeToLive" => {
            topic.default_message_time_to_live = atom::read_duration(value)?
        }
        "AutoDeleteOnIdle" => topic.auto_delete_on_idle = atom::read_duration(value)?,
        "RequiresDuplicateDetection" => topic.requires_duplicate_detection = boolean(value)?,
        "EnableExpress" => topic.enable_express = boolean(value)?,
        "SupportOrdering" => topic.support_ordering = boolean(value)?,
        "EnableBatchedOperations" => topic.enable_batched_operations = boolean(value)?,
        "DuplicateDetectionHistoryTimeWindow" => {
            topic.duplicate_detection_history_time_window = history_window(value)?
        }
        "Status" => topic.status = status(value)?,
        "UserMetadata" => topic.user_metadata = user_metadata(value)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn entry_response(
    status: StatusCode,
    id: &str,
    title: &str,
    updated_ms: i64,
    content: &str,
) -> Response<Full<Bytes>> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>{}",
        atom::entry(id, title, updated_ms, content)
    );
    xml(
        status,
        "application/atom+xml;type=entry;charset=utf-8",
        body,
    )
}

/// Performs a management operation on a subscription's lane, as its `$management` node
/// would; the refusal is the answer to send.
async fn manage(
    admin: &Admin,
    subscription: &Subscription,
    operation: Operation,
) -> Result<Answer, Response<Full<Bytes>>> {
    admin
        .registry
        .manage(&subscription.topic, &subscription.name, operation)
        .await
        .map_err(|refused| refusal(&refused, &subscription.path()))
}

/// Every rule of a subscription.
async fn all_rules(
    admin: &Admin,
    subscription: &Subscription,
) -> Result<Vec<Rule>, Response<Full<Bytes>>> {
    let operation = Operation::EnumerateRules {
        skip: 0,
        top: usize::MAX,
    };
    match manage(admin, subscription, operation).await? {
        Answer::Rules(rules) => Ok(rules),
        _ => Ok(Vec::new()),
    }
}

fn rule_entry(
    urls: &Urls,
    subscription: &Subscription,
    rule: &Rule,
) -> (String, String, i64, String) {
    let id = urls.of(&format!("{}/Rules/{}", subscription.path(), rule.name));
    (
        id,
        rule.name.clone(),
        rule.created_ms,
        rules::describe(rule),
    )
}

async fn list_rules(
    admin: &Admin,
    urls: &Urls,
    subscription: &Subscription,
    page: Page,
) -> Response<Full<Bytes>> {
    let all = match all_rules(admin, subscription).await {
        Ok(all) => all,
        Err(refused) => return refused,
    };
    let entries: Vec<_> = all
        .iter()
        .skip(page.skip)
        .take(page.top)
        .map(|rule| rule_entry(urls, subscription, rule))
        .collect();
    let path = format!("{}/Rules", subscription.path());
    feed(urls, &path, "Rules", page, all.len(), &entries)
}

async fn get_rule(
    admin: &Admin,
    urls: &Urls,
    subscription: &Subscription,
    name: &str,
) -> Response<Full<Bytes>> {
    let all = match all_rules(admin, subscription).await {
        Ok(all) => all,
        Err(refused) => return refused,
    };
    match all.iter().find(|rule| rule.name.eq_ignore_ascii_case(name)) {
        Some(rule) => {
            let (id, title, updated, content) = rule_entry(urls, subscription, rule);
            entry_response(StatusCode::OK, &id, &title, updated, &content)
        }
        None => not_found(&format!("{}/Rules/{name}", subscription.path())),
    }
}

/// The rule named `name` that the `RuleDescription` in the request's body describes.
fn read_rule(body: &[u8], name: &str) -> Result<Rule, String> {
    rules::read(body, name, now_ms())
}

async fn create_rule(
    admin: &Admin,
    urls: &Urls,
    subscription: &Subscription,
    name: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let rule = match read_rule(body, name) {
        Ok(rule) => rule,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    let created = rule_entry(urls, subscription, &rule);
    match manage(admin, subscription, Operation::AddRule { rule }).await {
        Ok(_) => entry_response(
            StatusCode::CREATED,
            &created.0,
            &created.1,
            created.2,
            &created.3,
        ),
        Err(refused) => refused,
    }
}

/// Replaces a rule's filter and action with those of the `RuleDescription` in the body
/// (`If-Match: *`), inside the topic's actor: no message is routed between the old rule and
/// the new one. The rule keeps its place and its creation time.
async fn update_rule(
    admin: &Admin,
    urls: &Urls,
    subscription: &Subscription,
    name: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let rule = match read_rule(body, name) {
        Ok(rule) => rule,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    match manage(admin, subscription, Operation::ReplaceRule { rule }).await {
        Ok(Answer::Rules(replaced)) if !replaced.is_empty() => {
            let (id, title, updated, content) = rule_entry(urls, subscription, &replaced[0]);
            entry_response(StatusCode::OK, &id, &title, updated, &content)
        }
        Ok(_) => not_found(&format!("{}/Rules/{name}", subscription.path())),
        Err(refused) => refused,
    }
}

fn empty_ok() -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/xml; charset=utf-8"),
    );
    response
}

/// Creates a subscription of a live topic from the `SubscriptionDescription` in the body; a
/// `DefaultRuleDescription` in it becomes its only rule.
async fn create_subscription(
    admin: &Admin,
    urls: &Urls,
    topic: &str,
    name: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let config = match atom::parse(body).and_then(|root| subscription_config(name, &root)) {
        Ok(config) => config,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    let path = format!("{topic}/Subscriptions/{name}");
    if let Some(Declaration::Topic(mut changed)) =
        admin.registry.entry(topic).map(|e| e.declaration)
    {
        changed.subscriptions.push(config.clone());
        if let Err(refused) = admin
            .registry
            .check_forwarding(&Declaration::Topic(changed))
        {
            return refusal(&refused, &path);
        }
    }
    if let Err(refused) = admin.registry.add_subscription(topic, config).await {
        return refusal(&refused, &path);
    }
    match subscription(admin, urls, topic, name).await {
        Some((title, content, updated)) => {
            let id = urls.of(&format!("{topic}/Subscriptions/{title}"));
            entry_response(StatusCode::CREATED, &id, &title, updated, &content)
        }
        None => not_found(&path),
    }
}

/// The subscription a client's description asks for, from the config's defaults.
fn subscription_config(name: &str, root: &atom::Element) -> Result<SubscriptionConfig, String> {
    apply_subscription(SubscriptionConfig::named(name)?, root, Intent::Create)
}

/// What a description is sent for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Intent {
    Create,
    Update,
}

/// `subscription` with the properties of the client's `SubscriptionDescription` in `root`
/// applied. At creation a `DefaultRuleDescription` in it becomes the only rule; an update
/// ignores it, as Service Bus reads it only at creation.
///
/// # Errors
/// No description, or a property refused, named with its value.
fn apply_subscription(
    mut subscription: SubscriptionConfig,
    root: &atom::Element,
    intent: Intent,
) -> Result<SubscriptionConfig, String> {
    const DEFAULT_RULE: &str = "DefaultRuleDescription";
    let description = root
        .find("SubscriptionDescription")
        .ok_or("the body holds no SubscriptionDescription")?;
    if let Some(child) = description
        .child(DEFAULT_RULE)
        .filter(|_| intent == Intent::Create)
    {
        let rule_name = child.child("Name").map_or("$Default", |n| n.text.as_str());
        let rule = rules::from_element(child, rule_name, now_ms())?;
        subscription.rules = vec![rules::declared(&rule)?];
    }
    // As for a queue: a forwarding target or UserMetadata the description leaves out is
    // removed.
    subscription.forward_to = None;
    subscription.forward_dead_lettered_messages_to = None;
    subscription.user_metadata = None;
    let fields = description
        .children
        .iter()
        .filter(|child| child.name != DEFAULT_RULE)
        .map(|child| (child.name.as_str(), child.text.as_str()));
    set_each(fields, |property, value| {
        set_subscription(&mut subscription, property, value)
    })?;
    Ok(subscription)
}

/// Updates a subscription from the `SubscriptionDescription` in the body (`If-Match: *`): the
/// properties it sets change on the live subscription (through the topic's declaration),
/// the others keep their values, and so do its messages, locks and rules.
async fn update_subscription(
    admin: &Admin,
    urls: &Urls,
    topic: &str,
    name: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let path = format!("{topic}/Subscriptions/{name}");
    let Some(entry) = admin.registry.entry(topic) else {
        return not_found(&path);
    };
    let Declaration::Topic(mut declaration) = entry.declaration else {
        return not_found(&path);
    };
    let same_name = |s: &&mut SubscriptionConfig| s.name.eq_ignore_ascii_case(name);
    let live = entry.handle.subscription(name).is_some();
    let Some(slot) = declaration
        .subscriptions
        .iter_mut()
        .find(same_name)
        .filter(|_| live)
    else {
        return not_found(&path);
    };
    let changed = match atom::parse(body) {
        Ok(root) => apply_subscription(slot.clone(), &root, Intent::Update),
        Err(detail) => Err(detail),
    };
    let changed = match changed {
        Ok(changed) => changed,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    if changed.requires_session != slot.requires_session {
        return unchangeable("RequiresSession", "Subscription");
    }
    *slot = changed;
    let changed = match validated(&Declaration::Topic(declaration)) {
        Ok(changed) => changed,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    let updated = match admin.registry.check_forwarding(&changed) {
        Ok(()) => admin.registry.update(&changed).await,
        Err(refused) => Err(refused),
    };
    if let Err(refused) = updated {
        return refusal(&refused, &path);
    }
    match subscription(admin, urls, topic, name).await {
        Some((title, content, updated)) => {
            let id = urls.of(&format!("{topic}/Subscriptions/{title}"));
            entry_response(StatusCode::OK, &id, &title, updated, &content)
        }
        None => not_found(&path),
    }
}

/// The answer to a registry's refusal of what `name` names, as Service Bus gives it.
fn refusal(refused: &RegistryError, name: &str) -> Response<Full<Bytes>> {
    match refused {
        RegistryError::NotFound(_) => not_found(name),
        RegistryError::Exists(_) => error(
            registry_status(refused),
            format!("The messaging entity '{name}' already exists. SubCode=40900."),
        ),
        _ => error(registry_status(refused), refused.to_string()),
    }
}

/// The status Service Bus answers a registry's refusal with; an entity's refusal takes the
/// status of [`EntityError::status`], as over AMQP.
pub(super) fn registry_status(refused: &RegistryError) -> StatusCode {
    match refused {
        RegistryError::NotFound(_) => StatusCode::NOT_FOUND,
        RegistryError::Exists(_) => StatusCode::CONFLICT,
        RegistryError::Stopping => StatusCode::SERVICE_UNAVAILABLE,
        RegistryError::QuotaExceeded { .. } => StatusCode::FORBIDDEN,
        RegistryError::Invalid(_) => StatusCode::BAD_REQUEST,
        RegistryError::Refused(error) => entity_status(error),
        RegistryError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The status of an entity's refusal, from [`EntityError::status`].
pub(super) fn entity_status(refused: &EntityError) -> StatusCode {
    // Every code of the table is a status code HTTP defines.
    StatusCode::from_u16(refused.status().code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The 400 answer to an update changing a property fixed at creation (`kind`: `Queue` or
/// `Subscription`), in Service Bus's words.
fn unchangeable(property: &str, kind: &str) -> Response<Full<Bytes>> {
    error(
        StatusCode::BAD_REQUEST,
        format!("The value for the {property} property of an existing {kind} cannot be changed."),
    )
}

fn not_found(name: &str) -> Response<Full<Bytes>> {
    error(
        StatusCode::NOT_FOUND,
        format!("The messaging entity '{name}' could not be found."),
    )
}

pub(super) fn error(status: StatusCode, detail: String) -> Response<Full<Bytes>> {
    if status.is_server_error() {
        tracing::warn!(%status, %detail, "admin request failed");
    } else {
        tracing::info!(%status, %detail, "admin request refused");
    }
    xml(
        status,
        "application/xml; charset=utf-8",
        atom::error(status.as_u16(), &detail),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_is_named_by_the_first_label_of_its_host() {
        assert_eq!(namespace_name("ns1.servicebus.windows.net"), "ns1");
        assert_eq!(namespace_name("localhost:443"), "localhost");
        assert_eq!(namespace_name("localhost"), "localhost");
        assert_eq!(namespace_name("127.0.0.1:5300"), wire::NAMESPACE);
        assert_eq!(namespace_name("[::1]:443"), wire::NAMESPACE);
        assert_eq!(namespace_name(""), wire::NAMESPACE);
    }

    fn description(children: &str) -> atom::Element {
        let body = format!(
            "<entry><content><SubscriptionDescription>{children}</SubscriptionDescription>\
             </content></entry>"
        );
        atom::parse(body.as_bytes()).expect("XML")
    }

    fn rule(name: &str, sql: &str) -> String {
        format!(
            "<DefaultRuleDescription><Filter i:type=\"SqlFilter\"><SqlExpression>{sql}\
             </SqlExpression></Filter><Name>{name}</Name></DefaultRuleDescription>"
        )
    }

    #[test]
    fn an_update_sets_what_it_sends_and_ignores_the_default_rule() {
        let sent = format!(
            "<MaxDeliveryCount>3</MaxDeliveryCount>{}",
            rule("only", "a = 1")
        );
        let created = subscription_config("s", &description(&sent)).expect("created");
        assert_eq!(created.max_delivery_count, 3);
        let names: Vec<&str> = created.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["only"], "creation takes the default rule");

        let sent = format!(
            "<LockDuration>PT45S</LockDuration><MessageCount>9</MessageCount>\
             <CreatedAt>2024-05-01T10:00:00Z</CreatedAt><Status>Active</Status>\
             <EnableBatchedOperations>true</EnableBatchedOperations>{}",
            rule("other", "b = 2")
        );
        let updated = apply_subscription(created.clone(), &description(&sent), Intent::Update)
            .expect("updated");
        assert_eq!(updated.lock_duration, std::time::Duration::from_secs(45));
        assert_eq!(updated.max_delivery_count, 3, "not sent: kept");
        assert_eq!(
            updated.rules, created.rules,
            "an update ignores the default rule"
        );

        let forward = description("<ForwardTo>sb://localhost:5300/Elsewhere</ForwardTo>");
        let forwarding = apply_subscription(created, &forward, Intent::Update).expect("applied");
        assert_eq!(
            forwarding.forward_to.as_deref(),
            Some("sb://localhost:5300/Elsewhere"),
            "kept as given, to be written back so"
        );
    }

    #[test]
    fn user_metadata_is_set_cleared_when_left_out_and_bounded() {
        let queue = |children: &str| {
            atom::Sent {
            kind: "QueueDescription".to_owned(),
            fields: atom::read_description(
                format!("<entry><content><QueueDescription>{children}</QueueDescription></content></entry>")
                    .as_bytes(),
            )
            .expect("reads")
            .fields,
            authorization_rules: None,
        }
        };
        let created =
            declaration("q", &queue("<UserMetadata>a &amp; b</UserMetadata>")).expect("created");
        let Declaration::Queue(kept) = &created else {
            panic!("a queue");
        };
        assert_eq!(kept.user_metadata.as_deref(), Some("a & b"));
        let Declaration::Queue(cleared) = apply(
            created.clone(),
            &queue("<MaxDeliveryCount>3</MaxDeliveryCount>"),
        )
        .expect("applied") else {
            panic!("a queue");
        };
        assert_eq!(
            cleared.user_metadata, None,
            "left out: removed, as a forwarding target"
        );
        let long = format!("<UserMetadata>{}</UserMetadata>", "x".repeat(1025));
        assert_eq!(
            apply(created, &queue(&long)).expect_err("refused"),
            format!(
                "UserMetadata = {:?}...: is 1025 characters long; Service Bus allows at most 1024",
                "x".repeat(40)
            )
        );
        let subscription =
            subscription_config("s", &description("<UserMetadata>notes</UserMetadata>"))
                .expect("created");
        assert_eq!(subscription.user_metadata.as_deref(), Some("notes"));
        let updated =
            apply_subscription(subscription, &description(""), Intent::Update).expect("updated");
        assert_eq!(updated.user_metadata, None);
    }

    #[test]
    fn a_refused_value_is_shown_cut() {
        assert_eq!(shown("short"), "\"short\"");
        assert_eq!(shown(&"é".repeat(41)), format!("{:?}...", "é".repeat(40)));
    }

    /// An entity's refusal is answered with the status Service Bus's REST API gives it, as
    /// its `$management` node answers it: a storage failure is the broker's fault (500), a
    /// full entity a quota (403), a missing message 404; 400 is for the request's own faults.
    #[test]
    fn an_entity_s_refusal_is_answered_with_service_bus_s_status() {
        let answered = |error: EntityError| {
            refusal(&RegistryError::Refused(error), "t/Subscriptions/s").status()
        };
        let cases = [
            (EntityError::Storage("disk full".into()), 500),
            (EntityError::QuotaExceeded { size: 2, max: 1 }, 403),
            (
                EntityError::MessageNotFound(7, "unlocked dead-lettered"),
                404,
            ),
            (EntityError::LockLost, 410),
            (EntityError::RuleNotFound("r".into()), 404),
            (EntityError::Unavailable, 503),
            (EntityError::InvalidRuleName("too long".into()), 400),
        ];
        for (error, status) in cases {
            assert_eq!(answered(error.clone()).as_u16(), status, "{error:?}");
        }
    }
}
