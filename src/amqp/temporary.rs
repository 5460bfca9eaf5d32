//! Temporary queues and topics: JMS's `createTemporaryQueue()` and `createTemporaryTopic()`,
//! nodes the broker makes and names for a client, that live as long as the link that asked.
//!
//! Qpid JMS (and azure-servicebus-jms on it) asks with a sender whose target is `dynamic`, has
//! no address, names the node's kind in its capabilities (`temporary-queue`,
//! `temporary-topic`) and has `lifetime-policy` `delete-on-close` in its dynamic node
//! properties; it reads the node's name from the target address of the broker's reply, and
//! deletes the node (`TemporaryQueue.delete()`) by detaching that link. The broker makes a queue
//! or a topic with default settings named `$temp-queue-<connection>-<n>` (or `$temp-topic-`):
//! `$` is in no name a user may give ([`crate::wire::temporary`]), and the connection's id in
//! the name says which connection owns it. It deletes the node, messages and all, when that
//! link detaches, its session ends or its connection ends, closed or dropped (AMQP 1.0
//! §3.5.10 `delete-on-close`). Its declaration is never stored, and what a crash leaves of it
//! (its log, its times) is dropped at the next start, so it never comes back.
//!
//! JMS lets only the connection that made a temporary destination consume from it, and any
//! connection send to it (the answer to a request's `JMSReplyTo`). A receiver of a temporary
//! (or of its dead-letter queue), or a link to its `$management` node, from another
//! connection is refused with `amqp:resource-locked` ([`check_owner`]): the AMQP condition of
//! a node "to which it has no access because another client is working with it"; no right
//! would let it in, so `amqp:unauthorized-access` would mislead.
//!
//! Making one needs Send and Listen on the namespace (the creator sends on its link and
//! receives the answers; an entity's own policies cannot reach a name the broker makes), not
//! Manage: Microsoft documents none for temporaries, and its JMS guides give applications
//! Send and Listen policies. A connection holds at most [`MAX_PER_CONNECTION`] at once, and
//! every temporary counts toward `broker.max_entities`; both refusals are
//! `amqp:resource-limit-exceeded`. Any other dynamic node (a dynamic source, another kind or
//! lifetime policy) is refused with `amqp:not-implemented` naming what was asked.
//!
//! The connection task has [`Temporaries::prepare`] make the node before the attach reaches
//! its session (making an entity opens its log, off the runtime thread), binds it to the link
//! the attach opened ([`Temporaries::attached`]), and at the end of each turn deletes those
//! whose link went ([`Temporaries::reap`]), before the turn's answers leave: a detach, an end
//! is answered once the node is gone.

use std::collections::HashMap;
use std::sync::Arc;

use fe2o3_amqp::types::definitions::{self, AmqpError, Fields, Role};
use fe2o3_amqp::types::messaging::TargetArchetype;
use fe2o3_amqp::types::performatives::Attach;
use fe2o3_amqp::types::primitives::{Array, Symbol, Value};
use serde_amqp::descriptor::Descriptor;

use crate::amqp::link;
use crate::auth::access::Access;
use crate::clock;
use crate::config::{Declaration, Rights};
use crate::entity::registry::{Registry, RegistryError};
use crate::node::Node;
use crate::wire::temporary::{is_temporary, PREFIX};

/// The most temporaries one connection holds at once: a JMS application holds one per
/// requester, and each is an entity of the namespace's quota.
pub const MAX_PER_CONNECTION: usize = 64;

/// The target capability asking for a temporary queue (Qpid JMS's `TEMP_QUEUE_CAPABILITY`).
const TEMPORARY_QUEUE: &str = "temporary-queue";
/// The target capability asking for a temporary topic (Qpid JMS's `TEMP_TOPIC_CAPABILITY`).
const TEMPORARY_TOPIC: &str = "temporary-topic";
/// The dynamic node property naming the node's lifetime (AMQP 1.0 §3.5.9).
const LIFETIME_POLICY: &str = "lifetime-policy";
/// AMQP 1.0's lifetime policies (§3.5.10 to §3.5.13) by descriptor code; the broker keeps the
/// first.
const LIFETIME_POLICIES: [(u64, &str); 4] = [
    (0x2b, "delete-on-close"),
    (0x2c, "delete-on-no-links"),
    (0x2d, "delete-on-no-messages"),
    (0x2e, "delete-on-no-links-or-messages"),
];

/// What kind of node a dynamic target asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Queue,
    Topic,
}

impl Kind {
    /// The kind in names and messages.
    fn word(self) -> &'static str {
        match self {
            Kind::Queue => "queue",
            Kind::Topic => "topic",
        }
    }
}

/// The temporaries one connection made, owned by its task.
#[derive(Debug, Default)]
pub struct Temporaries {
    /// Each live temporary by the id of the link that made it: it goes when that link does.
    by_link: HashMap<u64, String>,
    /// The one made for the attach being answered, until [`Temporaries::attached`] binds it.
    pending: Option<String>,
    /// Those made for attaches that opened no link: deleted at the end of the turn.
    orphans: Vec<String>,
    /// How many this connection made: numbers their names, so that none is named twice.
    made: u64,
}

impl Temporaries {
    /// Makes the node a client attach asks for with a dynamic target, if it asks for one, and
    /// writes its name into the attach's target address (the reply echoes it); returns why
    /// not, to refuse the attach with, when it cannot be made. An attach asking for no dynamic
    /// node is left alone. The node is pending until [`Temporaries::attached`].
    ///
    /// # Cancel safety
    /// Not cancel safe: an entity made when the future is dropped is deleted only when the
    /// connection ends. The connection task awaits it inline.
    pub async fn prepare(
        &mut self,
        attach: &mut Attach,
        (registry, access, connection_id): (&Arc<Registry>, &Access, &str),
    ) -> Option<definitions::Error> {
        self.orphans.extend(self.pending.take());
        let kind = match requested(attach)? {
            Ok(kind) => kind,
            Err(refusal) => return Some(refusal),
        };
        let name = match self.make(kind, registry, access, connection_id).await {
            Ok(name) => name,
            Err(refusal) => return Some(refusal),
        };
        tracing::debug!(entity = %name, link = %attach.name, "temporary {} made", kind.word());
        if let Some(TargetArchetype::Target(target)) = attach.target.as_deref_mut() {
            target.address = Some(name.clone());
        }
        self.pending = Some(name);
        None
    }

    /// Binds the node made for the attach just answered to the link it opened (`link`), or,
    /// when it opened none or was refused, has it deleted at the end of the turn.
    pub fn attached(&mut self, link: Option<u64>) {
        let Some(name) = self.pending.take() else {
            return;
        };
        match link {
            Some(link) => {
                self.by_link.insert(link, name);
            }
            None => self.orphans.push(name),
        }
    }

    /// Deletes, messages and all, the temporaries whose link is no longer `live` (detached,
    /// its session or connection ended) and those no link took.
    ///
    /// # Cancel safety
    /// Not cancel safe: a deletion cut short leaves the entity to the next start.
    pub async fn reap(&mut self, live: impl Fn(u64) -> bool, registry: &Registry) {
        if self.by_link.is_empty() && self.orphans.is_empty() && self.pending.is_none() {
            return;
        }
        let mut gone: Vec<String> = self.orphans.drain(..).collect();
        gone.extend(self.pending.take());
        let links: Vec<u64> = (self.by_link.keys().copied())
            .filter(|link| !live(*link))
            .collect();
        gone.extend(links.iter().filter_map(|link| self.by_link.remove(link)));
        for name in gone {
            match registry.delete(&name).await {
                Ok(()) => tracing::debug!(entity = %name, "temporary deleted with its link"),
                // Deleted meanwhile (the administration API, a testing reset).
                Err(RegistryError::NotFound(_)) => {}
                Err(error) => {
                    tracing::warn!(entity = %name, %error, "temporary not deleted: the next start drops it");
                }
            }
        }
    }

    /// Makes a temporary of `kind` for the connection `connection_id`, unless it holds as
    /// many as it may or lacks the rights; returns its name.
    async fn make(
        &mut self,
        kind: Kind,
        registry: &Arc<Registry>,
        access: &Access,
        connection_id: &str,
    ) -> Result<String, definitions::Error> {
        if self.by_link.len() + self.orphans.len() >= MAX_PER_CONNECTION {
            return Err(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "a connection holds at most {MAX_PER_CONNECTION} temporary queues and \
                     topics; delete one first"
                ),
            ));
        }
        self.made += 1;
        let name = format!("{PREFIX}{}-{connection_id}-{}", kind.word(), self.made);
        for rights in [Rights::SEND, Rights::LISTEN] {
            access
                .check(&name, rights, clock::real_ms())
                .map_err(|description| {
                    link::amqp_error(
                        AmqpError::UnauthorizedAccess,
                        format!(
                            "making a temporary {} needs Send and Listen on the namespace: \
                             {description}",
                            kind.word()
                        ),
                    )
                })?;
        }
        let declaration = declaration(kind, &name)?;
        match registry.create_off_runtime(&declaration, false).await {
            Ok(_) => Ok(name),
            Err(error) => Err(link::registry_refusal(&error)),
        }
    }
}

/// Refuses a link of another connection than the one that made the temporary it attaches
/// to: a receiver of it (or of its dead-letter queue) or either link of its `$management`
/// node. Every other link, and every link to an entity that is not temporary, goes on: any
/// connection may send to a temporary.
///
/// # Errors
/// `amqp:resource-locked` naming the temporary.
pub fn check_owner(
    role: &Role,
    (node, address): (Node, String),
    connection_id: &str,
) -> Result<(Node, String), definitions::Error> {
    let entity = match (role, &node) {
        (Role::Receiver, Node::Entity(entity, _)) | (_, Node::Management(entity, _)) => entity,
        _ => return Ok((node, address)),
    };
    let name = entity.name();
    if !is_temporary(name) || owner(name) == Some(connection_id) {
        return Ok((node, address));
    }
    let kind = if entity.is_topic() { "topic" } else { "queue" };
    Err(link::amqp_error(
        AmqpError::ResourceLocked,
        format!(
            "'{name}' is a temporary {kind} of another connection: only the connection that \
             made it may receive from it (any connection may send to it)"
        ),
    ))
}

/// The id of the connection that made the temporary `name`.
fn owner(name: &str) -> Option<&str> {
    let rest = name.get(PREFIX.len()..)?;
    let rest = (rest.strip_prefix("queue-")).or_else(|| rest.strip_prefix("topic-"))?;
    rest.rsplit_once('-').map(|(owner, _)| owner)
}

/// The node a client attach asks the broker to make: `None` when it asks for none (its
/// terminus is not dynamic); why not when it asks for one the broker does not make.
fn requested(attach: &Attach) -> Option<Result<Kind, definitions::Error>> {
    match attach.role {
        Role::Receiver => {
            let source = attach.source.as_ref().filter(|source| source.dynamic)?;
            Some(Err(not_implemented(format!(
                "a dynamic source (a node made for this receiver, capabilities {}) is not \
                 implemented: make a temporary queue with a sender whose target is dynamic \
                 with capability {TEMPORARY_QUEUE}, and receive from the address the broker \
                 answers",
                capabilities(source.capabilities.as_ref())
            ))))
        }
        Role::Sender => match attach.target.as_deref() {
            Some(TargetArchetype::Target(target)) if target.dynamic => {
                let lifetime = check_lifetime(target.dynamic_node_properties.as_ref());
                Some(lifetime.and_then(|()| kind(target.capabilities.as_ref())))
            }
            _ => None,
        },
    }
}

/// The kind of node a dynamic target's capabilities ask for.
///
/// # Errors
/// `amqp:not-implemented` naming the capabilities, when they ask for neither kind.
fn kind(asked: Option<&Array<Symbol>>) -> Result<Kind, definitions::Error> {
    let has = |wanted: &str| asked.is_some_and(|asked| asked.iter().any(|c| c.as_str() == wanted));
    match (has(TEMPORARY_QUEUE), has(TEMPORARY_TOPIC)) {
        (true, _) => Ok(Kind::Queue),
        (false, true) => Ok(Kind::Topic),
        (false, false) => Err(not_implemented(format!(
            "a dynamic target with capabilities {} is not implemented: the broker makes \
             {TEMPORARY_QUEUE} and {TEMPORARY_TOPIC} nodes",
            capabilities(asked)
        ))),
    }
}

/// Accepts the lifetime a dynamic target's node properties ask for: `delete-on-close`, or
/// none (the node then lives as long as its link: the same).
///
/// # Errors
/// `amqp:not-implemented` naming any other lifetime policy.
fn check_lifetime(properties: Option<&Fields>) -> Result<(), definitions::Error> {
    let Some(policy) = properties.and_then(|p| p.get(&Symbol::from(LIFETIME_POLICY))) else {
        return Ok(());
    };
    let named = match policy {
        Value::Described(described) => match &described.descriptor {
            Descriptor::Code(code) => (LIFETIME_POLICIES.iter())
                .find(|(known, _)| known == code)
                .map(|(_, name)| (*name).to_owned()),
            Descriptor::Name(name) => Some(name.as_str().to_owned()),
        },
        _ => None,
    };
    let (kept_code, kept) = LIFETIME_POLICIES[0];
    let asked = match named {
        Some(name) if name == kept || name == format!("amqp:{kept}:list") => return Ok(()),
        Some(name) => name,
        None => format!("{policy:?}"),
    };
    Err(not_implemented(format!(
        "the lifetime policy {asked} is not implemented: a temporary node is deleted with \
         the link that made it ({kept}, descriptor {kept_code:#x})"
    )))
}

/// Capabilities as a message names them.
fn capabilities(asked: Option<&Array<Symbol>>) -> String {
    let names: Vec<&str> =
        asked.map_or_else(Vec::new, |asked| asked.iter().map(Symbol::as_str).collect());
    format!("{names:?}")
}

/// A temporary of `kind` named `name`, with the default settings of a declared one.
///
/// # Errors
/// `amqp:internal-error` when the defaults do not read (they always do).
fn declaration(kind: Kind, name: &str) -> Result<Declaration, definitions::Error> {
    let defaults = format!("[[{}s]]\nname = \"temporary\"\n", kind.word());
    let mut declaration = Declaration::parse(&defaults, "<temporary>").map_err(|error| {
        link::amqp_error(
            AmqpError::InternalError,
            format!("temporary defaults: {error}"),
        )
    })?;
    match &mut declaration {
        Declaration::Queue(queue) => queue.name = name.to_owned(),
        Declaration::Topic(topic) => topic.name = name.to_owned(),
    }
    Ok(declaration)
}

/// The refusal of an attach whose temporary the registry would not make.
fn not_implemented(description: String) -> definitions::Error {
    link::amqp_error(AmqpError::NotImplemented, description)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::messaging::{DeleteOnClose, DeleteOnNoMessages, Source, Target};
    use serde_amqp::described::Described;

    use crate::amqp::fixtures;
    use crate::entity::handle::LaneId;

    const CONNECTION: &str = "tidebus-0c1d";

    /// A sender attach as Qpid JMS's creator link makes it: a dynamic target with
    /// `capabilities` and, when given, `lifetime-policy` `policy`.
    fn creator(capabilities: &[&str], policy: Option<Value>) -> Attach {
        let mut attach = fixtures::attach(Role::Sender, "ignored");
        let properties = policy.map(|policy| {
            let mut properties = Fields::new();
            properties.insert(Symbol::from(LIFETIME_POLICY), policy);
            properties
        });
        let target = Target {
            address: None,
            dynamic: true,
            dynamic_node_properties: properties,
            capabilities: Some(Array(
                capabilities.iter().map(|c| Symbol::from(*c)).collect(),
            )),
            ..Target::builder().build()
        };
        attach.target = Some(Box::new(TargetArchetype::Target(target)));
        attach
    }

    fn condition(asked: Option<Result<Kind, definitions::Error>>) -> definitions::ErrorCondition {
        match asked {
            Some(Err(error)) => error.condition,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn described(code: u64) -> Value {
        Value::Described(Box::new(Described {
            descriptor: Descriptor::Code(code),
            value: Value::List(Vec::new()),
        }))
    }

    #[test]
    fn a_dynamic_target_asks_for_a_temporary_queue_or_topic() {
        let on_close = Some(DeleteOnClose::new().into());
        let queue = creator(&[TEMPORARY_QUEUE], on_close.clone());
        assert!(matches!(requested(&queue), Some(Ok(Kind::Queue))));
        let topic = creator(&["other", TEMPORARY_TOPIC], on_close);
        assert!(matches!(requested(&topic), Some(Ok(Kind::Topic))));
        let no_policy = creator(&[TEMPORARY_QUEUE], None);
        assert!(matches!(requested(&no_policy), Some(Ok(Kind::Queue))));
        let by_name = Value::Described(Box::new(Described {
            descriptor: Descriptor::Name(Symbol::from("amqp:delete-on-close:list")),
            value: Value::List(Vec::new()),
        }));
        let named = creator(&[TEMPORARY_QUEUE], Some(by_name));
        assert!(matches!(requested(&named), Some(Ok(Kind::Queue))));
        // Terminuses that are not dynamic ask for nothing.
        assert!(requested(&fixtures::attach(Role::Sender, "q")).is_none());
        assert!(requested(&fixtures::attach(Role::Receiver, "q")).is_none());
    }

    #[test]
    fn other_dynamic_nodes_are_refused_naming_what_was_asked() {
        let not_implemented = definitions::ErrorCondition::from(AmqpError::NotImplemented);
        let mut receiver = fixtures::attach(Role::Receiver, "q");
        receiver.source = Some(Box::new(Source::builder().dynamic(true).build()));
        assert_eq!(condition(requested(&receiver)), not_implemented);
        let policy = Some(DeleteOnNoMessages::new().into());
        let kept_while_full = requested(&creator(&[TEMPORARY_QUEUE], policy));
        let Some(Err(refused)) = kept_while_full else {
            panic!("refused");
        };
        let description = refused.description.unwrap_or_default();
        assert!(
            description.contains("delete-on-no-messages"),
            "{description}"
        );
        let unknown = requested(&creator(&[TEMPORARY_QUEUE], Some(described(0x99))));
        assert_eq!(condition(unknown), not_implemented);
        let Some(Err(refused)) = requested(&creator(&["shared"], None)) else {
            panic!("refused");
        };
        let description = refused.description.unwrap_or_default();
        assert!(description.contains("[\"shared\"]"), "{description}");
    }

    #[test]
    fn a_temporary_is_named_after_its_connection_which_owns_it() {
        let name = format!("{PREFIX}queue-{CONNECTION}-12");
        assert_eq!(owner(&name), Some(CONNECTION));
        assert_eq!(
            owner(&format!("{PREFIX}topic-{CONNECTION}-1")),
            Some(CONNECTION)
        );
        assert_eq!(owner(&format!("{PREFIX}other-{CONNECTION}-1")), None);
        assert_eq!(owner("$te"), None);
        let defaults = declaration(Kind::Topic, &name).expect("declaration");
        assert!(matches!(&defaults, Declaration::Topic(topic) if topic.subscriptions.is_empty()));
        assert_eq!(defaults.name(), name);
        let defaults = declaration(Kind::Queue, &name).expect("declaration");
        assert!(matches!(defaults, Declaration::Queue(_)));
    }

    #[test]
    fn only_its_connection_may_receive_from_a_temporary_or_manage_it_any_may_send() {
        let name = format!("{PREFIX}queue-{CONNECTION}-1");
        let entity = || fixtures::named(&name, false);
        let dead_letter = LaneId {
            subscription: 0,
            dead_letter: true,
        };
        let links = [
            (Role::Receiver, Node::Entity(entity(), LaneId::MAIN)),
            (Role::Receiver, Node::Entity(entity(), dead_letter)),
            (Role::Sender, Node::Management(entity(), LaneId::MAIN)),
            (Role::Receiver, Node::Management(entity(), LaneId::MAIN)),
        ];
        for (role, node) in links {
            let found = (node, name.clone());
            assert!(check_owner(&role, found.clone(), CONNECTION).is_ok());
            let refused = check_owner(&role, found, "tidebus-other").expect_err("refused");
            assert_eq!(refused.condition, AmqpError::ResourceLocked.into());
        }
        let sender = (Node::Entity(entity(), LaneId::MAIN), name.clone());
        assert!(check_owner(&Role::Sender, sender, "tidebus-other").is_ok());
        let plain = (
            Node::Entity(fixtures::named("q", false), LaneId::MAIN),
            "q".into(),
        );
        assert!(check_owner(&Role::Receiver, plain, "tidebus-other").is_ok());
    }

    #[test]
    fn a_made_node_goes_to_the_link_its_attach_opened_or_is_orphaned() {
        let mut temporaries = Temporaries {
            pending: Some("a".into()),
            ..Temporaries::default()
        };
        temporaries.attached(Some(7));
        assert_eq!(temporaries.by_link.get(&7).map(String::as_str), Some("a"));
        temporaries.attached(Some(8));
        assert_eq!(
            temporaries.by_link.len(),
            1,
            "an attach that made nothing binds nothing"
        );
        temporaries.pending = Some("b".into());
        temporaries.attached(None);
        assert_eq!(temporaries.orphans, ["b"]);
    }
}
