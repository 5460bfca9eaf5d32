//! Auto-delete on idle with the fe2o3-amqp client: what happens to links that are still
//! attached when their entity goes (design.md §4, D6). The Python SDK suite covers the
//! common path (a new sender is refused); these are the links that were already open.

use std::time::Duration;

use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::link::{LinkStateError, RecvError, SendError, SenderAttachError};
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::{Message, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use tokio::time::timeout;

use crate::support::{config_with_queues, connect_session, next_delivery, TestBroker, DEADLINE};

/// The shortest idle time the config allows.
const IDLE: Duration = Duration::from_secs(1);

fn is_not_found(error: &LinkStateError) -> bool {
    match error {
        LinkStateError::RemoteClosedWithError(error)
        | LinkStateError::RemoteDetachedWithError(error) => {
            error.condition == ErrorCondition::AmqpError(AmqpError::NotFound)
        }
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_open_on_a_deleted_entity_are_detached_with_not_found() {
    let mut config = config_with_queues(&["idle", "busy"]);
    for queue in &mut config.queues {
        queue.auto_delete_on_idle = Some(IDLE);
    }
    let broker = TestBroker::start(config).await;
    let (_connection, mut session) = connect_session(broker.addr).await;
    // Attached but unused: neither link is activity.
    let mut idle_sender = Sender::attach(&mut session, "idle-s", "idle")
        .await
        .expect("sender");
    let mut idle_receiver = Receiver::builder()
        .name("idle-r")
        .source("idle")
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .expect("receiver");
    // Waiting with credit the whole time: activity.
    let mut busy_receiver = Receiver::builder()
        .name("busy-r")
        .source("busy")
        .credit_mode(CreditMode::Auto(10))
        .attach(&mut session)
        .await
        .expect("receiver");

    match timeout(DEADLINE, idle_receiver.recv::<Value>()).await {
        Ok(Err(RecvError::LinkStateError(error))) if is_not_found(&error) => {}
        other => panic!("expected the receiver detached with not-found, got {other:?}"),
    }
    match timeout(DEADLINE, idle_sender.send(Message::from("late"))).await {
        Ok(Ok(Outcome::Rejected(rejected))) => assert_eq!(
            rejected.error.map(|e| e.condition),
            Some(ErrorCondition::AmqpError(AmqpError::NotFound))
        ),
        Ok(Err(SendError::LinkStateError(error))) if is_not_found(&error) => {}
        Ok(Err(SendError::Detached(_))) => {}
        other => panic!("expected the send refused with not-found, got {other:?}"),
    }
    let (_other_connection, mut fresh) = connect_session(broker.addr).await;
    match Sender::attach(&mut fresh, "again", "idle").await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => assert_eq!(
            error.condition,
            ErrorCondition::AmqpError(AmqpError::NotFound)
        ),
        other => panic!("expected not-found, got {:?}", other.map(|_| ())),
    }

    // The queue with a waiting receiver outlived the idle one, and still works.
    let mut busy_sender = Sender::attach(&mut session, "busy-s", "busy")
        .await
        .expect("the busy queue still exists");
    busy_sender
        .send(Message::from("still here"))
        .await
        .expect("send")
        .accepted_or_else(|outcome| outcome)
        .expect("accepted");
    let delivery = next_delivery::<Value>(&mut busy_receiver).await;
    busy_receiver.accept(&delivery).await.expect("accept");
}
