//! One AMQP session: the books only. It keeps the transfer and delivery ids, the session
//! windows, the links attached to it and the frames waiting for the client's window, and hands
//! each frame to the role of the link it names: [`attach`] (a new link), [`inbound`] (client
//! senders), [`outbound`] (client receivers), [`outcome`] (dispositions both ways),
//! [`requests`] (`$cbs`, `$management`) and [`coordinator`] (transactions). The roles never
//! call back: each returns what it decided and writes frames and commands into the
//! [`Outbox`]; the connection task performs it.

use foldhash::{HashMap, HashMapExt};
use std::collections::VecDeque;

use bytes::Bytes;
use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::{self, AmqpError, Handle, SessionError};
use fe2o3_amqp::types::performatives::{Attach, Begin, Detach, Disposition, End, Flow, Transfer};

use crate::amqp::attach::{self, HANDLE_MAX};
use crate::amqp::coordinator;
use crate::amqp::inbound::{self, Step};
use crate::amqp::link::{self, Link, LinkKind, Outgoing};
use crate::amqp::outbound;
use crate::amqp::outbox::{CbsLinks, Context, Fault, Outbox};
use crate::amqp::outcome::{self, Ledger};
use crate::amqp::requests::{self, Reply, Request, Requests};
use crate::amqp::transactions::Transactions;
use crate::amqp::via::CrossEntity;
use crate::auth::access::Access;
use crate::clock;
use crate::entity::handle::{Command, ConsumerId, Delivery, EntityError, EventSink, Ticket, Work};
use crate::entity::operation::Answer;
use crate::node::Node;

/// Incoming window the broker grants, in transfer frames; refilled when half is used.
const INCOMING_WINDOW: u32 = 8192;

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
    /// Transfer frames waiting for the client's incoming window, each with what leaves
    /// with it.
    pending: VecDeque<(FrameBody, Leaving)>,
    /// Deliveries owed an outcome, both ways.
    ledger: Ledger,
    /// Requests to `$cbs` and `$management` and their answers.
    requests: Requests,
    /// Whether the session's links send through one via entity (send-via).
    cross: CrossEntity,
    /// Largest frame the client accepts.
    remote_max_frame: usize,
}

impl Session {
    /// The `$cbs` links the session holds open.
    pub fn cbs_links(&self) -> CbsLinks {
        let mut cbs = CbsLinks::default();
        for link in self.links.values() {
            match &link.kind {
                LinkKind::Incoming(incoming) if matches!(incoming.node, Node::Cbs) => {
                    cbs.sender = true;
                }
                LinkKind::Replies(replies) if replies.node == link::node_key(&Node::Cbs) => {
                    cbs.receiver = true;
                }
                _ => {}
            }
        }
        cbs
    }

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
            pending: VecDeque::new(),
            ledger: Ledger::default(),
            requests: Requests::default(),
            cross: CrossEntity::default(),
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

    /// Whether the link `link_id` is attached and was not refused.
    pub fn accepted(&self, link_id: u64) -> bool {
        let link = (self.by_id.get(&link_id)).and_then(|handle| self.links.get(handle));
        link.is_some_and(|link| !matches!(link.kind, LinkKind::Refused))
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
        let in_use = self.links.contains_key(&remote_handle);
        let local_handle = attach::handles(remote_handle, in_use, self.free_local_handle())?;
        let base = self.flow();
        let roles = (ctx, &mut self.cross);
        let opened = attach::open(attach, link_id, local_handle, &base, roles, out);
        Ok(opened.map(|link| {
            self.insert_link(remote_handle, link);
            link_id
        }))
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
                out.frames.push(FrameBody::Flow(self.flow()));
            }
            return Ok(());
        };
        let link = self
            .links
            .get_mut(&remote_handle)
            .ok_or_else(|| unattached(remote_handle))?;
        let (local_handle, link_id) = (link.local_handle, link.id);
        let (echo, drain) = match &mut link.kind {
            LinkKind::Outgoing(outgoing) => (outbound::on_flow(outgoing, flow, out), false),
            LinkKind::Incoming(incoming) => (inbound::on_flow(incoming, flow), false),
            LinkKind::Replies(replies) => {
                requests::apply_flow(replies, flow);
                self.send_waiting_replies(link_id, out);
                let echo = match self
                    .links
                    .get_mut(&remote_handle)
                    .map(|link| &mut link.kind)
                {
                    Some(LinkKind::Replies(replies)) => requests::finish_flow(replies, flow),
                    _ => None,
                };
                (echo, flow.drain)
            }
            LinkKind::Refused => (None, false),
        };
        if let Some((count, credit)) = echo {
            out.frames
                .push(link::flow(&self.flow(), local_handle, count, credit, drain));
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
            out.frames.push(FrameBody::Flow(self.flow()));
        }
        let base = self.flow();
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
        let step = inbound::receive(
            incoming,
            transfer,
            payload,
            &base,
            local_handle,
            ctx.reassembly,
            out,
        )?;
        let whole = match step {
            Step::Waiting => return Ok(()),
            Step::Whole(whole) => whole,
            Step::Detach(error) => {
                self.detach_with(remote_handle, error, out);
                return Ok(());
            }
            Step::Oversized(head, error) => {
                let node = incoming.node.clone();
                let address = link.authorized.as_ref().map(|(address, _)| address.clone());
                let description = error.description.clone().unwrap_or_default();
                match Request::oversized(node, address, head, description, &self.links, out) {
                    Some(request) => {
                        let reply = self.requests.on_request(request, &self.links, ctx, out)?;
                        self.send_reply(reply, out);
                    }
                    None => self.detach_with(remote_handle, error, out),
                }
                return Ok(());
            }
        };
        let address = link
            .authorized
            .as_ref()
            .map(|(address, _)| address.as_str());
        if let Some(now) = address.and_then(|address| incoming.node.rebound(address, ctx.registry))
        {
            incoming.node = now;
        }
        let (node, via) = (incoming.node.clone(), incoming.via.clone());
        if let Node::Coordinator = node {
            let now_ms = clock::now_ms();
            coordinator::control(whole, link_id, ctx.transactions, now_ms, ctx.events, out);
            return Ok(());
        }
        let Node::Entity(entity, _) = node else {
            let address = link.authorized.as_ref().map(|(address, _)| address.clone());
            let request = Request::accept(node, address, whole, out);
            let reply = self.requests.on_request(request, &self.links, ctx, out)?;
            self.send_reply(reply, out);
            return Ok(());
        };
        let span = link.span.clone();
        let delivery_id = whole.delivery_id;
        let context = (ctx.events, &mut *ctx.transactions);
        let entities = (entity, via);
        match span.in_scope(|| inbound::send(entities, whole, link_id, context, out)) {
            Ok(Some(txn)) => self.ledger.staged(delivery_id, txn),
            Ok(None) => {}
            Err(error) => self.detach_with(remote_handle, error, out),
        }
        Ok(())
    }

    /// What this session holds of answers: bytes waiting for the client, and requests
    /// posted to entities and not answered yet.
    pub fn answers_held(&self) -> (u64, usize) {
        self.requests.answers_held()
    }

    /// Whether a request waits for the connection's answers to have room.
    pub fn defers_requests(&self) -> bool {
        self.requests.defers()
    }

    /// Answers the first deferred request (the connection has room for its answer now).
    pub fn answer_deferred(&mut self, ctx: &mut Context<'_>, out: &mut Outbox) {
        let reply = self.requests.answer_deferred(&self.links, ctx, out);
        self.send_reply(reply, out);
    }

    /// The entity answered a management request: send the response.
    pub fn on_managed(
        &mut self,
        ticket: Ticket,
        result: Result<Answer, EntityError>,
        out: &mut Outbox,
    ) {
        let reply = self.requests.on_managed(ticket, result);
        self.send_reply(Some(reply), out);
    }

    /// Queues an answer on its reply link and sends what the link's credit allows.
    fn send_reply(&mut self, reply: Option<Reply>, out: &mut Outbox) {
        let Some(Reply { link, encoded }) = reply else {
            return;
        };
        let Some(handle) = self.by_id.get(&link).copied() else {
            return;
        };
        if let Some(Link {
            kind: LinkKind::Replies(replies),
            ..
        }) = self.links.get_mut(&handle)
        {
            self.requests.waiting(encoded.len() as u64);
            replies.waiting.push_back(encoded);
        }
        self.send_waiting_replies(link, out);
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
            let local_handle = *local_handle;
            let Some(encoded) = requests::next_answer(replies) else {
                return;
            };
            let delivery_id = self.take_delivery_id();
            let tag = delivery_id.to_be_bytes().to_vec();
            let first = outbound::transfer(local_handle, delivery_id, tag, true);
            let pending = &mut self.pending;
            outbound::split_transfer(first, encoded, self.remote_max_frame, |frame, _| {
                let carried = match &frame {
                    FrameBody::Transfer { payload, .. } => payload.len() as u64,
                    _ => 0,
                };
                pending.push_back((frame, Leaving::Answer(carried)));
            });
            self.flush_pending(out);
        }
    }

    /// Handles a client `disposition` for deliveries the broker sent: settled at their
    /// entity, or staged in the transaction it names.
    pub fn on_disposition(
        &mut self,
        disposition: Disposition,
        events: &EventSink,
        transactions: &mut Transactions,
        out: &mut Outbox,
    ) {
        for settling in self.ledger.on_disposition(disposition) {
            let Some(outgoing) = self.outgoing_by_id(settling.link_id) else {
                continue;
            };
            let (entity, consumer) = (outgoing.entity.clone(), outgoing.consumer());
            let ticket = Ticket {
                link: settling.link_id,
                request: settling.request,
            };
            let reply = Some((ticket, events.clone()));
            let items = settling.items;
            let command = match &settling.txn {
                None => Command::Settle {
                    consumer,
                    items,
                    reply,
                    awaited: settling.awaited,
                },
                Some(txn) => {
                    match transactions.enlist(txn, &entity, (items.len(), 0), clock::now_ms()) {
                        Ok(txn) => Command::Stage {
                            txn,
                            work: Work::Settle {
                                consumer,
                                items,
                                client_settled: !settling.awaited,
                            },
                            reply,
                        },
                        Err(error) => {
                            self.ledger.refuse(settling.request, txn, &error, out);
                            continue;
                        }
                    }
                }
            };
            out.posts.push((entity, command));
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
        out.frames.extend(attach::refuse_pending(&link));
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
    pub fn on_delivery(&mut self, delivery: Delivery, out: &mut Outbox) {
        let link_id = delivery.consumer.link();
        let Some((local_handle, outgoing)) = self.outgoing_mut(link_id) else {
            return;
        };
        let Some(ready) = outbound::take(outgoing, delivery, out) else {
            return;
        };
        let delivery_id = self.take_delivery_id();
        if let Some(lock) = ready.lock {
            self.ledger.sent(delivery_id, link_id, lock);
        }
        let tag = outbound::delivery_tag(ready.lock.as_ref());
        let first = outbound::transfer(local_handle, delivery_id, tag, ready.lock.is_none());
        let pending = &mut self.pending;
        outbound::split_transfer(
            first,
            ready.payload,
            self.remote_max_frame,
            |frame, last| {
                let leaving = match last {
                    true => Leaving::Delivery(ready.consumer, ready.size),
                    false => Leaving::Nothing,
                };
                pending.push_back((frame, leaving));
            },
        );
        self.flush_pending(out);
    }

    /// The entity finished a drain: the credit left is used up and the client is told.
    pub fn on_drained(&mut self, consumer: ConsumerId, out: &mut Outbox) {
        let Some((local_handle, outgoing)) = self.outgoing_mut(consumer.link()) else {
            return;
        };
        if let Some(count) = outbound::on_drained(outgoing, consumer, out) {
            out.frames
                .push(link::flow(&self.flow(), local_handle, count, 0, true));
        }
    }

    /// The entity stored (or refused) a send: queue its disposition.
    pub fn on_sent(&mut self, ticket: Ticket, result: Result<(), EntityError>, out: &mut Outbox) {
        let Ok(delivery_id) = u32::try_from(ticket.request) else {
            return;
        };
        let gone = result == Err(EntityError::Deleted);
        self.ledger.on_sent(delivery_id, result, out);
        if gone {
            if let Some(&remote_handle) = self.by_id.get(&ticket.link) {
                let error = outcome::entity_error(&EntityError::Deleted);
                self.detach_with(remote_handle, error, out);
            }
        }
    }

    /// The via entity committed or rolled back a transaction discharged on a coordinator link
    /// of this session: the discharge is answered.
    pub fn on_discharged(
        &mut self,
        ticket: Ticket,
        result: Result<(), EntityError>,
        out: &mut Outbox,
    ) {
        out.frames
            .extend(coordinator::on_discharged(ticket, result));
    }

    /// The entity bound a session receiver to a session: its attach is answered now, naming
    /// the session and when its lock ends. A receiver that asked every partition for the next
    /// available session keeps the partition that found one: the others let it go.
    pub fn on_session_accepted(
        &mut self,
        consumer: ConsumerId,
        session: &str,
        locked_until_ms: i64,
        ctx: &Context<'_>,
        out: &mut Outbox,
    ) {
        let Some(&remote_handle) = self.by_id.get(&consumer.link()) else {
            return;
        };
        let Some(link) = self.links.get_mut(&remote_handle) else {
            return;
        };
        let local_handle = link.local_handle;
        if let LinkKind::Outgoing(outgoing) = &mut link.kind {
            if outgoing.feed_mut(consumer).is_none() {
                // Another partition bound it first: this one was let go meanwhile.
                return;
            }
            for other in outgoing
                .feeds
                .iter()
                .filter(|feed| feed.consumer != consumer)
            {
                let consumer = other.consumer;
                out.posts.push((
                    outgoing.entity.clone(),
                    Command::RemoveConsumer { consumer },
                ));
            }
            outgoing.feeds.retain(|feed| feed.consumer == consumer);
            if let Some(waiting) = outgoing.pending_attach.take() {
                tracing::debug!(link = %link.name, session, "session accepted");
                out.frames.push(FrameBody::Attach(attach::session_reply(
                    &waiting.attach(),
                    local_handle,
                    ctx.max_message_size,
                    session,
                    locked_until_ms,
                )));
                outbound::request_credit(outgoing, out);
            }
        }
    }

    /// The entity registered a receiver that asked for no session: its attach is answered
    /// once every partition it consumes from has.
    pub fn on_consumer_added(&mut self, consumer: ConsumerId, ctx: &Context<'_>, out: &mut Outbox) {
        let link = self
            .by_id
            .get(&consumer.link())
            .and_then(|h| self.links.get_mut(h));
        let Some(link) = link else {
            return;
        };
        let local_handle = link.local_handle;
        if let LinkKind::Outgoing(outgoing) = &mut link.kind {
            outgoing.registering = outgoing.registering.saturating_sub(1);
            if outgoing.registering > 0 {
                return;
            }
            if let Some(waiting) = outgoing.pending_attach.take() {
                out.frames.push(FrameBody::Attach(attach::accept_reply(
                    &waiting.attach(),
                    local_handle,
                    ctx.max_message_size,
                )));
                outbound::request_credit(outgoing, out);
            }
        }
    }

    /// The entity behind a link will not serve it any more (deleted: `amqp:not-found`; or
    /// refused it): the link is detached with that error. A receiver waiting for the next
    /// available session in several partitions waits on while any of them may find one.
    pub fn on_entity_gone(&mut self, consumer: ConsumerId, error: &EntityError, out: &mut Outbox) {
        let Some(&remote_handle) = self.by_id.get(&consumer.link()) else {
            return;
        };
        if let Some(Link {
            kind: LinkKind::Outgoing(outgoing),
            ..
        }) = self.links.get_mut(&remote_handle)
        {
            let waits =
                outgoing.pending_attach.is_some() && *error == EntityError::NoSessionAvailable;
            outgoing.feeds.retain(|feed| feed.consumer != consumer);
            if waits && !outgoing.feeds.is_empty() {
                return;
            }
        } else {
            // Refused already (another partition's refusal came first).
            return;
        }
        self.detach_with(remote_handle, outcome::entity_error(error), out);
    }

    /// Detaches, with `amqp:unauthorized-access`, every link the connection is no longer
    /// authorized for (its token lapsed unrefreshed).
    pub fn revoke(&mut self, access: &Access, now_ms: i64, out: &mut Outbox) {
        for (handle, description) in attach::lapsed(&self.links, access, now_ms) {
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
        self.ledger.on_settled(ticket.request, results, out);
    }

    /// Writes the coalesced dispositions of accepted sends.
    pub fn flush_accepted(&mut self, out: &mut Outbox) {
        self.ledger.flush_accepted(out);
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

    /// Detaches a link with an error; it stays in the table, refused, until the client's
    /// detach. A link detached already is left alone (its detach was sent).
    fn detach_with(&mut self, remote_handle: u32, error: definitions::Error, out: &mut Outbox) {
        let link = self.links.get_mut(&remote_handle);
        if let Some(link) = link.filter(|link| !matches!(link.kind, LinkKind::Refused)) {
            out.frames.extend(attach::refuse_pending(link));
            out.frames.push(FrameBody::Detach(attach::refuse_detach(
                link.local_handle,
                error,
            )));
            let kind = std::mem::replace(&mut link.kind, LinkKind::Refused);
            let id = link.id;
            self.release_link(id, kind, out);
        }
    }

    /// What a link leaves behind when it goes: its waiting answers, its deliveries' outcomes,
    /// its consumer at the entity (whose locks then expire).
    fn release_link(&mut self, link_id: u64, kind: LinkKind, out: &mut Outbox) {
        match kind {
            LinkKind::Replies(replies) => {
                let waiting = replies.waiting.iter().map(|a| a.len() as u64).sum::<u64>();
                self.requests.gone(waiting);
            }
            LinkKind::Outgoing(outgoing) => {
                self.ledger.forget_link(link_id);
                for feed in &outgoing.feeds {
                    let consumer = feed.consumer;
                    out.posts.push((
                        outgoing.entity.clone(),
                        Command::RemoveConsumer { consumer },
                    ));
                }
            }
            LinkKind::Incoming(_) | LinkKind::Refused => {}
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

    fn take_delivery_id(&mut self) -> u32 {
        let id = self.next_delivery_id;
        self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
        id
    }

    /// Sends the waiting transfer frames the client's session window allows.
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
                    if let Some(outgoing) = self.outgoing_by_id(consumer.link()) {
                        out.forwarded
                            .push((outgoing.entity.clone(), consumer, bytes));
                    }
                }
                Leaving::Answer(bytes) => self.requests.gone(bytes),
            }
        }
    }

    /// The session's own `flow` fields (its windows and ids).
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

fn unattached(remote_handle: u32) -> Fault {
    Fault::Session(link::amqp_error(
        SessionError::UnattachedHandle,
        format!("handle {remote_handle} is not attached"),
    ))
}

#[cfg(test)]
mod tests;
