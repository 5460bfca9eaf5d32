//! The registry's tests: entities declared, created, updated and deleted, what a restart
//! brings back, and partitioned entities.

use super::*;
use crate::entity::handle::{EntityEvent, Sending, Ticket};
use crate::store::Log;

/// A registry on `dir` in `sync` mode whose config file declares `declared`; run `body`
/// with it, then stop its actors; what `body` returns.
async fn with_registry<F, Fut, T>(dir: &std::path::Path, declared: &[Declaration], body: F) -> T
where
    F: FnOnce(Registry) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut config = Config::embedded_default();
    config.broker.data_dir = dir.to_path_buf();
    config.broker.durability = Durability::Sync;
    config.queues.clear();
    config.topics.clear();
    for declaration in declared.iter().cloned() {
        match declaration {
            Declaration::Queue(queue) => config.queues.push(queue),
            Declaration::Topic(topic) => config.topics.push(topic),
        }
    }
    // The test may have had it open a moment ago (a run before, or its own writes).
    let store = Store::reopen(&config.broker).expect("store");
    let (flusher, flusher_thread) = store.flusher().expect("flusher").unzip();
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let registry =
        Registry::start(&config, &store, flusher.as_ref(), &shutdown, &tracker).expect("start");
    drop(flusher);
    let out = body(registry).await;
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    store.flush_blocking().expect("flush");
    // The next run opens the database again: wait until it is closed.
    drop(store);
    if let Some(thread) = flusher_thread {
        let closed =
            tokio::task::spawn_blocking(move || thread.wait(std::time::Duration::from_secs(30)))
                .await
                .expect("wait task");
        assert!(closed, "the flusher thread let go of the database");
    }
    out
}

fn queue(name: &str) -> Declaration {
    let mut queue = Config::embedded_default().queues[0].clone();
    queue.name = name.to_owned();
    queue.max_delivery_count = 4;
    Declaration::Queue(queue)
}

/// A subscription with the defaults, `$Default` its rule, delivering `max_delivery_count`
/// times.
fn subscription(name: &str, max_delivery_count: u32) -> SubscriptionConfig {
    let mut subscription = Config::embedded_default().topics[0].subscriptions[0].clone();
    subscription.name = name.to_owned();
    subscription.max_delivery_count = max_delivery_count;
    subscription.rules.clear();
    subscription
}

/// A topic declaring `subscriptions`, each delivering 10 times.
fn topic(name: &str, subscriptions: &[&str]) -> Declaration {
    let mut topic = Config::embedded_default().topics[0].clone();
    topic.name = name.to_owned();
    topic.subscriptions = subscriptions.iter().map(|s| subscription(s, 10)).collect();
    Declaration::Topic(topic)
}

/// The subscriptions a registry's topic runs, each with its delivery limit; every one has
/// its lanes in the topic's actor.
fn subscriptions(registry: &Registry, topic: &str) -> Vec<(String, u32)> {
    let entry = registry.entry(topic).expect("the topic");
    let Declaration::Topic(declaration) = &entry.declaration else {
        panic!("a topic");
    };
    let names = declaration.subscriptions.iter().map(|subscription| {
        assert!(entry.handle.subscription(&subscription.name).is_some());
        (subscription.name.clone(), subscription.max_delivery_count)
    });
    names.collect()
}

fn pairs(expected: &[(&str, u32)]) -> Vec<(String, u32)> {
    let owned = expected
        .iter()
        .map(|(name, count)| ((*name).to_owned(), *count));
    owned.collect()
}

#[tokio::test]
async fn a_declared_topic_keeps_the_subscriptions_created_at_run_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = [topic("events", &["all", "picky"])];
    with_registry(dir.path(), &file, |registry| async move {
        let made = subscription("made", 3);
        registry
            .add_subscription("events", made)
            .await
            .expect("added");
        registry
            .remove_subscription("events", "picky")
            .await
            .expect("removed");
        let Some(Declaration::Topic(mut changed)) =
            registry.entry("events").map(|entry| entry.declaration)
        else {
            panic!("a topic");
        };
        changed.subscriptions[0].max_delivery_count = 7;
        let changed = Declaration::Topic(changed);
        registry.update(&changed).await.expect("updated");
        assert_eq!(
            subscriptions(&registry, "events"),
            pairs(&[("all", 7), ("made", 3)])
        );
    })
    .await;
    with_registry(dir.path(), &file, |registry| async move {
        assert_eq!(
            subscriptions(&registry, "events"),
            pairs(&[("all", 10), ("picky", 10), ("made", 3)]),
            "the file's subscriptions with their settings, a deleted one back, and the one \
             created at run time"
        );
    })
    .await;
    // The file declares it now: the file's settings apply, and it is the file's.
    let declaring = [topic("events", &["all", "made"])];
    with_registry(dir.path(), &declaring, |registry| async move {
        assert_eq!(
            subscriptions(&registry, "events"),
            pairs(&[("all", 10), ("made", 10)])
        );
    })
    .await;
    with_registry(dir.path(), &file, |registry| async move {
        assert_eq!(
            subscriptions(&registry, "events"),
            pairs(&[("all", 10), ("picky", 10)]),
            "no longer stored as created at run time"
        );
    })
    .await;
}

#[tokio::test]
async fn a_reloaded_file_takes_over_the_subscriptions_it_declares() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = [topic("events", &["all", "picky"])];
    with_registry(dir.path(), &file, |registry| async move {
        for name in ["made", "other"] {
            let added = registry.add_subscription("events", subscription(name, 3));
            added.await.expect("added");
        }
        // A reload's file declares `made`, and no longer `picky`.
        let reloaded = topic("events", &["all", "made"]);
        registry.declare(&reloaded).await.expect("declared");
    })
    .await;
    let file = [topic("events", &["all"])];
    with_registry(dir.path(), &file, |registry| async move {
        assert_eq!(
            subscriptions(&registry, "events"),
            pairs(&[("all", 10), ("other", 3)]),
            "`made` became the file's; `picky` was never created at run time"
        );
    })
    .await;
}

/// Lets the clock's milliseconds move on.
async fn tick() {
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
}

#[tokio::test]
async fn times_are_stored_moved_by_what_an_update_changes_and_forgotten_on_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = [queue("declared"), topic("events", &["all"])];
    let first = with_registry(dir.path(), &file, |registry| async move {
        let queue = registry.times("DECLARED", None).expect("a queue's times");
        assert_eq!(queue.created_ms, queue.updated_ms);
        let topic = registry.times("events", None).expect("a topic's times");
        let all = registry
            .times("events", Some("ALL"))
            .expect("a subscription's");
        (queue, topic, all)
    })
    .await;
    tick().await;
    let (queue, topic, all) = first;
    let updated = with_registry(dir.path(), &file, move |registry| async move {
        assert_eq!(registry.times("declared", None), Some(queue), "kept");
        assert_eq!(registry.times("events", None), Some(topic));
        assert_eq!(registry.times("events", Some("all")), Some(all));

        let Some(Declaration::Queue(mut changed)) =
            registry.entry("declared").map(|entry| entry.declaration)
        else {
            panic!("a queue");
        };
        changed.max_delivery_count = 9;
        let changed = Declaration::Queue(changed);
        registry.update(&changed).await.expect("updated");
        let updated = registry.times("declared", None).expect("times");
        assert_eq!(updated.created_ms, queue.created_ms);
        assert!(updated.updated_ms > queue.updated_ms, "moved");
        tick().await;
        registry.update(&changed).await.expect("updated");
        let unchanged = registry.times("declared", None);
        assert_eq!(unchanged, Some(updated), "nothing changed: nothing moves");

        let Some(Declaration::Topic(mut events)) =
            registry.entry("events").map(|entry| entry.declaration)
        else {
            panic!("a topic");
        };
        events.subscriptions[0].max_delivery_count = 2;
        registry
            .update(&Declaration::Topic(events))
            .await
            .expect("updated");
        let moved = registry.times("events", Some("all")).expect("times");
        assert!(
            moved.updated_ms > all.updated_ms,
            "the subscription's moved"
        );
        assert_eq!(
            registry.times("events", None),
            Some(topic),
            "not the topic's"
        );

        let made = subscription("made", 3);
        registry
            .add_subscription("events", made)
            .await
            .expect("added");
        let made = registry.times("events", Some("made")).expect("times");
        assert!(made.created_ms > topic.created_ms);
        registry
            .remove_subscription("events", "made")
            .await
            .expect("removed");
        assert_eq!(registry.times("events", Some("made")), None);
        registry.delete("events").await.expect("deleted");
        assert_eq!(registry.times("events", None), None);
        assert_eq!(registry.times("events", Some("all")), None);
        updated
    })
    .await;
    with_registry(dir.path(), &file, |registry| async move {
        assert_eq!(registry.times("declared", None), Some(updated), "stored");
        let back = registry
            .times("events", None)
            .expect("the file declares it again");
        assert!(back.created_ms > topic.created_ms, "a new topic");
    })
    .await;
}

#[tokio::test]
async fn entities_created_at_run_time_come_back_until_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    with_registry(dir.path(), &[queue("declared")], |registry| async move {
        assert!(registry.lookup("Made").is_none());
        registry.create(&queue("Made"), false).expect("created");
        assert!(registry.lookup("made").is_some(), "names ignore case");
        assert!(matches!(
            registry.create(&queue("MADE"), false),
            Err(RegistryError::Exists(_))
        ));
        assert!(matches!(
            registry.create(&queue("Declared"), false),
            Err(RegistryError::Exists(_)),
        ));
    })
    .await;
    with_registry(dir.path(), &[queue("declared")], |registry| async move {
        assert!(registry.lookup("made").is_some(), "back after a restart");
        assert_eq!(registry.len(), 2);
        registry.delete("MADE").await.expect("deleted");
        assert!(registry.lookup("made").is_none());
        assert!(matches!(
            registry.delete("made").await,
            Err(RegistryError::NotFound(_))
        ));
        registry
            .delete("declared")
            .await
            .expect("a declared one too");
    })
    .await;
    with_registry(dir.path(), &[queue("declared")], |registry| async move {
        assert!(
            registry.lookup("made").is_none(),
            "a deleted one stays gone"
        );
        assert!(
            registry.lookup("declared").is_some(),
            "the file declares it again"
        );
    })
    .await;
}

#[tokio::test]
async fn temporaries_are_never_declared_in_the_store_nor_back_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (temporary_queue, temporary_topic) = ("$temp-queue-c-1", "$temp-topic-c-2");
    with_registry(dir.path(), &[], |registry| async move {
        registry
            .create(&queue(temporary_queue), false)
            .expect("queue");
        let Declaration::Topic(mut topic) = topic(temporary_topic, &[]) else {
            panic!("a topic");
        };
        registry
            .create(&Declaration::Topic(topic.clone()), false)
            .expect("topic");
        topic.default_message_time_to_live = Some(std::time::Duration::from_secs(60));
        registry
            .update(&Declaration::Topic(topic))
            .await
            .expect("updated");
        let consumer = subscription("jms$$ND", 10);
        (registry.add_subscription(temporary_topic, consumer).await)
            .expect("a JMS consumer's subscription on a temporary topic");
        assert!(registry.times(temporary_topic, None).is_some());
        assert_eq!(registry.len(), 2);
        let store = registry.store().expect("store");
        assert!(store.declarations().expect("declarations").is_empty());
        assert_eq!(store.times().expect("times").len(), 3, "times are stored");
        // Left live: as if the broker crashed with their connections open.
    })
    .await;
    with_registry(dir.path(), &[], |registry| async move {
        assert!(registry.is_empty(), "not back after a restart");
        let store = registry.store().expect("store");
        assert!(store.times().expect("times").is_empty(), "their times went");
    })
    .await;
}

/// A partitioned queue named `name` with `partitions` partitions.
fn partitioned(name: &str, partitions: u16) -> Declaration {
    let Declaration::Queue(mut queue) = queue(name) else {
        unreachable!("a queue")
    };
    queue.partitions = Some(partitions);
    Declaration::Queue(queue)
}

/// A message with a partition key (and a body naming it `n`).
fn keyed(key: &str, n: u8) -> crate::message::Arrival {
    let mut arrival =
        crate::message::Arrival::bare(bytes::Bytes::from(vec![0x00, 0x53, 0x75, 0xa0, 0x01, n]));
    arrival.partition_key = Some(key.to_owned());
    arrival
}

/// A partition key `partitions` sends to partition `partition`.
fn key_of(partition: usize, partitions: usize) -> String {
    (0..)
        .map(|i| format!("key-{i}"))
        .find(|key| crate::entity::partition::of_key(key.as_bytes(), partitions) == partition)
        .expect("a key")
}

/// Sends `messages` to `handle`; panics unless stored.
async fn send_all(handle: &EntityHandle, messages: Vec<crate::message::Arrival>) {
    for message in messages {
        let (events, mut answers) = tokio::sync::mpsc::unbounded_channel();
        let ticket = Ticket {
            link: 1,
            request: 1,
        };
        let command = Command::send(vec![message], Some(ticket), events);
        handle.post(command).await.expect("posted");
        match answers.recv().await {
            Some(EntityEvent::Sent { results }) if results == [(ticket, Ok(()))] => {}
            other => panic!("not stored: {other:?}"),
        }
    }
}

/// One send command's transfers (a connection's turn) go each to its partition and are each
/// answered; a batch whose messages belong in different partitions is refused alone.
#[tokio::test]
async fn a_turns_sends_go_each_to_its_partition_and_are_answered_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let declared = [partitioned("p", 2)];
    with_registry(dir.path(), &declared, |registry| async move {
        let handle = registry.lookup("p").expect("live");
        let (first, second) = (key_of(0, 2), key_of(1, 2));
        let ticket = |request| Ticket { link: 1, request };
        let sending = |messages, request| Sending {
            messages,
            ticket: Some(ticket(request)),
        };
        let (events, mut answers) = tokio::sync::mpsc::unbounded_channel();
        let transfers = vec![
            sending(vec![keyed(&second, 1)], 1),
            sending(vec![keyed(&first, 2), keyed(&second, 3)], 2),
            sending(vec![keyed(&first, 4)], 3),
        ];
        let command = Command::Send { transfers, events };
        handle.post(command).await.expect("posted");
        let mut results = std::collections::BTreeMap::new();
        while results.len() < 3 {
            match answers.recv().await {
                Some(EntityEvent::Sent { results: some }) => results.extend(
                    some.into_iter()
                        .map(|(ticket, result)| (ticket.request, result.is_ok())),
                ),
                other => panic!("not a send's answer: {other:?}"),
            }
        }
        assert_eq!(
            results,
            [(1, true), (2, false), (3, true)].into(),
            "the mixed batch alone is refused"
        );
        let partition_of = |seq: i64| seq >> 48;
        let peeked = peeked_numbers(&registry, "p", 0).await;
        let mut partitions: Vec<i64> = peeked.into_iter().map(partition_of).collect();
        partitions.sort_unstable();
        assert_eq!(partitions, [0, 1], "one message in each partition");
    })
    .await;
}

/// A message whose application property `colour` is `colour`.
fn coloured(colour: &str) -> crate::message::Arrival {
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Data};
    let mut properties = ApplicationProperties::default();
    properties.insert(
        "colour".to_owned(),
        fe2o3_amqp::types::primitives::SimpleValue::String(colour.to_owned()),
    );
    let mut bytes = serde_amqp::to_vec(&properties).expect("properties");
    let body = Data(colour.as_bytes().to_vec().into());
    bytes.extend(serde_amqp::to_vec(&body).expect("body"));
    crate::message::inspect(bytes::Bytes::from(bytes)).expect("a valid message")
}

/// A topic tells its connections whether its rules read the messages sent to it: not with
/// true filters alone (they decode nothing then), yes once a SQL rule is added, no again once
/// it is gone. A message that comes without what they read (a connection that had not been
/// told yet sends none) is read by the topic itself and filtered all the same.
#[tokio::test]
async fn a_topic_tells_whether_its_rules_read_messages_and_reads_one_sent_without() {
    use crate::entity::topic::Rule;
    use crate::filter::{Filter, SqlFilter};
    let dir = tempfile::tempdir().expect("tempdir");
    let file = [topic("events", &["all", "red"])];
    with_registry(dir.path(), &file, |registry| async move {
        let handle = registry.lookup("events").expect("live");
        let rule = |name: &str, filter| Rule {
            name: name.to_owned(),
            filter,
            action: None,
            created_ms: 0,
            local_times: Default::default(),
        };
        let add = |subscription, rule| {
            let registry = &registry;
            async move {
                let add = Operation::AddRule { rule };
                registry.manage("events", subscription, add).await
            }
        };
        add("all", rule("everything", Filter::True))
            .await
            .expect("added");
        assert!(!handle.rules_read_messages(), "a true filter reads nothing");
        let sql = SqlFilter::parse("colour = 'red'").expect("parses");
        add("red", rule("red", Filter::Sql(sql)))
            .await
            .expect("added");
        assert!(handle.rules_read_messages(), "a SQL filter reads");
        send_all(&handle, vec![coloured("red"), coloured("blue")]).await;
        let count = |path| {
            let registry = &registry;
            async move { peeked_numbers(registry, path, 0).await.len() }
        };
        assert_eq!(count("events/Subscriptions/all").await, 2);
        assert_eq!(
            count("events/Subscriptions/red").await,
            1,
            "blue filtered out"
        );
        let remove = Operation::RemoveRule {
            name: "red".to_owned(),
        };
        registry
            .manage("events", "red", remove)
            .await
            .expect("removed");
        assert!(!handle.rules_read_messages(), "no rule reads any more");
    })
    .await;
}

/// The sequence numbers `peek-message` shows from `from`, in its order.
async fn peeked_numbers(registry: &Registry, path: &str, from: i64) -> Vec<i64> {
    let peek = Operation::Peek {
        from,
        count: 100,
        session: None,
    };
    let Ok(Answer::Peeked(messages)) = registry.operate(path, peek).await else {
        panic!("peeked");
    };
    messages
        .iter()
        .map(|bytes| {
            crate::message::annotation_number(bytes, crate::wire::annotation::SEQUENCE_NUMBER)
                .expect("a sequence number")
        })
        .collect()
}

#[tokio::test]
async fn a_partition_numbers_across_its_48_bit_rollover_and_keeps_order_lookup_and_recovery() {
    const LIMIT: i64 = 1 << 48;
    let dir = tempfile::tempdir().expect("tempdir");
    let declared = [partitioned("p", 2)];
    let key = key_of(1, 2);
    // The second partition has numbered all but two of its 48-bit numbers.
    {
        let mut config = Config::embedded_default();
        config.broker.data_dir = dir.path().to_path_buf();
        config.broker.durability = Durability::Sync;
        let store = Store::open(&config.broker).expect("store");
        let mut log = store.partition_log("p", 1).expect("log");
        log.write(vec![(
            LaneId::MAIN,
            crate::store::Change::NextSeq(LIMIT - 2),
        )])
        .expect("written");
        store.flush_blocking().expect("flushed");
    }
    let number = |n: i64| (1 << 48) | n;
    with_registry(dir.path(), &declared, |registry| {
        let key = key.clone();
        async move {
            let handle = registry.lookup("p").expect("live");
            let messages = (1..=4).map(|n| keyed(&key, n)).collect();
            send_all(&handle, messages).await;
            let sent = [number(LIMIT - 2), number(LIMIT - 1), number(0), number(1)];
            assert_eq!(
                peeked_numbers(&registry, "p", 0).await,
                sent,
                "in send order"
            );
            assert_eq!(
                peeked_numbers(&registry, "p", number(LIMIT - 1)).await,
                sent[1..],
                "a peek from a number before the rollover goes on past it"
            );
            // A scheduled message's number carries the partition; it cancels by that number.
            let mut scheduled = keyed(&key, 9);
            scheduled.scheduled_ms = Some(crate::clock::now_ms() + 3_600_000);
            let schedule = Operation::Schedule {
                messages: vec![scheduled],
            };
            let answer = registry.operate("p", schedule).await.expect("scheduled");
            assert_eq!(answer, Answer::Scheduled(vec![number(2)]));
            let cancel = Operation::CancelScheduled {
                seqs: vec![number(2)],
            };
            assert_eq!(
                registry.operate("p", cancel).await.expect("cancelled"),
                Answer::Done
            );
            // Deferred on both sides of the rollover, then received by their numbers.
            let (events, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
            let consumer = crate::entity::handle::ConsumerId::at(7, 1);
            let add = Command::peek_lock_consumer(consumer, events);
            handle.post(add).await.expect("added");
            handle
                .post(Command::Credit { consumer, limit: 4 })
                .await
                .expect("credit");
            let mut received = Vec::new();
            while received.len() < 4 {
                if let Some(EntityEvent::Delivered(run)) = deliveries.recv().await {
                    received.extend(run);
                }
            }
            let shown: Vec<i64> = received
                .iter()
                .map(|delivery| match delivery.stamp.annotations[0].1 {
                    fe2o3_amqp::types::primitives::Value::Long(seq) => seq,
                    ref other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(shown, sent, "delivered in order across the rollover");
            assert!(received
                .iter()
                .all(|delivery| crate::entity::partition::of_token(
                    delivery.lock_token.expect("locked")
                ) == 1));
            let items = received
                .iter()
                .map(|delivery| {
                    let lock = crate::entity::handle::LockRef {
                        seq: delivery.seq,
                        token: delivery.lock_token.expect("locked"),
                    };
                    (lock, crate::entity::handle::Settlement::Defer(Vec::new()))
                })
                .collect();
            let settle = Command::Settle {
                consumer,
                items,
                reply: None,
                awaited: false,
            };
            handle.post(settle).await.expect("deferred");
            let receive = Operation::ReceiveBySequence {
                seqs: vec![number(0), number(LIMIT - 1)],
                mode: crate::entity::handle::ReceiveMode::ReceiveAndDelete,
                session: None,
            };
            let Ok(Answer::Received(taken)) = registry.operate("p", receive).await else {
                panic!("received by number");
            };
            let numbers: Vec<i64> = taken
                .iter()
                .map(|(_, bytes)| {
                    crate::message::annotation_number(
                        bytes,
                        crate::wire::annotation::SEQUENCE_NUMBER,
                    )
                    .expect("numbered")
                })
                .collect();
            assert_eq!(numbers, [number(0), number(LIMIT - 1)]);
            handle
                .post(Command::RemoveConsumer { consumer })
                .await
                .expect("removed");
        }
    })
    .await;
    // After a restart: the rest in order, and the next number is new.
    with_registry(dir.path(), &declared, |registry| async move {
        let handle = registry.lookup("p").expect("live");
        assert_eq!(
            peeked_numbers(&registry, "p", 0).await,
            [number(LIMIT - 2), number(1)]
        );
        send_all(&handle, vec![keyed(&key, 5)]).await;
        assert_eq!(
            peeked_numbers(&registry, "p", 0).await,
            [number(LIMIT - 2), number(1), number(3)],
            "number(2) went to the cancelled message: never given again"
        );
    })
    .await;
}
