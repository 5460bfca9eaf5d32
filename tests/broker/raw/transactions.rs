//! The .NET SDK's transaction on the wire (amqp-dialect.md §10), frame by frame: a controller
//! whose source is a GUID with `distribution-mode` `move` and whose target is a coordinator
//! with no capabilities, `declare`, a transactional send, a transactional completion, and
//! `discharge`.

use fe2o3_amqp::types::messaging::{AmqpValue, Body, DistributionMode, Outcome};
use fe2o3_amqp::types::transaction::{
    Coordinator, Declare, Declared, Discharge, TransactionId, TransactionalState,
};

use super::hostile_requests::{answer_status, peek_request};
use super::*;

/// An encoded message whose only section is an `amqp-value` holding `value`.
fn control<T: serde::Serialize>(value: T) -> Bytes {
    Bytes::from(serde_amqp::to_vec(&AmqpValue(value)).expect("amqp-value"))
}

/// Our delivery's state inside transaction `txn_id`, with the outcome the client proposes.
fn in_txn(txn_id: &TransactionId, outcome: Option<Outcome>) -> DeliveryState {
    DeliveryState::TransactionalState(TransactionalState {
        txn_id: txn_id.clone(),
        outcome,
    })
}

impl RawClient {
    /// Attaches a transaction controller as the .NET SDK does; returns the broker's handle.
    async fn attach_controller(&mut self, handle: u32) -> u32 {
        let name = "controller-1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        let source = Source::builder()
            .address("1b4e28ba-2fa1-11d2-883f-0016d3cca427")
            .distribution_mode(DistributionMode::Move)
            .build();
        self.send(FrameBody::Attach(Attach {
            name: name.to_owned(),
            handle: Handle(handle),
            role: Role::Sender,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(source)),
            target: Some(Box::new(TargetArchetype::Coordinator(Coordinator {
                capabilities: None,
            }))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }))
        .await;
        let reply = self.attach_reply(name).await;
        assert!(
            matches!(
                reply.target.as_deref(),
                Some(TargetArchetype::Coordinator(_))
            ),
            "the coordinator is attached: {reply:?}"
        );
        reply.handle.0
    }

    /// Declares a transaction on our controller link `handle`; returns its id.
    async fn declare(&mut self, handle: u32) -> TransactionId {
        let declare = self
            .send_message(handle, control(Declare { global_id: None }))
            .await;
        let DeliveryState::Declared(Declared { txn_id }) = self.send_outcome(declare).await else {
            panic!("not declared");
        };
        txn_id
    }

    /// Commits (or with `fail`, rolls back) transaction `txn_id` on our controller `handle`.
    async fn discharge(&mut self, handle: u32, txn_id: TransactionId, fail: bool) {
        let discharge = Discharge {
            txn_id,
            fail: Some(fail),
        };
        let discharged = self.send_message(handle, control(discharge)).await;
        let outcome = self.send_outcome(discharged).await;
        assert!(matches!(outcome, DeliveryState::Accepted(_)), "{outcome:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dotnet_sdks_transaction_commits_a_send_and_a_completion_together() {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    client.attach_sender(1, "q").await;
    let receiver = client
        .attach_receiver(2, "q", ReceiverSettleMode::First)
        .await;
    let sent = client.send_message(1, message("work", 10)).await;
    assert!(matches!(
        client.send_outcome(sent).await,
        DeliveryState::Accepted(_)
    ));
    client.flow(2, 0, 1, false).await;
    let (work, _) = client.delivery(receiver).await;
    let work_id = work.delivery_id.expect("delivery id");

    client.attach_controller(0).await;
    let txn_id = client.declare(0).await;

    let state = Some(in_txn(&txn_id, None));
    let reply = client.send_in_state(1, message("reply", 10), state).await;
    let answer = client.send_outcome(reply).await;
    assert_eq!(
        answer,
        in_txn(&txn_id, Some(Outcome::Accepted(Accepted {}))),
        "a staged send is answered in its transaction"
    );
    let completed = in_txn(&txn_id, Some(Outcome::Accepted(Accepted {})));
    client.dispose(work_id, false, completed.clone()).await;
    let confirmed = client.settled_disposition(Role::Sender, work_id).await;
    assert_eq!(
        confirmed, completed,
        "the completion is confirmed in its transaction"
    );

    client.discharge(0, txn_id.clone(), false).await;
    // The work is gone and the reply is there: the next delivery is the reply.
    client.flow(2, 1, 1, false).await;
    let (_, payload) = client.delivery(receiver).await;
    assert_eq!(id_and_count(&payload), ("reply".to_owned(), 0));

    // The id is spent: a second discharge of it is refused as unknown.
    let again = client
        .send_message(0, control(Discharge { txn_id, fail: None }))
        .await;
    let refused = client.send_outcome(again).await;
    assert_eq!(
        condition_of(&refused),
        Some(&ErrorCondition::TransactionError(
            fe2o3_amqp::types::transaction::TransactionError::UnknownId
        ))
    );
    broker.stop().await;
}

/// Issue 51.6c: a coordinator link that detaches takes its open transactions with it (AMQP 1.0
/// §4.3): what they staged is rolled back, and their ids are unknown to a second coordinator
/// on the same connection, which used to commit them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_coordinator_rolls_back_its_open_transactions() {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    client.attach_sender(1, "q").await;
    let controller = client.attach_controller(0).await;
    let txn_id = client.declare(0).await;
    let state = Some(in_txn(&txn_id, None));
    let staged = client.send_in_state(1, message("staged", 10), state).await;
    client.send_outcome(staged).await;
    client.detach(0).await;
    client
        .expect(
            "the coordinator's detach",
            |body| matches!(body, FrameBody::Detach(d) if d.handle == Handle(controller)),
        )
        .await;
    client.attach_controller(2).await;
    let discharge = Discharge {
        txn_id,
        fail: Some(false),
    };
    let discharged = client.send_message(2, control(discharge)).await;
    let refused = client.send_outcome(discharged).await;
    assert_eq!(
        condition_of(&refused),
        Some(&ErrorCondition::TransactionError(
            fe2o3_amqp::types::transaction::TransactionError::UnknownId
        )),
        "{refused:?}"
    );
    let sent = client.send_message(1, message("plain", 10)).await;
    client.send_outcome(sent).await;
    let receiver = client
        .attach_receiver(3, "q", ReceiverSettleMode::First)
        .await;
    client.flow(3, 0, 1, false).await;
    let (_, payload) = client.delivery(receiver).await;
    assert_eq!(
        id_and_count(&payload).0,
        "plain",
        "the staged send was rolled back"
    );
    broker.stop().await;
}

/// Issue 51.2: every disposition gets an answer. A delivery settled in a transaction the
/// broker did not know is still locked by its receiver, and so is one settled in a
/// transaction rolled back: settled again, plainly, each is completed and the client told
/// (they used to get no answer at all). One settled in a committed transaction is gone: the
/// client is told its lock is lost, as Service Bus tells the .NET SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_settled_in_a_transaction_that_went_away_is_answered_when_settled_again() {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 65536).await;
    client.attach_sender(1, "q").await;
    let receiver = client
        .attach_receiver(2, "q", ReceiverSettleMode::Second)
        .await;
    for id in ["unknown", "rolled back", "committed"] {
        let sent = client.send_message(1, message(id, 10)).await;
        client.send_outcome(sent).await;
    }
    client.flow(2, 0, 3, false).await;
    let mut deliveries = Vec::new();
    for _ in 0..3 {
        let (transfer, _) = client.delivery(receiver).await;
        deliveries.push(transfer.delivery_id.expect("delivery id"));
    }
    let accepted = || DeliveryState::Accepted(Accepted {});
    let in_txn_accepted = |txn: &TransactionId| in_txn(txn, Some(Outcome::Accepted(Accepted {})));
    let unknown_id = ErrorCondition::TransactionError(
        fe2o3_amqp::types::transaction::TransactionError::UnknownId,
    );

    let unknown = TransactionId::from(vec![0, 0, 0, 0, 0, 0, 0, 99]);
    let refused = client
        .settle_second(deliveries[0], in_txn_accepted(&unknown))
        .await;
    let DeliveryState::TransactionalState(TransactionalState {
        outcome: Some(Outcome::Rejected(rejected)),
        ..
    }) = &refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!(
        rejected.error.as_ref().map(|e| &e.condition),
        Some(&unknown_id)
    );
    let again = client.settle_second(deliveries[0], accepted()).await;
    assert!(matches!(again, DeliveryState::Accepted(_)), "{again:?}");

    client.attach_controller(0).await;
    let rolled_back = client.declare(0).await;
    let staged = client
        .settle_second(deliveries[1], in_txn_accepted(&rolled_back))
        .await;
    assert_eq!(staged, in_txn_accepted(&rolled_back));
    client.discharge(0, rolled_back, true).await;
    let again = client.settle_second(deliveries[1], accepted()).await;
    assert!(matches!(again, DeliveryState::Accepted(_)), "{again:?}");

    let committed = client.declare(0).await;
    client
        .settle_second(deliveries[2], in_txn_accepted(&committed))
        .await;
    client.discharge(0, committed, false).await;
    let again = client.settle_second(deliveries[2], accepted()).await;
    assert_eq!(
        condition_of(&again),
        Some(&ErrorCondition::Custom(Symbol::from(
            "com.microsoft:message-lock-lost"
        ))),
        "{again:?}"
    );

    // All three are gone: the next delivery is a new message.
    let sent = client.send_message(1, message("after", 10)).await;
    client.send_outcome(sent).await;
    client.flow(2, 3, 1, false).await;
    let (_, payload) = client.delivery(receiver).await;
    assert_eq!(id_and_count(&payload).0, "after");
    broker.stop().await;
}

/// A request naming one lock token, answered on `reply_to`: `update-disposition` with
/// `completed` when `complete`, else `renew-lock`.
fn lock_request(id: u64, reply_to: &str, token: uuid::Uuid, complete: bool) -> Bytes {
    let operation = match complete {
        true => "com.microsoft:update-disposition",
        false => "com.microsoft:renew-lock",
    };
    let properties = Properties::builder()
        .message_id(id)
        .reply_to(reply_to.to_owned())
        .build();
    let application = ApplicationProperties::builder()
        .insert("operation", SimpleValue::String(operation.into()))
        .build();
    let mut body = fe2o3_amqp::types::primitives::OrderedMap::new();
    if complete {
        body.insert(
            Value::String("disposition-status".into()),
            Value::String("completed".into()),
        );
    }
    let tokens = vec![Value::Uuid(token.into_bytes().into())];
    body.insert(
        Value::String("lock-tokens".into()),
        Value::Array(fe2o3_amqp::types::primitives::Array(tokens)),
    );
    let mut bytes = serde_amqp::to_vec(&properties).expect("properties");
    bytes.extend(serde_amqp::to_vec(&application).expect("application properties"));
    bytes.extend(serde_amqp::to_vec(&AmqpValue(Value::Map(body))).expect("body"));
    Bytes::from(bytes)
}

/// A management request inside a transaction: `update-disposition` is staged (answered 200,
/// applied at the commit), `renew-lock` performed at once; any other operation is refused (501)
/// rather than run outside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_disposition_in_a_transaction_applies_at_the_commit_renew_lock_at_once_and_others_are_refused(
) {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 1 << 20).await;
    client.attach_sender(4, "q").await;
    let receiver = client
        .attach_receiver(5, "q", ReceiverSettleMode::First)
        .await;
    let replies = client
        .attach_receiver(2, "q/$management", ReceiverSettleMode::First)
        .await;
    client.attach_sender(1, "q/$management").await;
    client.attach_controller(0).await;
    for id in ["work", "marker"] {
        let sent = client.send_message(4, message(id, 10)).await;
        client.send_outcome(sent).await;
    }
    client.flow(5, 0, 1, false).await;
    let (work, _) = client.delivery(receiver).await;
    let tag = work.delivery_tag.expect("a lock token");
    let token = uuid::Uuid::from_slice_le(tag.as_ref()).expect("a 16-byte tag");
    let txn_id = client.declare(0).await;
    let state = || Some(in_txn(&txn_id, None));
    let refused = client
        .send_in_state(1, peek_request(7, "receiver-2", 1), state())
        .await;
    client.send_outcome(refused).await;
    let renewed = client
        .send_in_state(1, lock_request(8, "receiver-2", token, false), state())
        .await;
    client.send_outcome(renewed).await;
    let completed = client
        .send_in_state(1, lock_request(10, "receiver-2", token, true), state())
        .await;
    client.send_outcome(completed).await;
    client.flow(2, 0, 3, false).await;
    for want in [501, 200, 200] {
        let (_, answer) = client.delivery(replies).await;
        let (_, status) = answer_status(&answer);
        assert_eq!(status, Some(SimpleValue::Int(want)));
    }
    let discharge = Discharge {
        txn_id,
        fail: Some(false),
    };
    let discharged = client.send_message(0, control(discharge)).await;
    assert!(matches!(
        client.send_outcome(discharged).await,
        DeliveryState::Accepted(_)
    ));
    // Completed at the commit: after it, a peek from the start finds only the marker.
    let peek = client
        .send_message(1, peek_request(9, "receiver-2", 10))
        .await;
    client.send_outcome(peek).await;
    client.flow(2, 3, 1, false).await;
    let (_, answer) = client.delivery(replies).await;
    assert_eq!(
        peeked_ids(&answer),
        ["marker"],
        "the work was completed at the commit"
    );
    broker.stop().await;
}

/// The message ids of the messages a peek answer holds (none when it says 204).
fn peeked_ids(answer: &Bytes) -> Vec<String> {
    let (message, status) = answer_status(answer);
    if status == Some(SimpleValue::Int(204)) {
        return Vec::new();
    }
    let Body::Value(AmqpValue(Value::Map(body))) = message.body else {
        panic!("the answer's body is a map");
    };
    let Some(Value::List(peeked)) = body.get(&Value::String("messages".into())) else {
        return Vec::new();
    };
    peeked
        .iter()
        .map(|entry| match entry {
            Value::Map(entry) => match entry.get(&Value::String("message".into())) {
                Some(Value::Binary(bytes)) => id_and_count(&Bytes::copy_from_slice(bytes)).0,
                other => panic!("no message bytes: {other:?}"),
            },
            other => panic!("not a map: {other:?}"),
        })
        .collect()
}

/// A `schedule-message` request for one message `id`, due in an hour.
fn schedule_request(request: u64, reply_to: &str, id: &str) -> Bytes {
    use fe2o3_amqp::types::messaging::MessageAnnotations;
    use fe2o3_amqp::types::primitives::Timestamp;
    let due = Timestamp::from_milliseconds(crate::support::now_ms() + 3_600_000);
    let annotations = MessageAnnotations::builder()
        .insert("x-opt-scheduled-enqueue-time", Value::Timestamp(due))
        .build();
    // The plain message with the annotations between its header and its properties.
    let header = serde_amqp::to_vec(&Header::builder().durable(true).build()).expect("header");
    let plain = message(id, 10);
    let mut scheduled = header.clone();
    scheduled.extend(serde_amqp::to_vec(&annotations).expect("annotations"));
    scheduled.extend_from_slice(&plain[header.len()..]);
    let properties = Properties::builder()
        .message_id(request)
        .reply_to(reply_to.to_owned())
        .build();
    let application = ApplicationProperties::builder()
        .insert(
            "operation",
            SimpleValue::String("com.microsoft:schedule-message".into()),
        )
        .build();
    let mut entry = fe2o3_amqp::types::primitives::OrderedMap::new();
    entry.insert(
        Value::String("message".into()),
        Value::Binary(scheduled.into()),
    );
    entry.insert(Value::String("message-id".into()), Value::String(id.into()));
    let mut body = fe2o3_amqp::types::primitives::OrderedMap::new();
    body.insert(
        Value::String("messages".into()),
        Value::List(vec![Value::Map(entry)]),
    );
    let mut bytes = serde_amqp::to_vec(&properties).expect("properties");
    bytes.extend(serde_amqp::to_vec(&application).expect("application properties"));
    bytes.extend(serde_amqp::to_vec(&AmqpValue(Value::Map(body))).expect("body"));
    Bytes::from(bytes)
}

/// The sequence numbers a `schedule-message` answer holds (its status must be 200).
fn scheduled_numbers(answer: &Bytes) -> Vec<i64> {
    let (message, status) = answer_status(answer);
    assert_eq!(status, Some(SimpleValue::Int(200)), "{message:?}");
    let Body::Value(AmqpValue(Value::Map(body))) = message.body else {
        panic!("the answer's body is a map");
    };
    match body.get(&Value::String("sequence-numbers".into())) {
        Some(Value::Array(numbers)) => (numbers.0.iter())
            .map(|number| match number {
                Value::Long(seq) => *seq,
                other => panic!("not a long: {other:?}"),
            })
            .collect(),
        other => panic!("no sequence numbers: {other:?}"),
    }
}

/// `schedule-message` inside a transaction is answered with its sequence number at once (as
/// Service Bus does), and the message is stored scheduled at the commit only: a rollback
/// leaves nothing, its number unused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_message_in_a_transaction_is_numbered_at_once_and_stored_at_the_commit() {
    let broker = broker(&["q"], |_| {}).await;
    let mut client = RawClient::connect(broker.addr, 1 << 20).await;
    client.attach_sender(4, "q").await;
    let replies = client
        .attach_receiver(2, "q/$management", ReceiverSettleMode::First)
        .await;
    client.attach_sender(1, "q/$management").await;
    client.attach_controller(0).await;
    client.flow(2, 0, 100, false).await;
    let mut answers = 0;
    for (commit, id) in [(true, "committed"), (false, "rolled-back")] {
        let txn_id = client.declare(0).await;
        let request = schedule_request(answers, "receiver-2", id);
        let scheduled = client
            .send_in_state(1, request, Some(in_txn(&txn_id, None)))
            .await;
        client.send_outcome(scheduled).await;
        let (_, answer) = client.delivery(replies).await;
        let numbers = scheduled_numbers(&answer);
        assert_eq!(numbers.len(), 1);
        let peek = client
            .send_message(1, peek_request(answers + 1, "receiver-2", 10))
            .await;
        client.send_outcome(peek).await;
        let (_, answer) = client.delivery(replies).await;
        let before = peeked_ids(&answer);
        assert!(
            !before.contains(&id.to_owned()),
            "visible before the commit"
        );
        let discharge = Discharge {
            txn_id,
            fail: Some(!commit),
        };
        let discharged = client.send_message(0, control(discharge)).await;
        assert!(matches!(
            client.send_outcome(discharged).await,
            DeliveryState::Accepted(_)
        ));
        let peek = client
            .send_message(1, peek_request(answers + 2, "receiver-2", 10))
            .await;
        client.send_outcome(peek).await;
        let (_, answer) = client.delivery(replies).await;
        assert_eq!(peeked_ids(&answer), ["committed"], "after {id}");
        answers += 3;
    }
    broker.stop().await;
}
