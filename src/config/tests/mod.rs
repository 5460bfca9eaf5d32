//! Behaviour of [`Config::parse`] and [`Config::load`]: what is read, what is refused and how
//! the refusal reads. Topics, subscriptions and rules are in `topics`.

mod emulator;
mod forwarding;
mod security;
mod topics;

use std::path::PathBuf;
use std::time::Duration;

use super::units::SIZE_FORMS;
use super::validate::Source;
use super::*;

/// A policy appended to configs that test other keys, so that some client could connect.
const A_POLICY: &str =
    "\n[[shared_access_policies]]\nname = \"p\"\nkey = \"k\"\nrights = [\"Send\"]\n";

/// `text`, with [`A_POLICY`] appended, parsed; it must be valid.
fn parse(text: &str) -> Config {
    Config::parse(&format!("{text}{A_POLICY}"), "t.toml").expect("config should be valid")
}

fn refuse(text: &str) -> ConfigError {
    Config::parse(text, "t.toml").expect_err("config should be refused")
}

/// The one-line message of the refusal of `text`.
fn refusal(text: &str) -> String {
    refuse(text).to_string()
}

/// Asserts that the refusal of `text` starts with `start` (for messages that go on with
/// serde's list of the keys expected).
fn assert_refusal_starts_with(text: &str, start: &str) {
    let message = refusal(text);
    assert!(message.starts_with(start), "{message}");
}

fn at(line: usize, column: usize) -> Location {
    Location {
        origin: "t.toml".to_owned(),
        line,
        column,
    }
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

#[test]
fn embedded_default_parses_with_three_queues_and_a_topic() {
    let config = Config::embedded_default();
    let broker = &config.broker;
    assert_eq!(
        broker.listen,
        Some("127.0.0.1:5672".parse().expect("address"))
    );
    assert_eq!(broker.data_dir, PathBuf::from("tidebus-data"));
    assert_eq!(broker.durability, Durability::Sync);
    assert_eq!(broker.flush_interval, Duration::from_millis(100));
    assert_eq!(broker.max_message_size, 1_048_576);
    assert_eq!(broker.max_connections, 1024);
    assert_eq!(broker.idle_timeout, secs(60));
    assert_eq!(broker.max_frame_size, 65536);
    assert_eq!(broker.shutdown_timeout, secs(10));
    let names: Vec<&str> = config.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["queue.1", "queue.2", "queue.3"]);
    for queue in &config.queues {
        assert_eq!(queue.lock_duration, secs(60));
        assert_eq!(queue.max_delivery_count, 10);
    }
    let [topic] = config.topics.as_slice() else {
        panic!("one topic: {:?}", config.topics);
    };
    assert_eq!(topic.name, "topic.1");
    let rules: Vec<(&str, &str, &RuleFilter)> = topic
        .subscriptions
        .iter()
        .flat_map(|subscription| {
            let rules = subscription.rules.iter();
            rules.map(|rule| (subscription.name.as_str(), rule.name.as_str(), &rule.filter))
        })
        .collect();
    let content_type = CorrelationConfig {
        content_type: Some("application/json".to_owned()),
        ..names_nothing()
    };
    let prop1 = CorrelationConfig {
        properties: vec![(
            "prop1".to_owned(),
            PropertyValue::String("value1".to_owned()),
        )],
        ..names_nothing()
    };
    let sql = "sys.MessageId = '123456' AND userProp1 = 'value1'".to_owned();
    assert_eq!(
        rules,
        [
            (
                "subscription.1",
                "app-prop-filter-1",
                &RuleFilter::Correlation(content_type)
            ),
            (
                "subscription.2",
                "user-prop-filter-1",
                &RuleFilter::Correlation(prop1)
            ),
            ("subscription.3", "$Default", &RuleFilter::True),
            ("subscription.4", "sql-filter-1", &RuleFilter::Sql(sql)),
        ]
    );
    let actions: Vec<Option<&str>> = topic
        .subscriptions
        .iter()
        .map(|s| s.rules[0].action.as_deref())
        .collect();
    assert_eq!(actions, [None, None, None, Some("SET sys.To = 'Entity'")]);
    for subscription in &topic.subscriptions {
        assert_eq!(subscription.lock_duration, secs(60));
        assert_eq!(subscription.max_delivery_count, 10);
    }
}

/// A correlation filter with nothing set, to fill in with `..`.
fn names_nothing() -> CorrelationConfig {
    CorrelationConfig {
        correlation_id: None,
        message_id: None,
        to: None,
        reply_to: None,
        subject: None,
        session_id: None,
        reply_to_session_id: None,
        content_type: None,
        properties: Vec::new(),
    }
}

#[test]
fn absent_keys_take_the_same_defaults_as_the_embedded_file() {
    let config = parse("[[queues]]\nname = \"queue.1\"\n");
    let default = Config::embedded_default();
    assert!(
        default.broker.allow_anonymous,
        "the embedded default lets anyone in"
    );
    assert!(!config.broker.allow_anonymous, "absent, it is false");
    let broker = BrokerConfig {
        allow_anonymous: true,
        ..config.broker
    };
    assert_eq!(broker, default.broker);
    assert_eq!(config.queues[0], default.queues[0]);
    assert!(parse("").queues.is_empty());
}

#[test]
fn every_broker_key_is_read() {
    let config = parse(
        "[broker]\nlisten = \"0.0.0.0:5673\"\ndata_dir = \"/var/lib/tb\"\n\
         durability = \"interval\"\nflush_interval = \"PT0.25S\"\n\
         max_message_size = \"256KB\"\nmax_connections = 7\nidle_timeout = \"2m\"\n\
         max_frame_size = \"4MiB\"\nshutdown_timeout = \"0s\"\nlog_format = \"json\"\n",
    );
    let broker = config.broker;
    assert_eq!(
        broker.listen,
        Some("0.0.0.0:5673".parse().expect("address"))
    );
    assert_eq!(broker.data_dir, PathBuf::from("/var/lib/tb"));
    assert_eq!(broker.durability, Durability::Interval);
    assert_eq!(broker.flush_interval, Duration::from_millis(250));
    assert_eq!(broker.max_message_size, 256_000);
    assert_eq!(broker.max_connections, 7);
    assert_eq!(broker.idle_timeout, secs(120));
    assert_eq!(broker.max_frame_size, 4 * 1024 * 1024);
    assert_eq!(broker.shutdown_timeout, Duration::ZERO);
    assert_eq!(broker.log_format, crate::config::LogFormat::Json);
}

#[test]
fn an_unknown_log_format_is_refused_naming_the_key() {
    let error = refuse("[broker]\nlog_format = \"xml\"\n");
    let text = error.to_string();
    assert!(text.contains("broker.log_format"), "{text}");
    assert!(text.contains("unknown variant `xml`"), "{text}");
}

#[test]
fn unknown_broker_key_is_named_with_its_position() {
    let error = refuse("[broker]\nlisten = \"127.0.0.1:5672\"\ncolour = \"red\"\n");
    assert!(
        matches!(&error, ConfigError::Invalid { key, at: position, .. }
            if key == "broker.colour" && *position == at(3, 1)),
        "{error:?}"
    );
    assert!(
        error.to_string().starts_with(
            "broker.colour (t.toml:3:1): unknown field `colour`, expected one of `listen`"
        ),
        "{error}"
    );
}

#[test]
fn unknown_queue_key_is_named_with_its_queue_index_and_position() {
    assert_refusal_starts_with(
        "[[queues]]\nname = \"a\"\n\n[[queues]]\nname = \"b\"\n  lock_duraton = \"1m\"\n",
        "queues[1].lock_duraton (t.toml:6:3): unknown field `lock_duraton`",
    );
}

#[test]
fn unknown_top_level_table_is_named() {
    assert_refusal_starts_with(
        "[broker]\n[brokr]\nlisten = \"127.0.0.1:1\"\n",
        "brokr (t.toml:2:2): unknown field `brokr`",
    );
}

#[test]
fn toml_syntax_error_has_a_position() {
    let error = refuse("[broker]\nlisten = \"127.0.0.1:5672\nmax_connections = 1\n");
    assert!(
        matches!(&error, ConfigError::Syntax { at: position, .. } if position.line == 2),
        "{error:?}"
    );
    assert!(error.to_string().starts_with("t.toml:2:"), "{error}");
    assert!(!error.to_string().contains('\n'), "{error}");
}

#[test]
fn wrong_type_names_the_key_and_the_value_position() {
    let error = refuse("[broker]\nmax_connections = \"many\"\n");
    assert_eq!(
        error.to_string(),
        "broker.max_connections (t.toml:2:19): invalid type: string \"many\", expected u64"
    );
}

#[test]
fn a_datetime_where_none_belongs_is_named_by_its_key() {
    let error = refuse("[broker]\nlisten = \"127.0.0.1:1\"\nidle_timeout = 1979-05-27\n");
    assert_eq!(
        error.to_string(),
        "broker.idle_timeout (t.toml:3:16): invalid type: map, expected a string"
    );
}

#[test]
fn missing_queue_name_names_the_queue() {
    let error = refuse("[[queues]]\nname = \"a\"\n[[queues]]\nlock_duration = \"1m\"\n");
    assert_eq!(
        error.to_string(),
        "queues[1] (t.toml:3:1): missing field `name`"
    );
}

#[test]
fn bad_duration_names_key_value_and_allowed_forms() {
    let error = refuse("[broker]\nidle_timeout = \"5 parsecs\"\n");
    assert_eq!(
        error.to_string(),
        "broker.idle_timeout (t.toml:2:16): invalid duration \"5 parsecs\" (unknown time \
         unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, \
         months, years (and few variations)); expected humantime such as \"30s\", \"5m\", \
         \"1h 30m\", \"14d\" or ISO 8601 such as \"PT30S\", \"P1DT2H\""
    );
    let error = refuse("[broker]\nidle_timeout = 60\n");
    assert_eq!(
        error.to_string(),
        "broker.idle_timeout (t.toml:2:16): invalid type: integer `60`, expected a string"
    );
}

#[test]
fn bad_size_names_key_value_and_allowed_forms() {
    let error = refuse("[broker]\nmax_message_size = \"12 bananas\"\n");
    assert_eq!(
        error.to_string(),
        format!(
            "broker.max_message_size (t.toml:2:20): invalid size \"12 bananas\"; \
             expected {SIZE_FORMS}"
        )
    );
    let error = refuse("[broker]\nmax_message_size = -1\n");
    assert_eq!(
        error.to_string(),
        format!(
            "broker.max_message_size (t.toml:2:20): invalid value: integer `-1`, \
             expected {SIZE_FORMS}"
        )
    );
    assert_eq!(
        parse("[broker]\nmax_message_size = 2048\n")
            .broker
            .max_message_size,
        2048
    );
}

#[test]
fn max_frame_size_is_bounded() {
    assert_eq!(
        parse("[broker]\nmax_frame_size = 512\n")
            .broker
            .max_frame_size,
        512
    );
    for (value, column) in [("511", 18), ("\"5MiB\"", 18), ("\"8GiB\"", 18)] {
        let error = refuse(&format!("[broker]\nmax_frame_size = {value}\n"));
        assert_eq!(
            error.to_string(),
            format!(
                "broker.max_frame_size (t.toml:2:{column}): {value} is out of range; \
                 allowed: 512 bytes to 4MiB"
            )
        );
    }
}

#[test]
fn idle_timeout_below_one_second_is_refused() {
    for value in ["\"0s\"", "\"0\"", "\"PT0.5S\""] {
        let error = refuse(&format!("[broker]\nidle_timeout = {value}\n"));
        assert_eq!(
            error.to_string(),
            format!(
                "broker.idle_timeout (t.toml:2:16): {value} is out of range; allowed: 1s to \
                 4294967295ms (about 49 days; AMQP sends it as u32 milliseconds)"
            )
        );
    }
    assert_eq!(
        parse("[broker]\nidle_timeout = \"1s\"\n")
            .broker
            .idle_timeout,
        secs(1)
    );
}

#[test]
fn lock_duration_over_five_minutes_is_refused() {
    let error = refuse("[[queues]]\nname = \"q\"\nlock_duration = \"5m 1s\"\n");
    assert_eq!(
        error.to_string(),
        "queues[0].lock_duration (t.toml:3:17): \"5m 1s\" is out of range; allowed: 1s to 5m"
    );
    let config = parse("[[queues]]\nname = \"q\"\nlock_duration = \"PT5M\"\n");
    assert_eq!(config.queues[0].lock_duration, secs(300));
}

#[test]
fn max_delivery_count_zero_is_refused() {
    let error = refuse("[[queues]]\nname = \"q\"\nmax_delivery_count = 0\n");
    assert_eq!(
        error.to_string(),
        "queues[0].max_delivery_count (t.toml:3:22): 0 is out of range; allowed: 1 to \
         2147483647"
    );
}

#[test]
fn durability_names_the_allowed_modes() {
    let error = refuse("[broker]\ndurability = \"fast\"\n");
    assert_eq!(
        error.to_string(),
        "broker.durability (t.toml:2:14): unknown variant `fast`, expected one of `sync`, \
         `interval`, `memory`"
    );
    let memory = parse("[broker]\ndurability = \"memory\"\n");
    assert_eq!(memory.broker.durability, Durability::Memory);
}

#[test]
fn listen_must_be_a_socket_address() {
    let error = refuse("[broker]\nlisten = \"localhost:5672\"\n");
    assert_eq!(
        error.to_string(),
        "broker.listen (t.toml:2:10): \"localhost:5672\" is not a socket address; expected \
         IP:port such as \"127.0.0.1:5672\" or \"[::]:5672\" (host names are not resolved)"
    );
}

#[test]
fn websocket_listeners_are_socket_addresses_and_none_by_default() {
    assert!(parse("[broker]\n").broker.websocket_listen.is_empty());
    let both = parse("[broker]\nwebsocket_listen = [\"0.0.0.0:80\", \"[::]:443\"]\n");
    let ports: Vec<u16> = both
        .broker
        .websocket_listen
        .iter()
        .map(|a| a.port())
        .collect();
    assert_eq!(ports, [80, 443]);
    let error = refuse("[broker]\nwebsocket_listen = [\"127.0.0.1:80\", \"localhost:443\"]\n");
    assert_eq!(
        error.to_string(),
        "broker.websocket_listen (t.toml:2:37): \"localhost:443\" is not a socket address; \
         expected IP:port such as \"127.0.0.1:443\" or \"[::]:443\" (host names are not resolved)"
    );
}

#[test]
fn empty_data_dir_is_refused() {
    let error = refuse("[broker]\ndata_dir = \"\"\n");
    assert_eq!(
        error.to_string(),
        "broker.data_dir (t.toml:2:12): must not be empty; expected a directory path"
    );
}

#[test]
fn duplicate_queue_names_ignoring_case_name_both() {
    let error = refuse(
        "[[queues]]\nname = \"queue.1\"\n[[queues]]\nname = \"other\"\n\
         [[queues]]\nname = \"Queue.1\"\n",
    );
    assert_eq!(
        error.to_string(),
        "queues[2].name (t.toml:6:8): queue name \"Queue.1\" is already used by \
         queues[0].name = \"queue.1\" (t.toml:2:8); queue and topic names share one namespace \
         and are compared case-insensitively"
    );
}

#[test]
fn invalid_queue_name_names_the_rule_it_breaks() {
    let error = refuse("[[queues]]\nname = \"a$b\"\n");
    assert_eq!(
        error.to_string(),
        "queues[0].name (t.toml:2:8): \"a$b\" is not a valid queue name: '$' is not \
         allowed; use letters, digits, '.', '_', '-' and '/'"
    );
}

#[test]
fn requires_session_is_read_for_queues_and_defaults_to_false() {
    let config =
        parse("[[queues]]\nname = \"a\"\nrequires_session = true\n[[queues]]\nname = \"b\"\n");
    assert!(config.queues[0].requires_session);
    assert!(!config.queues[1].requires_session);
}

#[test]
fn time_keys_are_read_and_bounded() {
    let config = parse(
        "[[queues]]\nname = \"a\"\ndefault_message_time_to_live = \"2s\"\n\
         dead_lettering_on_message_expiration = true\nauto_delete_on_idle = \"PT1H\"\n\
         [[queues]]\nname = \"b\"\n",
    );
    let (a, b) = (&config.queues[0], &config.queues[1]);
    assert_eq!(a.default_message_time_to_live, Some(Duration::from_secs(2)));
    assert!(a.dead_lettering_on_message_expiration);
    assert_eq!(a.auto_delete_on_idle, Some(Duration::from_secs(3600)));
    assert_eq!(
        (
            b.default_message_time_to_live,
            b.dead_lettering_on_message_expiration,
            b.auto_delete_on_idle
        ),
        (None, false, None),
        "absent: unlimited, delete expired messages, never auto-delete"
    );
    let error = refuse("[[queues]]\nname = \"a\"\nauto_delete_on_idle = \"500ms\"\n");
    assert_eq!(
        error.to_string(),
        "queues[0].auto_delete_on_idle (t.toml:3:23): \"500ms\" is out of range; allowed: \
         at least 1s"
    );
}

#[test]
fn duplicate_detection_is_off_by_default_with_a_ten_minute_window() {
    let config = parse(
        "[[queues]]\nname = \"a\"\nrequires_duplicate_detection = true\n\
         duplicate_detection_history_time_window = \"2s\"\n\
         [[queues]]\nname = \"b\"\n\
         [[topics]]\nname = \"t\"\nrequires_duplicate_detection = true\n",
    );
    let (a, b, t) = (&config.queues[0], &config.queues[1], &config.topics[0]);
    assert!(a.requires_duplicate_detection);
    assert_eq!(
        a.duplicate_detection_history_time_window,
        Duration::from_secs(2)
    );
    assert!(!b.requires_duplicate_detection);
    assert_eq!(
        b.duplicate_detection_history_time_window,
        Duration::from_secs(600)
    );
    assert!(t.requires_duplicate_detection);
    let error =
        refuse("[[topics]]\nname = \"t\"\nduplicate_detection_history_time_window = \"8d\"\n");
    assert_eq!(
        error.to_string(),
        "topics[0].duplicate_detection_history_time_window (t.toml:3:43): \"8d\" is out of \
         range; allowed: 1s to 7d"
    );
}

#[test]
fn lane_keys_are_type_checked() {
    let error = refuse("[[queues]]\nname = \"a\"\nrequires_session = \"yes\"\n");
    assert_eq!(
        error.to_string(),
        "queues[0].requires_session (t.toml:3:20): invalid type: string \"yes\", expected a \
         boolean"
    );
    let error = refuse("[[queues]]\nname = \"a\"\nauto_delete_on_idle = \"soon\"\n");
    assert!(
        error
            .to_string()
            .starts_with("queues[0].auto_delete_on_idle (t.toml:3:23): invalid duration \"soon\""),
        "{error}"
    );
}

#[test]
fn location_counts_lines_and_characters_from_one() {
    let source = Source {
        text: "ab\nçd = 1\n",
        origin: "t.toml",
    };
    assert_eq!(source.location(0), at(1, 1));
    assert_eq!(source.location(3), at(2, 1));
    assert_eq!(source.location(5), at(2, 2));
}

#[test]
fn load_names_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tidebus.toml");
    let error = Config::load(&path).expect_err("missing file");
    assert!(matches!(error, ConfigError::Read { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}: cannot read config file: ", path.display())),
        "{error}"
    );
    std::fs::write(&path, "[broker]\nmax_connections = 0\n").expect("write");
    let error = Config::load(&path).expect_err("invalid file");
    assert_eq!(
        error.to_string(),
        format!(
            "broker.max_connections ({}:2:19): 0 is out of range; allowed: at least 1",
            path.display()
        )
    );
    std::fs::write(&path, DEFAULT_CONFIG_TOML).expect("write");
    assert_eq!(
        Config::load(&path).expect("valid file"),
        Config::embedded_default()
    );
}
