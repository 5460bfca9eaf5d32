//! The Java suite (`tests/java`: JUnit 5 classes on the official `azure-messaging-servicebus`
//! SDK, pinned in `tests/java/pom.xml`), run by its own `tests/java/run.sh` against the broker
//! binary under test.
//!
//! `cargo test` runs the smoke slice, the tests tagged `smoke` (a send and receive, a session
//! with its state, a transaction, an administration call, and the README's testing recipe: a
//! reset and a day on the controlled clock, under half a second), to keep the suite alive
//! within CI's time; the whole suite is `tests/java/run.sh`. Maven's output goes to `<target>/java`; its
//! artifacts to `~/.m2`, downloaded on the first run. `TIDEBUS_JAVA_ARGS` replaces the Maven
//! arguments, e.g. `-Dtest=SessionTest` or empty for every class. Output and failure as in
//! `runner`.

use crate::runner;

/// Send and receive with every property, a session's state across receivers, a complete and a
/// send committed together in a transaction, a queue's lifecycle through the administration
/// client over HTTPS, and `TestingRecipeTest`: the README's `HttpClient` reset and clock
/// advance, a message gone after the reset and one scheduled a day ahead received.
#[test]
fn azure_sdk_smoke_suite() {
    runner::maven_suite("java");
}
