//! Send-via with fe2o3-amqp against the real broker: both wire shapes (a sender to the via
//! entity naming its destination in `com.microsoft:transfer-destination-address`, and a
//! session whose coordinator came first), commit and rollback, the transfer dead-letter queue,
//! and `kill -9` in the middle of commits that send via.

use fe2o3_amqp::types::definitions::Fields;
use fe2o3_amqp::types::primitives::{SimpleValue, Symbol, Value};

use super::*;

/// A sender on `session` attached to `via` whose messages are for `destination`.
pub(super) async fn via_sender(
    session: &mut SessionHandle<()>,
    via: &str,
    destination: &str,
) -> Result<Sender, fe2o3_amqp::link::SenderAttachError> {
    let mut properties = Fields::default();
    properties.insert(
        Symbol::from("com.microsoft:transfer-destination-address"),
        Value::String(destination.into()),
    );
    Sender::builder()
        .name(format!("via-{via}-to-{destination}"))
        .target(via)
        .properties(properties)
        .attach(session)
        .await
}

/// A receiver of `source` on a connection of its own.
async fn receiver_of(
    addr: std::net::SocketAddr,
    source: &str,
) -> (ConnectionHandle<()>, SessionHandle<()>, Receiver) {
    let (connection, mut session) = connect_session(addr).await;
    let receiver = Receiver::attach(&mut session, format!("of-{source}"), source)
        .await
        .expect("receiver");
    (connection, session, receiver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_from_a_and_send_via_it_to_b_commit_together_and_a_stays_gap_free() {
    let broker = TestBroker::start(config_with_queues(&["a", "b"])).await;
    let mut client = Client::open(broker.addr, "a").await;
    let mut to_b = via_sender(&mut client.session, "a", "b")
        .await
        .expect("via sender");
    let (mut b_connection, _b_session, mut b) = receiver_of(broker.addr, "b").await;
    client.sender.send("work").await.expect("send work");
    let work = next_delivery::<String>(&mut client.receiver).await;
    let txn = declare(&client.controller).await;
    txn.accept(&mut client.receiver, &work)
        .await
        .expect("accept in txn");
    let outcome = txn.post(&mut to_b, "reply").await.expect("post");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    txn.commit().await.expect("commit");
    let reply = next_delivery::<String>(&mut b).await;
    assert_eq!(reply.body(), "reply");
    b.accept(&reply).await.expect("accept reply");
    // The transfer took none of a's numbers, and the work is gone from a.
    client.sender.send("next").await.expect("send next");
    let next = next_delivery::<String>(&mut client.receiver).await;
    assert_eq!(next.body(), "next", "the completed work does not come back");
    assert_eq!(sequence_number(&next), sequence_number(&work) + 1);
    // Outside a transaction the via sender sends straight to b.
    to_b.send("plain").await.expect("plain send");
    assert_eq!(next_delivery::<String>(&mut b).await.body(), "plain");
    let _ = timeout(DEADLINE, b_connection.close()).await;
    client.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transfer_never_reaches_its_destination() {
    let broker = TestBroker::start(config_with_queues(&["a", "b"])).await;
    let mut client = Client::open(broker.addr, "a").await;
    let mut to_b = via_sender(&mut client.session, "a", "b")
        .await
        .expect("via sender");
    let txn = declare(&client.controller).await;
    txn.post(&mut to_b, "rolled back").await.expect("post");
    txn.rollback().await.expect("rollback");
    let txn = declare(&client.controller).await;
    txn.post(&mut to_b, "committed").await.expect("post");
    txn.commit().await.expect("commit");
    // Transfers move in order: had the first been kept, it would come first.
    let (mut b_connection, _b_session, mut b) = receiver_of(broker.addr, "b").await;
    assert_eq!(next_delivery::<String>(&mut b).await.body(), "committed");
    let _ = timeout(DEADLINE, b_connection.close()).await;
    client.close().await;
    broker.stop().await;
}

/// .NET's cross-entity mode: all links on one session, the coordinator first. The first
/// entity linked is the via entity; a sender to another entity sends through it, a receiver
/// of another entity is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_coordinator_came_first_sends_via_its_first_entity() {
    let broker = TestBroker::start(config_with_queues(&["a", "b", "c"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let controller = Controller::attach(&mut session, "controller")
        .await
        .expect("controller");
    let mut from_a = Receiver::attach(&mut session, "from-a", "a")
        .await
        .expect("receiver of a");
    let mut to_a = Sender::attach(&mut session, "to-a", "a")
        .await
        .expect("sender to a");
    let mut to_b = Sender::attach(&mut session, "to-b", "b")
        .await
        .expect("sender to b");
    let refused = Receiver::attach(&mut session, "from-c", "c").await;
    assert!(refused.is_err(), "a receiver of another entity is refused");
    let (mut b_connection, _b_session, mut b) = receiver_of(broker.addr, "b").await;
    to_a.send("work").await.expect("send work");
    let work = next_delivery::<String>(&mut from_a).await;
    let txn = declare(&controller).await;
    txn.accept(&mut from_a, &work).await.expect("accept in txn");
    let outcome = txn.post(&mut to_b, "reply").await.expect("post");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    txn.commit().await.expect("commit");
    assert_eq!(next_delivery::<String>(&mut b).await.body(), "reply");
    let _ = timeout(DEADLINE, b_connection.close()).await;
    let _ = timeout(DEADLINE, connection.close()).await;
    broker.stop().await;
}

/// A transfer its destination refuses for good (here: no session id for a queue that
/// requires sessions) lands in the via entity's transfer dead-letter queue, with the reason;
/// a destination that does not exist refuses the sender's attach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_its_destination_refuses_goes_to_the_transfer_dead_letter_queue() {
    let mut config = config_with_queues(&["a", "sessions"]);
    config.queues[1].requires_session = true;
    let broker = TestBroker::start(config).await;
    let mut client = Client::open(broker.addr, "a").await;
    // On a session of its own: fe2o3 may not have let go of a refused link's handle when the
    // next attach on its session starts.
    let mut other = fe2o3_amqp::Session::begin(&mut client.connection)
        .await
        .expect("session");
    let unknown = via_sender(&mut other, "a", "nowhere").await;
    assert!(unknown.is_err(), "an unknown destination is refused");
    let mut to_sessions = via_sender(&mut client.session, "a", "sessions")
        .await
        .expect("via sender");
    let txn = declare(&client.controller).await;
    txn.post(&mut to_sessions, "no session id")
        .await
        .expect("post");
    txn.commit().await.expect("commit");
    let (mut connection, _session, mut dead) =
        receiver_of(broker.addr, "a/$Transfer/$DeadLetterQueue").await;
    let refused = next_delivery::<String>(&mut dead).await;
    assert_eq!(refused.body(), "no session id");
    let reason = refused
        .message()
        .application_properties
        .as_ref()
        .and_then(|properties| properties.0.get("DeadLetterReason"))
        .cloned();
    assert_eq!(
        reason,
        Some(SimpleValue::String("TransferDestinationRefused".into()))
    );
    dead.accept(&refused).await.expect("accept");
    let _ = timeout(DEADLINE, connection.close()).await;
    client.close().await;
    broker.stop().await;
}

/// `kill -9` at random points of a stream of transactions that each complete one message of
/// `q` and send two replies via `q` to `r`: after the restarts each piece of work is either
/// still in `q` with no reply in `r`, or gone with both replies in `r`, each exactly once (`r`
/// detects duplicates); every commit the broker confirmed is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_commits_that_send_via_loses_no_transfer() {
    use std::collections::HashSet;

    use crate::durability::{config, drain};

    const WORK: i64 = 2_000;
    let toml = format!(
        "{}\n[[queues]]\nname = \"r\"\nrequires_duplicate_detection = true\n",
        config("sync")
    );
    let disk = crate::child::Disk::plain();
    let (broker, confirmed) = super::kill_9_rounds(&disk, &toml, WORK, |addr, committed| {
        tokio::spawn(work_in_transactions(addr, committed, Some("r")))
    })
    .await;
    // `drain` panics on an id that comes twice.
    let replies = drain(broker.addr, "r", &super::replies_of(&confirmed)).await;
    let replies: HashSet<i64> = replies.into_iter().map(|(id, _)| id).collect();
    let left = drain(broker.addr, "q", &HashSet::new()).await;
    let left: HashSet<i64> = left.into_iter().map(|(id, _)| id).collect();
    super::assert_whole_or_absent(WORK, &left, &replies, &confirmed);
}

/// A topic is a destination (each subscription gets its copy) and a via entity (its own
/// transfer lane), as a queue is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_takes_transfers_and_sends_via_its_own_transfer_lane() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = TestBroker::start(crate::azservicebus::topic_config(dir.path())).await;
    let mut client = Client::open(broker.addr, "q").await;
    let mut q_to_t = via_sender(&mut client.session, "q", "t")
        .await
        .expect("via q to t");
    let mut t_to_q = via_sender(&mut client.session, "t", "q")
        .await
        .expect("via t to q");
    let txn = declare(&client.controller).await;
    txn.post(&mut q_to_t, "to the topic").await.expect("post");
    txn.commit().await.expect("commit");
    let txn = declare(&client.controller).await;
    txn.post(&mut t_to_q, "via the topic").await.expect("post");
    txn.commit().await.expect("commit");
    for subscription in ["t/subscriptions/s1", "t/subscriptions/s2"] {
        let (mut connection, _session, mut copies) = receiver_of(broker.addr, subscription).await;
        assert_eq!(
            next_delivery::<String>(&mut copies).await.body(),
            "to the topic"
        );
        let _ = timeout(DEADLINE, connection.close()).await;
    }
    assert_eq!(client.take().await, "via the topic");
    client.close().await;
    broker.stop().await;
}
