//! What the link roles' unit tests build: entity handles with no actor behind them, links,
//! flows and deliveries.

use bytes::Bytes;
use fe2o3_amqp::types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Source, Target, TargetArchetype};
use fe2o3_amqp::types::performatives::{Attach, Flow};

use crate::amqp::link::{Feed, Link, LinkKind, Outgoing};
use crate::entity::handle::{ConsumerId, Delivery, EntityHandle, ReceiveMode};
use crate::message::DeliveryStamp;
use crate::metrics::{self, Held};
use crate::store::record::{MessageState, Record};

/// One `data` section holding `body`: the least message the codec takes.
pub fn message(body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x00, 0x53, 0x75, 0xb0];
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// A queue's (or, with `topic`, a topic's) handle whose mailbox nobody reads.
pub fn entity(topic: bool) -> EntityHandle {
    named("q", topic)
}

/// [`entity`], named `name`.
pub fn named(name: &str, topic: bool) -> EntityHandle {
    let (mailbox, _) = tokio::sync::mpsc::channel(1);
    let subscriptions = topic.then(Default::default);
    EntityHandle::new(name.into(), mailbox, Default::default(), subscriptions)
}

/// A client's attach (handle 3, settling second) of a link of `role` to `address`: a
/// sender's target, or a receiver's source (its target, where answers go, `reply-here`).
pub fn attach(role: Role, address: &str) -> Attach {
    let target = match role {
        Role::Sender => address,
        Role::Receiver => "reply-here",
    };
    Attach {
        name: "r".into(),
        handle: Handle(3),
        role,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::Second,
        source: Some(Box::new(Source::builder().address(address).build())),
        target: Some(Box::new(TargetArchetype::Target(
            Target::builder().address(target).build(),
        ))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: None,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// A peek-lock receiver link's state (consumer 1) without credit.
pub fn outgoing() -> Outgoing {
    Outgoing {
        entity: entity(false),
        feeds: vec![Feed {
            consumer: ConsumerId(1),
            owed: 0,
            taken: 0,
        }],
        mode: ReceiveMode::PeekLock,
        settle_second: false,
        delivery_count: 0,
        credit: 0,
        drain: false,
        draining: 0,
        registering: 0,
        pending_attach: None,
        splice_room: Vec::new(),
    }
}

/// A link of `kind` with the broker's handle `local_handle` and id `id`.
pub fn link(name: &str, local_handle: u32, id: u64, kind: LinkKind) -> Link {
    Link {
        name: name.to_owned(),
        local_handle,
        id,
        kind,
        authorized: None,
        attached: Held::one(&metrics::broker().links),
        span: tracing::Span::none(),
    }
}

/// A client `flow`: a session flow granting `window` frames, for the link `handle` when it
/// names one, with that link's credit state.
pub fn flow(handle: Option<u32>, window: u32, delivery_count: u32, credit: u32) -> Flow {
    Flow {
        next_incoming_id: Some(0),
        incoming_window: window,
        next_outgoing_id: 0,
        outgoing_window: u32::MAX,
        handle: handle.map(Handle),
        delivery_count: handle.map(|_| delivery_count),
        link_credit: handle.map(|_| credit),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    }
}

/// A flow for link handle 0 with its credit state, draining or asking for an echo.
pub fn link_flow(delivery_count: u32, credit: u32, drain: bool, echo: bool) -> Flow {
    let mut flow = flow(Some(0), 100, delivery_count, credit);
    (flow.drain, flow.echo) = (drain, echo);
    flow
}

/// A delivery of `bytes` (stored as they are) to consumer 1, locked or pre-settled.
pub fn delivery(seq: i64, bytes: Vec<u8>, locked: bool) -> Delivery {
    let token = locked.then(|| uuid::Uuid::from_u128(seq as u128));
    Delivery {
        consumer: ConsumerId(1),
        seq,
        lock_token: token,
        record: Record {
            state: MessageState::Active,
            delivery_count: 0,
            enqueued_ms: 0,
            size: bytes.len() as u32,
            expires_ms: i64::MAX,
            scheduled_ms: 0,
        },
        session: None,
        bytes: Bytes::from(bytes),
        stamp: DeliveryStamp {
            delivery_count: 0,
            annotations: Vec::new(),
            lock_token: token,
            presettled: !locked,
            ttl_ms: None,
            expires_ms: None,
        },
    }
}
