//! The session's books without a socket: windows, the link table, dispositions, answers.

use super::*;
use crate::amqp::fixtures::{self, link, message, outgoing};
use crate::amqp::link::Replies;
use crate::entity::handle::LockRef;
use fe2o3_amqp::types::definitions::Role;
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState};

/// A session whose client grants `window` transfer frames, with a peek-lock receiver
/// (client handle 0, link id 1) and a `$cbs` reply link (client handle 1, link id 2).
fn session(window: u32) -> Session {
    let begin = Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: window,
        outgoing_window: u32::MAX,
        handle_max: Handle(HANDLE_MAX),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    let (mut session, _) = Session::begin(0, 0, &begin, 512);
    let replies = LinkKind::Replies(Replies {
        node: "$cbs".into(),
        address: None,
        delivery_count: 0,
        credit: 0,
        waiting: VecDeque::new(),
    });
    session.insert_link(0, link("receiver", 0, 1, LinkKind::Outgoing(outgoing())));
    session.insert_link(1, link("replies", 1, 2, replies));
    session
}

fn flow(handle: Option<u32>, window: u32, credit: u32) -> Flow {
    fixtures::flow(handle, window, 0, credit)
}

/// A locked delivery to the receiver of a message with a body of `size` bytes.
fn delivery(seq: i64, size: usize) -> Delivery {
    fixtures::delivery(seq, message(&vec![b'x'; size]), true)
}

fn transfers(out: &Outbox) -> usize {
    out.frames
        .iter()
        .filter(|frame| matches!(frame, FrameBody::Transfer { .. }))
        .count()
}

#[test]
fn transfer_frames_wait_for_the_clients_session_window() {
    let mut session = session(2);
    let mut out = Outbox::default();
    session.on_flow(&flow(Some(0), 2, 10), &mut out).unwrap();
    // Two deliveries of three frames each (512-byte frames, 1,200-byte messages).
    session.on_delivery(delivery(1, 1_200), &mut out);
    session.on_delivery(delivery(2, 1_200), &mut out);
    assert_eq!(transfers(&out), 2, "the window holds two frames");
    assert!(out.forwarded.is_empty(), "no delivery left whole yet");
    // The client has taken the two frames and opens its window for ten more.
    let mut later = Outbox::default();
    session.on_flow(&flow(None, 10, 0), &mut later).unwrap();
    let mut opened = flow(None, 10, 0);
    opened.next_incoming_id = Some(2);
    session.on_flow(&opened, &mut later).unwrap();
    assert_eq!(transfers(&later), 4);
    assert_eq!(
        later.forwarded.len(),
        2,
        "each delivery reported once it left whole"
    );
    assert_eq!(session.next_outgoing_id, 6);
}

#[test]
fn a_flow_or_transfer_for_a_handle_not_attached_ends_the_session() {
    let mut session = session(10);
    let mut out = Outbox::default();
    let fault = session
        .on_flow(&flow(Some(7), 10, 1), &mut out)
        .unwrap_err();
    assert!(
        matches!(fault, Fault::Session(e) if e.condition == SessionError::UnattachedHandle.into())
    );
    // A detach for a handle not attached is ignored (fe2o3-amqp sends two).
    let detach = Detach {
        handle: Handle(7),
        closed: true,
        error: None,
    };
    assert_eq!(session.on_detach(&detach, &mut out).unwrap(), None);
}

#[test]
fn a_disposition_settles_at_the_entity_and_a_detach_forgets_the_links_deliveries() {
    let mut session = session(100);
    let mut out = Outbox::default();
    session.on_flow(&flow(Some(0), 100, 10), &mut out).unwrap();
    session.on_delivery(delivery(1, 10), &mut out);
    session.on_delivery(delivery(2, 10), &mut out);
    let (events, _) = tokio::sync::mpsc::unbounded_channel();
    let mut transactions = Transactions::new(std::time::Duration::from_secs(60), 1 << 20);
    let accept = |first, last| Disposition {
        role: Role::Receiver,
        first,
        last: Some(last),
        settled: true,
        state: Some(DeliveryState::Accepted(Accepted {})),
        batchable: false,
    };
    let mut settled = Outbox::default();
    session.on_disposition(accept(0, 0), &events, &mut transactions, &mut settled);
    let [(_, Command::Settle { items, .. })] = &settled.posts[..] else {
        panic!("one settle expected: {:?}", settled.posts);
    };
    let seqs: Vec<i64> = items.iter().map(|(LockRef { seq, .. }, _)| *seq).collect();
    assert_eq!(seqs, vec![1]);
    let mut detached = Outbox::default();
    let detach = Detach {
        handle: Handle(0),
        closed: true,
        error: None,
    };
    assert_eq!(session.on_detach(&detach, &mut detached).unwrap(), Some(1));
    assert!(matches!(
        detached.posts[..],
        [(_, Command::RemoveConsumer { .. })]
    ));
    assert!(
        !session.ledger.owes(1),
        "the detached link's delivery is not owed"
    );
    let mut after = Outbox::default();
    session.on_disposition(accept(1, 1), &events, &mut transactions, &mut after);
    assert!(after.posts.is_empty());
}

#[test]
fn answers_count_until_they_leave_or_their_link_goes() {
    let mut session = session(1);
    let mut out = Outbox::default();
    let reply = |bytes: &'static [u8]| Reply {
        link: 2,
        encoded: Bytes::from_static(bytes),
    };
    session.send_reply(Some(reply(b"first")), &mut out);
    session.send_reply(Some(reply(b"second")), &mut out);
    assert_eq!(session.answers_held(), (11, 0));
    // Credit for both, but the session window holds one frame.
    session.on_flow(&flow(Some(1), 1, 2), &mut out).unwrap();
    assert_eq!(transfers(&out), 1);
    assert_eq!(session.answers_held(), (6, 0));
    let detach = Detach {
        handle: Handle(1),
        closed: true,
        error: None,
    };
    session.on_detach(&detach, &mut out).unwrap();
    // The frame already framed still waits for the window; what never left the link is gone.
    assert_eq!(session.answers_held(), (6, 0));
    let mut opened = flow(None, 5, 0);
    opened.next_incoming_id = Some(1);
    session.on_flow(&opened, &mut out).unwrap();
    assert_eq!(session.answers_held(), (0, 0));
}
