//! A Spring Boot application on Spring Cloud Azure's JMS starter (`tests/spring-azure-jms`:
//! Spring Boot 3.5.7 with `spring-cloud-azure-starter-servicebus-jms` 6.1.0, which brings
//! azure-servicebus-jms 2.1.0 over Qpid JMS 2.9.0, pinned in its `pom.xml`), configured only by
//! the starter's documented `spring.jms.servicebus.*` properties as Microsoft documents it for
//! Service Bus Premium: JmsTemplate sends and `@JmsListener`s receive through the real broker
//! binary.
//!
//! An order sent with JmsTemplate to a queue reaches its listener, and an event published on a
//! topic reaches a listener on the starter's `topicJmsListenerContainerFactory`, made a shared
//! durable subscription by properties, on connections with the client id `topic-client-id`
//! gives. azure-servicebus-jms keeps only the host of the connection string and dials
//! `amqps://HOST` on 5671, so the broker serves TLS on 127.0.0.X:5671, X drawn at random from 2
//! to 254 (all of 127/8 is loopback on Linux; 127.0.0.1:5671 stays free for the Go suite, which
//! expects nothing there) and drawn again if that address is taken, with a `gen-cert`
//! certificate for that address whose CA the test JVM trusts through a PKCS12 trust store
//! (`keytool`, as `tests/java/suite.sh` makes it); its plain listener is on an ephemeral port
//! and unused. Each wait in the application's test has a 30 s deadline. Maven's output goes to
//! `<target>/spring-azure-jms`, its artifacts to `~/.m2`, downloaded on the first run. Output and
//! failure as in `runner`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use crate::child::ChildBroker;
use crate::runner;

/// The one port azure-servicebus-jms dials (AMQPS), whatever the connection string says.
const AMQPS_PORT: u16 = 5671;

/// How many loopback addresses are tried for [`AMQPS_PORT`] before the test gives up.
const ADDRESS_TRIES: u64 = 5;

/// The password of the test JVM's trust store.
const TRUST_STORE_PASSWORD: &str = "tidebus";

/// The emulator's policy, which the connection string names (SASL PLAIN: anonymous clients are
/// refused), the queue and the topic; the topic's subscription is made by the listener. (The
/// starter's `open` says `com.microsoft:is-client-provider`, so the broker would create the
/// queue and topic were they missing, as Service Bus Premium does for azure-servicebus-jms.)
const ENTITIES: &str = r#"
[[shared_access_policies]]
name = "RootManageSharedAccessKey"
key = "SAS_KEY_VALUE"
rights = ["Manage", "Send", "Listen"]

[[queues]]
name = "orders"

[[topics]]
name = "events"
"#;

/// JmsTemplate to a queue and `@JmsListener` on it; JmsTemplate to a topic and a
/// `@JmsListener` on a shared durable subscription; all through the starter's
/// azure-servicebus-jms over TLS.
#[test]
fn spring_azure_jms_app() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (broker, host) = start_on_amqps_port(dir.path());
    let trust_store = dir.path().join("truststore.p12");
    make_trust_store(
        &dir.path().join(format!("certs-{host}/ca.pem")),
        &trust_store,
    );

    let trust = format!(
        "-DargLine=-Djavax.net.ssl.trustStore={} -Djavax.net.ssl.trustStoreType=PKCS12 \
         -Djavax.net.ssl.trustStorePassword={TRUST_STORE_PASSWORD}",
        trust_store.display()
    );
    let mut command = runner::maven_test("tests/spring-azure-jms", "spring-azure-jms", &[&trust]);
    command.env(
        "TIDEBUS_CONNECTION_STRING",
        format!(
            "Endpoint=sb://{host}/;SharedAccessKeyName=RootManageSharedAccessKey;\
             SharedAccessKey=SAS_KEY_VALUE"
        ),
    );
    runner::maven_app("tests/spring-azure-jms", &mut command);
    drop(broker);
}

/// A broker whose TLS listener is on 127.0.0.X:[`AMQPS_PORT`], with a `gen-cert` certificate
/// for that address in `dir/certs-127.0.0.X`; another X while the broker cannot start (its
/// address taken).
fn start_on_amqps_port(dir: &Path) -> (ChildBroker, Ipv4Addr) {
    let mut failures = Vec::new();
    for attempt in 0..ADDRESS_TRIES {
        let host = Ipv4Addr::new(127, 0, 0, random_last_octet(attempt));
        let certs = dir.join(format!("certs-{host}"));
        let made = Command::new(env!("CARGO_BIN_EXE_tidebus"))
            .args(["gen-cert", "--host", &host.to_string(), "--out"])
            .arg(&certs)
            .output()
            .expect("run tidebus gen-cert");
        assert!(made.status.success(), "gen-cert: {made:?}");
        let config = format!(
            "[broker]\ndurability = \"memory\"\nallow_anonymous = false\n\n\
             [broker.tls]\nlisten = \"{host}:{AMQPS_PORT}\"\n\
             cert = \"{}\"\nkey = \"{}\"\n{ENTITIES}",
            certs.join("server.pem").display(),
            certs.join("server-key.pem").display(),
        );
        match ChildBroker::try_start(dir, &config) {
            Ok(broker) => return (broker, host),
            Err(failure) => {
                eprintln!(
                    "no broker with TLS on {host}:{AMQPS_PORT}, another address next: {failure}"
                );
                failures.push(failure);
            }
        }
    }
    panic!(
        "no broker with TLS on port {AMQPS_PORT} of {ADDRESS_TRIES} loopback addresses:\n{}",
        failures.join("\n")
    );
}

/// A last octet from 2 to 254, drawn anew for each `attempt`.
fn random_last_octet(attempt: u64) -> u8 {
    let draw = RandomState::new().hash_one(attempt);
    2 + u8::try_from(draw % 253).expect("below 253")
}

/// A PKCS12 trust store at `store` holding the CA certificate `ca`.
fn make_trust_store(ca: &Path, store: &Path) {
    let made = Command::new("keytool")
        .args(["-importcert", "-noprompt", "-alias", "tidebus-ca", "-file"])
        .arg(ca)
        .arg("-keystore")
        .arg(store)
        .args(["-storetype", "PKCS12", "-storepass", TRUST_STORE_PASSWORD])
        .output()
        .expect("run keytool (it comes with the JDK)");
    assert!(made.status.success(), "keytool -importcert: {made:?}");
}
