//! `/health` and `/metrics` on the administration listener of the real binary: the counts
//! move as messages are sent, completed, dead-lettered and expire; the text is checked line
//! by line against the OpenMetrics text format.

use std::collections::HashMap;
use std::time::Duration;

use fe2o3_amqp::types::definitions::{self, ErrorCondition, Fields};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use fe2o3_amqp::{Receiver, Sender};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

use crate::child::ChildBroker;
use crate::support::{connect_session, next_delivery, DEADLINE};

/// `GET path` on `addr`: the status code and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http(addr, "GET", path, "", "").await
}

/// One HTTP/1.1 request with extra `headers` (each ending in CRLF) and `body`: the status code
/// and the body of the answer.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    timeout(DEADLINE, socket.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    let answer = String::from_utf8(answer).expect("UTF-8");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status code");
    (status, body.to_owned())
}

/// The samples of an OpenMetrics text, by `name{labels}` as written; panics on any line
/// that breaks the format: a sample of an undeclared family, a bad name, label or value, a
/// family declared twice, or no `# EOF` at the end.
fn parse(text: &str) -> HashMap<String, f64> {
    let valid_name = |name: &str| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut families: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "# EOF" {
            assert!(lines.peek().is_none(), "text after # EOF");
            return samples;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            let (keyword, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            assert!(valid_name(name), "bad family name in {line:?}");
            match keyword {
                "HELP" | "UNIT" => {}
                "TYPE" => {
                    let kind = words.next().unwrap_or("");
                    assert!(
                        [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "info",
                            "stateset",
                            "unknown"
                        ]
                        .contains(&kind),
                        "bad type in {line:?}"
                    );
                    assert!(
                        families.insert(name.to_owned(), kind.to_owned()).is_none(),
                        "{name} declared twice"
                    );
                }
                _ => panic!("unknown comment {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample and its value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.strip_suffix('}').expect("labels close")),
            None => (series, ""),
        };
        assert!(valid_name(name), "bad sample name in {line:?}");
        for label in split_labels(labels) {
            let (key, quoted) = label.split_once('=').expect("label=value");
            assert!(valid_name(key), "bad label name in {line:?}");
            assert!(
                quoted.len() >= 2 && quoted.starts_with('"') && quoted.ends_with('"'),
                "unquoted label value in {line:?}"
            );
        }
        let family = ["_total", "_bucket", "_sum", "_count", "_created"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| families.contains_key(*base))
            })
            .unwrap_or(name);
        let kind = families
            .get(family)
            .unwrap_or_else(|| panic!("{name} has no # TYPE"));
        if kind == "counter" {
            assert!(
                name.ends_with("_total") || name.ends_with("_created"),
                "{line:?}"
            );
            assert!(value >= 0.0, "a negative counter: {line:?}");
        }
        assert!(
            samples.insert(series.to_owned(), value).is_none(),
            "{series} twice"
        );
    }
    panic!("no # EOF at the end");
}

/// `a="x",b="y, z"` split at the commas between labels (not those inside quoted values).
fn split_labels(labels: &str) -> Vec<&str> {
    let (mut parts, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (at, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&labels[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if start < labels.len() {
        parts.push(&labels[start..]);
    }
    parts
}

/// Scrapes until `check` holds for the samples (the counts move a moment after the clients
/// see their answers); panics with the last text at the deadline.
async fn scrape_until(
    admin: std::net::SocketAddr,
    what: &str,
    check: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (status, text) = http_get(admin, "/metrics").await;
        assert_eq!(status, 200, "{text}");
        let samples = parse(&text);
        if check(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "{what}; last scrape:\n{text}");
        sleep(Duration::from_millis(50)).await;
    }
}

fn get(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_follow_what_the_broker_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = "[broker]\ndurability = \"sync\"\nallow_anonymous = true\n\n\
                  [[queues]]\nname = \"q\"\ndefault_message_time_to_live = \"1s\"\n\
                  dead_lettering_on_message_expiration = true\nlock_duration = \"1s\"\n\n\
                  [[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n";
    let broker = ChildBroker::start(dir.path(), config);
    let admin = broker
        .admin_addr
        .expect("the ready file names the admin endpoint");

    let (status, health) = http_get(admin, "/health").await;
    assert_eq!(status, 200, "{health}");
    let health: serde_json::Value = serde_json::from_str(&health).expect("JSON");
    assert_eq!(health["status"], "healthy", "{health}");

    let before = scrape_until(admin, "a first scrape", |_| true).await;
    assert_eq!(
        get(
            &before,
            r#"tidebus_messages_in_total{entity="q",kind="queue"}"#
        ),
        0.0
    );

    let (mut connection, mut session) = connect_session(broker.addr).await;
    let mut sender = Sender::attach(&mut session, "s", "q")
        .await
        .expect("sender");
    for n in 0..4 {
        sender.send(format!("m{n}")).await.expect("send");
    }
    let mut to_topic = Sender::attach(&mut session, "t", "t")
        .await
        .expect("sender");
    to_topic.send("fan").await.expect("send");
    let mut receiver = Receiver::attach(&mut session, "r", "q")
        .await
        .expect("receiver");
    let first = next_delivery::<Value>(&mut receiver).await;
    receiver.accept(&first).await.expect("complete");
    let second = next_delivery::<Value>(&mut receiver).await;
    let mut info = Fields::new();
    info.insert(
        Symbol::from("DeadLetterReason"),
        Value::String("BadInput".into()),
    );
    let error = definitions::Error::new(
        ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
        None,
        Some(info),
    );
    receiver.reject(&second, error).await.expect("dead-letter");
    for _ in 0..2 {
        next_delivery::<Value>(&mut receiver).await;
    }
    receiver.close().await.expect("close");

    // The last two stay locked until their one-second locks run out; by then their
    // one-second time to live has run out too, and they are dead-lettered as expired.
    let samples = scrape_until(admin, "the counts moved", |s| {
        get(
            s,
            r#"tidebus_messages_expired_total{entity="q",kind="queue"}"#,
        ) == 2.0
    })
    .await;
    let q = |name: &str, extra: &str| {
        get(
            &samples,
            &format!(r#"{name}{{entity="q",kind="queue"{extra}}}"#),
        )
    };
    assert_eq!(q("tidebus_messages_in_total", ""), 4.0);
    assert_eq!(q("tidebus_messages_out_total", ""), 1.0, "one completed");
    assert_eq!(q("tidebus_lock_expirations_total", ""), 2.0);
    assert_eq!(q("tidebus_messages", r#",state="active""#), 0.0);
    assert_eq!(q("tidebus_messages", r#",state="dead_letter""#), 3.0);
    assert_eq!(
        q("tidebus_dead_lettered_total", r#",reason="BadInput""#),
        1.0
    );
    assert_eq!(
        q(
            "tidebus_dead_lettered_total",
            r#",reason="TTLExpiredException""#
        ),
        2.0
    );
    assert!(q("tidebus_entity_bytes", "") > 0.0);
    let subscription = |name: &str, extra: &str| {
        get(
            &samples,
            &format!(r#"{name}{{entity="t/Subscriptions/s",kind="subscription"{extra}}}"#),
        )
    };
    assert_eq!(
        get(
            &samples,
            r#"tidebus_messages_in_total{entity="t",kind="topic"}"#
        ),
        1.0
    );
    assert_eq!(subscription("tidebus_messages_in_total", ""), 1.0);
    assert_eq!(subscription("tidebus_messages", r#",state="active""#), 1.0);
    assert_eq!(get(&samples, "tidebus_connections"), 1.0);
    assert_eq!(get(&samples, "tidebus_links"), 2.0, "the two senders");
    assert!(get(&samples, "tidebus_connections_accepted_total") >= 1.0);
    assert!(
        get(&samples, "tidebus_flush_duration_seconds_count") >= 1.0,
        "sync sends wait for flushes"
    );
    assert!(
        get(&samples, "tidebus_flush_messages_sum") >= 5.0,
        "each send was flushed"
    );
    assert!(get(&samples, "tidebus_store_bytes") > 0.0);
    assert_eq!(get(&samples, "tidebus_storage_errors_total"), 0.0);

    drop(sender);
    drop(to_topic);
    // Dropped links detach on their own; the close may find them half-way.
    let _ = connection.close().await;
    scrape_until(admin, "the connection and its links are gone", |s| {
        get(s, "tidebus_connections") == 0.0 && get(s, "tidebus_links") == 0.0
    })
    .await;
}

/// `log_format = "json"`: every line is a JSON object; a connection's open and close are
/// logged at info inside its span, with its peer, SASL mechanism and policy, and its links
/// have spans of their own; the key never appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_name_each_connection_its_mechanism_and_policy_never_the_key() {
    use fe2o3_amqp::sasl_profile::SaslProfile;
    let dir = tempfile::tempdir().expect("tempdir");
    let key = "a-key-that-must-not-be-logged";
    let config = format!(
        "[broker]\nlog_format = \"json\"\n\n[[shared_access_policies]]\nname = \"sender\"\n\
         key = \"{key}\"\nrights = [\"Send\"]\n\n[[queues]]\nname = \"q\"\n"
    );
    let broker = ChildBroker::start(dir.path(), &config);
    let stream = TcpStream::connect(broker.addr).await.expect("tcp");
    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id("json-log-test")
        .sasl_profile(SaslProfile::Plain {
            username: "sender".into(),
            password: key.into(),
        })
        .open_with_stream(stream)
        .await
        .expect("open");
    let mut session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("begin");
    let mut sender = Sender::attach(&mut session, "logged-sender", "q")
        .await
        .expect("sender");
    sender.send("hello").await.expect("send");
    sender.close().await.expect("detach");
    connection.close().await.expect("close");

    let deadline = Instant::now() + DEADLINE;
    let lines: Vec<serde_json::Value> = loop {
        let text = broker.log_text();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
            })
            .collect();
        let closed = lines
            .iter()
            .any(|line| line["fields"]["message"] == "connection closed");
        if closed {
            assert!(!text.contains(key), "the key is logged:\n{text}");
            break lines;
        }
        assert!(Instant::now() < deadline, "no close logged:\n{text}");
        sleep(Duration::from_millis(50)).await;
    };
    let opened = lines
        .iter()
        .find(|line| line["fields"]["message"] == "connection opened")
        .expect("the open is logged");
    assert_eq!(opened["level"], "INFO", "{opened}");
    assert_eq!(opened["fields"]["mechanism"], "PLAIN", "{opened}");
    assert_eq!(opened["fields"]["policy"], "sender", "{opened}");
    let span = &opened["span"];
    assert_eq!(span["name"], "connection", "{opened}");
    assert!(
        span["peer"]
            .as_str()
            .is_some_and(|peer| peer.starts_with("127.0.0.1:")),
        "{opened}"
    );
    assert_eq!(span["container"], "json-log-test", "{opened}");
    let attached = lines
        .iter()
        .find(|line| line["fields"]["message"] == "link attached")
        .expect("the attach is logged (debug)");
    let spans = attached["spans"].as_array().expect("the span list");
    let link = spans.last().expect("the link's span");
    assert_eq!(link["name"], "link", "{attached}");
    assert_eq!(link["address"], "q", "{attached}");
    assert_eq!(
        spans[0]["name"], "connection",
        "inside its connection's: {attached}"
    );
}

/// The console's changing calls come only from its own page: a cross-site form (not JSON) or
/// another origin is refused, so a web page a developer visits cannot purge a broker that lets
/// anonymous clients in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_calls_from_another_origin_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = "[broker]\nallow_anonymous = true\n\n[[queues]]\nname = \"q\"\n";
    let broker = ChildBroker::start(dir.path(), config);
    let admin = broker
        .admin_addr
        .expect("the ready file names the admin endpoint");
    let purge = r#"{"entity":"q"}"#;
    let (status, answer) = http(
        admin,
        "POST",
        "/$console/api/purge",
        "Content-Type: text/plain\r\nOrigin: http://elsewhere.example\r\n",
        purge,
    )
    .await;
    assert_eq!(status, 415, "a cross-site form: {answer}");
    let (status, answer) = http(
        admin,
        "POST",
        "/$console/api/purge",
        "Content-Type: application/json\r\nOrigin: http://elsewhere.example\r\n",
        purge,
    )
    .await;
    assert_eq!(status, 403, "another origin: {answer}");
    let own = format!("Content-Type: application/json\r\nOrigin: http://{admin}\r\n");
    let (status, answer) = http(admin, "POST", "/$console/api/purge", &own, purge).await;
    assert_eq!((status, answer.as_str()), (200, r#"{"purged":0}"#));
}

/// The console answers an entity's refusal with the status Service Bus gives the same refusal
/// (one table for every surface): a send to a full queue 403 (quota exceeded), a resubmit of a
/// message that is not in the dead-letter queue 404 (message not found), not 400, which would
/// blame the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_refusals_carry_the_status_service_bus_gives_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = "[broker]\nallow_anonymous = true\n\n[[queues]]\nname = \"q\"\n\
                  max_size_in_megabytes = 1\n";
    let broker = ChildBroker::start(dir.path(), config);
    let admin = broker
        .admin_addr
        .expect("the ready file names the admin endpoint");
    let own = format!("Content-Type: application/json\r\nOrigin: http://{admin}\r\n");
    let send = format!(r#"{{"entity":"q","body":"{}"}}"#, "x".repeat(600_000));
    let (status, answer) = http(admin, "POST", "/$console/api/send", &own, &send).await;
    assert_eq!((status, answer.as_str()), (200, r#"{"sent":true}"#));
    let (status, answer) = http(admin, "POST", "/$console/api/send", &own, &send).await;
    assert_eq!(status, 403, "1,200,000 bytes exceed 1 MiB: {answer}");
    assert!(answer.contains("does not fit"), "{answer}");
    let resubmit = r#"{"entity":"q","sequenceNumber":12345}"#;
    let (status, answer) = http(admin, "POST", "/$console/api/resubmit", &own, resubmit).await;
    assert_eq!(status, 404, "nothing is dead-lettered: {answer}");
    assert!(answer.contains("12345"), "{answer}");
}

/// A start says what it started in one info line: version, listeners, data directory,
/// durability, entities, the messages it recovered and the time it took. What each lane
/// recovered is debug detail, and no info line shows a Rust value's Debug form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_is_one_info_line_that_counts_what_it_recovered() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = format!(
        "{}\n[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n",
        crate::durability::config("sync")
    );
    let broker = ChildBroker::start(dir.path(), &config);
    assert_eq!(
        crate::durability::send_ids(broker.addr, 0..3).await,
        vec![0, 1, 2]
    );
    broker.terminate();
    let broker = ChildBroker::start(dir.path(), &config);
    let log = broker.log_text();
    let info: Vec<&str> = log.lines().filter(|line| line.contains(" INFO ")).collect();
    let started: Vec<&&str> = info
        .iter()
        .filter(|line| line.contains(" started "))
        .collect();
    let [started] = started[..] else {
        panic!("one start line:\n{log}");
    };
    let addr = broker.addr.to_string();
    for field in [
        format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        format!("listeners=amqp {addr}, admin "),
        "durability=\"sync\"".to_owned(),
        "entities=2".to_owned(),
        "messages=3".to_owned(),
        "data_dir=".to_owned(),
        "took=".to_owned(),
    ] {
        assert!(started.contains(&field), "{field} in {started}");
    }
    assert_eq!(info.len(), 1, "nothing else at info:\n{}", info.join("\n"));
    assert!(
        log.lines().any(
            |line| line.contains(" DEBUG ") && line.contains("lane=subscription 1 dead-letter")
        ),
        "each lane's recovery at debug:\n{log}"
    );
    assert!(
        !log.contains("LaneId {"),
        "no Debug-formatted struct:\n{log}"
    );
    broker.terminate();
}

/// `TIDEBUS_TESTING` turns testing features on as `[testing]` does (the container image's
/// way): `/health` lists them and the start's log warns of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn testing_features_come_from_the_environment_and_are_announced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = "[broker]\nallow_anonymous = true\n\n[[queues]]\nname = \"q\"\n";
    let features = std::path::Path::new("reset");
    let broker = ChildBroker::start_with_env(dir.path(), config, &[("TIDEBUS_TESTING", features)]);
    let admin = broker.admin_addr.expect("an administration endpoint");
    let (status, health) = http_get(admin, "/health").await;
    assert_eq!(status, 200, "{health}");
    let health: serde_json::Value = serde_json::from_str(&health).expect("JSON");
    assert_eq!(health["testing"], serde_json::json!(["reset"]), "{health}");
    let log = broker.log_text();
    assert!(
        log.contains(" WARN ") && log.contains("testing feature on") && log.contains("reset"),
        "{log}"
    );
    broker.terminate();
}
