//! The fe2o3-amqp client against the real broker.

use fe2o3_amqp::types::messaging::{Message, Outcome};
use fe2o3_amqp::{Receiver, Sender, Session};
use tokio::time::timeout;

use crate::support::{
    config_with_queues, connect, connect_session, next_delivery, TestBroker, DEADLINE,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_then_receive_round_trip() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    let outcome = timeout(DEADLINE, sender.send("hello"))
        .await
        .expect("in time")
        .expect("send");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    let mut receiver = Receiver::attach(&mut session, "r", "q")
        .await
        .expect("receiver");
    let delivery = next_delivery::<String>(&mut receiver).await;
    assert_eq!(delivery.body(), "hello");
    receiver.accept(&delivery).await.expect("accept");
    let _: Message<String> = delivery.into_message();
    sender.close().await.expect("close sender");
    receiver.close().await.expect("close receiver");
    session.end().await.expect("end");
    connection.close().await.expect("close");
    broker.stop().await;
}

fn delivery_count<T>(delivery: &fe2o3_amqp::link::delivery::Delivery<T>) -> u32 {
    delivery
        .message()
        .header
        .as_ref()
        .map_or(0, |h| h.delivery_count)
}

pub(super) fn sequence_number<T>(delivery: &fe2o3_amqp::link::delivery::Delivery<T>) -> i64 {
    let key = fe2o3_amqp::types::messaging::annotations::OwnedKey::from(
        fe2o3_amqp::types::primitives::Symbol::from("x-opt-sequence-number"),
    );
    match delivery
        .message()
        .message_annotations
        .as_ref()
        .and_then(|ma| ma.0.get(&key))
    {
        Some(fe2o3_amqp::types::primitives::Value::Long(seq)) => *seq,
        other => panic!("x-opt-sequence-number missing or not a long: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_sessions_and_links_share_one_connection() {
    let broker = TestBroker::start(config_with_queues(&["a", "b"])).await;
    let mut connection = connect(broker.addr, 65536).await;
    let mut first = Session::begin(&mut connection).await.expect("begin 1");
    let mut second = Session::begin(&mut connection).await.expect("begin 2");
    let mut to_a = Sender::attach(&mut first, "to-a", "a").await.expect("to-a");
    let mut to_b = Sender::attach(&mut second, "to-b", "b")
        .await
        .expect("to-b");
    let mut from_a = Receiver::attach(&mut second, "from-a", "a")
        .await
        .expect("from-a");
    let mut from_b = Receiver::attach(&mut first, "from-b", "b")
        .await
        .expect("from-b");
    for i in 0..20 {
        let a = timeout(DEADLINE, to_a.send(format!("a{i}")))
            .await
            .expect("in time")
            .expect("send a");
        let b = timeout(DEADLINE, to_b.send(format!("b{i}")))
            .await
            .expect("in time")
            .expect("send b");
        assert!(matches!(
            (a, b),
            (Outcome::Accepted(_), Outcome::Accepted(_))
        ));
    }
    let mut last_seq = 0;
    for i in 0..20 {
        let a = next_delivery::<String>(&mut from_a).await;
        let b = next_delivery::<String>(&mut from_b).await;
        assert_eq!(
            (a.body().as_str(), b.body().as_str()),
            (format!("a{i}").as_str(), format!("b{i}").as_str())
        );
        let seq = sequence_number(&a);
        assert_eq!(seq, last_seq + 1, "sequence numbers are gap-free");
        last_seq = seq;
        from_a.accept(&a).await.expect("accept a");
        from_b.accept(&b).await.expect("accept b");
    }
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_kb_message_crosses_512_byte_frames_both_ways() {
    let mut config = config_with_queues(&["big"]);
    config.broker.max_frame_size = 512;
    let broker = TestBroker::start(config).await;
    let mut connection = connect(broker.addr, 512).await;
    let mut session = Session::begin(&mut connection).await.expect("begin");
    let mut sender = Sender::attach(&mut session, "s", "big")
        .await
        .expect("sender");
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let message = Message::builder()
        .data(fe2o3_amqp::types::primitives::Binary::from(body.clone()))
        .build();
    let outcome = timeout(DEADLINE, sender.send(message))
        .await
        .expect("in time")
        .expect("send");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    let mut receiver = Receiver::attach(&mut session, "r", "big")
        .await
        .expect("receiver");
    let delivery = timeout(
        DEADLINE,
        receiver.recv::<fe2o3_amqp::types::messaging::Data>(),
    )
    .await
    .expect("in time")
    .expect("recv");
    assert_eq!(delivery.body().0.as_ref(), body.as_slice());
    receiver.accept(&delivery).await.expect("accept");
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presettled_sends_and_receive_and_delete() {
    use fe2o3_amqp::types::definitions::SenderSettleMode;
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::builder()
        .name("fire-and-forget")
        .target("q")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .expect("sender");
    for i in 0..5 {
        sender.send(format!("m{i}")).await.expect("send");
    }
    let mut receiver = Receiver::builder()
        .name("r-and-d")
        .source("q")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .expect("receiver");
    for i in 0..5 {
        let delivery = next_delivery::<String>(&mut receiver).await;
        assert_eq!(delivery.body(), &format!("m{i}"));
    }
    receiver.close().await.expect("close receiver");
    // Receive-and-delete removed them: a peek-lock receiver finds the queue empty.
    let mut check = Receiver::attach(&mut session, "check", "q")
        .await
        .expect("check");
    sender.send("marker").await.expect("send marker");
    let next = next_delivery::<String>(&mut check).await;
    assert_eq!(next.body(), "marker");
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_keeps_the_count_and_modified_raises_it() {
    use fe2o3_amqp::types::messaging::Modified;
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    sender.send("again").await.expect("send");
    let mut receiver = Receiver::attach(&mut session, "r", "q")
        .await
        .expect("receiver");
    let first = next_delivery::<String>(&mut receiver).await;
    assert_eq!(delivery_count(&first), 0);
    receiver.release(&first).await.expect("release");
    let second = next_delivery::<String>(&mut receiver).await;
    assert_eq!(
        (second.body().as_str(), delivery_count(&second)),
        ("again", 0),
        "released: same count"
    );
    receiver
        .modify(
            &second,
            Modified {
                delivery_failed: Some(true),
                undeliverable_here: None,
                message_annotations: None,
            },
        )
        .await
        .expect("modify");
    let third = next_delivery::<String>(&mut receiver).await;
    assert_eq!(
        (third.body().as_str(), delivery_count(&third)),
        ("again", 1),
        "modified: count + 1"
    );
    assert_eq!(sequence_number(&third), sequence_number(&first));
    receiver.accept(&third).await.expect("accept");
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_with_three_queued_delivers_three_and_uses_up_the_credit() {
    use fe2o3_amqp::link::receiver::CreditMode;
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    for i in 0..3 {
        sender.send(format!("d{i}")).await.expect("send");
    }
    let mut receiver = Receiver::builder()
        .name("drainer")
        .source("q")
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .expect("receiver");
    receiver.set_credit(10).await.expect("credit");
    receiver.drain().await.expect("drain");
    for i in 0..3 {
        let delivery = next_delivery::<String>(&mut receiver).await;
        assert_eq!(delivery.body(), &format!("d{i}"));
        receiver.accept(&delivery).await.expect("accept");
    }
    // The drain used up the remaining credit: a new message waits for new credit.
    sender.send("after").await.expect("send after");
    let early = timeout(
        std::time::Duration::from_millis(500),
        receiver.recv::<String>(),
    )
    .await;
    assert!(early.is_err(), "no delivery without credit after a drain");
    receiver.set_credit(1).await.expect("credit");
    let after = next_delivery::<String>(&mut receiver).await;
    assert_eq!(after.body(), "after");
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_address_is_refused_with_not_found() {
    use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
    use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut connection = connect(broker.addr, 65536).await;
    // One session per refusal: fe2o3-amqp reuses a refused link's handle before its own
    // detach exchange is over, which confuses its session, not the broker.
    let mut first = Session::begin(&mut connection).await.expect("begin");
    match Sender::attach(&mut first, "s", "no-such-queue").await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(
                error.condition,
                ErrorCondition::AmqpError(AmqpError::NotFound)
            )
        }
        other => panic!("expected not-found, got {:?}", other.map(|_| ())),
    }
    let mut second = Session::begin(&mut connection).await.expect("begin");
    match Receiver::attach(&mut second, "r", "amqps://host/No-Such-Queue").await {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(
                error.condition,
                ErrorCondition::AmqpError(AmqpError::NotFound)
            )
        }
        other => panic!("expected not-found, got {:?}", other.map(|_| ())),
    }
    // The connection still works, and addresses are case-insensitive with a scheme and host.
    let mut third = Session::begin(&mut connection).await.expect("begin");
    let mut sender = Sender::attach(&mut third, "s2", "amqps://host:5671/Q")
        .await
        .expect("sender");
    assert!(matches!(
        sender.send("ok").await.expect("send"),
        Outcome::Accepted(_)
    ));
    connection.close().await.expect("close");
    broker.stop().await;
}

/// A smoke test: fe2o3-amqp attaches a receiver in settle mode second and accepts and
/// releases over it. It cannot see whether the broker confirms a settlement (fe2o3-amqp's
/// `accept` and `release` send the unsettled disposition and return without waiting for the
/// broker's settled one); `raw::settle_second_confirms_accepted_released_and_modified` pins that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_second_receiver_works_end_to_end() {
    use fe2o3_amqp::types::definitions::ReceiverSettleMode;
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    sender.send("one").await.expect("send");
    sender.send("two").await.expect("send");
    let mut receiver = Receiver::builder()
        .name("second")
        .source("q")
        .receiver_settle_mode(ReceiverSettleMode::Second)
        .attach(&mut session)
        .await
        .expect("receiver");
    let one = next_delivery::<String>(&mut receiver).await;
    timeout(DEADLINE, receiver.accept(&one))
        .await
        .expect("disposition written in time")
        .expect("accept");
    let two = next_delivery::<String>(&mut receiver).await;
    assert_eq!(two.body(), "two");
    timeout(DEADLINE, receiver.release(&two))
        .await
        .expect("disposition written in time")
        .expect("release");
    let again = next_delivery::<String>(&mut receiver).await;
    assert_eq!(again.body(), "two");
    timeout(DEADLINE, receiver.accept(&again))
        .await
        .expect("disposition written in time")
        .expect("accept");
    receiver.close().await.expect("close receiver");
    sender.close().await.expect("close sender");
    session.end().await.expect("end");
    connection.close().await.expect("close");
    broker.stop().await;
}

/// A lost connection's locks outlive it, as in Service Bus: its unsettled messages go to
/// other consumers only once their locks have expired, counted once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_leaves_its_locks_to_expire_then_others_get_the_messages() {
    let mut config = config_with_queues(&["q"]);
    config.queues[0].lock_duration = std::time::Duration::from_secs(2);
    let broker = TestBroker::start(config).await;
    let (mut producer, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    for i in 0..10 {
        sender.send(format!("m{i}")).await.expect("send");
    }
    let (doomed, mut doomed_session) = connect_session(broker.addr).await;
    let mut greedy = Receiver::attach(&mut doomed_session, "greedy", "q")
        .await
        .expect("receiver");
    let mut first_lock_ends = i64::MAX;
    for i in 0..10 {
        let delivery = next_delivery::<String>(&mut greedy).await;
        assert_eq!(delivery.body(), &format!("m{i}"));
        first_lock_ends = first_lock_ends.min(locked_until_ms(&delivery));
    }
    drop(greedy);
    drop(doomed_session);
    drop(doomed);
    let mut patient = Receiver::attach(&mut session, "patient", "q")
        .await
        .expect("receiver");
    for i in 0..10 {
        let delivery = next_delivery::<String>(&mut patient).await;
        let now = crate::support::now_ms();
        assert!(
            now >= first_lock_ends,
            "m{i} came back at {now}, before the first lock ran out at {first_lock_ends}"
        );
        assert_eq!(
            (delivery.body().as_str(), delivery_count(&delivery)),
            (format!("m{i}").as_str(), 1)
        );
        patient.accept(&delivery).await.expect("accept");
    }
    producer.close().await.expect("close");
    broker.stop().await;
}

fn locked_until_ms<T>(delivery: &fe2o3_amqp::link::delivery::Delivery<T>) -> i64 {
    let key = fe2o3_amqp::types::messaging::annotations::OwnedKey::from(
        fe2o3_amqp::types::primitives::Symbol::from("x-opt-locked-until"),
    );
    match delivery
        .message()
        .message_annotations
        .as_ref()
        .and_then(|ma| ma.0.get(&key))
    {
        Some(fe2o3_amqp::types::primitives::Value::Timestamp(at)) => at.milliseconds(),
        other => panic!("x-opt-locked-until missing or not a timestamp: {other:?}"),
    }
}
