//! Suites with real Python AMQP clients, run by pytest against the real broker binary.

use crate::pytest;

/// python-qpid-proton against the broker: links, settlement, SASL, frames, idle timeout, garbage.
#[test]
fn proton_suite() {
    pytest::run("tests/python/test_proton.py");
}

/// The official `azure-servicebus` SDK in emulator mode: CBS, peek-lock settlement, the DLQ,
/// deferral, lock renewal and expiry, peek, errors mapped to the SDK's exception types.
#[test]
fn azure_sdk_suite() {
    pytest::run("tests/python/test_azure_sdk.py");
}

/// The official `azure-servicebus` SDK against time (issue 6): scheduled messages (schedule,
/// cancel, peek, activation, restart), time to live (entity cap, expiry under a lock, the
/// sweeper, dead-lettering on expiry) and auto-delete on idle.
#[test]
fn azure_sdk_time_suite() {
    pytest::run("tests/python/test_time.py");
}

/// The official `azure-servicebus` SDK against topics: copies per subscription with the
/// topic's numbers, independent settlement, SQL and correlation rules with actions, scheduled
/// messages held by the topic, the shortest time to live winning, unknown subscriptions.
#[test]
fn azure_sdk_topics_suite() {
    pytest::run("tests/python/test_topics.py");
}

/// The official `azure-servicebus` SDK against sessions: named and next-available session
/// receivers, order within a session, the session lock (held, renewed, lapsed), session
/// state, deferral and receive-and-delete inside a session, sends without a session id, and
/// a topic's session-enabled subscription.
#[test]
fn azure_sdk_sessions_suite() {
    pytest::run("tests/python/test_sessions.py");
}

/// Security with the official `azure-servicebus` SDK and python-qpid-proton: the emulator's
/// connection string with anonymous clients refused, wrong keys, entity-level and Listen-only
/// policies, expired signatures, SASL PLAIN right and wrong, a token lapsing under a link, no
/// secret in the log, and the SDK over TLS with a `gen-cert` certificate.
#[test]
fn security_suite() {
    pytest::run("tests/python/test_security.py");
}

/// The official `azure-servicebus` SDK's `ServiceBusAdministrationClient` over HTTPS: the
/// namespace, declared and created queues and topics, runtime counts after sends, a
/// dead-letter and a schedule, conflicts, missing entities, refused properties, a wrong key,
/// and a created queue surviving a restart.
#[test]
fn admin_suite() {
    pytest::run("tests/python/test_admin.py");
}

/// Duplicate detection with the official `azure-servicebus` SDK: its own five-sends test (sync
/// and asyncio), repeats inside and after the window, a batch with an internal duplicate, a
/// scheduled repeat, a topic, and a retry after `kill -9` and a restart.
#[test]
fn duplicates_suite() {
    pytest::run("tests/python/test_duplicates.py");
}

/// SIGHUP reloads the config file: an added queue created and used through the SDK, a changed
/// delivery limit applied with a held lock untouched, a file with an error changing nothing,
/// restart-only settings and removed queues reported.
#[test]
fn reload_suite() {
    pytest::run("tests/python/test_reload.py");
}

/// Auto-forwarding with the official `azure-servicebus` SDK: queue and subscription to queue,
/// dead letters to an error queue, a two-hop chain through a topic, a refused receiver, a
/// loop refused at start and through the administration API, and nothing lost when the
/// broker is killed while it forwards.
#[test]
fn forwarding_suite() {
    pytest::run("tests/python/test_forwarding.py");
}

/// The official `azure-servicebus` SDK where its own live suite found Tidebus unlike Service Bus
/// (issue 31): received messages sent again, every section kind of an annotated message, the
/// tag of a pre-settled delivery, and the management operations that suite uses.
#[test]
fn azure_sdk_fidelity_suite() {
    pytest::run("tests/python/test_fidelity.py");
}

/// Partitioned queues and topics with the official `azure-servicebus` SDK (issue 34): sends
/// spread over partitions and numbered gap-free in each, keys and sessions in one partition,
/// a key unlike the session id refused, one-at-a-time receives, peek across partitions,
/// schedule, cancel, deferral, dead-lettering and renewal by number and token, next-available
/// sessions, a partitioned topic's rules, duplicate detection, and `kill -9` losing nothing.
#[test]
fn partitions_suite() {
    pytest::run("tests/python/test_partitions.py");
}

/// AMQP over WebSockets with the azure-servicebus SDK, sync and async: the emulator string with
/// a custom endpoint on the plain port, the bare emulator string on ports 80 and 443
/// (`websocket_listen`), wss to the TLS port and to the plain port with the `gen-cert` CA, and
/// AMQPS on the plain port; CBS, send, receive, settle, peek, schedule, sessions on each.
#[test]
fn websockets_suite() {
    pytest::run("tests/python/test_websockets.py");
}

/// The container image (`config/container/build.sh` from the binary under test, run with
/// podman): the emulator's `Config.json` at its path, published loopback ports, the
/// emulator's environment ignored and never logged, the ready line, `/health` and the
/// `HEALTHCHECK`, the SDK over AMQP and over a WebSocket on 443 as user 10001, exit 0 on
/// SIGTERM; and testcontainers-python through podman's Docker-compatible socket.
#[test]
fn container_suite() {
    pytest::run("tests/python/test_container.py");
}

/// `[testing]` through the official SDK: the reset between tests (messages of every kind,
/// session states, duplicate ids and entities created at run time gone, numbering from 1),
/// `tidebus reset`; the controlled clock firing every time rule on an advance (a day's
/// schedule and time to live, peek and session locks, idleness, the duplicate window, across
/// a restart); both off by default, Manage-only, refused on an exposed broker.
#[test]
fn testing_suite() {
    pytest::run("tests/python/test_testing.py");
}
