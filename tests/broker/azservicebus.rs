//! The Rust Service Bus SDK `azservicebus` 0.25 (on fe2o3-amqp 0.14) against the real broker.
//!
//! Plain TCP needs the SDK's `unsecured` feature (`ServiceBusClient::unsecured()`); its client
//! types exist only with exactly one of `native-tls`/`rustls` on, though no TLS is used here.
//! The namespace is given as `127.0.0.1:<port>` with a named-key credential: the connection
//! string path keeps only the endpoint's host (the port is dropped), so it reaches 5672 alone.
//! Each link is authorised by a CBS `put-token` (`servicebus.windows.net:sastoken`, audience
//! `amqp://127.0.0.1:<port>/<entity>`); entities are named by full URL; peek-lock receivers
//! attach with `rcv-settle-mode second` and manual credit; received messages are settled on the
//! link (`accepted`, `modified` for abandon/defer, `rejected` + `com.microsoft:dead-letter`),
//! deferred ones through `<entity>/$management` `update-disposition`.
//!
//! The tests run on a current-thread runtime on purpose. fe2o3-amqp 0.14 registers an unsettled
//! delivery only after handing its transfer to the session (`link/sender_link.rs`,
//! `send_payload_with_transfer`), so on a multi-thread runtime the broker's immediate `accepted`
//! can arrive first and is dropped: `send` (a message, a `put-token` or a management request)
//! then hangs until the SDK's try-timeout. fe2o3-amqp 0.18.2 fixed it; the SDK still pins 0.14.
//! On one thread the registration happens before the broker can answer.

use std::future::Future;

use azservicebus::authorization::AzureNamedKeyCredential;
use azservicebus::core::BasicRetryPolicy;
use azservicebus::receiver::DeadLetterOptions;
use azservicebus::{
    ServiceBusClient, ServiceBusClientOptions, ServiceBusMessage, ServiceBusMessageState,
    ServiceBusPeekedMessage, ServiceBusReceivedMessage, ServiceBusReceiver,
    ServiceBusReceiverOptions, ServiceBusRetryOptions, SubQueue,
};
use tokio::time::timeout;

use crate::support::{config_with_queues, TestBroker, DEADLINE};

type Client = ServiceBusClient<BasicRetryPolicy>;

/// `fut`'s value; panics with `what` and the SDK's error, or if it takes over [`DEADLINE`].
async fn within<T, E: std::fmt::Debug>(what: &str, fut: impl Future<Output = Result<T, E>>) -> T {
    match timeout(DEADLINE, fut).await {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => panic!("{what}: {error:?}"),
        Err(_) => panic!("{what}: no answer within {DEADLINE:?}"),
    }
}

/// A client of `broker` over plain TCP with the embedded default's policy and key (the broker
/// verifies its tokens) and no retries, so that whatever the broker refuses shows at once.
async fn client(broker: &TestBroker) -> Client {
    let options = ServiceBusClientOptions {
        retry_options: ServiceBusRetryOptions {
            max_retries: 0,
            try_timeout: DEADLINE / 2,
            ..Default::default()
        },
        ..Default::default()
    };
    within(
        "connect",
        ServiceBusClient::unsecured().new_from_named_key_credential(
            format!("127.0.0.1:{}", broker.addr.port()),
            AzureNamedKeyCredential::new("RootManageSharedAccessKey", "SAS_KEY_VALUE"),
            options,
        ),
    )
    .await
}

/// A peek-lock receiver on `q` (or its dead-letter queue).
async fn open_receiver(client: &mut Client, sub_queue: SubQueue) -> ServiceBusReceiver {
    let options = ServiceBusReceiverOptions {
        sub_queue,
        ..Default::default()
    };
    within("receiver", client.create_receiver_for_queue("q", options)).await
}

/// Sends `bodies` to `q` in one call (more than one goes as a batch, message-format 0x80013700).
async fn send(client: &mut Client, bodies: &[&str]) {
    let mut sender = within("sender", client.create_sender("q", Default::default())).await;
    let messages: Vec<ServiceBusMessage> = bodies
        .iter()
        .map(|body| {
            let mut message = ServiceBusMessage::new(body.as_bytes());
            message.set_message_id(format!("id-{body}")).expect("id");
            message.set_subject(Some("greeting".to_string()));
            message
        })
        .collect();
    within("send", sender.send_messages(messages)).await;
    within("dispose sender", sender.dispose()).await;
}

/// The next message on `receiver`.
async fn next(receiver: &mut ServiceBusReceiver) -> ServiceBusReceivedMessage {
    within("receive", receiver.receive_message()).await
}

fn text(body: &[u8]) -> String {
    String::from_utf8(body.to_vec()).expect("utf-8")
}

fn received_text(message: &ServiceBusReceivedMessage) -> String {
    text(message.body().expect("one data section"))
}

fn peeked_text(message: &ServiceBusPeekedMessage) -> String {
    text(message.body().expect("one data section"))
}

/// Every message peekable from the start of `receiver`'s queue.
async fn peek_all(receiver: &mut ServiceBusReceiver) -> Vec<ServiceBusPeekedMessage> {
    within("peek", receiver.peek_messages(100, Some(1))).await
}

#[tokio::test(flavor = "current_thread")]
async fn send_receive_peek_lock_and_complete() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = client(&broker).await;
    send(&mut client, &["hello"]).await;
    let mut receiver = open_receiver(&mut client, SubQueue::None).await;

    let message = next(&mut receiver).await;
    assert_eq!(received_text(&message), "hello");
    assert_eq!(message.message_id().as_deref(), Some("id-hello"));
    assert_eq!(message.subject(), Some("greeting"));
    assert_eq!(message.delivery_count(), Some(1), "first delivery");
    assert_eq!(message.sequence_number(), 1);
    assert_ne!(message.lock_token().as_ref(), &[0u8; 16], "a lock token");
    let enqueued = message.enqueued_time();
    let locked_until = message.locked_until().expect("x-opt-locked-until");
    assert!(locked_until > enqueued, "{locked_until} after {enqueued}");
    assert!(matches!(message.state(), ServiceBusMessageState::Active));

    // Locked, not gone: a peek still sees it.
    let peeked = peek_all(&mut receiver).await;
    assert_eq!(peeked.len(), 1);

    within("complete", receiver.complete_message(&message)).await;
    assert!(
        peek_all(&mut receiver).await.is_empty(),
        "completed is gone"
    );

    within("dispose receiver", receiver.dispose()).await;
    within("dispose client", client.dispose()).await;
    broker.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn abandon_redelivers_with_a_higher_delivery_count() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = client(&broker).await;
    send(&mut client, &["again"]).await;
    let mut receiver = open_receiver(&mut client, SubQueue::None).await;

    let first = next(&mut receiver).await;
    assert_eq!(first.delivery_count(), Some(1));
    let properties = [("attempt".to_string(), 1i32.into())].into_iter().collect();
    within(
        "abandon",
        receiver.abandon_message(&first, Some(properties)),
    )
    .await;

    let second = next(&mut receiver).await;
    assert_eq!(received_text(&second), "again");
    assert_eq!(second.sequence_number(), first.sequence_number());
    assert_eq!(
        second.delivery_count(),
        Some(2),
        "abandon counts a delivery"
    );
    assert_ne!(second.lock_token(), first.lock_token(), "a fresh lock");
    let attempt = second
        .application_properties()
        .and_then(|properties| properties.0.get("attempt"))
        .map(|value| format!("{value:?}"));
    assert_eq!(
        attempt.as_deref(),
        Some("Int(1)"),
        "properties-to-modify applied"
    );
    within("complete", receiver.complete_message(&second)).await;
    assert!(peek_all(&mut receiver).await.is_empty());

    within("dispose receiver", receiver.dispose()).await;
    within("dispose client", client.dispose()).await;
    broker.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn dead_letter_with_reason_and_read_it_from_the_dead_letter_queue() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = client(&broker).await;
    send(&mut client, &["poison"]).await;
    let mut receiver = open_receiver(&mut client, SubQueue::None).await;

    let message = next(&mut receiver).await;
    let options = DeadLetterOptions {
        dead_letter_reason: Some("BadInput".to_string()),
        dead_letter_error_description: Some("cannot parse 'poison'".to_string()),
        properties_to_modify: None,
    };
    within(
        "dead-letter",
        receiver.dead_letter_message(&message, options),
    )
    .await;
    assert!(peek_all(&mut receiver).await.is_empty(), "gone from q");

    // `SubQueue::DeadLetter` addresses `q/$DeadLetterQueue`, and its management node for peeks.
    let mut dead = open_receiver(&mut client, SubQueue::DeadLetter).await;
    let peeked = peek_all(&mut dead).await;
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked_text(&peeked[0]), "poison");
    assert_eq!(peeked[0].dead_letter_reason(), Some("BadInput"));

    let dead_lettered = next(&mut dead).await;
    assert_eq!(received_text(&dead_lettered), "poison");
    assert_eq!(dead_lettered.message_id().as_deref(), Some("id-poison"));
    assert_eq!(dead_lettered.sequence_number(), message.sequence_number());
    assert_eq!(dead_lettered.dead_letter_reason(), Some("BadInput"));
    assert_eq!(
        dead_lettered.dead_letter_error_description(),
        Some("cannot parse 'poison'")
    );
    within(
        "complete dead-letter",
        dead.complete_message(&dead_lettered),
    )
    .await;
    assert!(
        peek_all(&mut dead).await.is_empty(),
        "completed from the DLQ"
    );

    within("dispose dlq receiver", dead.dispose()).await;
    within("dispose receiver", receiver.dispose()).await;
    within("dispose client", client.dispose()).await;
    broker.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn peek_pages_through_a_batch_without_locking_it() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = client(&broker).await;
    send(&mut client, &["one", "two", "three"]).await;
    let mut receiver = open_receiver(&mut client, SubQueue::None).await;

    // Without a starting point a receiver pages on from the last message it peeked.
    let mut paged = Vec::new();
    for _ in 0..3 {
        let page = within("peek next", receiver.peek_message(None)).await;
        paged.push(page.expect("a message to peek").sequence_number());
    }
    assert_eq!(paged, [1, 2, 3]);
    assert!(within("peek past the end", receiver.peek_message(None))
        .await
        .is_none());

    let all = peek_all(&mut receiver).await;
    let bodies: Vec<String> = all.iter().map(peeked_text).collect();
    assert_eq!(bodies, ["one", "two", "three"]);
    let seqs: Vec<i64> = all.iter().map(|m| m.sequence_number()).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(all[1].message_id().as_deref(), Some("id-two"));
    assert_eq!(all[1].subject(), Some("greeting"));

    // Peeking locked nothing: all three are received in order and completed.
    for expected in ["one", "two", "three"] {
        let message = next(&mut receiver).await;
        assert_eq!(received_text(&message), expected);
        assert_eq!(message.delivery_count(), Some(1), "peek is not a delivery");
        within("complete", receiver.complete_message(&message)).await;
    }
    assert!(peek_all(&mut receiver).await.is_empty());

    within("dispose receiver", receiver.dispose()).await;
    within("dispose client", client.dispose()).await;
    broker.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn deferred_message_is_settled_through_the_management_node() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut client = client(&broker).await;
    send(&mut client, &["later"]).await;
    let mut receiver = open_receiver(&mut client, SubQueue::None).await;

    let message = next(&mut receiver).await;
    within("defer", receiver.defer_message(&message, None)).await;
    let peeked = peek_all(&mut receiver).await;
    assert_eq!(peeked.len(), 1, "deferred messages are peekable");
    assert!(matches!(
        peeked[0].state(),
        ServiceBusMessageState::Deferred
    ));

    let deferred = within(
        "receive deferred",
        receiver.receive_deferred_message(message.sequence_number()),
    )
    .await
    .expect("the deferred message");
    assert_eq!(received_text(&deferred), "later");
    // Settled by `update-disposition` on `q/$management`, not on the link.
    within("complete deferred", receiver.complete_message(&deferred)).await;
    assert!(peek_all(&mut receiver).await.is_empty());

    within("dispose receiver", receiver.dispose()).await;
    within("dispose client", client.dispose()).await;
    broker.stop().await;
}

/// A `sync` broker on `data_dir` with topic `t` and subscriptions `s1` and `s2` (each with the
/// declared rule `$Default`).
pub(super) fn topic_config(data_dir: &std::path::Path) -> tidebus::config::Config {
    use tidebus::config::{
        Durability, EntityStatus, RuleConfig, RuleFilter, SubscriptionConfig, TopicConfig,
    };
    let mut config = config_with_queues(&["q"]);
    config.broker.durability = Durability::Sync;
    config.broker.data_dir = data_dir.to_path_buf();
    let subscription = |name: &str| SubscriptionConfig {
        name: name.into(),
        lock_duration: std::time::Duration::from_secs(60),
        max_delivery_count: 10,
        default_message_time_to_live: None,
        dead_lettering_on_message_expiration: false,
        requires_session: false,
        dead_lettering_on_filter_evaluation_exceptions: true,
        auto_delete_on_idle: None,
        enable_batched_operations: true,
        forward_to: None,
        forward_dead_lettered_messages_to: None,
        rules: vec![RuleConfig {
            name: "$Default".into(),
            filter: RuleFilter::True,
            action: None,
            parameters: Vec::new(),
            action_parameters: Vec::new(),
        }],
        status: EntityStatus::Active,
        user_metadata: None,
    };
    config.topics = vec![TopicConfig {
        name: "t".into(),
        default_message_time_to_live: None,
        max_size_in_megabytes: 1024,
        partitions: None,
        auto_delete_on_idle: None,
        enable_express: false,
        support_ordering: true,
        enable_batched_operations: true,
        requires_duplicate_detection: false,
        duplicate_detection_history_time_window: std::time::Duration::from_secs(600),
        shared_access_policies: Vec::new(),
        subscriptions: vec![subscription("s1"), subscription("s2")],
        status: EntityStatus::Active,
        user_metadata: None,
    }];
    config
}

async fn rule_names(client: &mut Client) -> Vec<String> {
    let mut rules = within("rule manager", client.create_rule_manager("t", "s1")).await;
    let listed = within("get rules", rules.get_rules()).await;
    within("dispose rule manager", rules.dispose()).await;
    listed.into_iter().map(|rule| rule.name).collect()
}

/// The subjects of every message peekable in subscription `name` of `t`.
async fn subscription_subjects(client: &mut Client, name: &str) -> Vec<String> {
    let options = ServiceBusReceiverOptions::default();
    let receiver = client.create_receiver_for_subscription("t", name, options);
    let mut receiver = within("subscription receiver", receiver).await;
    let peeked = peek_all(&mut receiver).await;
    within("dispose receiver", receiver.dispose()).await;
    peeked
        .iter()
        .map(|message| message.subject().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn rules_managed_at_run_time_pick_copies_and_outlive_a_restart() {
    use azservicebus::administration::SqlRuleFilter;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = TestBroker::start(topic_config(dir.path())).await;
    let mut first = client(&broker).await;
    assert_eq!(rule_names(&mut first).await, ["$Default"]);
    let mut rules = within("rule manager", first.create_rule_manager("t", "s1")).await;
    within("delete $Default", rules.delete_rule("$Default")).await;
    let red = SqlRuleFilter::new("sys.Label = 'red'");
    within("create rule", rules.create_rule("red", red)).await;
    within("dispose rule manager", rules.dispose()).await;
    assert_eq!(rule_names(&mut first).await, ["red"]);

    let mut sender = within("sender", first.create_sender("t", Default::default())).await;
    for subject in ["red", "blue"] {
        let mut message = ServiceBusMessage::new(subject.as_bytes());
        message.set_subject(Some(subject.to_string()));
        within("send", sender.send_message(message)).await;
    }
    within("dispose sender", sender.dispose()).await;
    assert_eq!(subscription_subjects(&mut first, "s1").await, ["red"]);
    assert_eq!(
        subscription_subjects(&mut first, "s2").await,
        ["red", "blue"]
    );
    within("dispose client", first.dispose()).await;
    broker.stop().await;

    // The rule added at run time is stored; the declared one removed at run time comes back.
    let broker = TestBroker::start(topic_config(dir.path())).await;
    let mut again = client(&broker).await;
    assert_eq!(rule_names(&mut again).await, ["$Default", "red"]);
    assert_eq!(subscription_subjects(&mut again, "s1").await, ["red"]);
    within("dispose client", again.dispose()).await;
    broker.stop().await;
}

/// `add-rule` through azservicebus's rule manager: a name the config and the administration
/// API refuse is refused here too (not stored, to come back after a restart), and a topic
/// holds at most Service Bus's 2,000 SQL filters while correlation filters still fit.
#[tokio::test(flavor = "current_thread")]
async fn added_rules_are_named_as_in_the_config_and_counted_against_the_topic() {
    use azservicebus::administration::{CorrelationRuleFilter, SqlRuleFilter};
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = TestBroker::start(topic_config(dir.path())).await;
    let mut client = client(&broker).await;
    let mut rules = within("rule manager", client.create_rule_manager("t", "s1")).await;
    for (name, why) in [
        ("a/b", "'/' is not allowed"),
        ("<b>", "'<' is not allowed"),
        (&"r".repeat(51) as &str, "at most 50 are allowed"),
    ] {
        let refused = timeout(DEADLINE, rules.create_rule(name, SqlRuleFilter::new("1=1")))
            .await
            .expect("an answer in time")
            .expect_err("a rule name Service Bus refuses");
        let text = format!("{refused:?}");
        assert!(
            text.contains("StatusCode(400)") && text.contains(why),
            "{name}: {text}"
        );
    }
    // Both subscriptions hold $Default (a SQL filter): 1,998 more reach the limit.
    for index in 0..1_998 {
        let filter = SqlRuleFilter::new(format!("n = {index}"));
        within(
            "create rule",
            rules.create_rule(format!("r{index}"), filter),
        )
        .await;
    }
    let refused = timeout(
        DEADLINE,
        rules.create_rule("over", SqlRuleFilter::new("1=1")),
    )
    .await
    .expect("an answer in time")
    .expect_err("a SQL filter past 2,000");
    let text = format!("{refused:?}");
    assert!(
        text.contains("StatusCode(403)") && text.contains("2000 SQL filters"),
        "{text}"
    );
    for subject in ["red", "blue"] {
        let correlation = CorrelationRuleFilter::builder().subject(subject).build();
        within("correlation rule", rules.create_rule(subject, correlation)).await;
    }
    within("dispose rule manager", rules.dispose()).await;
    // (2,001 rules: azservicebus pages by 100 and takes the 204 after a full last page for an
    // error.)
    assert_eq!(rule_names(&mut client).await.len(), 2_001);
    within("dispose client", client.dispose()).await;
    broker.stop().await;
}

/// Sessions through azservicebus: its next-available session (sent as a described null
/// filter) is the one with the oldest message, its messages come in order, state set and read
/// back, the session lock renewed; a named session after that.
#[tokio::test(flavor = "current_thread")]
async fn session_receivers_take_their_sessions_in_order_with_state() {
    use azservicebus::ServiceBusSessionReceiverOptions;
    let mut config = config_with_queues(&["sq"]);
    config.queues[0].requires_session = true;
    let broker = TestBroker::start(config).await;
    let mut client = client(&broker).await;
    let mut sender = within("sender", client.create_sender("sq", Default::default())).await;
    let messages: Vec<ServiceBusMessage> = [("a", "a-0"), ("b", "b-0"), ("a", "a-1")]
        .iter()
        .map(|(session, body)| {
            let mut message = ServiceBusMessage::new(body.as_bytes());
            message
                .set_session_id(session.to_string())
                .expect("session id");
            message
        })
        .collect();
    within("send", sender.send_messages(messages)).await;
    within("dispose sender", sender.dispose()).await;

    let options = ServiceBusSessionReceiverOptions::default();
    let mut first = within(
        "accept next session",
        client.accept_next_session_for_queue("sq", options.clone()),
    )
    .await;
    assert_eq!(first.session_id(), "a", "the oldest message is a's");
    for expected in ["a-0", "a-1"] {
        let message = within("receive", first.receive_message()).await;
        assert_eq!(received_text(&message), expected);
        assert_eq!(message.session_id(), Some("a"));
        within("complete", first.complete_message(&message)).await;
    }
    within("set state", first.set_session_state(b"done".to_vec())).await;
    assert_eq!(within("get state", first.session_state()).await, b"done");
    within("renew session lock", first.renew_session_lock()).await;
    within("dispose", first.dispose()).await;

    let mut named = within(
        "accept session b",
        client.accept_session_for_queue("sq", "b", options),
    )
    .await;
    let message = within("receive", named.receive_message()).await;
    assert_eq!(received_text(&message), "b-0");
    within("complete", named.complete_message(&message)).await;
    within("dispose", named.dispose()).await;
}
