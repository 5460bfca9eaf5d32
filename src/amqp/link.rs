//! Links: the two kinds the broker keeps (it receives from client senders and sends to client
//! receivers), their credit arithmetic and the attach replies (amqp-dialect.md §4.3).

use bytes::{Bytes, BytesMut};
use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::{self, AmqpError, ErrorCondition, Fields, Handle};
use fe2o3_amqp::types::performatives::{Attach, Flow};
use fe2o3_amqp::types::primitives::{Binary, Symbol};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::Rights;
use crate::entity::handle::{ConsumerId, EntityHandle, ReceiveMode};
use crate::entity::registry::RegistryError;
use crate::metrics::Held;
use crate::node::Node;
use crate::wire::condition::SERVER_BUSY;

/// Credit the broker grants a client sender, and tops up when half is used.
pub const SENDER_CREDIT: u32 = 1000;

/// A link the broker receives on (the client's sender).
#[derive(Debug)]
pub struct Incoming {
    /// Where the messages go: a queue, or a request/response node.
    pub node: Node,
    /// The entity the link's transactional sends go through to `node` (send-via), when it
    /// is another one.
    pub via: Option<EntityHandle>,
    /// The sender's delivery count as the broker has seen it.
    pub delivery_count: u32,
    /// Credit left before the broker must top up.
    pub credit: u32,
    /// The largest message the broker accepts.
    pub max_message_size: u64,
    /// A delivery whose frames are still arriving.
    pub partial: Option<Partial>,
}

/// A multi-frame delivery being reassembled.
#[derive(Debug)]
pub struct Partial {
    /// Delivery id from the first frame.
    pub delivery_id: u32,
    /// Whether the sender settled it.
    pub settled: bool,
    /// Message format from the first frame.
    pub message_format: u32,
    /// Payload bytes received so far (kept or not).
    pub received: u64,
    /// The bytes so far.
    pub bytes: BytesMut,
    /// The bytes' share of the connection's reassembly budget.
    pub charge: Charge,
    /// The transaction it is part of (a `transactional-state` on one of its frames).
    pub txn: Option<Binary>,
}

/// A delivery whose last frame arrived.
#[derive(Debug)]
pub struct Whole {
    /// Its delivery id.
    pub delivery_id: u32,
    /// Whether the client settled it (then it cannot be rejected).
    pub settled: bool,
    /// Its message format (a Service Bus batch, or 0).
    pub message_format: u32,
    /// The message bytes.
    pub bytes: Bytes,
    /// The transaction it is part of, as the client named it.
    pub txn: Option<Binary>,
}

/// What one connection may hold of deliveries whose frames are still arriving, over all its
/// links: each link's delivery is bounded by `max_message_size`, and this bounds their sum.
#[derive(Debug, Clone)]
pub struct ReassemblyBudget {
    held: Arc<AtomicU64>,
    limit: u64,
}

impl ReassemblyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            held: Arc::new(AtomicU64::new(0)),
            limit,
        }
    }

    /// The budget's size.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// An empty charge against this budget.
    pub fn charge(&self) -> Charge {
        Charge {
            budget: self.clone(),
            held: 0,
        }
    }
}

/// One partial delivery's share of its connection's [`ReassemblyBudget`], given back when it
/// is released or dropped (the delivery finished, was aborted, or its link went).
#[derive(Debug)]
pub struct Charge {
    budget: ReassemblyBudget,
    held: u64,
}

impl Charge {
    /// Takes `bytes` more; `false`, taking nothing, when that would exceed the budget.
    pub fn add(&mut self, bytes: u64) -> bool {
        let total = self.budget.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > self.budget.limit {
            self.budget.held.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        self.held += bytes;
        true
    }

    /// Gives back everything held.
    pub fn release(&mut self) {
        self.budget.held.fetch_sub(self.held, Ordering::Relaxed);
        self.held = 0;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release();
    }
}

/// A link the broker sends on (the client's receiver), bound to consumers at its entity: one,
/// or one per partition of a partitioned entity (until a session receiver is bound to the
/// session of one).
#[derive(Debug)]
pub struct Outgoing {
    /// The entity it consumes from.
    pub entity: EntityHandle,
    /// Its consumers at the entity, each with what it may still deliver.
    pub feeds: Vec<Feed>,
    /// Peek-lock or receive-and-delete.
    pub mode: ReceiveMode,
    /// Whether the client asked to settle second (the broker then confirms every settlement).
    pub settle_second: bool,
    /// The broker's delivery count on this link.
    pub delivery_count: u32,
    /// Link credit the client has given and the broker not yet used.
    pub credit: u32,
    /// The client asked for a drain that is not finished yet.
    pub drain: bool,
    /// Consumers whose drain request is at the entity unanswered.
    pub draining: usize,
    /// Consumers the entity has not registered yet: the attach waits for them all.
    pub registering: usize,
    /// A receiver's attach, answered once the entity registered it (or bound it to a session).
    pub pending_attach: Option<WaitingAttach>,
    /// Room for the header and annotations of the next delivery's splice, kept between
    /// deliveries.
    pub splice_room: Vec<u8>,
}

/// One consumer of a receiver link at its entity (or at one partition of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feed {
    /// Its consumer id.
    pub consumer: ConsumerId,
    /// Deliveries it may still send: credit handed to it minus deliveries seen.
    pub owed: i64,
    /// Deliveries seen from it in all (given back ones too): the entity counts them alike,
    /// so a limit of `taken + owed` means the same at both ends.
    pub taken: u64,
}

impl Feed {
    /// The delivery limit that lets it send what it owes.
    fn limit(&self) -> (ConsumerId, u64) {
        let owed = u64::try_from(self.owed).unwrap_or(0);
        (self.consumer, self.taken + owed)
    }
}

/// A session receiver's attach while it waits for a session: only what its reply reads
/// (name, role, settle modes, terminus), kept encoded (a decoded map can take 50 times its
/// encoding) and charged to the connection's [`ReassemblyBudget`] until it is answered or
/// the link goes.
#[derive(Debug)]
pub struct WaitingAttach {
    encoded: Vec<u8>,
    _charge: Charge,
}

impl WaitingAttach {
    /// Keeps what the reply to `request` needs, if `budget` has room for it.
    ///
    /// # Errors
    /// `amqp:resource-limit-exceeded` when the connection's budget is used up.
    pub fn new(request: &Attach, budget: &ReassemblyBudget) -> Result<Self, definitions::Error> {
        let kept = Attach {
            unsettled: None,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
            ..request.clone()
        };
        let encoded = serde_amqp::to_vec(&kept).map_err(|error| {
            amqp_error(
                AmqpError::InternalError,
                format!("the attach does not encode: {error}"),
            )
        })?;
        let mut charge = budget.charge();
        if !charge.add(encoded.len() as u64) {
            return Err(amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "receivers waiting for a session, and unfinished deliveries, hold more \
                     than {} bytes on this connection",
                    budget.limit()
                ),
            ));
        }
        Ok(Self {
            encoded,
            _charge: charge,
        })
    }

    /// The attach as kept.
    pub fn attach(&self) -> Attach {
        serde_amqp::from_slice(&self.encoded).expect("an attach this broker encoded decodes")
    }
}

impl Outgoing {
    /// Applies a client `flow` to the link credit (AMQP 1.0 §2.6.7):
    /// `credit = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)`.
    pub fn apply_flow(&mut self, delivery_count: Option<u32>, link_credit: u32, drain: bool) {
        let receiver_count = delivery_count.unwrap_or(0);
        let credit = receiver_count
            .wrapping_add(link_credit)
            .wrapping_sub(self.delivery_count);
        // A credit "above" u32::MAX / 2 is a count from before deliveries the client has not
        // seen yet: it means no credit is left.
        self.credit = if credit > u32::MAX / 2 { 0 } else { credit };
        self.drain = drain;
    }

    /// The delivery limits to give the consumers whose demand changes so that what they owe
    /// matches the credit (each `taken + owed`, see [`Feed::taken`]): all of it for one consumer. Several (a partitioned entity's) share it: each
    /// consumer owing half its share or less (the credit over their number, rounded up) gets
    /// it,
    /// so that every partition with messages can deliver while credit is left and at most
    /// `consumers - 1` deliveries past the credit go back to their partitions. Demand is taken
    /// back from those owing the most (never below their share) only as far as the others need
    /// the room: a delivery already on its way when a limit falls goes back to its partition.
    /// Updates each `owed`; unchanged ones are left out.
    pub fn credit_limits(&mut self) -> Vec<(ConsumerId, u64)> {
        let credit = i64::from(self.credit);
        if let [feed] = &mut self.feeds[..] {
            let changed = credit != feed.owed;
            feed.owed = credit;
            return changed.then(|| feed.limit()).into_iter().collect();
        }
        let count = self.feeds.len() as i64;
        let share = (credit + count - 1) / count;
        let bound = credit + count - 1;
        let owed = |feeds: &[Feed]| -> i64 { feeds.iter().map(|feed| feed.owed.max(0)).sum() };
        // One that still owes over half its share waits: a top-up per delivery would cost a
        // command per delivery.
        let hungry = |feed: &Feed| feed.owed <= share / 2;
        let needed: i64 = self
            .feeds
            .iter()
            .filter(|feed| hungry(feed))
            .map(|feed| share - feed.owed)
            .sum();
        let mut deltas = vec![0; self.feeds.len()];
        // Room the hungry need is taken from those owing the most, just as much as needed
        // and never below their share.
        let mut short = owed(&self.feeds) + needed - bound;
        while short > 0 {
            let Some((index, feed)) = self
                .feeds
                .iter_mut()
                .enumerate()
                .filter(|(_, feed)| feed.owed > share)
                .max_by_key(|(_, feed)| feed.owed)
            else {
                break;
            };
            let taken = (feed.owed - share).min(short);
            feed.owed -= taken;
            deltas[index] -= taken;
            short -= taken;
        }
        let mut room = (bound - owed(&self.feeds)).max(0);
        for (feed, delta) in self.feeds.iter_mut().zip(&mut deltas) {
            if !hungry(feed) {
                continue;
            }
            let add = (share - feed.owed).clamp(0, room);
            room -= add;
            feed.owed += add;
            *delta += add;
        }
        self.feeds
            .iter()
            .zip(deltas)
            .filter(|(_, delta)| *delta != 0)
            .map(|(feed, _)| feed.limit())
            .collect()
    }

    /// The consumer of this link whose id is `consumer`.
    pub fn feed_mut(&mut self, consumer: ConsumerId) -> Option<&mut Feed> {
        self.feeds.iter_mut().find(|feed| feed.consumer == consumer)
    }

    /// The link's consumer id (its first consumer's: every one has the link's id).
    pub fn consumer(&self) -> ConsumerId {
        self.feeds
            .first()
            .map_or(ConsumerId(0), |feed| feed.consumer)
    }
}

/// A link the broker sends request/response answers on (a `$cbs` or `$management` reply link).
#[derive(Debug)]
pub struct Replies {
    /// Which node's answers it takes ([`node_key`]).
    pub node: String,
    /// The link's target address, which requests name in `reply-to`.
    pub address: Option<String>,
    /// The broker's delivery count on this link.
    pub delivery_count: u32,
    /// Credit the client has given.
    pub credit: u32,
    /// Answers waiting for credit.
    pub waiting: VecDeque<Bytes>,
}

/// A name shared by the request and reply links of one node.
pub fn node_key(node: &Node) -> String {
    match node {
        Node::Cbs => "$cbs".to_string(),
        Node::Coordinator => "$coordinator".to_string(),
        Node::Management(entity, sub) | Node::Entity(entity, sub) => {
            format!("{}/{sub:?}/$management", entity.name().to_lowercase())
        }
    }
}

/// What a link is.
#[derive(Debug)]
pub enum LinkKind {
    /// Client sender.
    Incoming(Incoming),
    /// Client receiver of a queue.
    Outgoing(Outgoing),
    /// Client receiver of a request/response node.
    Replies(Replies),
    /// Refused at attach: the broker already sent its detach and waits for the client's.
    Refused,
}

/// One attached link of a session.
#[derive(Debug)]
pub struct Link {
    /// The link name.
    pub name: String,
    /// The broker's handle for it.
    pub local_handle: u32,
    /// Broker-wide unique id (also the consumer id of an outgoing link).
    pub id: u64,
    /// Its kind and state.
    pub kind: LinkKind,
    /// The address it was authorized for and the rights it needs there (one of them is
    /// enough), checked again when a token of the connection lapses; `None` for `$cbs` and
    /// refused links.
    pub authorized: Option<(String, Rights)>,
    /// Counts it in the links gauge while it lives.
    pub attached: Held,
    /// Its tracing span (name, id, role, address), inside its connection's.
    pub span: tracing::Span,
}

/// A link `flow` on top of the session fields of `base` (its windows and ids).
pub fn flow(
    base: &Flow,
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
        ..base.clone()
    })
}

/// An error with a standard AMQP condition and a description.
///
/// `info` is always written (empty): the Python SDK reads the error list by position and fails
/// on a two-element list, which is what an absent trailing `info` encodes to.
pub fn amqp_error(
    condition: impl Into<ErrorCondition>,
    description: impl Into<String>,
) -> definitions::Error {
    definitions::Error::new(condition, Some(description.into()), Some(Fields::new()))
}

/// A registry's refusal to create or change an entity, as a link's error: a missing entity
/// `amqp:not-found`, the namespace full `amqp:resource-limit-exceeded`, a declaration out of
/// bounds `amqp:invalid-field`, a stopping broker Service Bus's server-busy, anything else
/// `amqp:internal-error`.
pub fn registry_refusal(error: &RegistryError) -> definitions::Error {
    let description = error.to_string();
    match error {
        RegistryError::NotFound(_) => amqp_error(AmqpError::NotFound, description),
        RegistryError::QuotaExceeded { .. } => {
            amqp_error(AmqpError::ResourceLimitExceeded, description)
        }
        RegistryError::Invalid(_) => amqp_error(AmqpError::InvalidField, description),
        RegistryError::Stopping => custom_error(SERVER_BUSY, description),
        _ => amqp_error(AmqpError::InternalError, description),
    }
}

/// An error with a Service Bus (custom) condition and a description.
pub fn custom_error(condition: &str, description: impl Into<String>) -> definitions::Error {
    amqp_error(ErrorCondition::Custom(Symbol::from(condition)), description)
}

/// `amqp:not-found` for an address no entity answers to, in Service Bus's wording.
pub fn not_found(address: &str) -> definitions::Error {
    amqp_error(
        AmqpError::NotFound,
        format!("The messaging entity '{address}' could not be found."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fixtures::outgoing;

    #[test]
    fn a_registry_refusal_keeps_its_meaning() {
        let quota = RegistryError::QuotaExceeded {
            name: "t".into(),
            wanted: 1,
            used: 2,
            max: 2,
        };
        let refused = registry_refusal(&quota);
        assert_eq!(refused.condition, AmqpError::ResourceLimitExceeded.into());
        assert!(refused
            .description
            .unwrap_or_default()
            .contains("QuotaExceeded"));
        let stopping = registry_refusal(&RegistryError::Stopping);
        assert_eq!(
            stopping.condition,
            ErrorCondition::Custom(Symbol::from(SERVER_BUSY))
        );
        let missing = registry_refusal(&RegistryError::NotFound("t".into()));
        assert_eq!(missing.condition, AmqpError::NotFound.into());
    }

    #[test]
    fn flow_credit_follows_the_spec_formula() {
        let mut link = outgoing();
        let limits = |link: &mut super::Outgoing| -> Vec<u64> {
            link.credit_limits()
                .into_iter()
                .map(|(_, limit)| limit)
                .collect()
        };
        link.apply_flow(None, 10, false);
        assert_eq!(link.credit, 10);
        assert_eq!(limits(&mut link), [10]);
        // Five delivered; the client refreshes to 10 counting from what it has seen (3).
        link.delivery_count = 5;
        link.credit = 5;
        (link.feeds[0].owed, link.feeds[0].taken) = (5, 5);
        link.apply_flow(Some(3), 10, false);
        assert_eq!(link.credit, 8, "3 + 10 - 5");
        assert_eq!(limits(&mut link), [13], "five taken and eight more");
        link.apply_flow(Some(5), 0, false);
        assert_eq!((link.credit, limits(&mut link)), (0, vec![5]));
    }

    #[test]
    fn credit_is_shared_among_partitions_and_each_gets_some_while_any_is_left() {
        let mut link = outgoing();
        link.feeds = (0..4)
            .map(|partition| super::Feed {
                consumer: crate::entity::handle::ConsumerId::at(1, partition),
                owed: 0,
                taken: 0,
            })
            .collect();
        link.apply_flow(None, 10, false);
        let owed =
            |link: &super::Outgoing| -> Vec<i64> { link.feeds.iter().map(|f| f.owed).collect() };
        let limits: Vec<u64> = link.credit_limits().into_iter().map(|(_, l)| l).collect();
        assert_eq!(limits, [3, 3, 3, 3], "10 over 4, rounded up");
        // The first partition delivered its three; seven credits are left: it gets its share
        // (two), one of those owing the most gives back the room it needs.
        link.feeds[0].owed = 0;
        link.credit = 7;
        link.credit_limits();
        assert_eq!(owed(&link), [2, 3, 3, 2]);
        // A flow that changes nothing the partitions need takes nothing back, and one owing
        // over half its share waits for more.
        link.credit = 9;
        assert_eq!(link.credit_limits(), []);
        // The client takes its credit back to one: each keeps one at most.
        link.credit = 1;
        link.credit_limits();
        assert_eq!(owed(&link), [1, 1, 1, 1]);
        // Credit 135 while three partitions, empty, owe 46 each: the fourth gets its share.
        link.credit = 135;
        for (feed, owed) in link.feeds.iter_mut().zip([0, 46, 46, 46]) {
            feed.owed = owed;
        }
        link.credit_limits();
        assert_eq!(owed(&link), [34, 36, 34, 34], "just the room it needs");
        // Credit for one partition with messages while the others, empty, owe more than it:
        // they give some back and it gets its share (no partition waits with credit left).
        link.credit = 9;
        for (feed, owed) in link.feeds.iter_mut().zip([0, 5, 5, 5]) {
            feed.owed = owed;
        }
        link.credit_limits();
        assert_eq!(owed(&link), [3, 3, 3, 3]);
        // All delivered, one credit: every partition may deliver one (the extras go back).
        link.credit = 1;
        for feed in &mut link.feeds {
            feed.owed = 0;
        }
        link.credit_limits();
        assert_eq!(owed(&link), [1, 1, 1, 1]);
    }
}
