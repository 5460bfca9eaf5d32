//! The README's Go recipe for test suites ("Testing with Tidebus"), run for real:
//! `tests/containers/go/recipe` (`resetBroker` and `advanceBroker`, net/http POSTs to
//! `/$testing/reset` and `/$testing/clock/advance`, around azservicebus as pinned in
//! `tests/containers/go/go.mod`) by `go test` against a broker binary started here with the
//! reset and the controlled clock on. No container: the package links the SDK only, and takes
//! a few seconds once Go's build cache holds it.
//!
//! The broker is `TIDEBUS_BIN` if set (to see the test fail on another build), else the binary
//! under test. Output and failure as in `runner`.

use std::process::Command;
use std::time::Duration;

use crate::child::ChildBroker;
use crate::prepared::crate_root;
use crate::runner;

/// A cold Go build cache compiles the SDK and go-amqp first.
const RUN_DEADLINE: Duration = Duration::from_secs(5 * 60);

/// The recipe's broker: anonymous clients allowed (the README's recipe sends no
/// `Authorization`), the testing features on, and the queue the tests use. The emulator's
/// policy signs the SDK's tokens.
const CONFIG: &str = r#"
[broker]
durability = "memory"
allow_anonymous = true

[testing]
reset = true
clock = "controlled"

[[shared_access_policies]]
name = "RootManageSharedAccessKey"
key = "SAS_KEY_VALUE"
rights = ["Manage", "Send", "Listen"]

[[queues]]
name = "recipe"
"#;

/// A message sent before `resetBroker(t)` is gone after it, and a sender kept across it
/// works; a message scheduled a day ahead of the broker's clock arrives right after
/// `advanceBroker(t, 24*time.Hour)`.
#[test]
fn go_testing_recipe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), CONFIG);
    let admin = broker
        .admin_addr
        .expect("the administration endpoint's address");
    let mut command = Command::new("go");
    command
        .current_dir(crate_root().join("tests/containers/go/recipe"))
        .args(["test", "-count=1", "-v", "-timeout", "2m", "."])
        .env(
            "TIDEBUS_CONNECTION_STRING",
            format!(
                "Endpoint=sb://{};SharedAccessKeyName=RootManageSharedAccessKey;\
                 SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true",
                broker.addr
            ),
        )
        .env("TIDEBUS_ADMIN", format!("http://{admin}"));
    runner::run(
        "go test (tests/containers/go/recipe)",
        &mut command,
        RUN_DEADLINE,
        |code| match code {
            Some(1) => "the Go recipe's tests failed (or did not build)",
            Some(_) => "go test error",
            None => "killed by a signal",
        },
    );
}
