//! Microsoft's emulator `Config.json`, unchanged, as the real binary's config: its entities
//! are served with their rules, and `check-config` accepts it or names what it refuses.

use std::process::Command;

use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Message, Properties};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};

use crate::child::ChildBroker;
use crate::support::{connect_session, next_delivery};

/// The shape of the emulator's sample file, as the repository keeps it.
const SAMPLE: &str = include_str!("../../config/emulator-config.json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_sample_serves_its_queue_and_topic_with_rules_and_actions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), SAMPLE);
    let (mut connection, mut session) = connect_session(broker.addr).await;

    let mut queue = Sender::attach(&mut session, "queue-sender", "queue.1")
        .await
        .expect("queue.1 exists");
    queue.send("to the queue").await.expect("send");
    let mut receiver = Receiver::attach(&mut session, "queue-receiver", "queue.1")
        .await
        .expect("receiver");
    let delivery: Delivery<Value> = next_delivery(&mut receiver).await;
    assert_eq!(delivery.body(), &Value::String("to the queue".into()));
    receiver.accept(&delivery).await.expect("accept");

    // subscription.4's SQL rule takes it and its action sets `to`; subscription.3 has none.
    let mut topic = Sender::attach(&mut session, "topic-sender", "topic.1")
        .await
        .expect("topic.1 exists");
    let message = Message::builder()
        .properties(
            Properties::builder()
                .message_id(String::from("123456"))
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("userProp1", "value1")
                .build(),
        )
        .value("to the topic")
        .build();
    topic.send(message).await.expect("send");
    for (subscription, to) in [("subscription.4", Some("Entity")), ("subscription.3", None)] {
        let address = format!("topic.1/Subscriptions/{subscription}");
        let mut receiver = Receiver::attach(&mut session, subscription, address)
            .await
            .expect("subscription exists");
        let delivery: Delivery<Value> = next_delivery(&mut receiver).await;
        let got = delivery
            .message()
            .properties
            .as_ref()
            .and_then(|properties| properties.to.clone());
        assert_eq!(got.as_deref(), to, "{subscription}");
        receiver.accept(&delivery).await.expect("accept");
        receiver.close().await.expect("detach");
    }
    connection.close().await.expect("close");
}

#[test]
fn check_config_reads_a_config_json_and_names_an_unknown_property() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("Config.json");
    let check = |text: &str| {
        std::fs::write(&path, text).expect("write");
        let output = Command::new(env!("CARGO_BIN_EXE_tidebus"))
            .arg("check-config")
            .arg(&path)
            .output()
            .expect("run check-config");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (
            output.status.code(),
            text(&output.stdout),
            text(&output.stderr),
        )
    };
    let (code, stdout, _) = check(SAMPLE);
    assert_eq!(code, Some(0));
    assert!(stdout.ends_with(": ok (1 queues, 1 topics)\n"), "{stdout}");
    let (code, _, stderr) = check(&SAMPLE.replacen("\"ForwardTo\"", "\"ForwardTwo\"", 1));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("UserConfig.Namespaces[0].Queues[0].Properties.ForwardTwo")
            && stderr.contains("unknown field `ForwardTwo`"),
        "{stderr}"
    );
    // Service Bus's entity statuses, each kind its own, and its 2,000 subscriptions a topic.
    let status = |value: &str| {
        SAMPLE.replacen(
            "\"RequiresSession\": false",
            &format!("\"RequiresSession\": false, \"Status\": \"{value}\""),
            1,
        )
    };
    assert_eq!(check(&status("SendDisabled")).0, Some(0));
    let (code, _, stderr) = check(&status("Paused"));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("\"Paused\" is not a status"), "{stderr}");
    let topic = |count: usize| {
        let subscriptions: Vec<String> = (0..count)
            .map(|index| format!("{{\"Name\": \"s{index}\"}}"))
            .collect();
        format!(
            "{{\"UserConfig\": {{\"Namespaces\": [{{\"Name\": \"ns\", \"Queues\": [], \
             \"Topics\": [{{\"Name\": \"t\", \"Subscriptions\": [{}]}}]}}]}}}}",
            subscriptions.join(", ")
        )
    };
    assert_eq!(check(&topic(2_000)).0, Some(0));
    let (code, _, stderr) = check(&topic(2_001));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("a topic has at most 2000 subscriptions"),
        "{stderr}"
    );
}
