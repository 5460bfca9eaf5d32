//! Suites with real Python AMQP clients, run by pytest against the real broker binary.

use crate::pytest;

/// python-qpid-proton against the broker: links, settlement, SASL, frames, idle timeout, garbage.
#[test]
fn proton_suite() {
    pytest::run("tests/python/test_proton.py");
}
