//! The JMS suite (`tests/jms`: JUnit 5 classes on Apache Qpid JMS 2.10.0, the JMS 2.0 client
//! Service Bus Premium's JMS support is built on, pinned in `tests/jms/pom.xml`), run by its own
//! `tests/jms/run.sh` against the broker binary under test.
//!
//! `cargo test` runs the smoke slice, the tests tagged `smoke` (a queue send and receive with
//! every JMS header, the five message types and the bodiless message, a `QueueBrowser` that
//! shows every message and takes none, a queue consumer with a selector that gets only what
//! matches and leaves the rest in order, a durable topic subscription kept until unsubscribed
//! and one whose selector is its rule, a request and its reply through a temporary queue, and
//! a send and receive through azure-servicebus-jms over TLS; about two seconds of tests in a
//! few seconds of Maven), to keep the suite alive within CI's time; the whole suite is
//! `tests/jms/run.sh`. Maven's output goes to `<target>/jms`; its artifacts to `~/.m2`,
//! downloaded on the first run. `TIDEBUS_JMS_ARGS` replaces the Maven arguments, e.g.
//! `-Dtest=BrowserTest` or empty for every class. Output and failure as in `runner`.

use crate::runner;

/// A text message with its JMS headers and typed properties, the five JMS message types and a
/// bodiless one, a browse that shows three messages twice and leaves them to a consumer, a
/// queue consumer with a selector handed only the matches while a plain consumer gets the rest
/// in order, a durable subscription of a client id kept while closed and deleted by
/// `unsubscribe`, a durable subscription's selector applied as its rule, a requester's
/// temporary queue as the JMSReplyTo a responder on another connection answers to, and
/// azure-servicebus-jms's `JMSContext` sending and receiving over TLS.
#[test]
fn jms_smoke_suite() {
    runner::maven_suite("jms");
}
