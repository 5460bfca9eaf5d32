//! Transactions (AMQP 1.0 §4, Service Bus's rules) with fe2o3-amqp's `transaction` API against
//! the real broker: commit, rollback, timeout, receive-complete-send atomicity, the limits, and
//! `kill -9` in the middle of commits.

use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::transaction::{
    Controller, Transaction, TransactionDischarge, TransactionPosting, TransactionRetirement,
};
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::{AmqpValue, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use tokio::time::timeout;

use crate::child::ChildBroker;
use crate::fe2o3_client::sequence_number;
use crate::observe::http;

mod send_via;
use crate::support::{config_with_queues, connect_session, next_delivery, TestBroker, DEADLINE};

/// A connection with a transaction controller, and a sender and a receiver on one queue.
struct Client {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
    controller: Controller,
    sender: Sender,
    receiver: Receiver,
}

impl Client {
    /// Connects to `addr` and attaches the controller and both links to `queue`.
    async fn open(addr: std::net::SocketAddr, queue: &str) -> Self {
        let (connection, mut session) = connect_session(addr).await;
        let controller = Controller::attach(&mut session, "controller")
            .await
            .expect("controller");
        let sender = Sender::attach(&mut session, "sender", queue)
            .await
            .expect("sender");
        let receiver = Receiver::attach(&mut session, "receiver", queue)
            .await
            .expect("receiver");
        Self {
            connection,
            session,
            controller,
            sender,
            receiver,
        }
    }

    /// The body of the next message, completed.
    async fn take(&mut self) -> String {
        let delivery = next_delivery::<String>(&mut self.receiver).await;
        self.receiver.accept(&delivery).await.expect("accept");
        delivery.body().clone()
    }

    async fn close(mut self) {
        let _ = timeout(DEADLINE, self.connection.close()).await;
    }
}

/// A new transaction on `controller`.
async fn declare(controller: &Controller) -> Transaction<'_> {
    timeout(DEADLINE, Transaction::declare(controller, None))
        .await
        .expect("in time")
        .expect("declare")
}

/// The condition of a rejected outcome.
fn rejected_condition(outcome: &Outcome) -> ErrorCondition {
    match outcome {
        Outcome::Rejected(rejected) => rejected.error.clone().expect("an error").condition,
        other => panic!("not rejected: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_sends_appear_at_the_commit_with_numbers_after_what_came_before() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = Client::open(broker.addr, "q").await;
    let committed = tidebus::metrics::broker().transactions_committed.get();
    let txn = declare(&client.controller).await;
    for body in ["in-txn-1", "in-txn-2"] {
        let outcome = timeout(DEADLINE, txn.post(&mut client.sender, body))
            .await
            .expect("in time")
            .expect("post");
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    }
    // Sent outside the transaction after the staged ones: it is the first to arrive, since
    // the staged ones are not visible before the commit.
    client.sender.send("plain").await.expect("plain send");
    let plain = next_delivery::<String>(&mut client.receiver).await;
    assert_eq!(plain.body(), "plain");
    client.receiver.accept(&plain).await.expect("accept plain");
    timeout(DEADLINE, txn.commit())
        .await
        .expect("in time")
        .expect("commit");
    let first = next_delivery::<String>(&mut client.receiver).await;
    let second = next_delivery::<String>(&mut client.receiver).await;
    assert_eq!(
        (first.body().as_str(), second.body().as_str()),
        ("in-txn-1", "in-txn-2")
    );
    let seqs = [
        sequence_number(&plain),
        sequence_number(&first),
        sequence_number(&second),
    ];
    assert_eq!(
        seqs,
        [seqs[0], seqs[0] + 1, seqs[0] + 2],
        "numbered at the commit, gap-free"
    );
    // Counted (other tests of this process may count too).
    assert!(tidebus::metrics::broker().transactions_committed.get() > committed);
    client.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_leaves_no_trace_and_no_gap() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = Client::open(broker.addr, "q").await;
    client.sender.send("before").await.expect("send");
    let rolled_back = tidebus::metrics::broker().transactions_rolled_back.get();
    let txn = declare(&client.controller).await;
    txn.post(&mut client.sender, "rolled-back")
        .await
        .expect("post");
    timeout(DEADLINE, txn.rollback())
        .await
        .expect("in time")
        .expect("rollback");
    client.sender.send("after").await.expect("send");
    let before = next_delivery::<String>(&mut client.receiver).await;
    let after = next_delivery::<String>(&mut client.receiver).await;
    assert_eq!(
        (before.body().as_str(), after.body().as_str()),
        ("before", "after")
    );
    assert_eq!(
        sequence_number(&after),
        sequence_number(&before) + 1,
        "a rolled-back send takes no number"
    );
    assert!(tidebus::metrics::broker().transactions_rolled_back.get() > rolled_back);
    client.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_complete_and_send_commit_together_or_not_at_all() {
    receive_complete_and_send(None).await;
}

/// The same on a partitioned queue: the work and the reply are in different partitions
/// (sends without a key go to the partitions in turn), each of which applies its part at the
/// commit, or drops it at the rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_complete_and_send_commit_together_or_not_at_all_across_partitions() {
    receive_complete_and_send(Some(4)).await;
}

/// Completes a received message and sends a reply in one transaction, rolled back then
/// committed, on a queue of `partitions` (or an unpartitioned one).
async fn receive_complete_and_send(partitions: Option<u16>) {
    let mut config = config_with_queues(&["q"]);
    config.queues[0].lock_duration = Duration::from_secs(1);
    config.queues[0].partitions = partitions;
    let broker = TestBroker::start(config).await;
    let mut client = Client::open(broker.addr, "q").await;
    client.sender.send("work").await.expect("send");
    let work = next_delivery::<String>(&mut client.receiver).await;

    // Rolled back: the reply is never sent, and the work stays locked until its lock ends,
    // then comes back.
    let txn = declare(&client.controller).await;
    txn.accept(&mut client.receiver, &work)
        .await
        .expect("complete in txn");
    txn.post(&mut client.sender, "reply-1").await.expect("post");
    txn.rollback().await.expect("rollback");
    let again = next_delivery::<String>(&mut client.receiver).await;
    assert_eq!(again.body(), "work", "back once its lock ended");
    assert_eq!(sequence_number(&again), sequence_number(&work));

    // Committed: the work is completed and the reply is there.
    let txn = declare(&client.controller).await;
    txn.accept(&mut client.receiver, &again)
        .await
        .expect("complete in txn");
    txn.post(&mut client.sender, "reply-2").await.expect("post");
    txn.commit().await.expect("commit");
    assert_eq!(client.take().await, "reply-2");
    // Completed, not merely locked: past its lock's end it does not come back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    client.sender.send("marker").await.expect("send");
    assert_eq!(
        client.take().await,
        "marker",
        "the work was completed at the commit"
    );
    client.close().await;
    broker.stop().await;
}

/// A dead-lettering in a transaction happens at its commit, with the reason the client gave;
/// rolled back, it never happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettering_in_a_transaction_moves_the_message_at_the_commit_only() {
    let mut config = config_with_queues(&["q"]);
    config.queues[0].lock_duration = Duration::from_secs(1);
    let broker = TestBroker::start(config).await;
    let mut client = Client::open(broker.addr, "q").await;
    let mut dead = Receiver::attach(&mut client.session, "dead", "q/$deadletterqueue")
        .await
        .expect("dead-letter receiver");
    client.sender.send("poison").await.expect("send");
    let reason = || {
        Some(fe2o3_amqp::types::definitions::Error::new(
            ErrorCondition::Custom("app:poison".into()),
            Some("cannot be processed".to_owned()),
            None,
        ))
    };
    let poison = next_delivery::<String>(&mut client.receiver).await;
    let txn = declare(&client.controller).await;
    txn.reject(&mut client.receiver, &poison, reason())
        .await
        .expect("dead-letter in txn");
    txn.rollback().await.expect("rollback");
    // Rolled back: still in the queue, back once its lock ends.
    let poison = next_delivery::<String>(&mut client.receiver).await;
    assert_eq!(poison.body(), "poison");
    let txn = declare(&client.controller).await;
    txn.reject(&mut client.receiver, &poison, reason())
        .await
        .expect("dead-letter in txn");
    txn.commit().await.expect("commit");
    let moved = next_delivery::<String>(&mut dead).await;
    assert_eq!(moved.body(), "poison");
    let reason = moved
        .message()
        .application_properties
        .as_ref()
        .and_then(|properties| properties.0.get("DeadLetterReason").cloned());
    assert_eq!(
        reason,
        Some(fe2o3_amqp::types::primitives::SimpleValue::String(
            "app:poison".into()
        ))
    );
    client.close().await;
    broker.stop().await;
}

/// A broker whose clock a test moves (`[testing] clock = "controlled"`), with queue `q` and
/// transactions timing out after 2 minutes: a child process, since the clock is the process's.
const CONTROLLED_CLOCK: &str = "[broker]\nallow_anonymous = true\ntransaction_timeout = \"2m\"\n\n\
    [testing]\nclock = \"controlled\"\n\n[[queues]]\nname = \"q\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_past_its_timeout_is_rolled_back_and_its_commit_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), CONTROLLED_CLOCK);
    let mut client = Client::open(broker.addr, "q").await;
    let txn = declare(&client.controller).await;
    txn.post(&mut client.sender, "too-late")
        .await
        .expect("post");
    // Past the deadline by the broker's clock, with no wait: the commit is refused whether
    // the connection's timer has rolled the transaction back yet or not (the deadline itself
    // is checked).
    let admin = broker.admin_addr.expect("an administration endpoint");
    let (status, body) = http(
        admin,
        "POST",
        "/$testing/clock/advance",
        "",
        r#"{"by": "3m"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let error = txn.commit().await.expect_err("refused");
    let text = format!("{error:?}");
    assert!(text.contains("Timeout"), "{text}");
    client.sender.send("marker").await.expect("send");
    assert_eq!(
        client.take().await,
        "marker",
        "nothing of the timed-out transaction"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_on_a_second_entity_and_past_100_operations_is_refused() {
    let broker = TestBroker::start(config_with_queues(&["a", "b"])).await;
    let mut client = Client::open(broker.addr, "a").await;
    // On a session of its own: on the controller's session it would send via `a`.
    let mut other = fe2o3_amqp::Session::begin(&mut client.connection)
        .await
        .expect("session");
    let mut to_b = Sender::attach(&mut other, "to-b", "b").await.expect("to-b");
    let txn = declare(&client.controller).await;
    for i in 0..100 {
        let outcome = txn
            .post(&mut client.sender, format!("m{i}"))
            .await
            .expect("post");
        assert!(matches!(outcome, Outcome::Accepted(_)), "{i}: {outcome:?}");
    }
    let over = txn.post(&mut client.sender, "m100").await.expect("post");
    assert_eq!(
        rejected_condition(&over),
        ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)
    );
    let elsewhere = txn.post(&mut to_b, "other").await.expect("post");
    assert_eq!(
        rejected_condition(&elsewhere),
        ErrorCondition::AmqpError(AmqpError::NotAllowed)
    );
    assert_rolled_back(txn.commit().await, "amqp:resource-limit-exceeded");
    // The same transaction without the operation over the limit: the send elsewhere dooms it.
    // (On a controller of its own: fe2o3 discharges a failed transaction again when dropped.)
    let controller = Controller::attach(&mut client.session, "controller-2")
        .await
        .expect("controller");
    let txn = declare(&controller).await;
    txn.post(&mut client.sender, "kept?").await.expect("post");
    let elsewhere = txn.post(&mut to_b, "other").await.expect("post");
    assert!(matches!(elsewhere, Outcome::Rejected(_)), "{elsewhere:?}");
    assert_rolled_back(txn.commit().await, "Local transactions cannot span");
    client.sender.send("marker").await.expect("send");
    assert_eq!(
        client.take().await,
        "marker",
        "nothing of either transaction"
    );
    client.close().await;
    broker.stop().await;
}

/// A commit refused because work in the transaction was refused: `amqp:transaction:rollback`,
/// naming the refusal (`why`).
fn assert_rolled_back<T: std::fmt::Debug, E: std::fmt::Debug>(commit: Result<T, E>, why: &str) {
    let text = format!("{:?}", commit.expect_err("the commit rolls back"));
    assert!(
        text.contains("Rollback")
            && text.contains("the transaction was rolled back: ")
            && text.contains(why),
        "{text}"
    );
}

/// The source filter of a receiver for session `id` (a plain string, as the Python SDK sends).
fn session_filter(id: &str) -> fe2o3_amqp::types::messaging::FilterSet {
    let mut filter = fe2o3_amqp::types::messaging::FilterSet::new();
    filter.insert(
        fe2o3_amqp::types::primitives::Symbol::from("com.microsoft:session-filter"),
        Value::String(id.to_owned()),
    );
    filter
}

/// A send the queue itself refuses (no session id on a session queue) dooms the transaction
/// as a refusal at the connection does: its other sends are not applied at the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_the_entity_refuses_rolls_its_transaction_back() {
    let mut config = config_with_queues(&["s"]);
    config.queues[0].requires_session = true;
    let broker = TestBroker::start(config).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let controller = Controller::attach(&mut session, "controller")
        .await
        .expect("controller");
    let mut sender = Sender::attach(&mut session, "sender", "s")
        .await
        .expect("sender");
    let in_session = |body: &str| {
        fe2o3_amqp::types::messaging::Message::builder()
            .properties(
                fe2o3_amqp::types::messaging::Properties::builder()
                    .group_id(String::from("a"))
                    .build(),
            )
            .value(body.to_owned())
            .build()
    };
    let txn = declare(&controller).await;
    let taken = txn
        .post(&mut sender, in_session("first"))
        .await
        .expect("post");
    assert!(matches!(taken, Outcome::Accepted(_)), "{taken:?}");
    let refused = txn.post(&mut sender, "no session").await.expect("post");
    assert!(matches!(refused, Outcome::Rejected(_)), "{refused:?}");
    txn.post(&mut sender, in_session("last"))
        .await
        .expect("post");
    assert_rolled_back(txn.commit().await, "The SessionId was not set on a message");
    // Nothing reached the session: a message sent outside the transaction comes first.
    sender.send(in_session("marker")).await.expect("send");
    let receiver = timeout(
        DEADLINE,
        Receiver::builder()
            .name("session-a")
            .source(
                fe2o3_amqp::types::messaging::Source::builder()
                    .address("s")
                    .filter(session_filter("a"))
                    .build(),
            )
            .attach(&mut session),
    )
    .await
    .expect("in time");
    let mut receiver = receiver.expect("session receiver");
    let delivery = next_delivery::<String>(&mut receiver).await;
    assert_eq!(delivery.body(), "marker");
    let _ = timeout(DEADLINE, connection.close()).await;
    broker.stop().await;
}

/// What a connection's open transactions stage is bounded: 16 messages of the largest size.
/// Past it a send is refused and the transaction's commit rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_messages_are_bounded_per_connection() {
    let mut config = config_with_queues(&["q"]);
    config.broker.max_message_size = 64 * 1024;
    let broker = TestBroker::start(config).await;
    let mut client = Client::open(broker.addr, "q").await;
    let txn = declare(&client.controller).await;
    let body = "x".repeat(60 * 1024);
    let mut staged = 0;
    let refused = loop {
        let outcome = txn
            .post(&mut client.sender, body.clone())
            .await
            .expect("post");
        match outcome {
            Outcome::Accepted(_) => staged += 1,
            other => break other,
        }
        assert!(
            staged * body.len() <= 16 * 64 * 1024,
            "{staged} staged: past the bound"
        );
    };
    assert_eq!(
        rejected_condition(&refused),
        ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)
    );
    assert_eq!(staged, 17, "as many as 16 × 64 KiB holds");
    assert_rolled_back(txn.commit().await, "amqp:resource-limit-exceeded");
    // The bytes are given back: the same transaction a message short commits.
    let controller = Controller::attach(&mut client.session, "controller-2")
        .await
        .expect("controller");
    let txn = declare(&controller).await;
    for _ in 0..staged {
        txn.post(&mut client.sender, body.clone())
            .await
            .expect("post");
    }
    txn.commit().await.expect("commit");
    for _ in 0..staged {
        assert_eq!(client.take().await.len(), body.len());
    }
    client.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_closes_commits_none_of_its_open_transactions() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = Client::open(broker.addr, "q").await;
    let mut txn = declare(&client.controller).await;
    txn.set_rollback_on_drop_trials(0);
    txn.post(&mut client.sender, "abandoned")
        .await
        .expect("post");
    std::mem::forget(txn);
    client.close().await;
    let mut client = Client::open(broker.addr, "q").await;
    client.sender.send("marker").await.expect("send");
    assert_eq!(client.take().await, "marker");
    client.close().await;
    broker.stop().await;
}

/// Where the ids of the two replies a worker sends for one piece of work start.
const FIRST_REPLY: i64 = 1_000_000;
const SECOND_REPLY: i64 = 2_000_000;

/// A reply whose id is `id`, with a message id, so that a destination that detects
/// duplicates drops one moved twice (a crash between its write there and its delete at the via
/// entity).
fn reply(id: i64) -> fe2o3_amqp::types::messaging::Message<AmqpValue<Value>> {
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Message, Properties};
    Message::builder()
        .properties(
            Properties::builder()
                .message_id(format!("reply-{id}"))
                .build(),
        )
        .application_properties(ApplicationProperties::builder().insert("id", id).build())
        .value(Value::Long(id))
        .build()
}

/// Takes work from `q` one message at a time and, in one transaction each, completes it and
/// sends its two replies (to `q`, or via `q` to `via_to`), until the broker goes away;
/// reports each confirmed commit on `committed`.
async fn work_in_transactions(
    addr: std::net::SocketAddr,
    committed: tokio::sync::watch::Sender<Vec<i64>>,
    via_to: Option<&'static str>,
) {
    use crate::durability::{id_of, OUTCOME_DEADLINE};
    let mut client = Client::open(addr, "q").await;
    let mut via = match via_to {
        Some(to) => match send_via::via_sender(&mut client.session, "q", to).await {
            Ok(sender) => Some(sender),
            Err(_) => return,
        },
        None => None,
    };
    loop {
        let Ok(Ok(work)) = timeout(OUTCOME_DEADLINE, client.receiver.recv::<Value>()).await else {
            break;
        };
        let id = id_of(&work);
        assert!(
            id < FIRST_REPLY,
            "replies come after all the work: got {id}"
        );
        let Ok(Ok(mut txn)) = timeout(
            OUTCOME_DEADLINE,
            Transaction::declare(&client.controller, None),
        )
        .await
        else {
            break;
        };
        txn.set_rollback_on_drop_trials(0);
        if !matches!(
            timeout(OUTCOME_DEADLINE, txn.accept(&mut client.receiver, &work)).await,
            Ok(Ok(()))
        ) {
            break;
        }
        let sender = via.as_mut().unwrap_or(&mut client.sender);
        let mut posted = true;
        for reply_id in [FIRST_REPLY + id, SECOND_REPLY + id] {
            let outcome = timeout(OUTCOME_DEADLINE, txn.post(sender, reply(reply_id))).await;
            posted &= matches!(outcome, Ok(Ok(Outcome::Accepted(_))));
        }
        if !posted || !matches!(timeout(OUTCOME_DEADLINE, txn.commit()).await, Ok(Ok(()))) {
            break;
        }
        committed.send_modify(|ids| ids.push(id));
    }
    let _ = timeout(Duration::from_secs(1), client.connection.close()).await;
}

/// Stores messages with ids `0..work` in `q` of a `sync` broker on `disk` (configured by
/// `toml`), then three times lets `worker` (spawned on the broker's address) run
/// transactions for a while and crashes the broker (`kill -9`, and the power cut of a disk
/// that has one) at a random point among them, and starts it again. Returns the broker last started and the work whose commit the workers saw
/// confirmed.
async fn kill_9_rounds(
    disk: &crate::child::Disk,
    toml: &str,
    work: i64,
    worker: impl Fn(
        std::net::SocketAddr,
        tokio::sync::watch::Sender<Vec<i64>>,
    ) -> tokio::task::JoinHandle<()>,
) -> (crate::child::ChildBroker, Vec<i64>) {
    use crate::durability::send_ids;

    let broker = disk.start(toml);
    assert_eq!(send_ids(broker.addr, 0..work).await.len(), work as usize);
    let mut broker = Some(broker);
    let mut confirmed = Vec::new();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    println!("kill points seeded with {seed}");
    for round in 0..3u32 {
        let running = broker.take().expect("a broker");
        let (committed, mut watched) = tokio::sync::watch::channel(Vec::new());
        let worker = worker(running.addr, committed);
        // Some commits first, then the kill lands wherever the stream of transactions is.
        let after = 20 + (seed.rotate_left(round * 7) % 60) as usize;
        timeout(DEADLINE, watched.wait_for(|ids| ids.len() >= after))
            .await
            .expect("commits in time")
            .expect("worker alive");
        let jitter = u64::from(seed.rotate_left(round * 13) % 20);
        tokio::time::sleep(Duration::from_millis(jitter)).await;
        disk.crash(running);
        timeout(DEADLINE * 2, worker)
            .await
            .expect("worker ends")
            .expect("worker");
        confirmed.extend(watched.borrow().iter().copied());
        broker = Some(disk.start(toml));
    }
    (broker.expect("a broker"), confirmed)
}

/// `kill -9` at random points of a stream of transactions (each completes one message and
/// sends two): after the restarts every transaction is whole or absent. Each piece of work is
/// either still there with neither reply, or gone with both replies, each once; every commit
/// the broker confirmed is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_commits_leaves_every_transaction_whole_or_absent() {
    crashes_during_commits(crate::child::Disk::plain()).await;
}

/// Crashes on `disk` at random points of a stream of transactions: see
/// [`kill_9_during_commits_leaves_every_transaction_whole_or_absent`].
pub(super) async fn crashes_during_commits(disk: crate::child::Disk) {
    use std::collections::HashSet;

    use crate::durability::{config, drain};

    const WORK: i64 = 3_000;
    let (broker, confirmed) = kill_9_rounds(&disk, &config("sync"), WORK, |addr, committed| {
        tokio::spawn(work_in_transactions(addr, committed, None))
    })
    .await;
    let got = drain(broker.addr, "q", &replies_of(&confirmed)).await;
    let got: HashSet<i64> = got.into_iter().map(|(id, _)| id).collect();
    assert_whole_or_absent(WORK, &got, &got, &confirmed);
}

/// The ids of the replies of `work`.
fn replies_of(work: &[i64]) -> std::collections::HashSet<i64> {
    (work.iter())
        .flat_map(|id| [FIRST_REPLY + id, SECOND_REPLY + id])
        .collect()
}

/// After [`kill_9_rounds`]: each piece of work `0..count` is either still there (among
/// `left`) with neither reply (among `replies`), and then its commit was never confirmed, or
/// gone with both; and enough commits were confirmed for the kills to have cut into them.
fn assert_whole_or_absent(
    count: i64,
    left: &std::collections::HashSet<i64>,
    replies: &std::collections::HashSet<i64>,
    confirmed: &[i64],
) {
    for id in 0..count {
        let replied = [FIRST_REPLY + id, SECOND_REPLY + id].map(|reply| replies.contains(&reply));
        match (left.contains(&id), replied) {
            (true, [false, false]) => {
                assert!(
                    !confirmed.contains(&id),
                    "work {id} came back after its commit"
                )
            }
            (false, [true, true]) => {}
            other => panic!("transaction of work {id} half applied: {other:?}"),
        }
    }
    assert!(
        confirmed.len() >= 60,
        "{} commits confirmed",
        confirmed.len()
    );
}
