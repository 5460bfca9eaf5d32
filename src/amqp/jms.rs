//! JMS subscriptions, as Service Bus Premium serves JMS 2.0: a JMS consumer on a topic attaches
//! a receiver to the topic's own address, and the broker makes that a Service Bus subscription
//! named `<name>$<client id>$D` (durable) or `<name>$<client id>$ND` (non-durable), created on
//! attach. A non-durable subscription goes with its last link; a durable one stays until it is
//! unsubscribed: a link of it closed (not merely detached), or Qpid JMS's `unsubscribe`, an
//! attach naming it with no source, answered with its source and then closed.
//!
//! azure-servicebus-jms (its `open` says `com.microsoft:is-client-provider`) also has the
//! queues and topics it names created when missing, as Service Bus Premium does for it, with
//! the auto-delete-on-idle times its `open` asks for; plain Qpid JMS gets `amqp:not-found`.
//!
//! Names follow Qpid JMS's link names: a named subscription's link is the subscription's name,
//! then `|` and a suffix for a shared one (`|global` when the connection has no client id,
//! `|volatile2` for a second non-durable consumer, ...); the client id is the connection's
//! container id unless the source asks for the `global` scope. A plain topic consumer (unshared,
//! non-durable) names nothing: its subscription gets a broker-made name.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::types::definitions::{self, AmqpError, Role};
use fe2o3_amqp::types::messaging::TargetArchetype;
use fe2o3_amqp::types::messaging::{
    DistributionMode, FilterSet, Source, TerminusDurability, TerminusExpiryPolicy,
};
use fe2o3_amqp::types::performatives::{Attach, Open};
use fe2o3_amqp::types::primitives::{Array, Symbol, Value};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use tokio::sync::Mutex;

use crate::amqp::{link, temporary};
use crate::auth::access::Access;
use crate::clock;
use crate::config::{Declaration, Rights, RuleFilter, SubscriptionConfig};
use crate::entity::handle::LaneId;
use crate::entity::registry::{Registry, RegistryError};
use crate::node::{router, Node};

/// The connection capability a broker offers when it serves JMS shared subscriptions (Qpid JMS
/// refuses `createSharedConsumer` without it).
pub const SHARED_SUBS: &str = "SHARED-SUBS";

/// Source capabilities Qpid JMS sends: a topic (a temporary one), a shared subscription, one
/// outside any client id.
const TOPIC: &str = "topic";
const TEMPORARY_TOPIC: &str = "temporary-topic";
const SHARED: &str = "shared";
const GLOBAL: &str = "global";
/// What separates Qpid JMS's subscription name from the rest of its link name.
const LINK_NAME_DELIMITER: char = '|';
/// What separates the parts of a JMS subscription's Service Bus name.
const NAME_DELIMITER: char = '$';
/// The suffixes of durable and non-durable JMS subscriptions' Service Bus names.
const DURABLE: &str = "D";
const NON_DURABLE: &str = "ND";

/// The `open` property azure-servicebus-jms sets (true), and those with the auto-delete-on-idle
/// times (seconds) it asks for the queues, topics and subscriptions it has created.
const CLIENT_PROVIDER: &str = "com.microsoft:is-client-provider";
const QUEUE_IDLE: &str = "com.microsoft:queue-auto-delete-on-idle-duration-in-seconds";
const TOPIC_IDLE: &str = "com.microsoft:topic-auto-delete-on-idle-duration-in-seconds";
const SUBSCRIPTION_IDLE: &str = "com.microsoft:subscriber-auto-delete-on-idle-duration-in-seconds";
/// Capabilities Qpid JMS gives a queue's terminus.
const QUEUE: &str = "queue";

/// What a client's `open` says that JMS needs: its client id (the container id), and, for
/// azure-servicebus-jms, what it has created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Client {
    /// The connection's container id: a JMS connection's client id.
    pub id: String,
    /// Set for azure-servicebus-jms: the queues and topics it names are created when missing.
    pub creates: Option<Creates>,
}

/// The auto-delete-on-idle times azure-servicebus-jms asks for what it has created (`None`:
/// never).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Creates {
    /// For queues.
    pub queue_idle: Option<Duration>,
    /// For topics.
    pub topic_idle: Option<Duration>,
    /// For the JMS subscriptions.
    pub subscription_idle: Option<Duration>,
}

impl Client {
    /// What `open` says.
    pub fn of(open: &Open) -> Client {
        let property = |name: &str| {
            (open.properties.as_ref()).and_then(|properties| properties.get(&Symbol::from(name)))
        };
        let seconds = |name: &str| match property(name)? {
            Value::Long(n) => u64::try_from(*n).ok(),
            Value::Int(n) => u64::try_from(*n).ok(),
            Value::Ulong(n) => Some(*n),
            Value::Uint(n) => Some(u64::from(*n)),
            _ => None,
        };
        let idle = |name: &str| seconds(name).filter(|s| *s > 0).map(Duration::from_secs);
        let provider = matches!(property(CLIENT_PROVIDER), Some(Value::Bool(true)));
        Client {
            id: open.container_id.clone(),
            creates: provider.then(|| Creates {
                queue_idle: idle(QUEUE_IDLE),
                topic_idle: idle(TOPIC_IDLE),
                subscription_idle: idle(SUBSCRIPTION_IDLE),
            }),
        }
    }
}

/// The queue or topic an azure-servicebus-jms attach names that is missing: its declaration,
/// as Service Bus creates it (default settings and the client's auto-delete-on-idle time).
/// `None` when the attach names no queue or topic, or one that exists (`exists`).
///
/// # Errors
/// A name that is not a valid queue or topic name.
pub fn missing_entity(
    attach: &Attach,
    creates: &Creates,
    exists: impl FnOnce(&str) -> bool,
) -> Option<Result<Declaration, String>> {
    let (address, capabilities) = match attach.role {
        Role::Sender => match attach.target.as_deref()? {
            TargetArchetype::Target(target) => {
                (target.address.as_ref()?, target.capabilities.as_ref())
            }
            TargetArchetype::Coordinator(_) => return None,
        },
        Role::Receiver => {
            let source = attach.source.as_deref()?;
            (source.address.as_ref()?, source.capabilities.as_ref())
        }
    };
    let (kind, idle) = match (has(capabilities, QUEUE), has(capabilities, TOPIC)) {
        (true, _) => ("queues", creates.queue_idle),
        (false, true) => ("topics", creates.topic_idle),
        (false, false) => return None,
    };
    let name = crate::wire::entity_path(address);
    if exists(name) {
        return None;
    }
    let mut declared = format!(
        "[[{kind}]]\nname = {}\n",
        toml::Value::String(name.to_owned())
    );
    if let Some(idle) = idle {
        declared.push_str(&format!("auto_delete_on_idle = \"{}s\"\n", idle.as_secs()));
    }
    Some(Declaration::parse(&declared, "the attach").map_err(|error| error.to_string()))
}

/// What a client receiver's attach asks of JMS subscriptions, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A consumer on the topic `address` names: the subscription it takes from.
    Subscribe(Subscription),
    /// Qpid JMS's `unsubscribe`: an attach with no source naming the durable subscription
    /// (its Service Bus name) it is about to close.
    Unsubscribe(String),
}

/// The subscription a JMS consumer takes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Its Service Bus name: `<name>$<client id>$D` or `$ND`.
    pub name: String,
    /// Whether it outlives its links.
    pub durable: bool,
    /// Whether more than one consumer may take from it at once.
    pub shared: bool,
    /// The JMS message selector its rule applies, if any.
    pub selector: Option<String>,
}

/// What `attach`, a client receiver's, asks of JMS subscriptions: a consumer when its source
/// names an address as a topic (the `topic` or `temporary-topic` capability: a Service Bus SDK
/// receiver attached to a topic is still refused; the caller checks that it is one), an
/// unsubscribe when it has no source. `client_id` is the connection's container id;
/// `made_name` names a plain topic consumer's subscription.
pub fn ask(attach: &Attach, client_id: &str, made_name: impl FnOnce() -> String) -> Option<Ask> {
    if attach.role != Role::Receiver {
        return None;
    }
    let Some(source) = attach.source.as_deref() else {
        let global = has(attach.desired_capabilities.as_ref(), GLOBAL);
        let client = scope(client_id, global);
        return Some(Ask::Unsubscribe(service_bus_name(
            jms_name(&attach.name),
            client,
            true,
        )));
    };
    source.address.as_ref()?;
    let capabilities = source.capabilities.as_ref();
    if !has(capabilities, TOPIC) && !has(capabilities, TEMPORARY_TOPIC) {
        return None;
    }
    let durable = source.durable != TerminusDurability::None
        || source.expiry_policy == TerminusExpiryPolicy::Never;
    let shared = has(capabilities, SHARED);
    let client = scope(client_id, has(capabilities, GLOBAL));
    let name = match (shared, durable) {
        (false, false) => service_bus_name(&made_name(), "", false),
        _ => service_bus_name(jms_name(&attach.name), client, durable),
    };
    Some(Ask::Subscribe(Subscription {
        name,
        durable,
        shared,
        selector: selector(attach),
    }))
}

/// Whether a subscription's Service Bus name is a non-durable JMS subscription's (none
/// outlives the broker: a restart deletes them).
pub fn is_non_durable(name: &str) -> bool {
    let suffix = format!("{NAME_DELIMITER}{NON_DURABLE}");
    name.len() > suffix.len()
        && name[name.len() - suffix.len()..].eq_ignore_ascii_case(&suffix)
        && name.matches(NAME_DELIMITER).count() == 2
}

/// The JMS subscription name in a Qpid JMS link name.
fn jms_name(link_name: &str) -> &str {
    link_name
        .split(LINK_NAME_DELIMITER)
        .next()
        .unwrap_or(link_name)
}

/// The client id a subscription is scoped to: none for the global scope.
fn scope(client_id: &str, global: bool) -> &str {
    match global {
        true => "",
        false => client_id,
    }
}

/// `<name>$<client>$D` or `$ND`, as Service Bus names a JMS subscription.
fn service_bus_name(name: &str, client: &str, durable: bool) -> String {
    let kind = if durable { DURABLE } else { NON_DURABLE };
    format!("{name}{NAME_DELIMITER}{client}{NAME_DELIMITER}{kind}")
}

fn has(capabilities: Option<&Array<Symbol>>, wanted: &str) -> bool {
    capabilities.is_some_and(|symbols| symbols.0.iter().any(|symbol| symbol.as_str() == wanted))
}

/// The descriptor of a JMS message selector filter (AMQP filters registry,
/// `apache.org:selector-filter:string`), by name and by code.
const SELECTOR_FILTER: (&str, u64) = ("apache.org:selector-filter:string", 0x0000_468C_0000_0004);
/// The key Qpid JMS puts a selector under in a source's filter set.
const SELECTOR_KEY: &str = "jms-selector";

/// The JMS message selector a receiver's source asks for (a selector filter under any key, by
/// descriptor name or code), as text.
pub fn selector(attach: &Attach) -> Option<String> {
    let filters = (attach.source.as_ref()).and_then(|source| source.filter.as_ref());
    let selector = filters
        .into_iter()
        .flatten()
        .find_map(|(_, value)| match value {
            Value::Described(described) if is_selector(value) => Some(&described.value),
            _ => None,
        })?;
    Some(match selector {
        Value::String(text) => text.clone(),
        other => format!("{other:?}"),
    })
}

/// Whether a source filter's value is a JMS message selector.
pub fn is_selector(value: &Value) -> bool {
    let Value::Described(described) = value else {
        return false;
    };
    let (name, code) = SELECTOR_FILTER;
    match &described.descriptor {
        Descriptor::Name(symbol) => symbol.as_str() == name,
        Descriptor::Code(number) => *number == code,
    }
}

/// A source filter set holding `selector`, as Qpid JMS sends one.
fn selector_filter(selector: &str) -> FilterSet {
    let mut filters = FilterSet::new();
    filters.insert(
        Symbol::from(SELECTOR_KEY),
        Value::Described(Box::new(Described {
            descriptor: Descriptor::Name(Symbol::from(SELECTOR_FILTER.0)),
            value: Value::String(selector.to_owned()),
        })),
    );
    filters
}

/// The source the broker answers Qpid JMS's unsubscribe with: the durable subscription's
/// topic, as a durable consumer's attach names it.
pub fn unsubscribe_source(topic: &str, selector: Option<&str>) -> Source {
    let mut source = Source::builder()
        .address(topic.to_owned())
        .durable(TerminusDurability::UnsettledState)
        .expiry_policy(TerminusExpiryPolicy::Never)
        .distribution_mode(DistributionMode::Copy)
        .capabilities(Array(vec![Symbol::from("topic")]))
        .build();
    if let Some(selector) = selector {
        source.filter = Some(selector_filter(selector));
    }
    source
}

/// The links each JMS subscription has on the whole broker: a non-durable subscription goes
/// with its last, an unshared one takes one at a time, and one with links is not unsubscribed.
#[derive(Debug, Default)]
pub struct Links {
    held: Mutex<HashMap<(String, String), Held>>,
}

/// The links of one subscription.
#[derive(Debug, Clone, Copy)]
struct Held {
    count: usize,
    shared: bool,
}

/// A link of a JMS subscription, released when it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tie {
    /// The topic, lower-cased.
    pub topic: String,
    /// The subscription's Service Bus name.
    pub name: String,
    /// Whether the subscription outlives its links.
    pub durable: bool,
}

impl Tie {
    /// The subscription's address.
    pub fn path(&self) -> String {
        format!("{}/Subscriptions/{}", self.topic, self.name)
    }
}

impl Links {
    /// Takes a link of `wanted` on `topic`, creating the subscription when missing (its
    /// `$Default` rule applies the selector). A durable subscription asked for with another
    /// selector than it has is replaced when no link holds it (JMS 2.0 §8.3: changing a
    /// durable subscription unsubscribes it first); its other rules are not compared, so rules
    /// an administrator changed never cost it its messages.
    ///
    /// # Errors
    /// `amqp:resource-locked` for a second link of an unshared subscription (or an unshared
    /// link of a shared one in use) and for another selector than a subscription in use has,
    /// `amqp:invalid-field` for a name Service Bus would not take, and the registry's refusals.
    pub async fn subscribe(
        &self,
        registry: &Registry,
        topic: &str,
        wanted: &Subscription,
        idle: Option<Duration>,
    ) -> Result<Tie, definitions::Error> {
        let key = (topic.to_lowercase(), wanted.name.to_lowercase());
        let mut held = self.held.lock().await;
        let links = held.get(&key).copied();
        if let Some(links) = links.filter(|links| !(links.shared && wanted.shared)) {
            return Err(link::amqp_error(
                AmqpError::ResourceLocked,
                format!(
                    "the JMS subscription '{}' of topic '{topic}' has a consumer already{}",
                    wanted.name,
                    if links.shared {
                        ""
                    } else {
                        " and is not shared"
                    }
                ),
            ));
        }
        let invalid = |reason| link::amqp_error(AmqpError::InvalidField, reason);
        let mut config = SubscriptionConfig::named(&wanted.name).map_err(invalid)?;
        config.auto_delete_on_idle = idle;
        let selected = (wanted.selector.as_deref())
            .map(RuleFilter::jms_selector)
            .transpose()
            .map_err(|reason| invalid(format!("the message selector is not valid: {reason}")))?
            .flatten();
        if let (Some(filter), Some(rule)) = (selected, config.rules.first_mut()) {
            rule.filter = filter;
        }
        // Only the selector is compared: rules an administrator changed are kept.
        let existing = registry.subscription_config(topic, &wanted.name);
        let changed = (existing.as_ref())
            .is_some_and(|existing| selector_of(existing) != selector_of(&config));
        if changed && links.is_some() {
            return Err(link::amqp_error(
                AmqpError::ResourceLocked,
                format!(
                    "the JMS subscription '{}' of topic '{topic}' is in use with another \
                     selector",
                    wanted.name
                ),
            ));
        }
        match existing {
            Some(_) if changed => {
                registry
                    .remove_subscription(topic, &wanted.name)
                    .await
                    .map_err(|error| link::registry_refusal(&error))?;
                registry
                    .add_subscription(topic, config)
                    .await
                    .map_err(|error| link::registry_refusal(&error))?;
            }
            Some(_) => {}
            None => registry
                .add_subscription(topic, config)
                .await
                .map_err(|error| link::registry_refusal(&error))?,
        }
        let entry = held.entry(key).or_insert(Held {
            count: 0,
            shared: wanted.shared,
        });
        entry.count += 1;
        Ok(Tie {
            topic: topic.to_lowercase(),
            name: wanted.name.clone(),
            durable: wanted.durable,
        })
    }

    /// Finds the durable subscription an unsubscribe names, on any topic, and takes a link of
    /// it for the unsubscribe to close. Returns the link and the source to answer with.
    ///
    /// # Errors
    /// `amqp:not-found` when no topic has it, `amqp:resource-locked` while a consumer holds it.
    pub async fn unsubscribe(
        &self,
        registry: &Registry,
        name: &str,
        allowed: impl Fn(&str) -> Result<(), definitions::Error>,
    ) -> Result<(Tie, Source), definitions::Error> {
        let found = registry
            .topics_with_subscription(name)
            .into_iter()
            .next()
            .ok_or_else(|| {
                link::amqp_error(
                    AmqpError::NotFound,
                    format!("no topic has the durable JMS subscription '{name}'"),
                )
            })?;
        let (topic, config) = found;
        allowed(&topic)?;
        let wanted = Subscription {
            name: config.name.clone(),
            durable: true,
            shared: false,
            selector: selector_of(&config).map(str::to_owned),
        };
        let source = unsubscribe_source(&topic, wanted.selector.as_deref());
        let tie = self.subscribe(registry, &topic, &wanted, None).await?;
        Ok((tie, source))
    }

    /// Gives back a link of `tie`: when it was the last, a non-durable subscription is
    /// deleted, and a durable one too when the link was `closed` (an unsubscribe).
    pub async fn release(&self, registry: &Registry, tie: &Tie, closed: bool) {
        let key = (tie.topic.clone(), tie.name.to_lowercase());
        let mut held = self.held.lock().await;
        let Some(links) = held.get_mut(&key) else {
            return;
        };
        links.count -= 1;
        if links.count > 0 {
            return;
        }
        held.remove(&key);
        if tie.durable && !closed {
            return;
        }
        match registry.remove_subscription(&tie.topic, &tie.name).await {
            Ok(()) => tracing::info!(subscription = %tie.path(), "JMS subscription deleted"),
            Err(error) => {
                tracing::debug!(subscription = %tie.path(), %error, "JMS subscription gone already");
            }
        }
    }
}

/// The JMS selector a subscription's rules apply, if any.
fn selector_of(subscription: &SubscriptionConfig) -> Option<&str> {
    subscription
        .rules
        .iter()
        .find_map(|rule| match &rule.filter {
            RuleFilter::Selector(selector) => Some(selector.as_str()),
            _ => None,
        })
}

/// Readies a client attach that is a JMS consumer on a topic (or Qpid JMS's unsubscribe): the
/// subscription it takes from exists and holds a link for it, and an unsubscribe's attach gets
/// the source to be answered with. `None` for every other attach; the attach is refused with
/// the error. Creating a subscription needs Listen on its topic, as receiving from it does, and
/// on a temporary topic being the connection (`connection_id`) that made it.
pub async fn prepare(
    attach: &mut Attach,
    links: &Links,
    (registry, access): (&Arc<Registry>, &Access),
    client: &Client,
    connection_id: &str,
) -> Option<Result<Tie, definitions::Error>> {
    if let Some(creates) = &client.creates {
        if let Err(refused) = create_missing(attach, creates, registry, access).await {
            return Some(Err(refused));
        }
    }
    let made_name = || uuid::Uuid::new_v4().simple().to_string();
    let listen = |topic: &str| {
        access
            .check(topic, Rights::LISTEN, clock::real_ms())
            .map_err(|description| link::amqp_error(AmqpError::UnauthorizedAccess, description))
    };
    match ask(attach, &client.id, made_name)? {
        Ask::Subscribe(wanted) => {
            let address = attach.source.as_ref()?.address.clone()?;
            let node = router::route(registry, &address)?;
            let topic = match temporary::check_owner(&attach.role, (node, address), connection_id) {
                Ok((Node::Entity(entity, lane), _))
                    if entity.is_topic() && lane == LaneId::MAIN =>
                {
                    entity.name().to_owned()
                }
                Ok(_) => return None,
                Err(refused) => return Some(Err(refused)),
            };
            if let Err(refused) = listen(&topic) {
                return Some(Err(refused));
            }
            let idle = client.creates.and_then(|creates| creates.subscription_idle);
            Some(links.subscribe(registry, &topic, &wanted, idle).await)
        }
        Ask::Unsubscribe(name) => {
            let unsubscribed = links.unsubscribe(registry, &name, listen).await;
            Some(unsubscribed.map(|(tie, source)| {
                attach.source = Some(Box::new(source));
                tie
            }))
        }
    }
}

/// Creates the queue or topic an azure-servicebus-jms attach names when it is missing; that
/// needs Manage there, as creating one through the administration API does.
async fn create_missing(
    attach: &Attach,
    creates: &Creates,
    registry: &Arc<Registry>,
    access: &Access,
) -> Result<(), definitions::Error> {
    let exists = |name: &str| router::route(registry, name).is_some();
    let declaration = match missing_entity(attach, creates, exists) {
        None => return Ok(()),
        Some(declared) => {
            declared.map_err(|reason| link::amqp_error(AmqpError::InvalidField, reason))?
        }
    };
    access
        .check(declaration.name(), Rights::MANAGE, clock::real_ms())
        .map_err(|description| link::amqp_error(AmqpError::UnauthorizedAccess, description))?;
    match registry.create_off_runtime(&declaration, false).await {
        Ok(_) | Err(RegistryError::Exists(_)) => {
            tracing::info!(
                entity = declaration.name(),
                "created for an azure-servicebus-jms client"
            );
            Ok(())
        }
        Err(refused) => Err(link::registry_refusal(&refused)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fixtures;

    fn consumer(link_name: &str, durable: bool, capabilities: &[&str]) -> Attach {
        let mut attach = fixtures::attach(Role::Receiver, "t");
        attach.name = link_name.to_owned();
        let source = attach.source.as_mut().expect("a source");
        if durable {
            source.durable = TerminusDurability::UnsettledState;
            source.expiry_policy = TerminusExpiryPolicy::Never;
            source.distribution_mode = Some(DistributionMode::Copy);
        }
        source.capabilities = Some(Array(
            capabilities.iter().map(|c| Symbol::from(*c)).collect(),
        ));
        attach
    }

    fn subscription(attach: &Attach) -> Subscription {
        match ask(attach, "cid", || "made".to_owned()) {
            Some(Ask::Subscribe(subscription)) => subscription,
            other => panic!("not a consumer: {other:?}"),
        }
    }

    #[test]
    fn each_kind_of_jms_consumer_names_its_subscription_as_service_bus_does() {
        let named = |attach: &Attach| subscription(attach).name;
        assert_eq!(named(&consumer("dur1", true, &["topic"])), "dur1$cid$D");
        assert_eq!(
            named(&consumer("sdur1", true, &["topic", "shared"])),
            "sdur1$cid$D"
        );
        let global = ["topic", "shared", "global"];
        assert_eq!(named(&consumer("sdur2|global", true, &global)), "sdur2$$D");
        assert_eq!(named(&consumer("sdur2|global2", true, &global)), "sdur2$$D");
        assert_eq!(
            named(&consumer("snd1|global-volatile1", false, &global)),
            "snd1$$ND"
        );
        assert_eq!(
            named(&consumer("snd2|volatile3", false, &["topic", "shared"])),
            "snd2$cid$ND"
        );
        assert_eq!(
            named(&consumer("qpid-jms:receiver:ID:1:1:1:t", false, &["topic"])),
            "made$$ND"
        );
    }

    #[test]
    fn durability_and_sharing_come_from_the_source() {
        let plain = subscription(&consumer("x", false, &["topic"]));
        assert!(!plain.durable && !plain.shared);
        let shared_durable = subscription(&consumer("x", true, &["topic", "shared"]));
        assert!(shared_durable.durable && shared_durable.shared);
    }

    #[test]
    fn an_attach_without_a_source_unsubscribes_in_its_scope() {
        let mut attach = fixtures::attach(Role::Receiver, "t");
        attach.name = "gone".to_owned();
        attach.source = None;
        assert_eq!(
            ask(&attach, "cid", String::new),
            Some(Ask::Unsubscribe("gone$cid$D".to_owned()))
        );
        attach.name = "gone|global".to_owned();
        attach.desired_capabilities =
            Some(Array(vec![Symbol::from("shared"), Symbol::from("global")]));
        assert_eq!(
            ask(&attach, "cid", String::new),
            Some(Ask::Unsubscribe("gone$$D".to_owned()))
        );
    }

    #[test]
    fn senders_and_receivers_not_asking_for_a_topic_ask_nothing() {
        let attach = fixtures::attach(Role::Sender, "t");
        assert_eq!(ask(&attach, "cid", String::new), None);
        let sdk_receiver = consumer("t-receiver", false, &[]);
        assert_eq!(ask(&sdk_receiver, "cid", String::new), None);
        let queue_consumer = consumer("q-receiver", false, &["queue"]);
        assert_eq!(ask(&queue_consumer, "cid", String::new), None);
        let temporary = consumer("tt", false, &["temporary-topic"]);
        assert!(ask(&temporary, "cid", || "made".to_owned()).is_some());
    }

    fn open(properties: &[(&str, Value)]) -> Open {
        let mut fields = fe2o3_amqp::types::definitions::Fields::new();
        for (name, value) in properties {
            fields.insert(Symbol::from(*name), value.clone());
        }
        Open {
            container_id: "cid".to_owned(),
            hostname: None,
            max_frame_size: Default::default(),
            channel_max: Default::default(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: Some(fields),
        }
    }

    #[test]
    fn azure_servicebus_jms_says_in_its_open_that_it_has_entities_created() {
        let plain = Client::of(&open(&[]));
        assert_eq!(
            plain,
            Client {
                id: "cid".to_owned(),
                creates: None
            }
        );
        let provider = Client::of(&open(&[
            (CLIENT_PROVIDER, Value::Bool(true)),
            (QUEUE_IDLE, Value::Long(300)),
            (SUBSCRIPTION_IDLE, Value::Long(0)),
        ]));
        let creates = Creates {
            queue_idle: Some(Duration::from_secs(300)),
            topic_idle: None,
            subscription_idle: None,
        };
        assert_eq!(provider.creates, Some(creates));
    }

    #[test]
    fn a_missing_queue_or_topic_named_with_its_capability_is_declared_as_asked() {
        let creates = Creates {
            queue_idle: Some(Duration::from_secs(600)),
            ..Creates::default()
        };
        let mut sender = fixtures::attach(Role::Sender, "orders");
        if let Some(TargetArchetype::Target(target)) = sender.target.as_deref_mut() {
            target.capabilities = Some(Array(vec![Symbol::from("queue")]));
        }
        let declared = missing_entity(&sender, &creates, |_| false)
            .expect("missing")
            .expect("valid");
        let Declaration::Queue(queue) = declared else {
            panic!("not a queue: {declared:?}");
        };
        assert_eq!(
            (queue.name.as_str(), queue.auto_delete_on_idle),
            ("orders", Some(Duration::from_secs(600)))
        );
        assert!(
            missing_entity(&sender, &creates, |_| true).is_none(),
            "it exists"
        );

        let receiver = consumer("c", false, &["topic"]);
        let declared = missing_entity(&receiver, &creates, |_| false).expect("missing");
        assert!(
            matches!(declared, Ok(Declaration::Topic(topic)) if topic.auto_delete_on_idle.is_none())
        );

        let plain = consumer("c", false, &[]);
        assert!(
            missing_entity(&plain, &creates, |_| false).is_none(),
            "no capability"
        );
        let bad = consumer("c", false, &["queue"]);
        let mut bad = bad;
        bad.source.as_mut().expect("source").address = Some("a b".to_owned());
        assert!(matches!(
            missing_entity(&bad, &creates, |_| false),
            Some(Err(_))
        ));
    }

    #[test]
    fn only_non_durable_jms_names_are_non_durable() {
        assert!(is_non_durable("snd1$$ND"));
        assert!(is_non_durable("snd2$cid$nd"));
        assert!(!is_non_durable("dur1$cid$D"));
        assert!(!is_non_durable("plain-ND"));
        assert!(!is_non_durable("$ND"));
    }
}
