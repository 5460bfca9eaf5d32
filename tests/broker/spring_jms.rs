//! A Spring Boot application on Spring JMS (`tests/spring-jms`: Spring Boot 4.0.7 with
//! `spring-boot-starter-jms`, Qpid JMS 2.10.0, pinned in its `pom.xml`): JmsTemplate sends and
//! `@JmsListener`s receive through the real broker binary, on a plain AMQP URI.
//!
//! An order sent with JmsTemplate reaches its listener, a request is answered by a listener
//! whose return value Spring sends to the request's JMSReplyTo, and an event published on a
//! topic reaches a listener on a shared durable subscription. The application signs in with
//! the emulator policy's name and key (SASL PLAIN). Each wait in the application's
//! test has a 30 s deadline, so a listener that hangs fails the test. Spring Cloud Azure's JMS
//! starter is not used: the pom says why. Maven's output goes to `<target>/spring-jms`, its
//! artifacts to `~/.m2`, downloaded on the first run. Output and failure as in `runner`.

use crate::child::ChildBroker;
use crate::runner;

/// The emulator's policy, which the application signs in with (SASL PLAIN: anonymous clients
/// are refused), and its queues.
const CONFIG: &str = r#"
[broker]
durability = "memory"
allow_anonymous = false

[[shared_access_policies]]
name = "RootManageSharedAccessKey"
key = "SAS_KEY_VALUE"
rights = ["Manage", "Send", "Listen"]

[[queues]]
name = "orders"
[[queues]]
name = "requests"
[[queues]]
name = "replies"

[[topics]]
name = "events"
"#;

/// JmsTemplate to a queue and `@JmsListener` on it; request and reply through JMSReplyTo; a
/// topic's `@JmsListener` on a shared durable subscription.
#[test]
fn spring_jms_app() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let broker = ChildBroker::start(dir.path(), CONFIG);
    let mut command = runner::maven_test("tests/spring-jms", "spring-jms", &[]);
    command.env("TIDEBUS_AMQP_URL", format!("amqp://{}", broker.addr));
    runner::maven_app("tests/spring-jms", &mut command);
    drop(broker);
}
