//! Microsoft's emulator `Config.json`: what is read, what is refused and how the refusal reads.

use super::*;

/// The shape of the emulator's sample file (amqp-dialect.md §13.2), in `config/`.
const SAMPLE: &str = include_str!("../../../config/emulator-config.json");

fn load(text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    // Not named .json: the content decides.
    let path = dir.path().join("Config.conf");
    std::fs::write(&path, text).expect("write");
    Config::load(&path)
}

/// The one-line refusal of `text`, with the temporary file's path replaced by `F`.
fn refusal(text: &str) -> String {
    let error = load(text).expect_err("refused").to_string();
    let start = error.find("Config.conf").expect("the error names the file");
    let path_start = error[..start].rfind('(').map_or(0, |open| open + 1);
    format!(
        "{}F{}",
        &error[..path_start],
        &error[start + "Config.conf".len()..]
    )
}

#[test]
fn the_emulator_sample_loads_with_its_entities_and_the_embedded_broker_settings() {
    let config = load(SAMPLE).expect("valid");
    let default = Config::embedded_default();
    assert_eq!(config.broker, default.broker);
    assert_eq!(
        config.shared_access_policies,
        default.shared_access_policies
    );
    let queue = &config.queues[0];
    assert_eq!(queue.name, "queue.1");
    assert_eq!(queue.lock_duration, secs(60));
    assert_eq!(queue.max_delivery_count, 3);
    assert_eq!(queue.default_message_time_to_live, Some(secs(3600)));
    assert!(!queue.requires_session && !queue.dead_lettering_on_message_expiration);
    let topic = &config.topics[0];
    assert_eq!(topic.name, "topic.1");
    assert_eq!(topic.default_message_time_to_live, Some(secs(3600)));
    let names: Vec<&str> = topic
        .subscriptions
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "subscription.1",
            "subscription.2",
            "subscription.3",
            "subscription.4"
        ]
    );
    let rule = |subscription: usize| &topic.subscriptions[subscription].rules[0];
    let RuleFilter::Correlation(first) = &rule(0).filter else {
        panic!("a correlation filter: {:?}", rule(0));
    };
    assert_eq!(
        first.subject.as_deref(),
        Some("subject1"),
        "Label is the subject"
    );
    assert_eq!(first.reply_to_session_id.as_deref(), Some("sessionId"));
    assert_eq!(first.content_type.as_deref(), Some("application/text"));
    let RuleFilter::Correlation(second) = &rule(1).filter else {
        panic!("a correlation filter: {:?}", rule(1));
    };
    assert_eq!(second.correlation_id, None, "an absent field is unset");
    assert_eq!(
        second.properties,
        [("prop3".to_owned(), PropertyValue::String("value3".into()))]
    );
    assert_eq!(rule(2).name, "$Default");
    assert_eq!(rule(2).filter, RuleFilter::True);
    assert_eq!(
        rule(3).filter,
        RuleFilter::Sql("sys.MessageId = '123456' AND userProp1 = 'value1'".into())
    );
    assert_eq!(rule(3).action.as_deref(), Some("SET sys.To = 'Entity'"));
}

#[test]
fn a_file_with_queues_only_and_no_properties_takes_tidebus_defaults() {
    let config = load(
        r#"{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
            "Queues": [{"Name": "a"}, {"Name": "b", "Properties": {"RequiresSession": true}}]}],
            "Logging": {"Type": "Console"}}}"#,
    )
    .expect("valid");
    assert!(config.topics.is_empty());
    let default = Config::embedded_default().queues[0].clone();
    assert_eq!(config.queues[0].lock_duration, default.lock_duration);
    assert_eq!(config.queues[0].max_delivery_count, 10);
    assert_eq!(config.queues[0].default_message_time_to_live, None);
    assert!(config.queues[1].requires_session);
}

#[test]
fn unknown_properties_are_refused_naming_them_and_their_place() {
    let text = SAMPLE.replace(
        "\"RequiresSession\": false\n            }",
        "\"Colour\": 3\n            }",
    );
    assert_eq!(
        refusal(&text),
        "UserConfig.Namespaces[0].Queues[0].Properties.Colour (F:18:22): unknown field \
         `Colour`, expected one of `DeadLetteringOnMessageExpiration`, \
         `DefaultMessageTimeToLive`, `DuplicateDetectionHistoryTimeWindow`, `EnablePartitioning`, \
         `ForwardDeadLetteredMessagesTo`, `ForwardTo`, `LockDuration`, `MaxDeliveryCount`, \
         `RequiresDuplicateDetection`, `RequiresSession`, `Status`"
    );
    assert_eq!(
        refusal("{\"UserConfig\": {\"Namespaces\": []},}"),
        "F:1:35: invalid JSON: trailing comma"
    );
}

#[test]
fn duplicate_detection_maps_with_its_window() {
    let on = SAMPLE.replace(
        "\"RequiresDuplicateDetection\": false",
        "\"RequiresDuplicateDetection\": true",
    );
    let config = load(&on).expect("loads");
    let queue = &config.queues[0];
    assert!(queue.requires_duplicate_detection);
    assert_eq!(
        queue.duplicate_detection_history_time_window,
        Duration::from_secs(20)
    );
    assert!(config.topics[0].requires_duplicate_detection);
    let long = SAMPLE.replacen("\"PT20S\"", "\"P8D\"", 1);
    assert_eq!(
        refusal(&long),
        "UserConfig.Namespaces[0].Queues[0].Properties.DuplicateDetectionHistoryTimeWindow \
         (F:12:54): \"P8D\" is out of range; allowed: 1s to 7d"
    );
}

#[test]
fn forwarding_maps_and_its_targets_are_checked() {
    let forward = SAMPLE
        .replacen("\"ForwardTo\": \"\"", "\"ForwardTo\": \"topic.1\"", 1)
        .replacen(
            "\"ForwardDeadLetteredMessagesTo\": \"\"",
            "\"ForwardDeadLetteredMessagesTo\": \"topic.1\"",
            1,
        )
        .replacen(
            "\"ForwardDeadLetteredMessagesTo\": \"\"",
            "\"ForwardDeadLetteredMessagesTo\": \"Queue.1\"",
            1,
        );
    let config = load(&forward).expect("valid");
    assert_eq!(config.queues[0].forward_to.as_deref(), Some("topic.1"));
    let subscription = &config.topics[0].subscriptions[0];
    assert_eq!(
        subscription.forward_dead_lettered_messages_to.as_deref(),
        Some("Queue.1")
    );
    assert_eq!(subscription.forward_to, None, "\"\" is none");
    let missing = SAMPLE.replacen("\"ForwardTo\": \"\"", "\"ForwardTo\": \"elsewhere\"", 2);
    assert_eq!(
        refusal(&missing),
        "UserConfig.Namespaces[0].Queues[0].Properties.ForwardTo (F:14:28): The auto \
         forwarding destination entity 'elsewhere' does not exist."
    );
}

#[test]
fn bad_values_are_refused_at_their_place() {
    let lock = SAMPLE.replacen(
        "\"LockDuration\": \"PT1M\"",
        "\"LockDuration\": \"PT10M\"",
        1,
    );
    assert_eq!(
        refusal(&lock),
        "UserConfig.Namespaces[0].Queues[0].Properties.LockDuration (F:15:31): \"PT10M\" is out \
         of range; allowed: 1s to 5m"
    );
    let filter = SAMPLE.replace("\"FilterType\": \"Sql\"", "\"FilterType\": \"Regex\"");
    assert!(refusal(&filter).starts_with(
        "UserConfig.Namespaces[0].Topics[0].Subscriptions[3].Rules[0].Properties.FilterType \
         (F:113:37): \"Regex\" is not a filter type"
    ));
    let sql = SAMPLE.replace("AND userProp1", "AND AND userProp1");
    assert!(refusal(&sql).starts_with(
        "UserConfig.Namespaces[0].Topics[0].Subscriptions[3].Rules[0].Properties.SqlFilter.\
         SqlExpression (F:115:42): expected a value, found AND (at character 30 of the \
         expression)"
    ));
    let twice = SAMPLE.replace("\"subscription.2\"", "\"SUBSCRIPTION.1\"");
    assert!(refusal(&twice).starts_with(
        "UserConfig.Namespaces[0].Topics[0].Subscriptions[1].Name (F:62:25): \"SUBSCRIPTION.1\" \
         is already used by UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Name"
    ));
    let count = SAMPLE.replacen("\"MaxDeliveryCount\": 3", "\"MaxDeliveryCount\": 0", 1);
    assert!(refusal(&count).starts_with(
        "UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount (F:16:35): 0 is out of \
         range"
    ));
}

#[test]
fn status_maps_and_each_kind_takes_service_bus_s_values() {
    let paused = SAMPLE.replacen(
        "\"RequiresSession\": false",
        "\"RequiresSession\": false, \"Status\": \"SendDisabled\"",
        1,
    );
    let config = load(&paused).expect("loads");
    assert_eq!(config.queues[0].status, EntityStatus::SendDisabled);
    assert_eq!(config.topics[0].status, EntityStatus::Active);
    let refused = refusal(&SAMPLE.replacen(
        "\"RequiresSession\": false",
        "\"RequiresSession\": false, \"Status\": \"Paused\"",
        1,
    ));
    assert!(
        refused.ends_with(
            "\"Paused\" is not a status this entity can have; allowed: \"Active\", \
             \"Disabled\", \"SendDisabled\" or \"ReceiveDisabled\""
        ),
        "{refused}"
    );
}
