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

use std::process::Command;
use std::time::Duration;

use crate::prepared::{self, crate_root};
use crate::runner;

/// The first run downloads the SDK and Maven's plugins (about 40 MB) before it tests.
const RUN_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// Send and receive with every property, a session's state across receivers, a complete and a
/// send committed together in a transaction, a queue's lifecycle through the administration
/// client over HTTPS, and `TestingRecipeTest`: the README's `HttpClient` reset and clock
/// advance, a message gone after the reset and one scheduled a day ahead received.
#[test]
fn azure_sdk_smoke_suite() {
    let args = std::env::var("TIDEBUS_JAVA_ARGS").unwrap_or_else(|_| "-Dgroups=smoke".into());
    let mut command = Command::new("bash");
    command
        .current_dir(crate_root())
        .arg("tests/java/run.sh")
        .args(args.split_whitespace())
        .env(
            "TIDEBUS_JAVA_BUILD_DIR",
            prepared::target_dir().join("java"),
        );
    runner::run(
        "tests/java/run.sh",
        &mut command,
        RUN_DEADLINE,
        |code| match code {
            Some(1) => "tests failed",
            Some(2) => "the suite could not start (broker, JDK or Maven)",
            Some(_) => "run.sh error",
            None => "killed by a signal",
        },
    );
}
