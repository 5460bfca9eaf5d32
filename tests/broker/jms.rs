//! The JMS suite (`tests/jms`: JUnit 5 classes on Apache Qpid JMS 2.10.0, the JMS 2.0 client
//! Service Bus Premium's JMS support is built on, pinned in `tests/jms/pom.xml`), run by its own
//! `tests/jms/run.sh` against the broker binary under test.
//!
//! `cargo test` runs the smoke slice, the tests tagged `smoke` (a queue send and receive with
//! every JMS header, the five message types and the bodiless message, a `QueueBrowser` that
//! shows every message and takes none, and a selector consumer refused, about a second of tests
//! in a few seconds of Maven), to keep the suite alive within CI's time; the whole suite is
//! `tests/jms/run.sh`. Maven's output goes to `<target>/jms`; its artifacts to `~/.m2`,
//! downloaded on the first run. `TIDEBUS_JMS_ARGS` replaces the Maven arguments, e.g.
//! `-Dtest=BrowserTest` or empty for every class. Output and failure as in `runner`.

use std::process::Command;
use std::time::Duration;

use crate::prepared::{self, crate_root};
use crate::runner;

/// The first run downloads Qpid JMS, JUnit and Maven's plugins before it tests.
const RUN_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// A text message with its JMS headers and typed properties, the five JMS message types and a
/// bodiless one, a browse that shows three messages twice and leaves them to a consumer, and a
/// consumer with a selector refused with the selector named in the exception.
#[test]
fn jms_smoke_suite() {
    let args = std::env::var("TIDEBUS_JMS_ARGS").unwrap_or_else(|_| "-Dgroups=smoke".into());
    let mut command = Command::new("bash");
    command
        .current_dir(crate_root())
        .arg("tests/jms/run.sh")
        .args(args.split_whitespace())
        .env("TIDEBUS_JMS_BUILD_DIR", prepared::target_dir().join("jms"));
    runner::run(
        "tests/jms/run.sh",
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
