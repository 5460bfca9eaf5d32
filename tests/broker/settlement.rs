//! Peek-lock settlement with the fe2o3-amqp client: dead-letter queues, the delivery limit,
//! deferral, lock expiry and competing consumers (design.md §4, amqp-dialect.md §6.1).

use std::collections::HashSet;
use std::time::Duration;

use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::link::SenderAttachError;
use fe2o3_amqp::types::definitions::{self, AmqpError, ErrorCondition, Fields};
use fe2o3_amqp::types::messaging::{Message, Modified};
use fe2o3_amqp::types::primitives::{SimpleValue, Symbol, Value};
use fe2o3_amqp::{Receiver, Sender};
use tokio::time::timeout;

use crate::support::{config_with_queues, connect_session, next_delivery, TestBroker, DEADLINE};

/// A short wait for something that must not happen.
const ABSENCE: Duration = Duration::from_millis(400);

async fn next(receiver: &mut Receiver) -> Delivery<Value> {
    next_delivery(receiver).await
}

fn count(delivery: &Delivery<Value>) -> u32 {
    delivery
        .message()
        .header
        .as_ref()
        .map_or(0, |h| h.delivery_count)
}

fn property(delivery: &Delivery<Value>, key: &str) -> Option<SimpleValue> {
    delivery
        .message()
        .application_properties
        .as_ref()
        .and_then(|p| p.0.get(key).cloned())
}

fn text(value: &str) -> Option<SimpleValue> {
    Some(SimpleValue::String(value.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_moves_the_message_to_the_dead_letter_queue_with_its_reason() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (_connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    let message = Message::builder()
        .application_properties(
            fe2o3_amqp::types::messaging::ApplicationProperties::builder()
                .insert("color", "red")
                .build(),
        )
        .value("poison")
        .build();
    sender.send(message).await.expect("send");
    let mut receiver = Receiver::attach(&mut session, "r", "q")
        .await
        .expect("receiver");
    let delivery = next(&mut receiver).await;
    let mut info = Fields::new();
    info.insert(
        Symbol::from("DeadLetterReason"),
        Value::String("BadColor".into()),
    );
    info.insert(
        Symbol::from("DeadLetterErrorDescription"),
        Value::String("red is not allowed".into()),
    );
    let error = definitions::Error::new(
        ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
        None,
        Some(info),
    );
    receiver.reject(&delivery, error).await.expect("reject");
    assert!(
        timeout(ABSENCE, receiver.recv::<Value>()).await.is_err(),
        "the message left the queue"
    );
    let mut dlq = Receiver::attach(&mut session, "dlq", "q/$DeadLetterQueue")
        .await
        .expect("dead-letter receiver");
    let dead = next(&mut dlq).await;
    assert_eq!(dead.body(), &Value::String("poison".into()), "body kept");
    assert_eq!(property(&dead, "color"), text("red"), "properties kept");
    assert_eq!(property(&dead, "DeadLetterReason"), text("BadColor"));
    assert_eq!(
        property(&dead, "DeadLetterErrorDescription"),
        text("red is not allowed")
    );
    dlq.accept(&dead).await.expect("accept");
    assert!(
        timeout(ABSENCE, dlq.recv::<Value>()).await.is_err(),
        "completed in the dead-letter queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_third_abandon_with_a_limit_of_three_dead_letters() {
    let mut config = config_with_queues(&["q"]);
    config.queues[0].max_delivery_count = 3;
    let broker = TestBroker::start(config).await;
    let (_connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    sender.send("again and again").await.expect("send");
    let mut receiver = Receiver::attach(&mut session, "r", "q")
        .await
        .expect("receiver");
    for expected in 0..3 {
        let delivery = next(&mut receiver).await;
        assert_eq!(count(&delivery), expected, "zero-based delivery count");
        receiver
            .modify(
                &delivery,
                Modified {
                    delivery_failed: Some(true),
                    undeliverable_here: None,
                    message_annotations: None,
                },
            )
            .await
            .expect("abandon");
    }
    assert!(
        timeout(ABSENCE, receiver.recv::<Value>()).await.is_err(),
        "no fourth delivery"
    );
    let mut dlq = Receiver::attach(&mut session, "dlq", "q/$deadletterqueue")
        .await
        .expect("dead-letter receiver");
    let dead = next(&mut dlq).await;
    assert_eq!(
        property(&dead, "DeadLetterReason"),
        text("MaxDeliveryCountExceeded")
    );
    assert_eq!(
        property(&dead, "DeadLetterErrorDescription"),
        text("Message could not be consumed after 3 delivery attempts.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandon_applies_properties_to_modify_and_defer_hides_the_message() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (_connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    sender.send("first").await.expect("send");
    sender.send("second").await.expect("send");
    let mut receiver = Receiver::attach(&mut session, "r", "q")
        .await
        .expect("receiver");
    let first = next(&mut receiver).await;
    let mut annotations = Fields::new();
    annotations.insert(Symbol::from("attempt"), Value::Long(1));
    receiver
        .modify(
            &first,
            Modified {
                delivery_failed: None,
                undeliverable_here: None,
                message_annotations: Some(annotations),
            },
        )
        .await
        .expect("abandon");
    let second = next(&mut receiver).await;
    assert_eq!(second.body(), &Value::String("second".into()));
    receiver
        .modify(
            &second,
            Modified {
                delivery_failed: Some(true),
                undeliverable_here: Some(true),
                message_annotations: None,
            },
        )
        .await
        .expect("defer");
    let again = next(&mut receiver).await;
    assert_eq!(again.body(), &Value::String("first".into()));
    assert_eq!(count(&again), 1);
    assert_eq!(property(&again, "attempt"), Some(SimpleValue::Long(1)));
    receiver.accept(&again).await.expect("accept");
    assert!(
        timeout(ABSENCE, receiver.recv::<Value>()).await.is_err(),
        "a deferred message is not delivered to a normal receiver"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_redelivers_with_a_counted_delivery() {
    let mut config = config_with_queues(&["q"]);
    config.queues[0].lock_duration = Duration::from_secs(1);
    let broker = TestBroker::start(config).await;
    let (_connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    sender.send("slow").await.expect("send");
    // One credit only: the holder must not take the message back after its lock expires.
    let mut holder = Receiver::builder()
        .name("holder")
        .source("q")
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .expect("receiver");
    holder.set_credit(1).await.expect("credit");
    let held = next(&mut holder).await;
    assert_eq!(count(&held), 0);
    let mut other = Receiver::attach(&mut session, "other", "q")
        .await
        .expect("receiver");
    let again = next(&mut other).await;
    assert_eq!(
        (again.body(), count(&again)),
        (&Value::String("slow".into()), 1)
    );
    other.accept(&again).await.expect("accept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_consumers_never_share_a_message() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (_connection, mut session) = connect_session(broker.addr).await;
    let mut a = Receiver::builder()
        .name("a")
        .source("q")
        .credit_mode(CreditMode::Auto(10))
        .attach(&mut session)
        .await
        .expect("a");
    let mut b = Receiver::builder()
        .name("b")
        .source("q")
        .credit_mode(CreditMode::Auto(10))
        .attach(&mut session)
        .await
        .expect("b");
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    for i in 0..200i64 {
        sender.send(i).await.expect("send");
    }
    let mut seen_a = HashSet::new();
    let mut seen_b = HashSet::new();
    while seen_a.len() + seen_b.len() < 200 {
        tokio::select! {
            delivery = a.recv::<Value>() => {
                let delivery = delivery.expect("recv a");
                assert!(seen_a.insert(format!("{:?}", delivery.body())));
                a.accept(&delivery).await.expect("accept");
            }
            delivery = b.recv::<Value>() => {
                let delivery = delivery.expect("recv b");
                assert!(seen_b.insert(format!("{:?}", delivery.body())));
                b.accept(&delivery).await.expect("accept");
            }
            _ = tokio::time::sleep(DEADLINE) => panic!("only {} messages arrived", seen_a.len() + seen_b.len()),
        }
    }
    assert!(seen_a.is_disjoint(&seen_b), "a message went to both");
    assert!(
        !seen_a.is_empty() && !seen_b.is_empty(),
        "both consumers got a share"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_send_to_a_dead_letter_queue_is_refused() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (_connection, mut session) = connect_session(broker.addr).await;
    match Sender::attach(&mut session, "s", "q/$deadletterqueue").await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(
                error.condition,
                ErrorCondition::AmqpError(AmqpError::NotAllowed)
            )
        }
        other => panic!("expected not-allowed, got {:?}", other.map(|_| ())),
    }
}
