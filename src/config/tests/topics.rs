//! `[[topics]]`, `[[topics.subscriptions]]` and `[[topics.subscriptions.rules]]`.

use toml::Spanned;

use super::*;

/// A file with every topic, subscription and rule key set.
const FULL: &str = r#"
[[queues]]
name = "invoices"

[[topics]]
name = "orders"
default_message_time_to_live = "1h"
max_size_in_megabytes = 2048
auto_delete_on_idle = "10m"

[[topics.subscriptions]]
name = "eu"
lock_duration = "30s"
max_delivery_count = 5
default_message_time_to_live = "PT30M"
dead_lettering_on_message_expiration = true
dead_lettering_on_filter_evaluation_exceptions = false
requires_session = true
auto_delete_on_idle = "2h"

[[topics.subscriptions.rules]]
name = "eu-only"
sql = "region = 'eu' AND sys.Label LIKE 'order-%'"
action = "SET priority = 'high'; REMOVE internal"

[[topics.subscriptions.rules]]
name = "vip"
correlation = { correlation_id = "c", message_id = "m", to = "t", reply_to = "r", subject = "vip", session_id = "s", reply_to_session_id = "rs", content_type = "application/json", properties = { tier = "gold", level = 3, ratio = 0.5, active = true } }

[[topics.subscriptions]]
name = "audit"

[[topics]]
name = "empty"
"#;

fn strings(value: &str) -> Option<String> {
    Some(value.to_owned())
}

/// Topic `t`, then `body`: its keys and tables.
fn in_topic(body: &str) -> String {
    format!("[[topics]]\nname = \"t\"\n{body}")
}

/// Topic `t` with subscription `s`, then `body`: the subscription's keys and tables.
fn in_subscription(body: &str) -> String {
    in_topic(&format!("[[topics.subscriptions]]\nname = \"s\"\n{body}"))
}

/// Topic `t` with subscription `s` with rule `r`, then `body`: the rule's keys and tables.
fn one_rule(body: &str) -> String {
    in_subscription(&format!(
        "[[topics.subscriptions.rules]]\nname = \"r\"\n{body}"
    ))
}

#[test]
fn every_topic_subscription_and_rule_key_is_read() {
    let config = parse(FULL);
    assert_eq!(config.queues.len(), 1);
    let [orders, empty] = config.topics.as_slice() else {
        panic!("two topics: {:?}", config.topics);
    };
    assert_eq!(orders.name, "orders");
    assert_eq!(orders.default_message_time_to_live, Some(secs(3600)));
    assert_eq!(orders.max_size_in_megabytes, 2048);
    assert_eq!(orders.auto_delete_on_idle, Some(secs(600)));
    let eu = &orders.subscriptions[0];
    assert_eq!(eu.name, "eu");
    assert_eq!(eu.lock_duration, secs(30));
    assert_eq!(eu.max_delivery_count, 5);
    assert_eq!(eu.default_message_time_to_live, Some(secs(1800)));
    assert!(eu.dead_lettering_on_message_expiration);
    assert!(!eu.dead_lettering_on_filter_evaluation_exceptions);
    assert!(eu.requires_session);
    assert!(!orders.subscriptions[1].requires_session);
    assert_eq!(eu.auto_delete_on_idle, Some(secs(7200)));
    let sql = RuleConfig {
        name: "eu-only".to_owned(),
        filter: RuleFilter::Sql("region = 'eu' AND sys.Label LIKE 'order-%'".to_owned()),
        action: strings("SET priority = 'high'; REMOVE internal"),
        parameters: Vec::new(),
        action_parameters: Vec::new(),
    };
    let correlation = CorrelationConfig {
        correlation_id: strings("c"),
        message_id: strings("m"),
        to: strings("t"),
        reply_to: strings("r"),
        subject: strings("vip"),
        session_id: strings("s"),
        reply_to_session_id: strings("rs"),
        content_type: strings("application/json"),
        properties: vec![
            ("active".to_owned(), PropertyValue::Bool(true)),
            ("level".to_owned(), PropertyValue::Int(3)),
            ("ratio".to_owned(), PropertyValue::Float(0.5)),
            ("tier".to_owned(), PropertyValue::String("gold".to_owned())),
        ],
    };
    let vip = RuleConfig {
        name: "vip".to_owned(),
        filter: RuleFilter::Correlation(correlation),
        action: None,
        parameters: Vec::new(),
        action_parameters: Vec::new(),
    };
    assert_eq!(eu.rules, [sql, vip]);
    assert_eq!(orders.subscriptions[1].name, "audit");
    assert_eq!(empty.name, "empty");
    assert!(empty.subscriptions.is_empty(), "a topic may have none");
}

#[test]
fn absent_keys_take_the_queue_defaults_and_service_bus_s_filter_default() {
    let config = parse(
        "[[queues]]\nname = \"q\"\n[[topics]]\nname = \"t\"\n\
         [[topics.subscriptions]]\nname = \"s\"\n",
    );
    let (queue, topic) = (&config.queues[0], &config.topics[0]);
    assert_eq!(topic.default_message_time_to_live, None, "unlimited");
    assert_eq!(topic.max_size_in_megabytes, queue.max_size_in_megabytes);
    assert_eq!(topic.auto_delete_on_idle, None, "never");
    let subscription = &topic.subscriptions[0];
    let lane = |q: &QueueConfig| {
        (
            q.lock_duration,
            q.max_delivery_count,
            q.default_message_time_to_live,
            q.dead_lettering_on_message_expiration,
            q.auto_delete_on_idle,
        )
    };
    assert_eq!(
        (
            subscription.lock_duration,
            subscription.max_delivery_count,
            subscription.default_message_time_to_live,
            subscription.dead_lettering_on_message_expiration,
            subscription.auto_delete_on_idle,
        ),
        lane(queue)
    );
    assert!(subscription.dead_lettering_on_filter_evaluation_exceptions);
}

#[test]
fn a_subscription_without_rules_gets_default_matching_everything() {
    let config = parse(&in_subscription(""));
    let default = RuleConfig {
        name: "$Default".to_owned(),
        filter: RuleFilter::True,
        action: None,
        parameters: Vec::new(),
        action_parameters: Vec::new(),
    };
    assert_eq!(config.topics[0].subscriptions[0].rules, [default]);
}

#[test]
fn default_may_be_declared_and_replaces_the_implicit_one() {
    let config = parse(&one_rule("sql = \"1=1\"\n").replace("\"r\"", "\"$Default\""));
    let rules = &config.topics[0].subscriptions[0].rules;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].filter, RuleFilter::Sql("1=1".to_owned()));
}

#[test]
fn a_topic_named_like_a_queue_names_both() {
    assert_eq!(
        refusal("[[queues]]\nname = \"orders\"\n[[topics]]\nname = \"t\"\n[[topics]]\nname = \"Orders\"\n",),
        "topics[1].name (t.toml:6:8): topic name \"Orders\" is already used by queues[0].name \
         = \"orders\" (t.toml:2:8); queue and topic names share one namespace and are compared \
         case-insensitively"
    );
    assert_refusal_starts_with(
        &in_topic("[[topics]]\nname = \"T\"\n"),
        "topics[1].name (t.toml:4:8): topic name \"T\" is already used by topics[0].name",
    );
}

#[test]
fn subscription_names_are_unique_within_their_topic_only() {
    assert_eq!(
        refusal(&in_topic(
            "[[topics.subscriptions]]\nname = \"eu\"\n[[topics.subscriptions]]\nname = \"us\"\n\
             [[topics.subscriptions]]\nname = \"EU\"\n",
        )),
        "topics[0].subscriptions[2].name (t.toml:8:8): subscription name \"EU\" is already used \
         by topics[0].subscriptions[0].name = \"eu\" (t.toml:4:8); subscription names are \
         compared case-insensitively within their topic"
    );
    let config = parse(
        "[[topics]]\nname = \"a\"\n[[topics.subscriptions]]\nname = \"s\"\n\
         [[topics]]\nname = \"b\"\n[[topics.subscriptions]]\nname = \"s\"\n",
    );
    assert_eq!(config.topics[1].subscriptions[0].name, "s");
}

#[test]
fn rule_names_are_unique_within_their_subscription_only() {
    let rule =
        |name: &str| format!("[[topics.subscriptions.rules]]\nname = \"{name}\"\nsql = \"1=1\"\n");
    let subscription = |name: &str| format!("[[topics.subscriptions]]\nname = \"{name}\"\n");
    let tables = [
        subscription("s"),
        rule("red"),
        subscription("u"),
        rule("red"),
        rule("Red"),
    ];
    assert_eq!(
        refusal(&in_topic(&tables.concat())),
        "topics[0].subscriptions[1].rules[1].name (t.toml:14:8): rule name \"Red\" is already \
         used by topics[0].subscriptions[1].rules[0].name = \"red\" (t.toml:11:8); rule names \
         are compared case-insensitively within their subscription"
    );
}

#[test]
fn names_follow_the_rules_of_their_kind() {
    assert_eq!(
        refusal("[[topics]]\nname = \"/t\"\n"),
        "topics[0].name (t.toml:2:8): \"/t\" is not a valid topic name: '/' is not allowed first \
         or last"
    );
    let long = "s".repeat(51);
    assert_eq!(
        refusal(&in_subscription(&format!(
            "[[topics.subscriptions]]\nname = \"{long}\"\n"
        ))),
        format!(
            "topics[0].subscriptions[1].name (t.toml:6:8): \"{long}\" is not a valid subscription \
             name: it has 51 characters; at most 50 are allowed"
        )
    );
    assert_eq!(
        refusal(&one_rule(
            "sql = \"1=1\"\n[[topics.subscriptions.rules]]\nname = \"b\"\nsql = \"1=1\"\n\
             [[topics.subscriptions.rules]]\nname = \"a b\"\nsql = \"1=1\"\n",
        )),
        "topics[0].subscriptions[0].rules[2].name (t.toml:12:8): \"a b\" is not a valid rule \
         name: ' ' is not allowed; use letters, digits, '.', '_', '-' and '$' first"
    );
}

#[test]
fn a_rule_has_exactly_one_filter() {
    assert_eq!(
        refusal(&one_rule(
            "sql = \"a = 1\"\ncorrelation = { subject = \"x\" }\n",
        )),
        "topics[0].subscriptions[0].rules[0] (t.toml:8:15): sets both `sql` and `correlation`; \
         a rule has exactly one filter"
    );
    assert_eq!(
        refusal(&one_rule("action = \"SET a = 1\"\n")),
        "topics[0].subscriptions[0].rules[0] (t.toml:5:1): sets no filter; a rule has exactly \
         one of `sql`, `correlation` and `selector`"
    );
    assert_eq!(
        refusal(&one_rule("selector = \"a = 1\"\nsql = \"a = 1\"\n")),
        "topics[0].subscriptions[0].rules[0] (t.toml:8:7): sets both `selector` and `sql`; a \
         rule has exactly one filter"
    );
}

#[test]
fn a_selector_is_a_jms_selector_checked_where_it_is_written() {
    let config = parse(&one_rule(
        "selector = \"JMSPriority > 4 AND color BETWEEN 1 AND 2\"\n",
    ));
    assert_eq!(
        config.topics[0].subscriptions[0].rules[0].filter,
        RuleFilter::Selector("JMSPriority > 4 AND color BETWEEN 1 AND 2".to_owned())
    );
    assert_eq!(
        refusal(&one_rule("selector = \"color = 'red' AND \"\n")),
        "topics[0].subscriptions[0].rules[0].selector (t.toml:7:31): expected a value, found \
         the end of the expression"
    );
    assert_eq!(
        refusal(&one_rule("selector = \"sys.Label = 'x'\"\n")),
        "topics[0].subscriptions[0].rules[0].selector (t.toml:7:16): unexpected character '.'"
    );
    assert_eq!(
        refusal(&one_rule("selector = \" \"\n")),
        "topics[0].subscriptions[0].rules[0].selector (t.toml:7:13): the expression is empty"
    );
    assert!(refusal(&one_rule(
        "selector = \"a = @a\"\nparameters = { \"@a\" = 1 }\n"
    ))
    .contains("the rule has no `sql`"));
}

#[test]
fn a_jms_consumer_s_selector_is_a_rule_filter_or_none() {
    assert_eq!(RuleFilter::jms_selector(""), Ok(None));
    assert_eq!(RuleFilter::jms_selector(" \t "), Ok(None));
    assert_eq!(
        RuleFilter::jms_selector("color = 'red'"),
        Ok(Some(RuleFilter::Selector("color = 'red'".to_owned())))
    );
    assert_eq!(
        RuleFilter::jms_selector("color = "),
        Err("expected a value, found the end of the expression at position 9".to_owned())
    );
}

#[test]
fn sql_parameters_give_the_expressions_their_values_and_need_them() {
    let config = parse(&one_rule(
        "sql = \"a = @a AND b > @b\"\nparameters = { \"@b\" = 2, \"@a\" = \"x\" }\n\
         action = \"SET c = @c\"\naction_parameters = { \"@c\" = true }\n",
    ));
    let rule = &config.topics[0].subscriptions[0].rules[0];
    let sorted = [
        ("@a".to_owned(), PropertyValue::String("x".to_owned())),
        ("@b".to_owned(), PropertyValue::Int(2)),
    ];
    assert_eq!(rule.parameters, sorted);
    assert_eq!(
        rule.action_parameters,
        [("@c".to_owned(), PropertyValue::Bool(true))]
    );
    assert!(refusal(&one_rule("sql = \"a = @a\"\n")).contains("parameter @a has no value"));
    assert_eq!(
        refusal(&one_rule(
            "correlation = { subject = \"x\" }\nparameters = { \"@a\" = 1 }\n"
        )),
        "topics[0].subscriptions[0].rules[0].parameters (t.toml:8:14): are the values of a SQL \
         filter's parameters; the rule has no `sql`"
    );
    assert!(refusal(&one_rule(
        "sql = \"1=1\"\naction_parameters = { \"@a\" = 1 }\n"
    ))
    .contains("the rule has no `action`"));
}

#[test]
fn user_metadata_is_kept_up_to_1024_characters() {
    let at_limit = "é".repeat(1024);
    let config = parse(&in_subscription(&format!(
        "user_metadata = \"{at_limit}\"\n[[queues]]\nname = \"q\"\nuser_metadata = \"\"\n"
    )));
    let subscription = &config.topics[0].subscriptions[0];
    assert_eq!(
        subscription.user_metadata.as_deref(),
        Some(at_limit.as_str())
    );
    assert_eq!(config.topics[0].user_metadata, None);
    assert_eq!(config.queues[0].user_metadata, None, "empty is none");
    let over = format!("user_metadata = \"{}\"\n", "x".repeat(1025));
    assert!(refusal(&in_topic(&over)).starts_with(
        "topics[0].user_metadata (t.toml:3:17): is 1025 characters long; Service Bus allows at \
         most 1024"
    ));
    // A character outside the Basic Multilingual Plane is two, as .NET counts.
    let astral = format!("user_metadata = \"{}\"\n", "😀".repeat(513));
    assert!(refusal(&in_topic(&astral)).contains("is 1026 characters long"));
}

#[test]
fn a_correlation_filter_naming_nothing_is_refused() {
    for empty in ["{}", "{ properties = {} }"] {
        assert_eq!(
            refusal(&one_rule(&format!("correlation = {empty}\n"))),
            "topics[0].subscriptions[0].rules[0].correlation (t.toml:7:15): names nothing; set \
             at least one of correlation_id, message_id, to, reply_to, subject, session_id, \
             reply_to_session_id, content_type and properties"
        );
    }
}

#[test]
fn unknown_keys_are_named_with_their_nested_path() {
    assert_refusal_starts_with(
        &one_rule("correlation = { label = \"x\" }\n"),
        "topics[0].subscriptions[0].rules[0].correlation.label (t.toml:7:17): unknown field \
         `label`, expected one of `correlation_id`, `message_id`, `to`, `reply_to`, `subject`,",
    );
    assert_refusal_starts_with(
        &one_rule("[topics.subscriptions.rules.correlation]\nsubject = \"x\"\nfoo = 1\n"),
        "topics[0].subscriptions[0].rules[0].correlation.foo (t.toml:9:1): unknown field `foo`",
    );
    // A subscription has no size of its own.
    assert_refusal_starts_with(
        &in_subscription("max_size_in_megabytes = 1\n"),
        "topics[0].subscriptions[0].max_size_in_megabytes (t.toml:5:1): unknown field \
         `max_size_in_megabytes`",
    );
    assert_refusal_starts_with(
        &in_topic("lock_duration = \"1m\"\n"),
        "topics[0].lock_duration (t.toml:3:1): unknown field `lock_duration`",
    );
}

#[test]
fn wrong_types_and_missing_names_are_named_with_their_nested_path() {
    assert_eq!(
        refusal(&in_subscription(
            "[[topics.subscriptions]]\nname = \"u\"\nmax_delivery_count = \"ten\"\n"
        )),
        "topics[0].subscriptions[1].max_delivery_count (t.toml:7:22): invalid type: string \
         \"ten\", expected u64"
    );
    assert_eq!(
        refusal(&one_rule("[[topics.subscriptions.rules]]\nsql = \"1=1\"\n")),
        "topics[0].subscriptions[0].rules[1] (t.toml:7:1): missing field `name`"
    );
}

#[test]
fn correlation_properties_are_strings_numbers_or_booleans() {
    for (value, shown) in [
        ("1979-05-27", "datetime"),
        ("[1, 2]", "sequence"),
        ("{ a = 1 }", "map"),
    ] {
        let error = refuse(&one_rule(&format!(
            "correlation = {{ properties = {{ ok = 1, bad = {value} }} }}\n"
        )));
        assert!(
            error.to_string().starts_with(&format!(
                "topics[0].subscriptions[0].rules[0].correlation.properties.bad (t.toml:7:46): \
                 invalid type: {shown}"
            )),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .ends_with("expected a string, an integer, a finite float or a boolean"),
            "{error}"
        );
    }
    assert_eq!(
        refusal(&one_rule("correlation = { properties = { x = nan } }\n")),
        "topics[0].subscriptions[0].rules[0].correlation.properties.x (t.toml:7:36): invalid \
         value: floating point `NaN`, expected a string, an integer, a finite float or a boolean"
    );
}

#[test]
fn property_floats_compare_by_value_as_written() {
    assert_eq!(PropertyValue::Float(0.5), PropertyValue::Float(0.5));
    assert_ne!(PropertyValue::Float(0.5), PropertyValue::Float(0.25));
    assert_ne!(PropertyValue::Int(1), PropertyValue::Float(1.0));
    assert_ne!(
        PropertyValue::String("1".to_owned()),
        PropertyValue::Int(1),
        "a property matches only a value of its type"
    );
}

#[test]
fn subscriptions_follow_the_queue_rules() {
    assert_eq!(
        refusal(&in_subscription("lock_duration = \"6m\"\n")),
        "topics[0].subscriptions[0].lock_duration (t.toml:5:17): \"6m\" is out of range; \
         allowed: 1s to 5m"
    );
    assert_eq!(
        refusal(&in_subscription("max_delivery_count = 0\n")),
        "topics[0].subscriptions[0].max_delivery_count (t.toml:5:22): 0 is out of range; \
         allowed: 1 to 2147483647"
    );
    assert_eq!(
        refusal(&in_subscription("auto_delete_on_idle = \"0s\"\n")),
        "topics[0].subscriptions[0].auto_delete_on_idle (t.toml:5:23): \"0s\" is out of range; \
         allowed: at least 1s"
    );
    assert_eq!(
        refusal(&in_subscription("requires_session = 1\n")),
        "topics[0].subscriptions[0].requires_session (t.toml:5:20): invalid type: integer \
         `1`, expected a boolean"
    );
}

#[test]
fn topic_settings_are_bounded() {
    assert_eq!(
        refusal(&in_topic("max_size_in_megabytes = 0\n")),
        "topics[0].max_size_in_megabytes (t.toml:3:25): 0 is out of range; allowed: at least 1"
    );
    assert_eq!(
        refusal(&in_topic("default_message_time_to_live = \"PT0.5S\"\n")),
        "topics[0].default_message_time_to_live (t.toml:3:32): \"PT0.5S\" is out of range; \
         allowed: at least 1s"
    );
}

#[test]
fn expressions_longer_than_service_bus_allows_are_refused_at_the_first_extra_character() {
    let at_limit = format!("a = '{}'", "x".repeat(1018));
    assert_eq!(at_limit.chars().count(), 1024);
    let config = parse(&one_rule(&format!("sql = \"{at_limit}\"\n")));
    assert_eq!(
        config.topics[0].subscriptions[0].rules[0].filter,
        RuleFilter::Sql(at_limit.clone())
    );
    // One more character, after an escape: the column counts the file's characters.
    assert_eq!(
        refusal(&one_rule(&format!("sql = \"\\t{at_limit}\"\n"))),
        "topics[0].subscriptions[0].rules[0].sql (t.toml:7:1033): the expression is longer \
         than 1024 characters"
    );
    assert_eq!(
        refusal(&one_rule(&format!(
            "sql = \"1=1\"\naction = '''\n{at_limit}é'''\n"
        ))),
        "topics[0].subscriptions[0].rules[0].action (t.toml:9:1025): the expression is longer \
         than 1024 characters"
    );
}

#[test]
fn expression_location_maps_an_offset_in_the_value_to_the_file() {
    let text = "[x]\nsql = \"a\\tb = 'é' AND\"\naction = \"\"\"\n  SET\\\n    c = 1\"\"\"\n";
    let source = Source {
        text,
        origin: "t.toml",
    };
    #[derive(serde::Deserialize)]
    struct Values {
        sql: Spanned<String>,
        action: Spanned<String>,
    }
    #[derive(serde::Deserialize)]
    struct File {
        x: Values,
    }
    let file: File = toml::from_str(text).expect("valid");
    let (sql, action) = (&file.x.sql, &file.x.action);
    assert_eq!(sql.get_ref(), "a\tb = 'é' AND");
    assert_eq!(action.get_ref(), "  SETc = 1");
    for (value, offset, position, what) in [
        (sql, 0, at(2, 8), "a"),
        (sql, 1, at(2, 9), "the tab's escape"),
        (sql, 2, at(2, 11), "b"),
        (sql, 10, at(2, 18), "AND, after the é"),
        (sql, 13, at(2, 21), "the end: the closing quote"),
        (action, 0, at(4, 1), "after the first newline"),
        (action, 5, at(5, 5), "after the line-ending backslash"),
    ] {
        assert_eq!(
            source.expression_location(value, offset),
            position,
            "{what}"
        );
    }
}

#[test]
fn sql_syntax_errors_name_their_position_in_the_file() {
    assert_eq!(
        refusal(&one_rule("sql = \"region = 'eu' AND (amount > \"\n")),
        "topics[0].subscriptions[0].rules[0].sql (t.toml:7:36): expected a value, found \
         the end of the expression"
    );
    assert_eq!(
        refusal(&one_rule("sql = \"1=1\"\naction = \"SET sys.Size = 1\"\n")),
        "topics[0].subscriptions[0].rules[0].action (t.toml:8:19): system property sys.Size is \
         not supported by this broker (only sys.MessageId, sys.CorrelationId, sys.To, \
         sys.ReplyTo, sys.Label, sys.SessionId, sys.ReplyToSessionId and sys.ContentType)"
    );
}

#[test]
fn a_topic_has_at_most_2000_subscriptions() {
    let topic = |count: usize| {
        let mut text = String::from("[[topics]]\nname = \"t\"\n");
        for index in 0..count {
            text.push_str(&format!("[[topics.subscriptions]]\nname = \"s{index}\"\n"));
        }
        text
    };
    assert_eq!(parse(&topic(2_000)).topics[0].subscriptions.len(), 2_000);
    assert!(
        refusal(&topic(2_001)).starts_with(
            "topics[0].subscriptions[2000] (t.toml:4004:8): a topic has at most 2000 \
             subscriptions, as in Service Bus"
        ),
        "{}",
        refusal(&topic(2_001))
    );
}

#[test]
fn statuses_are_the_ones_service_bus_gives_each_kind() {
    let config = parse(
        "[[queues]]\nname = \"q\"\nstatus = \"receive_disabled\"\n\
         [[topics]]\nname = \"t\"\nstatus = \"send_disabled\"\n\
         [[topics.subscriptions]]\nname = \"s\"\nstatus = \"disabled\"\n",
    );
    assert_eq!(config.queues[0].status, EntityStatus::ReceiveDisabled);
    assert_eq!(config.topics[0].status, EntityStatus::SendDisabled);
    assert_eq!(
        config.topics[0].subscriptions[0].status,
        EntityStatus::Disabled
    );
    assert_eq!(
        refusal("[[topics]]\nname = \"t\"\nstatus = \"receive_disabled\"\n"),
        "topics[0].status (t.toml:3:10): \"receive_disabled\" is not a status this entity can \
         have; allowed: \"active\", \"disabled\" or \"send_disabled\""
    );
}
