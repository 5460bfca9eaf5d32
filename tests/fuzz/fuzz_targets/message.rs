//! # Fuzz target `message`: the message codec, `tidebus::message`
//!
//! Every input is taken as the bytes of a message a client sent (the codec reads messages
//! without decoding their bodies; `src/amqp/message.rs`). What the target checks:
//!
//! - `scan_sections`, `inspect` and `unpack_batch` never panic, whatever the bytes (nor
//!   overflow the stack: the value scanner recurses on described values, `0x00` …).
//! - What `inspect` accepts it stores in AMQP's section order (sections may arrive in any
//!   order, as Service Bus reads them): a second `inspect` changes nothing.
//! - Whatever `inspect` accepts, and every message `unpack_batch` unpacks from a batch,
//!   goes through `splice` without error, with a bare `DeliveryStamp` and with a full one
//!   (lock token, ttl, expiry time, broker annotations, one of them a key clients set too).
//! - The spliced message is accepted by `scan_sections` and by `inspect`; it opens with the
//!   broker's own sections (header; delivery-annotations when there is a lock token, the
//!   delivery is pre-settled or the sender wrote some; message-annotations; properties when
//!   there is an expiry time); the header carries the stamp's delivery count and ttl; the
//!   rest is the stored bytes from the first section that is not a header or annotations
//!   on, byte for byte (from the one after it when that one is the properties the expiry
//!   time replaced).
//! - `set_application_properties`, on what `inspect` accepts: without entries it returns
//!   the bytes untouched; with entries it succeeds (its doc: "fails only on bytes that
//!   `inspect` would have refused"), its output is accepted by `inspect`, holds the entries
//!   in an application-properties section where AMQP puts one, and every other section is
//!   kept byte for byte.
//!
//! A violation panics, so libFuzzer reports it as a crash and saves the input under
//! `tests/fuzz/artifacts/message/`.
//!
//! ## Running (from the repository root, stable toolchain)
//!
//! cargo-fuzz passes `-Z` flags to rustc, which stable only takes with `RUSTC_BOOTSTRAP=1`:
//!
//! ```sh
//! cargo install cargo-fuzz
//! RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir tests/fuzz message \
//!     tests/fuzz/corpus/message tests/fuzz/seeds/message -- \
//!     -max_len=4096 -runs=10000000 -dict=tests/fuzz/message.dict
//! # a crash, shrunk:
//! RUSTC_BOOTSTRAP=1 cargo fuzz tmin --fuzz-dir tests/fuzz message tests/fuzz/artifacts/message/crash-…
//! ```
//!
//! The first corpus directory is where libFuzzer adds what it finds (git-ignored, like
//! `artifacts/`, `coverage/` and `target/`); `seeds/message/` holds a few well-formed
//! messages (every section kind, numeric, ulong and symbolic descriptors, list32/map32
//! forms, a batch) so that runs start past the framing. `message.dict` gives libFuzzer the
//! section descriptors (it does not find `amqp:header:list` and the like by itself) and the
//! annotation keys the codec reads. AddressSanitizer (the default `--sanitizer address`)
//! works on stable this way; `--sanitizer none` builds and runs faster without it. Without
//! `-O`, cargo-fuzz builds with debug assertions and overflow checks on (in dependencies
//! too), so an arithmetic overflow in serde_amqp shows as a crash.
//!
//! ## Findings
//!
//! The first run (10 million executions, against the codec before issue 12's fixes) found
//! that `inspect` accepted what later steps could not handle: application properties that
//! `set_application_properties` could not decode (`00 53 74 45`, a list; `00 53 74 c1 01
//! 01`, an odd map; `00 53 74 c1 08 02 a1 00 b0 ff ff ff ff`, a `vbin32` claiming 4 GiB that
//! serde_amqp allocated), sections out of order (`00 53 75 a0 00 00 53 70 45`, a header after
//! the body, delivered as a second header: since issue 31 put in order on arrival rather
//! than refused, as Service Bus takes it), and 74,724 nested descriptors after `00 53 75`
//! (a stack overflow). The second run, on the fixed codec, found application properties with
//! a key that is not UTF-8 (`a1 01 87`), which serde_amqp refuses when properties are set.
//! Later runs found a char that is no Unicode scalar, a null application-properties value
//! and a boolean byte of 5: `set_application_properties` now keeps the client's entries byte
//! for byte instead of decoding them.
//! Each is fixed and is a named test in `src/message.rs`
//! (`fuzz_findings_are_refused_or_get_through_every_later_step`).
//! Issue 31 (sections in any order, the sender's delivery annotations passed on): 10 million
//! executions (`-O --sanitizer none`, 55 s) found one flaw, in this target's own expectation
//! (a sender's delivery annotations holding only a lock token are not passed on), and none in
//! the codec.

#![no_main]

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Header};
use fe2o3_amqp::types::primitives::{SimpleValue, Timestamp, Value};
use libfuzzer_sys::fuzz_target;
use tidebus::message::{self, DeliveryStamp, Section};

const HEADER: u8 = 0x70;
const DELIVERY_ANNOTATIONS: u8 = 0x71;
const MESSAGE_ANNOTATIONS: u8 = 0x72;
const PROPERTIES: u8 = 0x73;
const APPLICATION_PROPERTIES: u8 = 0x74;

/// A stamp that changes nothing it may leave alone, and one that sets everything.
fn stamps() -> [DeliveryStamp; 3] {
    [
        DeliveryStamp {
            delivery_count: 0,
            annotations: Vec::new(),
            lock_token: None,
            presettled: false,
            ttl_ms: None,
            expires_ms: None,
        },
        DeliveryStamp {
            delivery_count: 1,
            annotations: Vec::new(),
            lock_token: None,
            presettled: true,
            ttl_ms: None,
            expires_ms: None,
        },
        DeliveryStamp {
            delivery_count: 0xfffe_ffff,
            // What the broker writes (src/entity/state.rs, `stamp`), and more.
            annotations: vec![
                ("x-opt-sequence-number", Value::Long(42)),
                (
                    "x-opt-enqueued-time",
                    Value::Timestamp(Timestamp::from_milliseconds(5)),
                ),
                ("x-opt-message-state", Value::Int(0)),
                (
                    "x-opt-locked-until",
                    Value::Timestamp(Timestamp::from_milliseconds(i64::MAX)),
                ),
                // A key clients send too: theirs must give way to the broker's.
                (
                    "x-opt-scheduled-enqueue-time",
                    Value::Timestamp(Timestamp::from_milliseconds(-1)),
                ),
                // Encoded through serde_amqp rather than by hand.
                ("x-opt-partition-key", Value::String("p".into())),
            ],
            lock_token: Some(uuid::Uuid::from_u128(0x0123_4567_89ab_cdef)),
            presettled: false,
            ttl_ms: Some(2_000),
            expires_ms: Some(i64::MIN),
        },
    ]
}

fn codes(sections: &[Section]) -> Vec<u8> {
    sections.iter().map(|section| section.code).collect()
}

/// The bytes of every section, in order.
fn section_bytes<'a>(bytes: &'a [u8], sections: &[Section]) -> Vec<&'a [u8]> {
    sections
        .iter()
        .map(|section| &bytes[section.range.clone()])
        .collect()
}

/// Whether a sender's delivery-annotations section holds an entry the broker passes on: any
/// but a lock token, which is only ever the broker's. `None` when serde_amqp cannot tell
/// (the broker reads the map without decoding its values).
fn passes_entries_on(section: &[u8]) -> Option<bool> {
    let lock_token = Value::Symbol("x-opt-lock-token".into());
    match serde_amqp::from_slice::<Value>(section).ok()? {
        Value::Described(described) => match described.value {
            Value::Map(map) => Some(map.keys().any(|key| *key != lock_token)),
            _ => Some(false),
        },
        _ => None,
    }
}

/// Splices `stored` (accepted by `inspect`, scanned into `sections`) and checks the result.
fn check_splice(stored: &Bytes, sections: &[Section], stamp: &DeliveryStamp) {
    let whole = message::splice(stored, stamp, &mut Vec::new())
        .unwrap_or_else(|error| panic!("splice refused a message inspect accepted: {error}"));

    // What the broker passes on: the stored bytes from the first section other than header
    // and annotations (from the one after it when that one is the properties the expiry time
    // replaced).
    let first_other = sections
        .iter()
        .position(|s| !matches!(s.code, HEADER | DELIVERY_ANNOTATIONS | MESSAGE_ANNOTATIONS))
        .unwrap_or(sections.len());
    let mut kept_from = first_other;
    if stamp.expires_ms.is_some() && sections.get(first_other).map(|s| s.code) == Some(PROPERTIES) {
        kept_from += 1;
    }
    let tail_start = sections
        .get(kept_from)
        .map_or(stored.len(), |s| s.range.start);
    let tail = &stored[tail_start..];
    assert!(
        whole.ends_with(tail),
        "the delivery does not end with the stored bytes from byte {tail_start} on"
    );

    // The prefix: the broker's own sections.
    let prefix = &whole[..whole.len() - tail.len()];
    let prefix_sections = message::scan_sections(prefix)
        .unwrap_or_else(|error| panic!("the spliced prefix does not scan: {error}"));
    let sent_delivery_annotations = (sections[..first_other].iter())
        .find(|s| s.code == DELIVERY_ANNOTATIONS)
        .map_or(Some(false), |s| passes_entries_on(&stored[s.range.clone()]));
    let mut expected = vec![HEADER];
    let broker_writes_them = stamp.lock_token.is_some() || stamp.presettled;
    if broker_writes_them || sent_delivery_annotations == Some(true) {
        expected.push(DELIVERY_ANNOTATIONS);
    }
    expected.push(MESSAGE_ANNOTATIONS);
    if stamp.expires_ms.is_some() {
        expected.push(PROPERTIES);
    }
    let mut got = codes(&prefix_sections);
    if sent_delivery_annotations.is_none() && !broker_writes_them {
        got.retain(|code| *code != DELIVERY_ANNOTATIONS);
    }
    assert_eq!(got, expected, "prefix sections");
    let header: Header = serde_amqp::from_slice(&prefix[prefix_sections[0].range.clone()])
        .unwrap_or_else(|error| panic!("the broker's header does not decode: {error}"));
    assert_eq!(
        header.delivery_count, stamp.delivery_count,
        "delivery count"
    );
    if let Some(ttl) = stamp.ttl_ms {
        assert_eq!(header.ttl, Some(ttl), "header ttl");
    }

    // The whole: prefix then tail, the tail's sections unchanged, and readable again.
    let whole_sections = message::scan_sections(&whole)
        .unwrap_or_else(|error| panic!("the spliced message does not scan: {error}"));
    assert_eq!(
        section_bytes(&whole, &whole_sections),
        [
            section_bytes(prefix, &prefix_sections),
            section_bytes(stored, &sections[kept_from..]),
        ]
        .concat(),
        "spliced sections"
    );
    if let Err(error) = message::inspect(whole.clone()) {
        panic!("inspect refuses the spliced message: {error}");
    }

    // The broker's header and annotations (and properties, when it sets the expiry time) are
    // the only ones delivered: none of the client's come through in the tail.
    for section in &sections[kept_from..] {
        let ours = matches!(
            section.code,
            HEADER | DELIVERY_ANNOTATIONS | MESSAGE_ANNOTATIONS
        ) || (section.code == PROPERTIES && stamp.expires_ms.is_some());
        assert!(
            !ours,
            "the client's section 0x{:02x} at byte {} is delivered after the broker's own",
            section.code, section.range.start
        );
    }
}

/// Sets application properties on `stored` (accepted by `inspect`) and checks the result.
fn check_set_application_properties(stored: &Bytes, sections: &[Section]) {
    let unchanged = message::set_application_properties(stored, &[])
        .unwrap_or_else(|error| panic!("setting no properties failed: {error}"));
    assert_eq!(
        unchanged, *stored,
        "setting no properties changed the message"
    );

    let entries = [
        (
            "DeadLetterReason".to_string(),
            SimpleValue::String("fuzz".into()),
        ),
        ("k".to_string(), SimpleValue::Long(2)),
    ];
    let changed = message::set_application_properties(stored, &entries).unwrap_or_else(|error| {
        panic!("set_application_properties refused a message inspect accepted: {error}")
    });
    if let Err(error) = message::inspect(changed.clone()) {
        panic!("inspect refuses the message with properties set: {error}");
    }
    let changed_sections = message::scan_sections(&changed).expect("inspect scanned it");
    // The first application-properties section is replaced; without one, one is inserted
    // before the first section that AMQP puts after it.
    let (at, replaced) = match sections
        .iter()
        .position(|s| s.code == APPLICATION_PROPERTIES)
    {
        Some(at) => (at, 1),
        None => (
            sections
                .iter()
                .position(|s| s.code > APPLICATION_PROPERTIES)
                .unwrap_or(sections.len()),
            0,
        ),
    };
    assert_eq!(
        changed_sections.len(),
        sections.len() + 1 - replaced,
        "section count"
    );
    let new = &changed_sections[at];
    assert_eq!(new.code, APPLICATION_PROPERTIES, "section {at}");
    // The client's own entries are kept byte for byte, so the new section decodes wherever
    // the old one did (or there was none), and then holds the entries set.
    let old_decodes = match sections.get(at).filter(|_| replaced == 1) {
        Some(old) => {
            serde_amqp::from_slice::<ApplicationProperties>(&stored[old.range.clone()]).is_ok()
        }
        None => true,
    };
    if old_decodes {
        match serde_amqp::from_slice::<ApplicationProperties>(&changed[new.range.clone()]) {
            Ok(properties) => {
                for (key, value) in &entries {
                    assert_eq!(properties.0.get(key), Some(value), "property {key}");
                }
            }
            Err(error) => panic!("the new application-properties do not decode: {error}"),
        }
    }
    let mut before = section_bytes(stored, sections);
    before.drain(at..at + replaced);
    let mut after = section_bytes(&changed, &changed_sections);
    after.remove(at);
    assert!(
        before == after,
        "the other sections are not kept byte for byte"
    );
}

/// Every check for a message `inspect` accepted.
fn check_accepted(stored: &Bytes) {
    let sections = message::scan_sections(stored)
        .unwrap_or_else(|error| panic!("inspect accepted what scan_sections refuses: {error}"));
    for stamp in &stamps() {
        check_splice(stored, &sections, stamp);
    }
    check_set_application_properties(stored, &sections);
}

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let _ = message::scan_sections(data);
    if let Ok(arrival) = message::inspect(bytes.clone()) {
        // The bytes are kept as sent, but for a message-id the broker assigns and sections
        // put in AMQP's order; what it stores passes inspect again unchanged.
        let again = message::inspect(arrival.bytes.clone())
            .unwrap_or_else(|error| panic!("inspect refuses what it stored: {error}"));
        assert_eq!(
            again.bytes, arrival.bytes,
            "a second inspect changed the bytes"
        );
        check_accepted(&arrival.bytes);
    }
    if let Ok(messages) = message::unpack_batch(&bytes) {
        assert!(!messages.is_empty(), "a batch of no messages");
        for arrival in &messages {
            check_accepted(&arrival.bytes);
        }
    }
});
