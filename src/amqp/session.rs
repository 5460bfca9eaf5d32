//! One AMQP session: transfer and delivery ids, session windows, the links attached to it,
//! reassembly of incoming deliveries, framing of outgoing ones, and dispositions with ranges.
//!
//! The session is a synchronous state machine: every handler writes the frames to send and
//! the entity commands to post into an [`Outbox`]; the connection task performs them.

use foldhash::{HashMap, HashMapExt};
use std::collections::{BTreeMap, VecDeque};

use bytes::{Bytes, BytesMut};
use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::DeliveryTag;
use fe2o3_amqp::types::definitions::{
    self, AmqpError, ConnectionError, ErrorCondition, Handle, LinkError, Role, SessionError,
};
use fe2o3_amqp::types::messaging::{
    Accepted, DeliveryState, MessageId, Rejected, Released, TargetArchetype,
};
use fe2o3_amqp::types::performatives::{Attach, Begin, Detach, Disposition, End, Flow, Transfer};
use fe2o3_amqp::types::primitives::{SimpleValue, Symbol, Value};

use crate::amqp::hot;
use crate::amqp::link::{
    self, Incoming, Link, LinkKind, Outgoing, Partial, Replies, SENDER_CREDIT,
};
use crate::auth::access::Access;
use crate::clock;
use crate::config::Rights;
use crate::entity::handle::{
    Command, ConsumerId, Delivery, EntityError, EntityHandle, EventSink, LaneId, LockRef,
    Properties, Settlement, Ticket,
};
use crate::entity::operation::Answer;
use crate::entity::registry::Registry;
use crate::message::{self, BATCH_MESSAGE_FORMAT};
use crate::metrics::{self, Held};
use crate::node::management;
use crate::node::response::{self, Style};
use crate::node::{router, Node};
use crate::wire;

/// Incoming window the broker grants, in transfer frames; refilled when half is used.
const INCOMING_WINDOW: u32 = 8192;
/// Most links one session may hold (`handle-max` + 1).
const HANDLE_MAX: u32 = 1023;
/// Longest delivery tag, in bytes (AMQP 1.0 §2.8.7).
const MAX_DELIVERY_TAG: usize = 32;

/// What a handler wants done: frames to send on this session's channel and commands to post.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Frames, in order.
    pub frames: Vec<FrameBody>,
    /// Entity commands, in order.
    pub posts: Vec<(EntityHandle, Command)>,
    /// Delivery bytes that left the session for the socket, per consumer: posted as
    /// [`Command::Forwarded`] once the connection's write buffer took them.
    pub forwarded: Vec<(EntityHandle, ConsumerId, u64)>,
}

/// A failure that ends more than one link.
#[derive(Debug)]
pub enum Fault {
    /// End this session with the error.
    Session(definitions::Error),
    /// Close the whole connection with the error.
    Connection(definitions::Error),
}

/// What the session needs from its connection.
pub struct Context<'a> {
    /// Entity lookup.
    pub registry: &'a Registry,
    /// The connection's event channel, for entity answers.
    pub events: &'a EventSink,
    /// Largest message accepted.
    pub max_message_size: u64,
    /// Largest frame the client accepts.
    pub remote_max_frame: usize,
    /// Message bytes a consumer may have on their way to the socket.
    pub consumer_window: u64,
    /// What the connection may hold of unfinished incoming deliveries.
    pub reassembly: &'a link::ReassemblyBudget,
    /// Whether the connection holds as many links as it may: new attaches are refused.
    pub links_full: bool,
    /// Whether the connection holds as many answers to management and CBS requests as it
    /// may (waiting for the client, or for their entity): new requests are deferred.
    pub answers_full: bool,
    /// What the connection may do; `$cbs` adds tokens to it.
    pub access: &'a mut Access,
}

/// Per link: what to tell the entity, and the delivery ids with the outcomes to echo.
type LinkSettlements = (Vec<(LockRef, Settlement)>, Vec<(u32, DeliveryState)>);

/// An outgoing delivery the client has not settled.
#[derive(Debug, Clone, Copy)]
struct Unsettled {
    link_id: u64,
    lock: LockRef,
}

/// What leaves with a frame that waited for the client's session window.
#[derive(Debug)]
enum Leaving {
    /// A frame before the last of a delivery.
    Nothing,
    /// The last frame of a delivery: its consumer and stored size, reported forwarded.
    Delivery(ConsumerId, u64),
    /// A frame of an answer, with the bytes of the answer it carries.
    Answer(u64),
}

/// A management or CBS request kept until the connection's answers have room; its bytes are
/// charged to the connection's reassembly budget meanwhile.
#[derive(Debug)]
struct Deferred {
    node: Node,
    address: Option<String>,
    bytes: Bytes,
    _charge: link::Charge,
}

/// One session's state.
#[derive(Debug)]
pub struct Session {
    /// The broker's channel for this session.
    pub local_channel: u16,
    next_incoming_id: u32,
    incoming_remaining: u32,
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    next_delivery_id: u32,
    /// Links by the client's handle.
    links: HashMap<u32, Link>,
    /// Client handle by link id.
    by_id: HashMap<u64, u32>,
    /// Outgoing deliveries awaiting the client's settlement, by delivery id.
    unsettled: BTreeMap<u32, Unsettled>,
    /// Transfer frames waiting for the client's incoming window, each with what leaves
    /// with it.
    pending: VecDeque<(FrameBody, Leaving)>,
    /// Settlements awaiting the entity's answer: delivery ids and the outcomes to echo.
    settling: HashMap<u64, Vec<(u32, DeliveryState)>>,
    next_request: u64,
    /// Accepted sends whose disposition is not written yet (coalesced into ranges).
    accepted: Vec<u32>,
    /// Management requests at an entity: the `message-id` each answer echoes.
    correlations: HashMap<u64, Option<MessageId>>,
    /// Bytes of answers to management and CBS requests that wait for the client's link
    /// credit or session window.
    answers_waiting: u64,
    /// Requests that arrived while the connection held as many answers as it may, in order.
    deferred: VecDeque<Deferred>,
    /// Largest frame the client accepts.
    remote_max_frame: usize,
}

impl Session {
    /// Starts a session from the client's `begin` and returns it with the reply.
    pub fn begin(
        local_channel: u16,
        remote_channel: u16,
        begin: &Begin,
        remote_max_frame: usize,
    ) -> (Self, Begin) {
        let session = Self {
            local_channel,
            next_incoming_id: begin.next_outgoing_id,
            incoming_remaining: INCOMING_WINDOW,
            next_outgoing_id: 0,
            remote_incoming_window: begin.incoming_window,
            next_delivery_id: 0,
            links: HashMap::new(),
            by_id: HashMap::new(),
            unsettled: BTreeMap::new(),
            pending: VecDeque::new(),
            settling: HashMap::new(),
            next_request: 0,
            accepted: Vec::new(),
            correlations: HashMap::new(),
            answers_waiting: 0,
            deferred: VecDeque::new(),
            remote_max_frame,
        };
        let reply = Begin {
            remote_channel: Some(remote_channel),
            next_outgoing_id: 0,
            incoming_window: INCOMING_WINDOW,
            outgoing_window: u32::MAX,
            handle_max: Handle(HANDLE_MAX),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        (session, reply)
    }

    /// Link ids of every link, for the connection's event routing.
    pub fn link_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_id.keys().copied()
    }

    /// Handles a client `attach`. Returns the id of a new link, if one was created.
    pub fn on_attach(
        &mut self,
        attach: Attach,
        link_id: u64,
        ctx: &Context<'_>,
        out: &mut Outbox,
    ) -> Result<Option<u64>, Fault> {
        let remote_handle = attach.handle.0;
        if remote_handle > HANDLE_MAX {
            // AMQP 1.0 §2.7.2: a handle outside the range closes the connection.
            return Err(Fault::Connection(link::amqp_error(
                ConnectionError::FramingError,
                format!("handle {remote_handle} is above this session's handle-max {HANDLE_MAX}"),
            )));
        }
        if self.links.contains_key(&remote_handle) {
            return Err(Fault::Session(link::amqp_error(
                SessionError::HandleInUse,
                format!("handle {remote_handle} is already attached"),
            )));
        }
        let local_handle = self.free_local_handle().ok_or_else(|| {
            Fault::Session(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!("a session holds at most {} links", HANDLE_MAX + 1),
            ))
        })?;
        let found = match ctx.links_full {
            true => Err(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                "the connection holds as many links as it may; detach one first",
            )),
            false => resolve(&attach, ctx.registry),
        };
        let authorized = found.and_then(|(node, address)| {
            let needs = rights_to_attach(&attach.role, &node);
            needs
                .map(|rights| {
                    ctx.access
                        .check(&address, rights, clock::now_ms())
                        .map_err(|description| {
                            link::amqp_error(AmqpError::UnauthorizedAccess, description)
                        })
                })
                .transpose()?;
            Ok((node, needs.map(|rights| (address, rights))))
        });
        let accepted = authorized.and_then(|(node, authorized)| {
            // A session receiver's attach is answered once the entity has bound it to a
            // session; until then the link keeps what the answer needs.
            let session = match (&attach.role, &node) {
                (Role::Receiver, Node::Entity(..)) => link::session_request(&attach),
                _ => None,
            };
            let waiting = session
                .as_ref()
                .map(|_| link::WaitingAttach::new(&attach, ctx.reassembly))
                .transpose()?;
            Ok((node, authorized, session, waiting))
        });
        let (node, authorized, session, waiting) = match accepted {
            Ok(found) => found,
            Err(error) => {
                tracing::debug!(link = %attach.name, condition = ?error.condition, "attach refused");
                out.frames
                    .push(FrameBody::Attach(link::refuse_reply(&attach, local_handle)));
                out.frames
                    .push(FrameBody::Detach(link::refuse_detach(local_handle, error)));
                if ctx.links_full {
                    // Holding it until the client's detach would take the connection past
                    // its limit; a detach for a handle not held is ignored.
                    return Ok(None);
                }
                // Held (without its name) until the client's detach, and counted as a link.
                self.insert_link(
                    remote_handle,
                    Link {
                        name: String::new(),
                        local_handle,
                        id: link_id,
                        kind: LinkKind::Refused,
                        authorized: None,
                        attached: Held::one(&metrics::broker().links),
                        span: tracing::Span::none(),
                    },
                );
                return Ok(Some(link_id));
            }
        };
        if session.is_none() {
            out.frames.push(FrameBody::Attach(link::accept_reply(
                &attach,
                local_handle,
                ctx.max_message_size,
            )));
        }
        let kind = match (attach.role.clone(), node) {
            (Role::Sender, node) => {
                let incoming = Incoming {
                    node,
                    delivery_count: attach.initial_delivery_count.unwrap_or(0),
                    credit: SENDER_CREDIT,
                    max_message_size: ctx.max_message_size,
                    partial: None,
                };
                out.frames.push(self.link_flow(
                    local_handle,
                    incoming.delivery_count,
                    SENDER_CREDIT,
                    false,
                ));
                LinkKind::Incoming(incoming)
            }
            (Role::Receiver, node @ (Node::Cbs | Node::Management(..))) => {
                LinkKind::Replies(Replies {
                    node: link::node_key(&node),
                    address: target_address(&attach),
                    delivery_count: 0,
                    credit: 0,
                    waiting: VecDeque::new(),
                })
            }
            (Role::Receiver, Node::Entity(entity, lane)) => {
                let consumer = ConsumerId(link_id);
                let mode = link::receive_mode(&attach);
                out.posts.push((
                    entity.clone(),
                    Command::AddConsumer {
                        consumer,
                        lane,
                        mode,
                        window: ctx.consumer_window,
                        events: ctx.events.clone(),
                        session: session.clone(),
                    },
                ));
                LinkKind::Outgoing(Outgoing {
                    entity,
                    consumer,
                    mode,
                    settle_second: link::settles_second(&attach),
                    delivery_count: 0,
                    credit: 0,
                    owed: 0,
                    drain: false,
                    draining: false,
                    pending_attach: waiting,
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
        self.insert_link(
            remote_handle,
            Link {
                name: attach.name,
                local_handle,
                id: link_id,
                kind,
                authorized,
                attached: Held::one(&metrics::broker().links),
                span,
            },
        );
        Ok(Some(link_id))
    }

    /// Handles a client `flow`: the session window, and the link credit when it names a link.
    pub fn on_flow(&mut self, flow: &Flow, out: &mut Outbox) -> Result<(), Fault> {
        self.remote_incoming_window = match flow.next_incoming_id {
            Some(next) => next
                .wrapping_add(flow.incoming_window)
                .wrapping_sub(self.next_outgoing_id),
            None => flow.incoming_window,
        };
        self.flush_pending(out);
        let Some(Handle(remote_handle)) = flow.handle else {
            if flow.echo {
                out.frames.push(self.session_flow());
            }
            return Ok(());
        };
        let link = self
            .links
            .get_mut(&remote_handle)
            .ok_or_else(|| unattached(remote_handle))?;
        let local_handle = link.local_handle;
        match &mut link.kind {
            LinkKind::Outgoing(outgoing) => {
                outgoing.apply_flow(
                    flow.delivery_count,
                    flow.link_credit.unwrap_or(0),
                    flow.drain,
                );
                if !outgoing.draining {
                    Self::request_credit(outgoing, out);
                }
                if flow.echo && !outgoing.drain {
                    let reply = (outgoing.delivery_count, outgoing.credit);
                    out.frames
                        .push(self.link_flow(local_handle, reply.0, reply.1, false));
                }
            }
            LinkKind::Replies(replies) => {
                let credit = flow
                    .delivery_count
                    .unwrap_or(0)
                    .wrapping_add(flow.link_credit.unwrap_or(0))
                    .wrapping_sub(replies.delivery_count);
                replies.credit = if credit > u32::MAX / 2 { 0 } else { credit };
                let link_id = link.id;
                self.send_waiting_replies(link_id, out);
                if let Some(Link {
                    kind: LinkKind::Replies(replies),
                    ..
                }) = self.links.get_mut(&remote_handle)
                {
                    if flow.drain || flow.echo {
                        if flow.drain {
                            replies.delivery_count =
                                replies.delivery_count.wrapping_add(replies.credit);
                            replies.credit = 0;
                        }
                        let reply = (replies.delivery_count, replies.credit);
                        out.frames
                            .push(self.link_flow(local_handle, reply.0, reply.1, flow.drain));
                    }
                }
            }
            LinkKind::Incoming(incoming) => {
                if let Some(count) = flow.delivery_count {
                    incoming.delivery_count = count;
                }
                if flow.echo {
                    let reply = (incoming.delivery_count, incoming.credit);
                    out.frames
                        .push(self.link_flow(local_handle, reply.0, reply.1, false));
                }
            }
            LinkKind::Refused => {}
        }
        Ok(())
    }

    /// Handles one `transfer` frame from a client sender.
    pub fn on_transfer(
        &mut self,
        transfer: Transfer,
        payload: Bytes,
        out: &mut Outbox,
        ctx: &mut Context<'_>,
    ) -> Result<(), Fault> {
        if self.incoming_remaining == 0 {
            return Err(Fault::Session(link::amqp_error(
                SessionError::WindowViolation,
                "transfer beyond the session's incoming window",
            )));
        }
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_remaining -= 1;
        if self.incoming_remaining < INCOMING_WINDOW / 2 {
            self.incoming_remaining = INCOMING_WINDOW;
            out.frames.push(self.session_flow());
        }
        let session_flow = self.flow();
        let remote_handle = transfer.handle.0;
        let link = self
            .links
            .get_mut(&remote_handle)
            .ok_or_else(|| unattached(remote_handle))?;
        let (local_handle, link_id) = (link.local_handle, link.id);
        let incoming = match &mut link.kind {
            LinkKind::Incoming(incoming) => incoming,
            LinkKind::Refused => return Ok(()),
            LinkKind::Outgoing(_) | LinkKind::Replies(_) => {
                let error = link::amqp_error(
                    AmqpError::NotAllowed,
                    "transfer on a link the broker sends on",
                );
                self.detach_with(remote_handle, error, out);
                return Ok(());
            }
        };
        if transfer.aborted {
            incoming.partial = None;
            return Ok(());
        }
        let mut partial = match incoming.partial.take() {
            Some(partial) => partial,
            None if transfer
                .delivery_tag
                .as_ref()
                .is_some_and(|tag| tag.len() > MAX_DELIVERY_TAG) =>
            {
                let error = link::amqp_error(
                    AmqpError::InvalidField,
                    format!("a delivery tag holds at most {MAX_DELIVERY_TAG} bytes"),
                );
                self.detach_with(remote_handle, error, out);
                return Ok(());
            }
            None => Partial {
                delivery_id: transfer.delivery_id.ok_or_else(|| {
                    Fault::Connection(link::amqp_error(
                        AmqpError::InvalidField,
                        "first transfer frame of a delivery without delivery-id",
                    ))
                })?,
                settled: false,
                message_format: transfer.message_format.unwrap_or(0),
                received: 0,
                bytes: BytesMut::new(),
                charge: ctx.reassembly.charge(),
            },
        };
        partial.settled |= transfer.settled.unwrap_or(false);
        partial.received += payload.len() as u64;
        let oversized = partial.received > incoming.max_message_size;
        if oversized {
            // Keep reading the delivery's frames, but stop keeping its bytes.
            partial.bytes = BytesMut::new();
            partial.charge.release();
        }
        let whole = if transfer.more {
            if !oversized {
                if !partial.charge.add(payload.len() as u64) {
                    return Err(Fault::Connection(link::amqp_error(
                        AmqpError::ResourceLimitExceeded,
                        format!(
                            "unfinished deliveries on this connection hold more than {} bytes",
                            ctx.reassembly.limit()
                        ),
                    )));
                }
                partial.bytes.extend_from_slice(&payload);
            }
            incoming.partial = Some(partial);
            return Ok(());
        } else if partial.bytes.is_empty() {
            payload
        } else {
            partial.bytes.extend_from_slice(&payload);
            std::mem::take(&mut partial.bytes).freeze()
        };
        incoming.delivery_count = incoming.delivery_count.wrapping_add(1);
        incoming.credit = incoming.credit.saturating_sub(1);
        let refill = (incoming.credit < SENDER_CREDIT / 2).then(|| {
            incoming.credit = SENDER_CREDIT;
            incoming.delivery_count
        });
        if let Some(count) = refill {
            out.frames.push(link_flow(
                session_flow,
                local_handle,
                count,
                SENDER_CREDIT,
                false,
            ));
        }
        if oversized {
            let error = link::amqp_error(
                LinkError::MessageSizeExceeded,
                format!(
                    "the message of {} bytes exceeds the maximum message size of {} bytes",
                    partial.received, incoming.max_message_size
                ),
            );
            // A pre-settled one cannot be rejected: its link is detached, so the sender (a
            // management client waiting for its answer, say) learns at once.
            if partial.settled {
                self.detach_with(remote_handle, error, out);
            } else {
                out.frames.push(rejection(partial.delivery_id, error));
            }
            return Ok(());
        }
        let node = incoming.node.clone();
        let Node::Entity(entity, _) = node else {
            let address = self
                .links
                .get(&remote_handle)
                .and_then(|link| link.authorized.as_ref())
                .map(|(address, _)| address.clone());
            return self.on_request(node, address, whole, &partial, ctx, out);
        };
        let mut inspected = if partial.message_format == BATCH_MESSAGE_FORMAT {
            message::unpack_batch(&whole)
        } else {
            message::inspect(whole).map(|arrival| vec![arrival])
        };
        if entity.is_topic() {
            // A topic's rules read the message's properties: decoded here, not in its actor.
            inspected = inspected.and_then(|mut arrivals| {
                for arrival in &mut arrivals {
                    arrival.view = Some(Box::new(message::view(&arrival.bytes)?));
                }
                Ok(arrivals)
            });
        }
        let messages = match inspected {
            Ok(messages) => messages,
            Err(error) => {
                // One malformed message costs only itself: it is rejected and the link stays.
                // A pre-settled one cannot be rejected, so its link is detached instead.
                let error = link::amqp_error(
                    AmqpError::DecodeError,
                    format!("delivery {}: {error}", partial.delivery_id),
                );
                let span = self.links.get(&remote_handle).map(|link| link.span.clone());
                span.unwrap_or_else(tracing::Span::none).in_scope(
                    || tracing::info!(description = ?error.description, "message refused"),
                );
                if partial.settled {
                    self.detach_with(remote_handle, error, out);
                } else {
                    out.frames.push(rejection(partial.delivery_id, error));
                }
                return Ok(());
            }
        };
        let reply = (!partial.settled).then(|| {
            let ticket = Ticket {
                link: link_id,
                request: u64::from(partial.delivery_id),
            };
            (ticket, ctx.events.clone())
        });
        out.posts.push((entity, Command::Send { messages, reply }));
        Ok(())
    }

    /// A request to `$cbs` or a `$management` node arrived whole: it is accepted, then
    /// answered, or deferred while the connection holds as many answers as it may
    /// ([`Context::answers_full`]) or this session already defers one (they keep their order).
    fn on_request(
        &mut self,
        node: Node,
        address: Option<String>,
        bytes: Bytes,
        delivery: &Partial,
        ctx: &mut Context<'_>,
        out: &mut Outbox,
    ) -> Result<(), Fault> {
        if !delivery.settled {
            out.frames.push(settled_disposition(
                delivery.delivery_id,
                DeliveryState::Accepted(Accepted {}),
            ));
        }
        if !ctx.answers_full && self.deferred.is_empty() {
            self.answer_request(&node, address.as_deref(), &bytes, ctx, out);
            return Ok(());
        }
        let mut charge = ctx.reassembly.charge();
        if !charge.add(bytes.len() as u64) {
            return Err(Fault::Connection(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "requests waiting for answers the client does not take, and unfinished \
                     deliveries, hold more than {} bytes on this connection",
                    ctx.reassembly.limit()
                ),
            )));
        }
        self.deferred.push_back(Deferred {
            node,
            address,
            bytes,
            _charge: charge,
        });
        Ok(())
    }

    /// What this session holds of answers: bytes waiting for the client, and requests
    /// posted to entities and not answered yet.
    pub fn answers_held(&self) -> (u64, usize) {
        (self.answers_waiting, self.correlations.len())
    }

    /// Whether a request waits for the connection's answers to have room.
    pub fn defers_requests(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Answers the first deferred request (the connection has room for its answer now).
    pub fn answer_deferred(&mut self, ctx: &mut Context<'_>, out: &mut Outbox) {
        if let Some(request) = self.deferred.pop_front() {
            let Deferred {
                node,
                address,
                bytes,
                ..
            } = &request;
            self.answer_request(node, address.as_deref(), bytes, ctx, out);
        }
    }

    /// Decodes a request and answers it on the reply link it names: CBS at once, management
    /// once the entity has answered, or at once when the connection lacks the operation's
    /// right.
    fn answer_request(
        &mut self,
        node: &Node,
        address: Option<&str>,
        bytes: &Bytes,
        ctx: &mut Context<'_>,
        out: &mut Outbox,
    ) {
        let request = management::Request::decode(bytes);
        if let Some(why) = &request.malformed {
            tracing::info!(%why, "undecodable request");
        }
        let key = link::node_key(node);
        let Some(reply_link) = self.reply_link(&key, request.reply_to.as_deref()) else {
            tracing::info!(node = %key, reply_to = ?request.reply_to, "request without a reply link dropped");
            return;
        };
        match node {
            Node::Cbs => {
                let registry = ctx.registry;
                let exists = |path: &str| router::route(registry, path).is_some();
                let response = management::cbs(&request, ctx.access, exists);
                let encoded = response.encode(request.message_id, Style::Cbs);
                self.send_reply(reply_link, encoded, out);
            }
            Node::Management(entity, lane) => {
                match management::parse(&request).and_then(|operation| {
                    let rights = management::rights_of(&operation);
                    ctx.access
                        .check(address.unwrap_or_default(), rights, clock::now_ms())
                        .map_err(management::unauthorized)?;
                    Ok(operation)
                }) {
                    Ok(operation) => {
                        let number = self.next_request;
                        self.next_request += 1;
                        self.correlations.insert(number, request.message_id);
                        let ticket = Ticket {
                            link: reply_link,
                            request: number,
                        };
                        out.posts.push((
                            entity.clone(),
                            Command::Manage {
                                lane: *lane,
                                operation: Box::new(operation),
                                reply: (ticket, ctx.events.clone()),
                            },
                        ));
                    }
                    Err(response) => {
                        let encoded = response.encode(request.message_id, Style::Management);
                        self.send_reply(reply_link, encoded, out);
                    }
                }
            }
            Node::Entity(..) => {}
        }
    }

    /// The entity answered a management request: send the response.
    pub fn on_managed(
        &mut self,
        ticket: Ticket,
        result: Result<Answer, EntityError>,
        out: &mut Outbox,
    ) {
        let response = management::respond(result);
        let correlation = self.correlations.remove(&ticket.request).flatten();
        let encoded = response.encode(correlation, Style::Management);
        self.send_reply(ticket.link, encoded, out);
    }

    /// The reply link for a request to `node`: the one whose target address is `reply-to`,
    /// else the one named `reply-to`, else the node's only reply link (amqp-dialect.md §2.1).
    fn reply_link(&self, node: &str, reply_to: Option<&str>) -> Option<u64> {
        let replies: Vec<(&Link, &Replies)> = self
            .links
            .values()
            .filter_map(|link| match &link.kind {
                LinkKind::Replies(replies) if replies.node == node => Some((link, replies)),
                _ => None,
            })
            .collect();
        let by = |matches: &dyn Fn(&Link, &Replies) -> bool| {
            replies
                .iter()
                .find(|(l, r)| matches(l, r))
                .map(|(l, _)| l.id)
        };
        reply_to
            .and_then(|to| by(&|_, r| r.address.as_deref() == Some(to)))
            .or_else(|| reply_to.and_then(|to| by(&|l, _| l.name == to)))
            .or_else(|| (replies.len() == 1).then(|| replies[0].0.id))
    }

    /// Queues an answer on a reply link and sends what its credit allows.
    fn send_reply(&mut self, link_id: u64, encoded: Bytes, out: &mut Outbox) {
        let Some(handle) = self.by_id.get(&link_id).copied() else {
            return;
        };
        if let Some(Link {
            kind: LinkKind::Replies(replies),
            ..
        }) = self.links.get_mut(&handle)
        {
            self.answers_waiting += encoded.len() as u64;
            replies.waiting.push_back(encoded);
        }
        self.send_waiting_replies(link_id, out);
    }

    /// Sends waiting answers, pre-settled, while the reply link has credit.
    fn send_waiting_replies(&mut self, link_id: u64, out: &mut Outbox) {
        let Some(handle) = self.by_id.get(&link_id).copied() else {
            return;
        };
        loop {
            let Some(Link {
                local_handle,
                kind: LinkKind::Replies(replies),
                ..
            }) = self.links.get_mut(&handle)
            else {
                return;
            };
            if replies.credit == 0 {
                return;
            }
            let Some(encoded) = replies.waiting.pop_front() else {
                return;
            };
            replies.credit -= 1;
            replies.delivery_count = replies.delivery_count.wrapping_add(1);
            let local_handle = *local_handle;
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
            let transfer = Transfer {
                handle: Handle(local_handle),
                delivery_id: Some(delivery_id),
                delivery_tag: Some(DeliveryTag::from(delivery_id.to_be_bytes().to_vec())),
                message_format: Some(0),
                settled: Some(true),
                more: false,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: false,
            };
            for frame in split_transfer(transfer, encoded, self.remote_max_frame) {
                let carried = match &frame {
                    FrameBody::Transfer { payload, .. } => payload.len() as u64,
                    _ => 0,
                };
                self.pending.push_back((frame, Leaving::Answer(carried)));
            }
            self.flush_pending(out);
        }
    }

    /// Handles a client `disposition` for deliveries the broker sent.
    pub fn on_disposition(
        &mut self,
        disposition: Disposition,
        events: &EventSink,
        out: &mut Outbox,
    ) {
        if disposition.role != Role::Receiver {
            // The broker settles every delivery it receives at once; nothing to do.
            return;
        }
        let first = disposition.first;
        let last = disposition.last.unwrap_or(first);
        // Most dispositions settle one delivery: that needs no list of ids.
        let single;
        let many: Vec<u32>;
        let ids: &[u32] = if first == last {
            single = [first];
            &single
        } else if first < last {
            many = self
                .unsettled
                .range(first..=last)
                .map(|(id, _)| *id)
                .collect();
            &many
        } else {
            many = self
                .unsettled
                .range(first..)
                .chain(self.unsettled.range(..=last))
                .map(|(id, _)| *id)
                .collect();
            &many
        };
        let state = disposition
            .state
            .unwrap_or(DeliveryState::Released(Released {}));
        let Some(settlement) = settlement_of(&state) else {
            return;
        };
        let mut by_link: BTreeMap<u64, LinkSettlements> = BTreeMap::new();
        for &id in ids {
            let Some(unsettled) = self.unsettled.get(&id).copied() else {
                continue;
            };
            if disposition.settled {
                self.unsettled.remove(&id);
            }
            let (items, echoes) = by_link
                .entry(unsettled.link_id)
                .or_insert_with(|| (Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len())));
            items.push((unsettled.lock, settlement.clone()));
            echoes.push((id, state.clone()));
        }
        for (link_id, (items, echoes)) in by_link {
            let Some(outgoing) = self.outgoing_by_id(link_id) else {
                continue;
            };
            let (entity, consumer) = (outgoing.entity.clone(), outgoing.consumer);
            // Every settlement is answered, also those the client settled itself: the
            // connection counts the answers, so that a later detach or close can wait for them.
            let request = self.next_request;
            self.next_request += 1;
            if !disposition.settled {
                self.settling.insert(request, echoes);
            }
            let ticket = Ticket {
                link: link_id,
                request,
            };
            out.posts.push((
                entity,
                Command::Settle {
                    consumer,
                    items,
                    reply: Some((ticket, events.clone())),
                },
            ));
        }
    }

    /// Handles a client `detach`: the link goes, its locks are released by the entity.
    pub fn on_detach(&mut self, detach: &Detach, out: &mut Outbox) -> Result<Option<u64>, Fault> {
        let remote_handle = detach.handle.0;
        let Some(link) = self.remove_link(remote_handle) else {
            // fe2o3-amqp answers a refused attach with two detaches; a detach for a handle that
            // is already gone changes nothing, so it is not worth ending the session over.
            tracing::debug!(
                handle = remote_handle,
                "detach for a handle that is not attached"
            );
            return Ok(None);
        };
        let refused = matches!(link.kind, LinkKind::Refused);
        link.span
            .in_scope(|| tracing::debug!(closed = detach.closed, "link detached"));
        Self::answer_pending_attach(&link, out);
        self.release_link(link.id, link.kind, out);
        if !refused {
            out.frames.push(FrameBody::Detach(Detach {
                handle: Handle(link.local_handle),
                closed: detach.closed,
                error: None,
            }));
        }
        Ok(Some(link.id))
    }

    /// Ends the session: every link is released. Returns the ids of the links that went.
    pub fn end(&mut self, out: &mut Outbox) -> Vec<u64> {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        let mut gone = Vec::with_capacity(handles.len());
        for handle in handles {
            if let Some(link) = self.remove_link(handle) {
                gone.push(link.id);
                self.release_link(link.id, link.kind, out);
            }
        }
        gone
    }

    /// The `end` frame that answers the client's (or reports an error).
    pub fn end_frame(error: Option<definitions::Error>) -> FrameBody {
        FrameBody::End(End { error })
    }

    /// Sends one message from the entity to its consumer, framed to the client's frame size.
    pub fn on_delivery(&mut self, delivery: Box<Delivery>, ctx: &Context<'_>, out: &mut Outbox) {
        let link_id = delivery.consumer.0;
        let Some((local_handle, outgoing)) = self.outgoing_mut(link_id) else {
            return;
        };
        outgoing.owed -= 1;
        if outgoing.credit == 0 {
            // Credit was taken back while this delivery was on its way: give it back untouched.
            out.posts
                .push((outgoing.entity.clone(), Command::GiveBack { delivery }));
            return;
        }
        outgoing.credit -= 1;
        outgoing.delivery_count = outgoing.delivery_count.wrapping_add(1);
        let size = u64::from(delivery.record.size);
        let payload = match message::splice(&delivery.bytes, &delivery.stamp) {
            Ok(payload) => payload,
            Err(error) => {
                tracing::error!(seq = delivery.seq, %error, "stored message does not splice");
                out.forwarded
                    .push((outgoing.entity.clone(), delivery.consumer, size));
                return;
            }
        };
        let delivery_id = self.next_delivery_id;
        self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
        let settled = delivery.lock_token.is_none();
        // A locked message's tag is its lock token; a pre-settled one has an empty tag, as
        // Service Bus sends it (the Python SDK's receive-and-delete messages have none).
        let tag = match delivery.lock_token {
            Some(token) => token.to_bytes_le().to_vec(),
            None => Vec::new(),
        };
        if let Some(token) = delivery.lock_token {
            self.unsettled.insert(
                delivery_id,
                Unsettled {
                    link_id,
                    lock: LockRef {
                        seq: delivery.seq,
                        token,
                    },
                },
            );
        }
        let first = Transfer {
            handle: Handle(local_handle),
            delivery_id: Some(delivery_id),
            delivery_tag: Some(DeliveryTag::from(tag)),
            message_format: Some(0),
            settled: Some(settled),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        let frames = split_transfer(first, payload, ctx.remote_max_frame);
        let last = frames.len().saturating_sub(1);
        for (index, frame) in frames.into_iter().enumerate() {
            let leaving = match index == last {
                true => Leaving::Delivery(delivery.consumer, size),
                false => Leaving::Nothing,
            };
            self.pending.push_back((frame, leaving));
        }
        self.flush_pending(out);
    }

    /// The entity finished a drain: the credit left is used up and the client is told.
    pub fn on_drained(&mut self, consumer: ConsumerId, out: &mut Outbox) {
        let Some((local_handle, outgoing)) = self.outgoing_mut(consumer.0) else {
            return;
        };
        outgoing.draining = false;
        outgoing.owed = 0;
        if outgoing.drain {
            outgoing.delivery_count = outgoing.delivery_count.wrapping_add(outgoing.credit);
            outgoing.credit = 0;
            outgoing.drain = false;
            let count = outgoing.delivery_count;
            out.frames
                .push(self.link_flow(local_handle, count, 0, true));
        } else {
            Self::request_credit(outgoing, out);
        }
    }

    /// The entity stored (or refused) a send: queue its disposition.
    pub fn on_sent(&mut self, ticket: Ticket, result: Result<(), EntityError>, out: &mut Outbox) {
        let Ok(delivery_id) = u32::try_from(ticket.request) else {
            return;
        };
        match result {
            Ok(()) => self.accepted.push(delivery_id),
            Err(error) => {
                out.frames
                    .push(rejection(delivery_id, entity_error(&error)));
                if error == EntityError::Deleted {
                    self.on_entity_gone(ticket.link, &error, out);
                }
            }
        }
    }

    /// The entity bound a session receiver to a session: its attach is answered now, naming
    /// the session and when its lock ends.
    pub fn on_session_accepted(
        &mut self,
        link_id: u64,
        session: &str,
        locked_until_ms: i64,
        ctx: &Context<'_>,
        out: &mut Outbox,
    ) {
        let Some(&remote_handle) = self.by_id.get(&link_id) else {
            return;
        };
        let Some(link) = self.links.get_mut(&remote_handle) else {
            return;
        };
        let local_handle = link.local_handle;
        if let LinkKind::Outgoing(outgoing) = &mut link.kind {
            if let Some(waiting) = outgoing.pending_attach.take() {
                tracing::debug!(link = %link.name, session, "session accepted");
                out.frames.push(FrameBody::Attach(link::session_reply(
                    &waiting.attach(),
                    local_handle,
                    ctx.max_message_size,
                    session,
                    locked_until_ms,
                )));
            }
        }
    }

    /// A link about to be detached whose attach is still unanswered (a session receiver
    /// waiting for a session) gets the refusing attach first: null source, then the detach.
    fn answer_pending_attach(link: &Link, out: &mut Outbox) {
        if let LinkKind::Outgoing(Outgoing {
            pending_attach: Some(waiting),
            ..
        }) = &link.kind
        {
            out.frames.push(FrameBody::Attach(link::refuse_reply(
                &waiting.attach(),
                link.local_handle,
            )));
        }
    }

    /// The entity behind a link will not serve it any more (deleted: `amqp:not-found`): the
    /// link is detached with that error.
    pub fn on_entity_gone(&mut self, link_id: u64, error: &EntityError, out: &mut Outbox) {
        if let Some(&remote_handle) = self.by_id.get(&link_id) {
            self.detach_with(remote_handle, entity_error(error), out);
        }
    }

    /// Detaches, with `amqp:unauthorized-access`, every link the connection is no longer
    /// authorized for (its token lapsed unrefreshed).
    pub fn revoke(&mut self, access: &Access, now_ms: i64, out: &mut Outbox) {
        let lapsed: Vec<(u32, String)> = self
            .links
            .iter()
            .filter_map(|(handle, link)| {
                let (address, rights) = link.authorized.as_ref()?;
                let refused = access.check(address, *rights, now_ms).err()?;
                Some((*handle, refused))
            })
            .collect();
        for (handle, description) in lapsed {
            if let Some(link) = self.links.get(&handle) {
                link.span
                    .in_scope(|| tracing::info!(%description, "token lapsed: detaching the link"));
            }
            let error = link::amqp_error(AmqpError::UnauthorizedAccess, description);
            self.detach_with(handle, error, out);
            if let Some(link) = self.links.get_mut(&handle) {
                link.authorized = None;
            }
        }
    }

    /// The entity applied a settlement the client left unsettled: confirm each outcome.
    pub fn on_settled(
        &mut self,
        ticket: Ticket,
        results: Vec<Result<(), EntityError>>,
        out: &mut Outbox,
    ) {
        let Some(echoes) = self.settling.remove(&ticket.request) else {
            return;
        };
        let mut states: Vec<(u32, DeliveryState)> = Vec::with_capacity(echoes.len());
        for ((id, echo), result) in echoes.into_iter().zip(results) {
            self.unsettled.remove(&id);
            let state = match result {
                Ok(()) => confirmation(echo),
                Err(error) => DeliveryState::Rejected(Rejected {
                    error: Some(entity_error(&error)),
                }),
            };
            states.push((id, state));
        }
        write_ranges(Role::Sender, states, out);
    }

    /// Writes the coalesced dispositions of accepted sends.
    pub fn flush_accepted(&mut self, out: &mut Outbox) {
        if self.accepted.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.accepted);
        let states = ids
            .into_iter()
            .map(|id| (id, DeliveryState::Accepted(Accepted {})))
            .collect();
        write_ranges(Role::Receiver, states, out);
    }

    fn request_credit(outgoing: &mut Outgoing, out: &mut Outbox) {
        if outgoing.drain {
            outgoing.draining = true;
            let delta = outgoing.credit_delta();
            out.posts.push((
                outgoing.entity.clone(),
                Command::Credit {
                    consumer: outgoing.consumer,
                    delta,
                },
            ));
            out.posts.push((
                outgoing.entity.clone(),
                Command::Drain {
                    consumer: outgoing.consumer,
                },
            ));
            return;
        }
        let delta = outgoing.credit_delta();
        if delta != 0 {
            out.posts.push((
                outgoing.entity.clone(),
                Command::Credit {
                    consumer: outgoing.consumer,
                    delta,
                },
            ));
        }
    }

    /// The broker's handle and the state of an outgoing link, by link id.
    fn outgoing_mut(&mut self, link_id: u64) -> Option<(u32, &mut Outgoing)> {
        let handle = self.by_id.get(&link_id)?;
        match self.links.get_mut(handle)? {
            Link {
                local_handle,
                kind: LinkKind::Outgoing(outgoing),
                ..
            } => Some((*local_handle, outgoing)),
            _ => None,
        }
    }

    fn outgoing_by_id(&self, link_id: u64) -> Option<&Outgoing> {
        let handle = self.by_id.get(&link_id)?;
        match &self.links.get(handle)?.kind {
            LinkKind::Outgoing(outgoing) => Some(outgoing),
            _ => None,
        }
    }

    fn detach_with(&mut self, remote_handle: u32, error: definitions::Error, out: &mut Outbox) {
        if let Some(link) = self.links.get_mut(&remote_handle) {
            Self::answer_pending_attach(link, out);
            out.frames.push(FrameBody::Detach(link::refuse_detach(
                link.local_handle,
                error,
            )));
            let kind = std::mem::replace(&mut link.kind, LinkKind::Refused);
            let id = link.id;
            self.release_link(id, kind, out);
        }
    }

    fn release_link(&mut self, link_id: u64, kind: LinkKind, out: &mut Outbox) {
        if let LinkKind::Replies(replies) = &kind {
            self.answers_waiting -= replies.waiting.iter().map(|a| a.len() as u64).sum::<u64>();
        }
        if let LinkKind::Outgoing(outgoing) = kind {
            self.unsettled
                .retain(|_, unsettled| unsettled.link_id != link_id);
            out.posts.push((
                outgoing.entity,
                Command::RemoveConsumer {
                    consumer: outgoing.consumer,
                },
            ));
        }
    }

    fn insert_link(&mut self, remote_handle: u32, link: Link) {
        self.by_id.insert(link.id, remote_handle);
        self.links.insert(remote_handle, link);
    }

    fn remove_link(&mut self, remote_handle: u32) -> Option<Link> {
        let link = self.links.remove(&remote_handle)?;
        self.by_id.remove(&link.id);
        Some(link)
    }

    fn free_local_handle(&self) -> Option<u32> {
        let used: std::collections::HashSet<u32> =
            self.links.values().map(|l| l.local_handle).collect();
        (0..=HANDLE_MAX).find(|handle| !used.contains(handle))
    }

    fn flush_pending(&mut self, out: &mut Outbox) {
        while self.remote_incoming_window > 0 {
            let Some((frame, leaving)) = self.pending.pop_front() else {
                break;
            };
            self.remote_incoming_window -= 1;
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
            out.frames.push(frame);
            match leaving {
                Leaving::Nothing => {}
                Leaving::Delivery(consumer, bytes) => {
                    if let Some(outgoing) = self.outgoing_by_id(consumer.0) {
                        out.forwarded
                            .push((outgoing.entity.clone(), consumer, bytes));
                    }
                }
                Leaving::Answer(bytes) => self.answers_waiting -= bytes,
            }
        }
    }

    fn session_flow(&self) -> FrameBody {
        FrameBody::Flow(self.flow())
    }

    fn link_flow(
        &self,
        local_handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
    ) -> FrameBody {
        link_flow(self.flow(), local_handle, delivery_count, credit, drain)
    }

    fn flow(&self) -> Flow {
        Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_remaining,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: None,
            delivery_count: None,
            link_credit: None,
            available: None,
            drain: false,
            echo: false,
            properties: None,
        }
    }
}

/// The node (and which of its queues) an attach names, with its address, or the error that
/// refuses it: `amqp:not-found` for unknown addresses, `amqp:not-allowed` for a send to a
/// dead-letter queue, `amqp:not-implemented` for a transaction coordinator.
fn resolve(attach: &Attach, registry: &Registry) -> Result<(Node, String), definitions::Error> {
    let address = match attach.role {
        Role::Sender => match attach.target.as_deref() {
            Some(TargetArchetype::Target(target)) => target.address.clone(),
            Some(TargetArchetype::Coordinator(_)) => {
                return Err(link::amqp_error(
                    AmqpError::NotImplemented,
                    "transactions are not supported yet",
                ))
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
    let refusal = match (&attach.role, &node) {
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
    };
    match refusal {
        Some(description) => Err(link::amqp_error(AmqpError::NotAllowed, description)),
        None => Ok((node, address)),
    }
}

/// The rights a client link to `node` needs (any one of them), by its role: a sender Send, a
/// receiver Listen, a management link any right (each operation checks its own); `None` for
/// `$cbs`, which every client may use.
fn rights_to_attach(role: &Role, node: &Node) -> Option<Rights> {
    match (role, node) {
        (_, Node::Cbs) => None,
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

/// What the entity should do for a client outcome; `None` for a non-terminal state
/// (amqp-dialect.md §6.1; `delivery-failed` decides nothing).
fn settlement_of(state: &DeliveryState) -> Option<Settlement> {
    match state {
        DeliveryState::Accepted(_) => Some(Settlement::Complete),
        DeliveryState::Released(_) => Some(Settlement::Release),
        DeliveryState::Modified(modified) => {
            let properties = simple_properties(modified.message_annotations.as_ref());
            Some(match modified.undeliverable_here {
                Some(true) => Settlement::Defer(properties),
                _ => Settlement::Abandon(properties),
            })
        }
        DeliveryState::Rejected(rejected) => Some(dead_letter_of(rejected.error.as_ref())),
        _ => None,
    }
}

/// A `rejected` outcome as a dead-lettering: reason and description from the error's info,
/// falling back to its condition (unless it is the dead-letter marker) and description; the
/// other info entries become application properties.
fn dead_letter_of(error: Option<&definitions::Error>) -> Settlement {
    let Some(error) = error else {
        return Settlement::DeadLetter {
            reason: None,
            description: None,
            properties: Vec::new(),
        };
    };
    let mut properties = simple_properties(error.info.as_deref());
    let mut take = |key: &str| {
        let at = properties.iter().position(|(k, _)| k == key)?;
        match properties.remove(at).1 {
            SimpleValue::String(value) => Some(value),
            _ => None,
        }
    };
    let reason = take(wire::dead_letter::REASON).or_else(|| {
        let condition = condition_name(&error.condition);
        (condition != wire::dead_letter::CONDITION).then_some(condition)
    });
    let description = take(wire::dead_letter::DESCRIPTION).or_else(|| error.description.clone());
    Settlement::DeadLetter {
        reason,
        description,
        properties,
    }
}

/// The symbol of an error condition.
fn condition_name(condition: &ErrorCondition) -> String {
    serde_amqp::to_vec(condition)
        .ok()
        .and_then(|bytes| serde_amqp::from_slice::<Symbol>(&bytes).ok())
        .map_or_else(String::new, |symbol| symbol.as_str().to_string())
}

/// Map entries that are simple values, keyed by string (nulls and composites are skipped).
fn simple_properties(fields: Option<&definitions::Fields>) -> Properties {
    fields
        .into_iter()
        .flat_map(|fields| fields.iter())
        .filter(|(_, value)| !matches!(value, Value::Null))
        .filter_map(|(key, value)| {
            SimpleValue::try_from(value.clone())
                .ok()
                .map(|simple| (key.as_str().to_string(), simple))
        })
        .collect()
}

/// A link `flow` on top of the session fields of `base`.
fn link_flow(
    base: Flow,
    local_handle: u32,
    delivery_count: u32,
    credit: u32,
    drain: bool,
) -> FrameBody {
    FrameBody::Flow(Flow {
        handle: Some(Handle(local_handle)),
        delivery_count: Some(delivery_count),
        link_credit: Some(credit),
        drain,
        ..base
    })
}

/// The outcome a settle-second confirmation carries: the client's own, except that a
/// dead-letter is confirmed with a bare `rejected` (the JavaScript SDK fails on an error there,
/// amqp-dialect.md §17).
fn confirmation(requested: DeliveryState) -> DeliveryState {
    match requested {
        DeliveryState::Rejected(_) => DeliveryState::Rejected(Rejected { error: None }),
        other => other,
    }
}

/// The settled `rejected` disposition of one received delivery.
fn rejection(delivery_id: u32, error: definitions::Error) -> FrameBody {
    settled_disposition(
        delivery_id,
        DeliveryState::Rejected(Rejected { error: Some(error) }),
    )
}

/// The broker's settled disposition of one delivery it received.
fn settled_disposition(delivery_id: u32, state: DeliveryState) -> FrameBody {
    FrameBody::Disposition(Disposition {
        role: Role::Receiver,
        first: delivery_id,
        last: None,
        settled: true,
        state: Some(state),
        batchable: false,
    })
}

/// The AMQP error a client sees for an entity's refusal.
fn entity_error(error: &EntityError) -> definitions::Error {
    let (_, condition) = response::status_of(error);
    link::custom_error(condition, error.to_string())
}

fn unattached(remote_handle: u32) -> Fault {
    Fault::Session(link::amqp_error(
        SessionError::UnattachedHandle,
        format!("handle {remote_handle} is not attached"),
    ))
}

/// Writes settled dispositions, one per run of consecutive ids with the same state.
fn write_ranges(role: Role, mut states: Vec<(u32, DeliveryState)>, out: &mut Outbox) {
    states.sort_by_key(|(id, _)| *id);
    let mut runs: Vec<(u32, u32, DeliveryState)> = Vec::new();
    for (id, state) in states {
        match runs.last_mut() {
            Some((_, last, run_state)) if last.wrapping_add(1) == id && *run_state == state => {
                *last = id
            }
            _ => runs.push((id, id, state)),
        }
    }
    for (first, last, state) in runs {
        out.frames.push(FrameBody::Disposition(Disposition {
            role: role.clone(),
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(state),
            batchable: false,
        }));
    }
}

/// Splits one delivery into transfer frames that each fit `max_frame` (wire-layer.md §6).
fn split_transfer(first: Transfer, mut rest: Bytes, max_frame: usize) -> Vec<FrameBody> {
    let mut frames = Vec::new();
    let mut performative = first;
    loop {
        performative.more = true;
        let overhead = 8 + hot::transfer_len(&performative);
        let room = max_frame.saturating_sub(overhead).max(1);
        let chunk = if rest.len() > room {
            rest.split_to(room)
        } else {
            std::mem::take(&mut rest)
        };
        performative.more = !rest.is_empty();
        let more = performative.more;
        let handle = performative.handle.clone();
        frames.push(FrameBody::Transfer {
            performative,
            payload: chunk,
        });
        if !more {
            return frames;
        }
        performative = Transfer {
            handle,
            delivery_id: None,
            delivery_tag: None,
            message_format: None,
            settled: None,
            more: true,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
    }
}
