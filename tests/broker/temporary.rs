//! Temporary queues and topics with the fe2o3-amqp client, asked for as Qpid JMS asks
//! (`createTemporaryQueue()`, `createTemporaryTopic()`): a sender whose target is dynamic,
//! deleted on close, with the node's kind as its capability. The broker names the node in its
//! reply; the node lives as long as that link, its session and its connection, and never
//! outlives the broker process.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition, Fields};
use fe2o3_amqp::types::messaging::{
    DeleteOnClose, DeleteOnNoLinks, Outcome, Source, Target, TerminusDurability,
    TerminusExpiryPolicy,
};
use fe2o3_amqp::types::primitives::{Array, Symbol, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

use crate::child::ChildBroker;
use crate::support::{config_with_queues, connect_session, next_delivery, TestBroker, DEADLINE};

const QUEUE: &str = "temporary-queue";
const TOPIC: &str = "temporary-topic";
/// How many temporaries one connection may hold at once.
const PER_CONNECTION: usize = 64;

/// The target Qpid JMS's creator link asks for: dynamic, no address, deleted on close
/// (`lifetime-policy`), expiring with the link, with `capability` naming the node's kind.
fn dynamic_target(capability: &str, lifetime_policy: Value) -> Target {
    let mut properties = Fields::new();
    properties.insert(Symbol::from("lifetime-policy"), lifetime_policy);
    Target {
        address: None,
        durable: TerminusDurability::None,
        expiry_policy: TerminusExpiryPolicy::LinkDetach,
        timeout: 0,
        dynamic: true,
        dynamic_node_properties: Some(properties),
        capabilities: Some(Array(vec![Symbol::from(capability)])),
    }
}

/// Attaches a creator link named `name` for a node of kind `capability`; returns the link and
/// the node's name (the target address of the broker's reply).
async fn create(session: &mut SessionHandle<()>, name: &str, capability: &str) -> (Sender, String) {
    let creator = Sender::builder()
        .name(name)
        .source(Source::builder().build())
        .target(dynamic_target(capability, DeleteOnClose::new().into()))
        .attach(session)
        .await
        .unwrap_or_else(|e| panic!("the creator link {name} is refused: {e:?}"));
    let address = creator.target().as_ref().and_then(|t| t.address.clone());
    let address = address.expect("the broker names the node it made");
    (creator, address)
}

/// The condition a refused sender attach was detached with.
async fn sender_refusal(session: &mut SessionHandle<()>, target: Target) -> ErrorCondition {
    let attached = Sender::builder()
        .name("refused-sender")
        .source(Source::builder().build())
        .target(target)
        .attach(session)
        .await;
    match attached {
        Err(SenderAttachError::RemoteClosedWithError(error)) => error.condition,
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

/// The condition a refused receiver attach of `source` was detached with.
async fn receiver_refusal(session: &mut SessionHandle<()>, source: Source) -> ErrorCondition {
    match Receiver::builder()
        .name("refused-receiver")
        .source(source)
        .attach(session)
        .await
    {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => error.condition,
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

/// Whether a sender attached to `address` on a fresh connection is refused with
/// `amqp:not-found`; panics if it is refused otherwise.
async fn is_gone(addr: SocketAddr, address: &str) -> bool {
    let (mut connection, mut session) = connect_session(addr).await;
    let gone = match Sender::attach(&mut session, "probe", address).await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, AmqpError::NotFound.into(), "{error:?}");
            true
        }
        Ok(sender) => {
            let _ = sender.close().await;
            false
        }
        Err(other) => panic!("the probe of {address} failed: {other:?}"),
    };
    let _ = connection.close().await;
    gone
}

/// Waits until `address` answers `amqp:not-found`, failing after [`DEADLINE`]: a connection's
/// close is answered before the broker tears it down.
async fn until_gone(addr: SocketAddr, address: &str) {
    let deadline = Instant::now() + DEADLINE;
    while !is_gone(addr, address).await {
        assert!(Instant::now() < deadline, "{address} still exists");
        sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `body` to `address` on its own sender in `session`; panics unless it is accepted.
async fn send(session: &mut SessionHandle<()>, address: &str, body: &str) {
    let mut sender = Sender::attach(session, format!("to-{body}"), address)
        .await
        .expect("a sender to the temporary");
    let outcome = timeout(DEADLINE, sender.send(body))
        .await
        .expect("in time")
        .expect("send");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    sender.close().await.expect("detach");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_target_gets_a_temporary_queue_its_connection_sends_to_and_receives_from() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let (_creator, name) = create(&mut session, "creator", QUEUE).await;
    assert!(name.starts_with("$temp-queue-"), "{name}");
    let mut consumers = Session::begin(&mut connection).await.expect("begin");
    let mut receiver = Receiver::attach(&mut consumers, "answers", name.as_str())
        .await
        .expect("the creating connection receives from its temporary queue");
    send(&mut session, &name, "to myself").await;
    let delivery = next_delivery::<String>(&mut receiver).await;
    assert_eq!(delivery.body(), "to myself");
    receiver.accept(&delivery).await.expect("accept");
    // A second one gets a name of its own.
    let (_second, other) = create(&mut session, "creator-2", QUEUE).await;
    assert_ne!(name, other);
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_connection_may_send_to_a_temporary_queue_but_not_receive_from_it() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut owner, mut owner_session) = connect_session(broker.addr).await;
    let (_creator, name) = create(&mut owner_session, "creator", QUEUE).await;
    let (mut other, mut other_session) = connect_session(broker.addr).await;
    send(&mut other_session, &name, "a reply").await;
    let mut refusals = Session::begin(&mut other).await.expect("begin");
    let source = Source::builder().address(name.as_str()).build();
    assert_eq!(
        receiver_refusal(&mut refusals, source).await,
        AmqpError::ResourceLocked.into()
    );
    let mut receiver = Receiver::attach(&mut owner_session, "answers", name.as_str())
        .await
        .expect("receiver");
    let delivery = next_delivery::<String>(&mut receiver).await;
    assert_eq!(delivery.body(), "a reply");
    receiver.accept(&delivery).await.expect("accept");
    other.close().await.expect("close");
    owner.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_queue_goes_with_its_messages_when_its_creator_link_detaches() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let (creator, name) = create(&mut session, "creator", QUEUE).await;
    send(&mut session, &name, "left behind").await;
    // TemporaryQueue.delete(): the creator link detaches, closed.
    creator.close().await.expect("detach");
    assert!(is_gone(broker.addr, &name).await, "answered after deletion");
    // Its name is not reused: a new temporary is a new, empty node.
    let (_creator, again) = create(&mut session, "creator-2", QUEUE).await;
    assert_ne!(name, again);
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_queue_goes_when_its_session_ends() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let (_creator, name) = create(&mut session, "creator", QUEUE).await;
    session.end().await.expect("end");
    assert!(
        is_gone(broker.addr, &name).await,
        "the end is answered after deletion"
    );
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_queue_goes_when_its_connection_closes_or_drops() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut closed, mut session) = connect_session(broker.addr).await;
    let (_creator, name) = create(&mut session, "creator", QUEUE).await;
    closed.close().await.expect("close");
    until_gone(broker.addr, &name).await;

    // A connection whose socket goes without a close: a proxy between the client and the
    // broker, aborted.
    let (client_end, proxy_end) = tokio::io::duplex(64 * 1024);
    let mut upstream = TcpStream::connect(broker.addr).await.expect("tcp");
    let proxy = tokio::spawn(async move {
        let mut proxy_end = proxy_end;
        let _ = tokio::io::copy_bidirectional(&mut proxy_end, &mut upstream).await;
    });
    let mut dropped = Connection::builder()
        .container_id("dropped")
        .open_with_stream(client_end)
        .await
        .expect("open");
    let mut session = Session::begin(&mut dropped).await.expect("begin");
    let (_creator, name) = create(&mut session, "creator", QUEUE).await;
    assert!(!is_gone(broker.addr, &name).await);
    proxy.abort();
    until_gone(broker.addr, &name).await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_topic_is_made_sent_to_and_deleted() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let (creator, name) = create(&mut session, "creator", TOPIC).await;
    assert!(name.starts_with("$temp-topic-"), "{name}");
    let (mut other, mut other_session) = connect_session(broker.addr).await;
    // A topic without subscriptions takes messages and keeps none.
    send(&mut other_session, &name, "published").await;
    creator.close().await.expect("detach");
    assert!(is_gone(broker.addr, &name).await);
    other.close().await.expect("close");
    connection.close().await.expect("close");
    broker.stop().await;
}

/// The source of a Qpid JMS consumer of the temporary topic `name`: a JMS consumer of a topic
/// (its capability says so) gets a subscription of its own.
fn temporary_topic_source(name: &str) -> Source {
    let mut source = Source::builder().address(name).build();
    source.capabilities = Some(Array(vec![Symbol::from(TOPIC)]));
    source
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_topic_delivers_to_a_consumer_of_its_connection_only() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let (_creator, name) = create(&mut session, "creator", TOPIC).await;
    let mut consumer = Receiver::builder()
        .name("consumer")
        .source(temporary_topic_source(&name))
        .attach(&mut session)
        .await
        .expect("the creating connection consumes from its temporary topic");
    let (mut other, mut other_session) = connect_session(broker.addr).await;
    send(&mut other_session, &name, "published").await;
    let delivery = next_delivery::<String>(&mut consumer).await;
    assert_eq!(delivery.body(), "published");
    consumer.accept(&delivery).await.expect("accept");
    let mut refused = Session::begin(&mut other).await.expect("begin");
    assert_eq!(
        receiver_refusal(&mut refused, temporary_topic_source(&name)).await,
        AmqpError::ResourceLocked.into()
    );
    other.close().await.expect("close");
    connection.close().await.expect("close");
    broker.stop().await;
}

/// A durable JMS consumer of another connection's temporary topic is refused before the
/// subscription it names is made: none is left on the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_connections_durable_consumer_of_a_temporary_topic_leaves_no_subscription() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let (_creator, name) = create(&mut session, "creator", TOPIC).await;
    let (mut other, mut other_session) = connect_session(broker.addr).await;
    let mut durable = temporary_topic_source(&name);
    durable.durable = TerminusDurability::UnsettledState;
    durable.expiry_policy = TerminusExpiryPolicy::Never;
    assert_eq!(
        receiver_refusal(&mut other_session, durable).await,
        AmqpError::ResourceLocked.into()
    );
    // The subscription Qpid JMS's naming gives that consumer (link name, client id, durable).
    let subscription = format!("{name}/Subscriptions/refused-receiver$tidebus-test$D");
    let source = Source::builder().address(subscription.as_str()).build();
    assert_eq!(
        receiver_refusal(&mut session, source).await,
        AmqpError::NotFound.into(),
        "a subscription was made for a consumer the topic refused"
    );
    other.close().await.expect("close");
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_a_bounded_number_of_temporaries() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let mut creators = Vec::new();
    for i in 0..PER_CONNECTION {
        let kind = if i % 2 == 0 { QUEUE } else { TOPIC };
        creators.push(create(&mut session, &format!("creator-{i}"), kind).await);
    }
    // One session per refusal: fe2o3-amqp reuses a refused link's handle too early.
    let mut refused = Session::begin(&mut connection).await.expect("begin");
    let target = dynamic_target(QUEUE, DeleteOnClose::new().into());
    assert_eq!(
        sender_refusal(&mut refused, target).await,
        AmqpError::ResourceLimitExceeded.into()
    );
    // Another connection has a bound of its own.
    let (mut other, mut other_session) = connect_session(broker.addr).await;
    let _elsewhere = create(&mut other_session, "elsewhere", QUEUE).await;
    // Deleting one makes room for one.
    let (creator, name) = creators.pop().expect("one");
    creator.close().await.expect("detach");
    assert!(is_gone(broker.addr, &name).await);
    let _one_more = create(&mut session, "one-more", QUEUE).await;
    other.close().await.expect("close");
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporaries_count_toward_the_entity_quota() {
    let mut config = config_with_queues(&["q"]);
    // Room for one more entity than the file declares.
    config.broker.max_entities = config.queues.len() + config.topics.len() + 1;
    let broker = TestBroker::start(config).await;
    let (mut connection, mut session) = connect_session(broker.addr).await;
    let (_creator, _name) = create(&mut session, "creator", QUEUE).await;
    let mut refused = Session::begin(&mut connection).await.expect("begin");
    let target = dynamic_target(TOPIC, DeleteOnClose::new().into());
    assert_eq!(
        sender_refusal(&mut refused, target).await,
        AmqpError::ResourceLimitExceeded.into()
    );
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_nodes_other_than_temporary_queues_and_topics_are_refused_as_not_implemented() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let (mut connection, _session) = connect_session(broker.addr).await;
    let not_implemented = ErrorCondition::from(AmqpError::NotImplemented);
    // A receiver asking for a node made for it (proton's dynamic receiver).
    let mut first = Session::begin(&mut connection).await.expect("begin");
    let source = Source::builder().dynamic(true).build();
    assert_eq!(receiver_refusal(&mut first, source).await, not_implemented);
    // A lifetime the broker does not keep.
    let mut second = Session::begin(&mut connection).await.expect("begin");
    let target = dynamic_target(QUEUE, DeleteOnNoLinks::new().into());
    assert_eq!(sender_refusal(&mut second, target).await, not_implemented);
    // A node of no kind the broker makes.
    let mut third = Session::begin(&mut connection).await.expect("begin");
    let target = dynamic_target("shared-queue", DeleteOnClose::new().into());
    assert_eq!(sender_refusal(&mut third, target).await, not_implemented);
    // The connection still works.
    let mut fourth = Session::begin(&mut connection).await.expect("begin");
    let (_creator, _) = create(&mut fourth, "creator", QUEUE).await;
    connection.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn making_a_temporary_needs_send_and_listen_on_the_namespace() {
    use fe2o3_amqp::sasl_profile::SaslProfile;
    let config = "[broker]\ndurability = \"memory\"\nallow_anonymous = false\n\n\
                  [[shared_access_policies]]\nname = \"sender\"\nkey = \"k1\"\nrights = [\"Send\"]\n\n\
                  [[shared_access_policies]]\nname = \"both\"\nkey = \"k2\"\nrights = [\"Send\", \"Listen\"]\n\n\
                  [[queues]]\nname = \"q\"\n\
                  [[queues.shared_access_policies]]\nname = \"owner\"\nkey = \"k3\"\n\
                  rights = [\"Manage\", \"Send\", \"Listen\"]\n";
    let config = tidebus::config::Config::parse(config, "test").expect("config");
    let broker = TestBroker::start(config).await;
    let addr = broker.addr;
    let connect = |username: &str, password: &str| {
        let profile = SaslProfile::Plain {
            username: username.into(),
            password: password.into(),
        };
        async move {
            let stream = TcpStream::connect(addr).await.expect("tcp");
            let mut connection: ConnectionHandle<()> = Connection::builder()
                .container_id("rights")
                .sasl_profile(profile)
                .open_with_stream(stream)
                .await
                .expect("open");
            let session = Session::begin(&mut connection).await.expect("begin");
            (connection, session)
        }
    };
    // Send alone, and every right on one queue only: refused.
    for (user, key) in [("sender", "k1"), ("owner", "k3")] {
        let (mut connection, mut session) = connect(user, key).await;
        let target = dynamic_target(QUEUE, DeleteOnClose::new().into());
        assert_eq!(
            sender_refusal(&mut session, target).await,
            AmqpError::UnauthorizedAccess.into(),
            "{user}"
        );
        connection.close().await.expect("close");
    }
    let (mut connection, mut session) = connect("both", "k2").await;
    let (_creator, name) = create(&mut session, "creator", QUEUE).await;
    let mut receiver = Receiver::attach(&mut session, "answers", name.as_str())
        .await
        .expect("receiver");
    send(&mut session, &name, "allowed").await;
    assert_eq!(
        next_delivery::<String>(&mut receiver).await.body(),
        "allowed"
    );
    connection.close().await.expect("close");
    broker.stop().await;
}

/// Whether any tree of the database in `data` (the broker stopped), by its name or one of its
/// keys, names a temporary entity.
fn store_names_a_temporary(data: &Path) -> bool {
    let conf = std::fs::read(data.join("conf")).expect("sled's conf");
    let segment_size = String::from_utf8_lossy(&conf)
        .lines()
        .find_map(|line| line.strip_prefix("segment_size: ")?.trim().parse().ok())
        .expect("a segment size");
    let db = sled::Config::new()
        .path(data)
        .segment_size(segment_size)
        .open()
        .expect("open the stopped broker's database");
    let names = |bytes: &[u8]| String::from_utf8_lossy(bytes).contains("$temp-");
    db.tree_names().iter().any(|tree| {
        names(tree)
            || (db.open_tree(tree).expect("tree").iter().keys())
                .any(|key| names(&key.expect("key")))
    })
}

/// A connection holding a temporary queue through its creator link.
struct Holding {
    _connection: ConnectionHandle<()>,
    _session: SessionHandle<()>,
    _creator: Sender,
}

/// Creates a temporary queue on the broker at `addr` and sends it a message; returns what
/// holds it open (dropping it would detach the creator) and the queue's name.
async fn temporary_with_a_message(addr: SocketAddr) -> (Holding, String) {
    let (connection, mut session) = connect_session(addr).await;
    let (creator, name) = create(&mut session, "creator", QUEUE).await;
    send(&mut session, &name, "durable, but temporary").await;
    let holding = Holding {
        _connection: connection,
        _session: session,
        _creator: creator,
    };
    (holding, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_is_not_back_after_a_crash_or_a_stop_and_leaves_nothing_in_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let config = "[broker]\ndurability = \"sync\"\nallow_anonymous = true\n\n\
                  [[queues]]\nname = \"q\"\n";
    let broker = ChildBroker::start(dir.path(), config);
    let (_crashed_holder, crashed) = temporary_with_a_message(broker.addr).await;
    broker.kill9();
    assert!(
        store_names_a_temporary(&data),
        "a crash leaves the temporary's log and times behind"
    );
    let broker = ChildBroker::start(dir.path(), config);
    assert!(
        is_gone(broker.addr, &crashed).await,
        "not back after a crash"
    );
    let (_stopped_holder, stopped) = temporary_with_a_message(broker.addr).await;
    let status = broker.terminate();
    assert!(status.success(), "{status}");
    let broker = ChildBroker::start(dir.path(), config);
    assert!(
        is_gone(broker.addr, &stopped).await,
        "not back after a stop"
    );
    assert!(broker.terminate().success());
    assert!(
        !store_names_a_temporary(&data),
        "the restarts left nothing of the temporaries in the store"
    );
}
