//! Mixed JMS and Service Bus SDK traffic (issue 55): the JMS suite's `InteropTest`
//! (`tests/jms`), run by `tests/jms/run.sh -Dtest=InteropTest` against the broker binary under
//! test. One broker; each test sends from one side and runs the other as a subprocess:
//! Qpid JMS's six message kinds read by the Python SDK (`tests/python/jms_interop.py`) and a
//! text and a bytes message by the JavaScript SDK (`tests/jms/interop.js`), and what each SDK
//! sends read by Qpid JMS.
//!
//! This driver prepares the SDKs as the Python and JavaScript suites do (the shared venv, the
//! lock file's `node_modules`) and names them to run.sh, so the tests run rather than skip.
//! Maven's output goes to `<target>/jms-interop` (apart from the smoke suite's, which may run
//! at the same time). Output and failure as in `runner`.

use crate::{js, pyenv, runner};

/// JMS -> Python SDK (six kinds: body type and content, subject, correlation id, message id,
/// reply-to, to, time to live, priority, typed application properties, the JMS type
/// annotation), JMSXGroupID as the session a Python session receiver takes, Python SDK -> JMS
/// (str, bytes, text/plain and value bodies, ids, subject, properties), JMS -> JavaScript SDK
/// (text and bytes), JavaScript SDK -> JMS (JSON string, Buffer and value bodies, ids,
/// subject, properties).
#[test]
fn jms_sdk_interop_suite() {
    let python = pyenv::shared().python();
    runner::maven_suite_run(
        "jms",
        &["-Dtest=InteropTest"],
        "jms-interop",
        &[
            ("TIDEBUS_INTEROP_PYTHON", python.as_ref()),
            ("TIDEBUS_INTEROP_NODE_PATH", js::node_modules()),
        ],
    );
}
