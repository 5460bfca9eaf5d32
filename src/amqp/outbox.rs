//! What a link role is given and what it gives back: the connection's [`Context`], the
//! [`Outbox`] of frames to send and commands to post, and the [`Fault`]s that end more than
//! one link. The session and its roles write into one outbox; the connection task performs it.

use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions;

use crate::amqp::link::ReassemblyBudget;
use crate::amqp::transactions::Transactions;
use crate::auth::access::Access;
use crate::entity::handle::{Command, ConsumerId, EntityHandle, EventSink};
use crate::entity::registry::Registry;

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

/// What the session and its roles need from their connection.
pub struct Context<'a> {
    /// Entity lookup.
    pub registry: &'a Registry,
    /// The connection's event channel, for entity answers.
    pub events: &'a EventSink,
    /// Largest message accepted.
    pub max_message_size: u64,
    /// Message bytes a consumer may have on their way to the socket.
    pub consumer_window: u64,
    /// What the connection may hold of unfinished incoming deliveries.
    pub reassembly: &'a ReassemblyBudget,
    /// Whether the connection holds as many links as it may: new attaches are refused.
    pub links_full: bool,
    /// Whether the connection holds as many answers to management and CBS requests as it
    /// may (waiting for the client, or for their entity): new requests are deferred.
    pub answers_full: bool,
    /// What the connection may do; `$cbs` adds tokens to it.
    pub access: &'a mut Access,
    /// The connection's transactions.
    pub transactions: &'a mut Transactions,
    /// The `$cbs` links the connection holds open (only an attach needs them).
    pub cbs: CbsLinks,
    /// The connection's id (the container id the broker's `open` gave it).
    pub connection_id: &'a str,
    /// For a JMS consumer's attach to a topic (only an attach has it): the address of the
    /// subscription it takes from, or why it may not.
    pub subscription: Option<Result<String, definitions::Error>>,
    /// Why the connection refuses the attach being answered before its session saw it: the
    /// node it asked the broker to make could not be made (see [`crate::amqp::temporary`]).
    pub refused: Option<definitions::Error>,
}

/// The `$cbs` links one connection holds open, by the client's role: Service Bus allows one of
/// each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CbsLinks {
    /// A client sender (its token requests).
    pub sender: bool,
    /// A client receiver (their answers).
    pub receiver: bool,
}

impl CbsLinks {
    /// The links of both (two sessions') together.
    #[must_use]
    pub fn and(self, other: CbsLinks) -> CbsLinks {
        CbsLinks {
            sender: self.sender || other.sender,
            receiver: self.receiver || other.receiver,
        }
    }
}
