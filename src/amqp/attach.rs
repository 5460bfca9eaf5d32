//! Client attaches: the node an address names, the rights a link needs there, the refusals,
//! the session a receiver asks for, and the broker's attach replies (amqp-dialect.md §4.3,
//! §8).

use std::collections::VecDeque;
use std::sync::Arc;

use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::{
    self, AmqpError, ConnectionError, Fields, Handle, ReceiverSettleMode, Role, SenderSettleMode,
    SessionError,
};
use fe2o3_amqp::types::messaging::{DistributionMode, TargetArchetype};
use fe2o3_amqp::types::performatives::{Attach, Detach, Flow};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use serde_amqp::described::Described;

use crate::amqp::jms;
use crate::amqp::link::{self, Feed, Incoming, Link, LinkKind, Outgoing, Replies, SENDER_CREDIT};
use crate::amqp::outbox::{Context, Fault, Outbox};
use crate::amqp::temporary;
use crate::amqp::via::{self, CrossEntity};
use crate::auth::access::Access;
use crate::clock;
use crate::config::Rights;
use crate::entity::handle::{
    Command, ConsumerId, EntityHandle, LaneId, ReceiveMode, SessionRequest,
};
use crate::entity::partition;
use crate::filter::{Filter, JmsSelector};
use crate::metrics::{self, Held};
use crate::node::{router, Node};

/// The highest link handle of a session (`handle-max`): a session holds 1,024 links at most.
pub const HANDLE_MAX: u32 = 1023;

/// The longest link name accepted, in bytes. An accepted link keeps its name, and a connection
/// holds up to `max_links_per_connection` links; the SDKs' names are an entity path and a GUID.
pub const MAX_LINK_NAME_BYTES: usize = 1024;

/// The broker's handle for a client attach on `remote_handle` (`in_use` when the session has
/// it attached already), the session's first free one (`free`).
///
/// # Errors
/// A handle above `handle-max` closes the connection (AMQP 1.0 §2.7.2); one in use, or none
/// free, ends the session.
pub fn handles(remote_handle: u32, in_use: bool, free: Option<u32>) -> Result<u32, Fault> {
    if remote_handle > HANDLE_MAX {
        return Err(Fault::Connection(link::amqp_error(
            ConnectionError::FramingError,
            format!("handle {remote_handle} is above this session's handle-max {HANDLE_MAX}"),
        )));
    }
    if in_use {
        return Err(Fault::Session(link::amqp_error(
            SessionError::HandleInUse,
            format!("handle {remote_handle} is already attached"),
        )));
    }
    free.ok_or_else(|| {
        Fault::Session(link::amqp_error(
            AmqpError::ResourceLimitExceeded,
            format!("a session holds at most {} links", HANDLE_MAX + 1),
        ))
    })
}

/// Answers a client attach on the broker's free `local_handle`. Returns the link it opens:
/// accepted (the broker's attach, a sender's first credit, a receiver's consumer posted to its
/// entity; a session receiver's attach waits for its session), or refused (a null terminus,
/// then the detach), held as [`LinkKind::Refused`] without its name until the client detaches.
/// `None` when refused on a connection that holds as many links as it may.
pub fn open(
    attach: Attach,
    link_id: u64,
    local_handle: u32,
    base: &Flow,
    (ctx, cross): (&Context<'_>, &mut CrossEntity),
    out: &mut Outbox,
) -> Option<Link> {
    let found = if ctx.links_full {
        Err(link::amqp_error(
            AmqpError::ResourceLimitExceeded,
            "the connection holds as many links as it may; detach one first",
        ))
    } else if attach.name.len() > MAX_LINK_NAME_BYTES {
        Err(link::amqp_error(
            AmqpError::InvalidField,
            format!(
                "the link name has {} bytes; at most {MAX_LINK_NAME_BYTES} are accepted",
                attach.name.len()
            ),
        ))
    } else if let Some(refused) = ctx.refused.clone() {
        Err(refused)
    } else {
        resolve(&attach, ctx)
            .and_then(|found| one_cbs_link(&attach.role, found, ctx))
            .and_then(|found| temporary::check_owner(&attach.role, found, ctx.connection_id))
    };
    let authorized = found.and_then(|(node, address)| {
        let needs = rights_to_attach(&attach.role, &node);
        needs
            .map(|rights| check_rights(ctx, &address, rights))
            .transpose()?;
        let (node, via) = route_via(&attach, node, ctx, cross)?;
        Ok((node, via, needs.map(|rights| (address, rights))))
    });
    let accepted = authorized.and_then(|(node, via, authorized)| {
        // A receiver's attach is answered once the entity has registered it (a session
        // receiver: bound it to a session), so that the entity's refusals (a plain receiver
        // of an entity that requires sessions, a forwarding or receive-disabled entity) refuse
        // the attach, as Service Bus does, instead of detaching a link the client holds open
        // already; until then the link keeps what the answer needs.
        let receiver = matches!((&attach.role, &node), (Role::Receiver, Node::Entity(..)));
        let (session, selector) = match receiver {
            true => {
                let session = session_request(&attach)?;
                // A JMS subscription's rule applies its consumer's selector.
                let selector = match ctx.subscription {
                    None => consumer_selector(&attach, session.is_some())?,
                    Some(_) => None,
                };
                (session, selector)
            }
            false => (None, None),
        };
        let waiting = receiver
            .then(|| link::WaitingAttach::new(&attach, ctx.reassembly))
            .transpose()?;
        Ok((node, via, authorized, (session, selector), waiting))
    });
    let (node, via, authorized, (session, selector), waiting) = match accepted {
        Ok(found) => found,
        Err(error) => {
            tracing::debug!(link = %attach.name, condition = ?error.condition, "attach refused");
            out.frames
                .push(FrameBody::Attach(refuse_reply(&attach, local_handle)));
            out.frames
                .push(FrameBody::Detach(refuse_detach(local_handle, error)));
            // Holding it past the connection's limit would defeat the limit; a detach for a
            // handle not held is ignored.
            return (!ctx.links_full).then(|| Link {
                name: String::new(),
                local_handle,
                id: link_id,
                kind: LinkKind::Refused,
                authorized: None,
                attached: Held::one(&metrics::broker().links),
                span: tracing::Span::none(),
            });
        }
    };
    cross.attached(&node);
    if waiting.is_none() {
        out.frames.push(FrameBody::Attach(accept_reply(
            &attach,
            local_handle,
            ctx.max_message_size,
        )));
    }
    let kind = match (attach.role.clone(), node) {
        (Role::Sender, node) => {
            let incoming = Incoming {
                node,
                via,
                delivery_count: attach.initial_delivery_count.unwrap_or(0),
                credit: SENDER_CREDIT,
                max_message_size: ctx.max_message_size,
                partial: None,
            };
            out.frames.push(link::flow(
                base,
                local_handle,
                incoming.delivery_count,
                SENDER_CREDIT,
                false,
            ));
            LinkKind::Incoming(incoming)
        }
        (Role::Receiver, node @ (Node::Cbs | Node::Management(..) | Node::Coordinator)) => {
            LinkKind::Replies(Replies {
                node: link::node_key(&node),
                address: target_address(&attach),
                delivery_count: 0,
                credit: 0,
                waiting: VecDeque::new(),
            })
        }
        (Role::Receiver, Node::Entity(entity, lane)) => {
            // A JMS subscription's consumer asks for copies as a topic's do, and takes them.
            let mode = receive_mode(&attach, ctx.subscription.is_none());
            // A partitioned entity's receiver takes from every partition, or from the one of
            // the session it names; the connection's window is shared among them.
            let partitions = match &session {
                Some(SessionRequest::Named(id)) if entity.is_partitioned() => {
                    let partition = partition::of_key(id.as_bytes(), entity.partitions());
                    partition..partition + 1
                }
                _ => 0..entity.partitions(),
            };
            let window = (ctx.consumer_window / partitions.len() as u64).max(1);
            let mut feeds = Vec::with_capacity(partitions.len());
            for partition in partitions {
                let consumer = ConsumerId::at(link_id, partition);
                out.posts.push((
                    entity.clone(),
                    Command::AddConsumer {
                        consumer,
                        lane,
                        mode,
                        window,
                        events: ctx.events.clone(),
                        session: session.clone(),
                        selector: selector.clone(),
                    },
                ));
                feeds.push(Feed {
                    consumer,
                    owed: 0,
                    taken: 0,
                });
            }
            LinkKind::Outgoing(Outgoing {
                entity,
                registering: feeds.len(),
                feeds,
                mode,
                settle_second: settles_second(&attach),
                delivery_count: 0,
                credit: 0,
                drain: false,
                draining: 0,
                pending_attach: waiting,
                splice_room: Vec::new(),
            })
        }
    };
    let span = tracing::info_span!(
        "link",
        name = %attach.name,
        id = link_id,
        role = ?attach.role,
        address = authorized.as_ref().map_or("", |(address, _)| address.as_str()),
    );
    span.in_scope(|| tracing::debug!("link attached"));
    Some(Link {
        name: attach.name,
        local_handle,
        id: link_id,
        kind,
        authorized,
        attached: Held::one(&metrics::broker().links),
        span,
    })
}

/// The refusing attach (null terminus) a link gets before its detach when its own attach is
/// still unanswered (a session receiver waiting for a session).
pub fn refuse_pending(link: &Link) -> Option<FrameBody> {
    match &link.kind {
        LinkKind::Outgoing(Outgoing {
            pending_attach: Some(waiting),
            ..
        }) => Some(FrameBody::Attach(refuse_reply(
            &waiting.attach(),
            link.local_handle,
        ))),
        _ => None,
    }
}

/// The links, by client handle, whose rights the connection no longer has (a token lapsed
/// unrefreshed), each with why.
pub fn lapsed<'a>(
    links: impl IntoIterator<Item = (&'a u32, &'a Link)>,
    access: &Access,
    now_ms: i64,
) -> Vec<(u32, String)> {
    links
        .into_iter()
        .filter_map(|(handle, link)| {
            let (address, rights) = link.authorized.as_ref()?;
            let refused = access.check(address, *rights, now_ms).err()?;
            Some((*handle, refused))
        })
        .collect()
}

/// Refuses `address` unless the connection holds one of `rights` there.
fn check_rights(
    ctx: &Context<'_>,
    address: &str,
    rights: Rights,
) -> Result<(), definitions::Error> {
    ctx.access
        .check(address, rights, clock::real_ms())
        .map_err(|description| link::amqp_error(AmqpError::UnauthorizedAccess, description))
}

/// Where an accepted link's messages go and the entity its transactional work goes through
/// (send-via, see [`crate::amqp::via`]): a sender that names a transfer destination sends
/// there through the entity it attached to (the connection needs Send there too); in a
/// session whose via entity is set, a sender to another entity sends through it.
///
/// # Errors
/// The destination's refusals, as a sender's to it, and the session's cross-entity refusal.
fn route_via(
    attach: &Attach,
    node: Node,
    ctx: &Context<'_>,
    cross: &CrossEntity,
) -> Result<(Node, Option<EntityHandle>), definitions::Error> {
    let destination = match (&attach.role, via::destination_address(attach)) {
        (Role::Sender, Some(destination)) => destination,
        _ => {
            let via = cross.via_for(&attach.role, &node)?;
            return Ok((node, via));
        }
    };
    let to =
        router::route(ctx.registry, &destination).ok_or_else(|| link::not_found(&destination))?;
    if let Some(description) = refusal(&Role::Sender, &to, &destination) {
        return Err(link::amqp_error(AmqpError::NotAllowed, description));
    }
    check_rights(ctx, &destination, Rights::SEND)?;
    via::redirect(node, to)
}

/// The node (and which of its queues) an attach names, with its address, or the error that
/// refuses it: `amqp:not-found` for unknown addresses, `amqp:not-allowed` for a send to a
/// dead-letter queue. A transaction coordinator has no address; a JMS consumer on a topic
/// takes from the subscription readied for it ([`jms::prepare`]).
fn resolve(attach: &Attach, ctx: &Context<'_>) -> Result<(Node, String), definitions::Error> {
    let registry = ctx.registry;
    if let Some(subscription) = &ctx.subscription {
        let path = subscription.clone()?;
        let node = router::route(registry, &path).ok_or_else(|| link::not_found(&path))?;
        return Ok((node, path));
    }
    let address = match attach.role {
        Role::Sender => match attach.target.as_deref() {
            Some(TargetArchetype::Target(target)) => target.address.clone(),
            Some(TargetArchetype::Coordinator(_)) => {
                return Ok((Node::Coordinator, String::new()));
            }
            None => None,
        },
        Role::Receiver => attach
            .source
            .as_ref()
            .and_then(|source| source.address.clone()),
    };
    let address = address
        .ok_or_else(|| link::amqp_error(AmqpError::InvalidField, "the attach names no address"))?;
    let node = router::route(registry, &address).ok_or_else(|| link::not_found(&address))?;
    match refusal(&attach.role, &node, &address) {
        Some(description) => Err(link::amqp_error(AmqpError::NotAllowed, description)),
        None => Ok((node, address)),
    }
}

/// Refuses a second `$cbs` link of one direction on a connection, as Service Bus does (the Go
/// SDK resets its connection on that refusal).
fn one_cbs_link(
    role: &Role,
    (node, address): (Node, String),
    ctx: &Context<'_>,
) -> Result<(Node, String), definitions::Error> {
    let open = match role {
        Role::Sender => ctx.cbs.sender,
        Role::Receiver => ctx.cbs.receiver,
    };
    match (&node, open) {
        (Node::Cbs, true) => Err(link::amqp_error(
            AmqpError::NotAllowed,
            format!(
                "A link to connection '{}' $cbs node has already been opened.",
                ctx.connection_id
            ),
        )),
        _ => Ok((node, address)),
    }
}

/// Why a link of `role` may not attach to `node` though it exists: a sender to a dead-letter
/// queue or a subscription, a receiver of a topic.
fn refusal(role: &Role, node: &Node, address: &str) -> Option<String> {
    match (role, node) {
        (Role::Sender, Node::Entity(_, lane)) if lane.dead_letter => Some(format!(
            "'{address}' is a dead-letter queue: messages arrive there only by dead-lettering"
        )),
        (Role::Sender, Node::Entity(_, lane)) if lane.subscription != 0 => Some(format!(
            "'{address}' is a subscription: messages arrive there through its topic"
        )),
        (Role::Receiver, Node::Entity(entity, lane))
            if entity.is_topic() && *lane == LaneId::MAIN =>
        {
            Some(format!(
                "'{address}' is a topic: receive from one of its subscriptions, \
                 '{}/Subscriptions/<name>'",
                entity.name()
            ))
        }
        _ => None,
    }
}

/// The rights a client link to `node` needs (any one of them), by its role: a sender Send, a
/// receiver Listen, a management link any right (each operation checks its own); `None` for
/// `$cbs` and a transaction coordinator, which every client may use (the work of a
/// transaction needs the rights of its links).
fn rights_to_attach(role: &Role, node: &Node) -> Option<Rights> {
    match (role, node) {
        (_, Node::Cbs | Node::Coordinator) => None,
        (_, Node::Management(..)) => Some(Rights::ANY),
        (Role::Sender, Node::Entity(..)) => Some(Rights::SEND),
        (Role::Receiver, Node::Entity(..)) => Some(Rights::LISTEN),
    }
}

/// The target address of a client receiver's attach (where its requests ask answers to go).
fn target_address(attach: &Attach) -> Option<String> {
    match attach.target.as_deref() {
        Some(TargetArchetype::Target(target)) => target.address.clone(),
        _ => None,
    }
}

/// The broker's attach reply to a client attach it accepts: terminus echoed verbatim, role
/// flipped, `initial-delivery-count` when the broker sends, a finite `max-message-size` when it
/// receives.
///
/// A source's filter keeps only the filters the broker applies (the session filter, and a JMS
/// selector, which an accepted attach applies: its subscription's rule, or the receiver's
/// own, see [`consumer_selector`]): AMQP 1.0
/// §3.5.3 has the sender set the filters actually in place, and a client reads an echoed
/// filter as applied (Qpid JMS's `no-local`, which Service Bus ignores too, goes unechoed).
pub fn accept_reply(request: &Attach, local_handle: u32, max_message_size: u64) -> Attach {
    let broker_sends = request.role == Role::Receiver;
    let mut source = request.source.clone();
    if let Some(source) = source.as_mut().filter(|_| broker_sends) {
        if let Some(filter) = source.filter.as_mut() {
            filter
                .as_inner_mut()
                .retain(|key, value| key.as_str() == SESSION_FILTER || jms::is_selector(value));
        }
        source.filter = source.filter.take().filter(|filter| !filter.is_empty());
    }
    Attach {
        name: request.name.clone(),
        handle: Handle(local_handle),
        role: if broker_sends {
            Role::Sender
        } else {
            Role::Receiver
        },
        snd_settle_mode: request.snd_settle_mode.clone(),
        rcv_settle_mode: request.rcv_settle_mode.clone(),
        source,
        target: request.target.clone(),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: broker_sends.then_some(0),
        max_message_size: Some(max_message_size),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// The source filter a session receiver attaches with (amqp-dialect.md §8.1).
const SESSION_FILTER: &str = "com.microsoft:session-filter";
/// The link property with how long a receiver waits for the next available session (ms).
const TIMEOUT_PROPERTY: &str = "com.microsoft:timeout";
/// The link property with the session lock's end, in .NET ticks (amqp-dialect.md §8.2).
const LOCKED_UNTIL_UTC: &str = "com.microsoft:locked-until-utc";
/// How long a receiver that names no timeout waits for the next available session (the
/// SDKs' default operation timeout).
const DEFAULT_SESSION_TIMEOUT_MS: i64 = 60_000;
/// .NET ticks (100 ns since 0001-01-01) at the Unix epoch.
const TICKS_AT_UNIX_EPOCH: i64 = 621_355_968_000_000_000;

/// The JMS message selector a receiver of a queue, a subscription or a dead-letter queue asks
/// for, parsed; `None` without one, or with an empty one (JMS: no selector).
///
/// # Errors
/// `amqp:invalid-field` with the parser's message when the selector does not parse, and
/// `amqp:not-implemented` on a session receiver (`session`): a session receiver takes its
/// session's messages in order, which a selector would break.
fn consumer_selector(
    attach: &Attach,
    session: bool,
) -> Result<Option<Arc<JmsSelector>>, definitions::Error> {
    let Some(text) = jms::selector(attach) else {
        return Ok(None);
    };
    let selector = match Filter::selector(&text) {
        Ok(Filter::Selector(selector)) => selector,
        Ok(_) => return Ok(None),
        Err(error) => {
            return Err(link::amqp_error(
                AmqpError::InvalidField,
                format!("the message selector {text:?} is not valid: {error}"),
            ))
        }
    };
    if session {
        return Err(link::amqp_error(
            AmqpError::NotImplemented,
            format!(
                "message selectors are not supported on session receivers (this one asks for \
                 {text:?}): a session receiver takes its session's messages in order; receive \
                 without one"
            ),
        ));
    }
    Ok(Some(Arc::new(selector)))
}

/// The session a receiver's attach asks for: the id in its session filter (a plain or, from
/// the Rust SDK, a described string), or the next available one (null), waiting as long as
/// its `com.microsoft:timeout` link property says; `None` without a session filter.
///
/// # Errors
/// `amqp:invalid-field` when the filter holds neither a string nor null (a session id is a
/// string: the Python SDK sends an int as it was given).
pub fn session_request(attach: &Attach) -> Result<Option<SessionRequest>, definitions::Error> {
    let Some(value) = attach
        .source
        .as_ref()
        .and_then(|source| source.filter.as_ref())
        .and_then(|filter| filter.get(&Symbol::from(SESSION_FILTER)))
    else {
        return Ok(None);
    };
    let value = match value {
        Value::Described(described) => &described.value,
        plain => plain,
    };
    match value {
        Value::String(id) => return Ok(Some(SessionRequest::Named(id.clone()))),
        Value::Null => {}
        other => {
            return Err(link::amqp_error(
                AmqpError::InvalidField,
                format!(
                    "the session filter must be a session id (a string) or null, not {other:?}"
                ),
            ))
        }
    }
    let timeout_ms = attach
        .properties
        .as_ref()
        .and_then(|properties| properties.get(&Symbol::from(TIMEOUT_PROPERTY)))
        .and_then(|timeout| match timeout {
            Value::Uint(ms) => Some(i64::from(*ms)),
            Value::Int(ms) => Some(i64::from(*ms)),
            Value::Ulong(ms) => i64::try_from(*ms).ok(),
            Value::Long(ms) => Some(*ms),
            _ => None,
        })
        .unwrap_or(DEFAULT_SESSION_TIMEOUT_MS);
    Ok(Some(SessionRequest::NextAvailable { timeout_ms }))
}

/// The reply to a session receiver's attach once it holds `session`: the source echoed with
/// the session id in its session filter, in the form the request used (a plain string for
/// .NET, Java, JavaScript and Python; the described value the Go and Rust SDKs send, whose
/// AMQP library decodes only a described filter), and the lock's end in .NET ticks in the
/// `com.microsoft:locked-until-utc` link property.
pub fn session_reply(
    request: &Attach,
    local_handle: u32,
    max_message_size: u64,
    session: &str,
    locked_until_ms: i64,
) -> Attach {
    let mut reply = accept_reply(request, local_handle, max_message_size);
    if let Some(filter) = reply
        .source
        .as_mut()
        .and_then(|source| source.filter.as_mut())
    {
        let id = Value::String(session.to_string());
        let echoed = match filter.get(&Symbol::from(SESSION_FILTER)) {
            Some(Value::Described(asked)) => Value::Described(Box::new(Described {
                descriptor: asked.descriptor.clone(),
                value: id,
            })),
            _ => id,
        };
        filter.insert(Symbol::from(SESSION_FILTER), echoed);
    }
    let ticks = locked_until_ms
        .saturating_mul(10_000)
        .saturating_add(TICKS_AT_UNIX_EPOCH);
    let mut properties = Fields::default();
    properties.insert(Symbol::from(LOCKED_UNTIL_UTC), Value::Long(ticks));
    reply.properties = Some(properties);
    reply
}

/// The reply to an attach the broker refuses: the broker's own terminus is null (AMQP 1.0
/// §2.6.3), to be followed by [`refuse_detach`].
pub fn refuse_reply(request: &Attach, local_handle: u32) -> Attach {
    let mut reply = accept_reply(request, local_handle, 0);
    reply.max_message_size = None;
    if request.role == Role::Receiver {
        reply.source = None;
    } else {
        reply.target = None;
    }
    reply
}

/// The detach that follows a refused attach.
pub fn refuse_detach(local_handle: u32, error: definitions::Error) -> Detach {
    Detach {
        handle: Handle(local_handle),
        closed: true,
        error: Some(error),
    }
}

/// The receive mode a client receiver asked for: a source with `distribution-mode` copy
/// browses (AMQP 1.0 §3.5.3: the messages stay for others; Qpid JMS's `QueueBrowser`, which
/// also asks for pre-settled transfers) unless `copies_browse` is false (a JMS subscription's
/// consumer asks for copies as every topic consumer does); otherwise pre-settled transfers
/// mean receive-and-delete.
pub fn receive_mode(request: &Attach, copies_browse: bool) -> ReceiveMode {
    let copies = copies_browse
        && (request.source.as_ref())
            .is_some_and(|source| source.distribution_mode == Some(DistributionMode::Copy));
    match request.snd_settle_mode {
        _ if copies => ReceiveMode::Browse,
        SenderSettleMode::Settled => ReceiveMode::ReceiveAndDelete,
        _ => ReceiveMode::PeekLock,
    }
}

/// Whether the client receiver asked to settle second.
pub fn settles_second(request: &Attach) -> bool {
    request.rcv_settle_mode == ReceiverSettleMode::Second
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::primitives::OrderedMap;
    use serde_amqp::descriptor::Descriptor;

    use crate::amqp::fixtures::{self, entity};

    fn receiver(filter: Option<Value>, timeout: Option<Value>) -> Attach {
        let mut attach = fixtures::attach(Role::Receiver, "q");
        if let (Some(value), Some(source)) = (filter, attach.source.as_mut()) {
            let mut map = OrderedMap::new();
            map.insert(Symbol::from(SESSION_FILTER), value);
            source.filter = Some(map);
        }
        attach.properties = timeout.map(|value| {
            let mut fields = Fields::default();
            fields.insert(Symbol::from(TIMEOUT_PROPERTY), value);
            fields
        });
        attach
    }

    #[test]
    fn senders_may_not_attach_to_dead_letter_queues_or_subscriptions_nor_receivers_to_topics() {
        let dead_letter = LaneId {
            subscription: 0,
            dead_letter: true,
        };
        let subscription = LaneId {
            subscription: 1,
            dead_letter: false,
        };
        let queue = Node::Entity(entity(false), LaneId::MAIN);
        assert!(refusal(&Role::Sender, &queue, "q").is_none());
        assert!(refusal(&Role::Receiver, &queue, "q").is_none());
        let refused = [
            (
                Role::Sender,
                Node::Entity(entity(false), dead_letter),
                "dead-letter queue",
            ),
            (
                Role::Sender,
                Node::Entity(entity(true), subscription),
                "subscription",
            ),
            (
                Role::Receiver,
                Node::Entity(entity(true), LaneId::MAIN),
                "a topic",
            ),
        ];
        for (role, node, why) in refused {
            let description = refusal(&role, &node, "x").expect("refused");
            assert!(description.contains(why), "{description}");
        }
        assert!(refusal(
            &Role::Receiver,
            &Node::Entity(entity(true), subscription),
            "s"
        )
        .is_none());
    }

    #[test]
    fn links_need_send_listen_or_any_right_and_cbs_none() {
        let queue = Node::Entity(entity(false), LaneId::MAIN);
        let management = Node::Management(entity(false), LaneId::MAIN);
        assert_eq!(rights_to_attach(&Role::Sender, &queue), Some(Rights::SEND));
        assert_eq!(
            rights_to_attach(&Role::Receiver, &queue),
            Some(Rights::LISTEN)
        );
        assert_eq!(
            rights_to_attach(&Role::Receiver, &management),
            Some(Rights::ANY)
        );
        assert_eq!(rights_to_attach(&Role::Sender, &Node::Cbs), None);
    }

    #[test]
    fn a_session_filter_names_a_session_or_asks_for_the_next_available_one() {
        assert!(session_request(&receiver(None, None)).unwrap().is_none());
        let named = session_request(&receiver(Some(Value::String("s-1".into())), None));
        assert_eq!(named, Ok(Some(SessionRequest::Named("s-1".into()))));
        let next = session_request(&receiver(Some(Value::Null), Some(Value::Uint(5_000))));
        assert_eq!(
            next,
            Ok(Some(SessionRequest::NextAvailable { timeout_ms: 5_000 }))
        );
        let default = session_request(&receiver(Some(Value::Null), None));
        assert_eq!(
            default,
            Ok(Some(SessionRequest::NextAvailable {
                timeout_ms: DEFAULT_SESSION_TIMEOUT_MS
            }))
        );
        let int = session_request(&receiver(Some(Value::Long(1)), None)).unwrap_err();
        assert_eq!(int.condition, AmqpError::InvalidField.into());
    }

    /// A receiver whose source carries `filter` under `key`.
    fn filtered(key: &str, filter: Value) -> Attach {
        let mut attach = receiver(None, None);
        let mut set = OrderedMap::new();
        set.insert(Symbol::from(key), filter);
        if let Some(source) = attach.source.as_mut() {
            source.filter = Some(set);
        }
        attach
    }

    fn described(descriptor: Descriptor, value: Value) -> Value {
        Value::Described(Box::new(Described { descriptor, value }))
    }

    /// A receiver with a selector filter (by descriptor, whatever its key).
    fn selecting(descriptor: Descriptor, selector: &str) -> Attach {
        let selector = Value::String(selector.into());
        filtered("jms-selector", described(descriptor, selector))
    }

    #[test]
    fn a_selector_is_found_by_its_descriptor_whatever_its_key_and_parsed() {
        for descriptor in [
            Descriptor::Code(0x0000_468C_0000_0004),
            Descriptor::Name(Symbol::from("apache.org:selector-filter:string")),
        ] {
            let asked = selecting(descriptor, "color = 'red'");
            let selector = consumer_selector(&asked, false).expect("parsed");
            let expression = selector.as_deref().map(JmsSelector::expression);
            assert_eq!(expression, Some("color = 'red'"));
        }
        let no_local = described(
            Descriptor::Code(0x0000_468C_0000_0003),
            Value::String("NoLocalFilter{}".into()),
        );
        let plain = consumer_selector(&filtered("no-local", no_local), false);
        assert_eq!(plain, Ok(None));
        let blank = selecting(Descriptor::Code(0x0000_468C_0000_0004), "  ");
        assert_eq!(
            consumer_selector(&blank, false),
            Ok(None),
            "JMS: no selector"
        );
    }

    #[test]
    fn a_selector_that_does_not_parse_or_on_a_session_receiver_is_refused() {
        let code = || Descriptor::Code(0x0000_468C_0000_0004);
        let refused = consumer_selector(&selecting(code(), "color = "), false).unwrap_err();
        assert_eq!(refused.condition, AmqpError::InvalidField.into());
        let description = refused.description.unwrap_or_default();
        assert!(
            description.contains("\"color = \" is not valid: "),
            "{description}"
        );
        let refused = consumer_selector(&selecting(code(), "color = 'red'"), true).unwrap_err();
        assert_eq!(refused.condition, AmqpError::NotImplemented.into());
        let description = refused.description.unwrap_or_default();
        assert!(description.contains("session receivers"), "{description}");
    }

    #[test]
    fn a_reply_echoes_only_the_filters_the_broker_applies() {
        let no_local = described(
            Descriptor::Code(0x0000_468C_0000_0003),
            Value::String("NoLocalFilter{}".into()),
        );
        let reply = accept_reply(&filtered("no-local", no_local), 1, 1024);
        assert_eq!(reply.source.and_then(|source| source.filter), None);
        let session = filtered(SESSION_FILTER, Value::Null);
        let reply = accept_reply(&session, 1, 1024);
        let echoed = reply.source.and_then(|source| source.filter);
        assert_eq!(echoed.map(|filter| filter.len()), Some(1));
    }

    #[test]
    fn a_copying_source_browses_and_a_settled_sender_receives_and_deletes() {
        let mut request = receiver(None, None);
        assert_eq!(receive_mode(&request, true), ReceiveMode::PeekLock);
        request.snd_settle_mode = SenderSettleMode::Settled;
        assert_eq!(receive_mode(&request, true), ReceiveMode::ReceiveAndDelete);
        if let Some(source) = request.source.as_mut() {
            source.distribution_mode = Some(DistributionMode::Copy);
        }
        assert_eq!(
            receive_mode(&request, true),
            ReceiveMode::Browse,
            "settled too, as Qpid JMS asks"
        );
        request.snd_settle_mode = SenderSettleMode::Unsettled;
        assert_eq!(receive_mode(&request, true), ReceiveMode::Browse);
    }

    #[test]
    fn replies_echo_the_terminus_and_a_refusal_nulls_the_brokers_own() {
        let request = receiver(Some(Value::Null), None);
        assert_eq!(target_address(&request).as_deref(), Some("reply-here"));
        assert_eq!(receive_mode(&request, true), ReceiveMode::PeekLock);
        assert!(settles_second(&request));
        let accepted = accept_reply(&request, 9, 1024);
        assert_eq!((accepted.role, accepted.handle), (Role::Sender, Handle(9)));
        assert_eq!(accepted.initial_delivery_count, Some(0));
        assert_eq!(accepted.source, request.source);
        let refused = refuse_reply(&request, 9);
        assert!(refused.source.is_none() && refused.target.is_some());
        let session = session_reply(&request, 9, 1024, "s-7", 1_000);
        let filter = session.source.unwrap().filter.unwrap();
        assert_eq!(
            filter.get(&Symbol::from(SESSION_FILTER)),
            Some(&Value::String("s-7".into()))
        );
        let properties = session.properties.unwrap();
        let ticks = properties.get(&Symbol::from(LOCKED_UNTIL_UTC)).cloned();
        assert_eq!(ticks, Some(Value::Long(TICKS_AT_UNIX_EPOCH + 10_000_000)));
    }

    #[test]
    fn a_described_session_filter_is_echoed_described() {
        // The Go SDK's filter: descriptor 0x0000_0137_0000_000C around the id or null.
        let asked = |value: Value| {
            Value::Described(Box::new(Described {
                descriptor: serde_amqp::descriptor::Descriptor::Code(0x0000_0137_0000_000C),
                value,
            }))
        };
        let request = receiver(Some(asked(Value::Null)), None);
        let session = session_reply(&request, 9, 1024, "s-7", 1_000);
        let filter = session.source.unwrap().filter.unwrap();
        assert_eq!(
            filter.get(&Symbol::from(SESSION_FILTER)),
            Some(&asked(Value::String("s-7".into())))
        );
    }
}
