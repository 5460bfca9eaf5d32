//! A Spring Boot application on Spring Cloud Azure's Service Bus support (`tests/spring`:
//! Spring Boot 4.0.7, Spring Cloud Azure 7.0.0, pinned in its `pom.xml`), configured with the
//! emulator's connection string alone, sending and receiving through the real broker binary.
//!
//! The broker runs as a plain process here, not in the image: what this checks is the Spring
//! starter's client configuration against the emulator string (the image's own paths are the
//! container tests'), and it needs no podman. Maven's output goes to `<target>/spring`, its
//! artifacts to `~/.m2`, downloaded on the first run. Output and failure as in `runner`.

use crate::child::ChildBroker;
use crate::runner;

/// The emulator's policy and key, which its connection string names, and the application's
/// queue.
const CONFIG: &str = r#"
[broker]
durability = "memory"

[[shared_access_policies]]
name = "RootManageSharedAccessKey"
key = "SAS_KEY_VALUE"
rights = ["Manage", "Send", "Listen"]

[[queues]]
name = "orders"
"#;

/// The starter's auto-configured sender places an order on a queue and the processor client it
/// built from the application's listener (started by the starter itself) receives it.
#[test]
fn spring_cloud_azure_servicebus_app() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let broker = ChildBroker::start(dir.path(), CONFIG);
    let connection = format!(
        "Endpoint=sb://localhost:{};SharedAccessKeyName=RootManageSharedAccessKey;\
         SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
        broker.addr.port()
    );
    let mut command = runner::maven_test("tests/spring", "spring", &[]);
    command.env("TIDEBUS_CONNECTION_STRING", connection);
    runner::maven_app("tests/spring", &mut command);
    drop(broker);
}
