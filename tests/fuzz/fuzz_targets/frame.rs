//! # Fuzz target `frame`: what the broker reads before and while it decodes a frame
//!
//! Every input is taken as the bytes a client writes after its protocol header: the frames
//! go through `tidebus::amqp::frames::FrameReader` (the size checked against the max frame
//! size before anything is buffered), each frame's body through `decode_amqp` and
//! `decode_sasl` (the encoding pre-check of `tidebus::encoding`, then fe2o3's types
//! from the bounded slice, then the string-key leniency), and the input as a whole through
//! the pre-checks themselves and a management request's decode. What it checks:
//!
//! - Nothing panics and nothing overflows the stack, whatever the bytes.
//! - No allocation is larger than the input allows: run with `-malloc_limit_mb=64`, so that
//!   libFuzzer reports any single allocation over 64 MiB (a declared length trusted before
//!   it was checked) as an out-of-memory crash. The frame size is capped at 65,536 bytes here.
//! - `check_value` and `value_len` agree: what the deep check accepts has the length the
//!   shallow one measures, and `string_map_keys` finds keys only where `check_value` accepts.
//!
//! ## Running (from the repository root, stable toolchain)
//!
//! ```sh
//! RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir tests/fuzz frame \
//!     tests/fuzz/corpus/frame tests/fuzz/seeds/frame -- \
//!     -max_len=4096 -runs=10000000 -malloc_limit_mb=64 -dict=tests/fuzz/frame.dict
//! ```

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tidebus::amqp::frames;
use tidebus::encoding;
use tidebus::node::management::Request;

/// The frame size the reader accepts here (the broker's default).
const MAX_FRAME: usize = 65_536;

fuzz_target!(|data: &[u8]| {
    // The pre-checks on their own, and their agreement.
    if let Ok(length) = encoding::check_value(data, 0) {
        assert_eq!(
            encoding::value_len(data, 0),
            Ok(length),
            "the deep check and the shallow measure disagree"
        );
        let keys = encoding::string_map_keys(data, 0).expect("the same walk accepts it");
        assert!(keys.iter().all(|at| matches!(data[*at], 0xa1 | 0xb1)));
    } else {
        assert!(encoding::string_map_keys(data, 0).is_err());
    }
    let _ = encoding::check_frame_body(data);
    let _ = Request::decode(&Bytes::copy_from_slice(data));

    // The bytes as a stream of frames, each decoded both ways.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut reader = frames::FrameReader::new(data);
        reader.set_max_frame_size(MAX_FRAME);
        while let Ok(Some(raw)) = reader.frame().await {
            let copy = frames::RawFrame {
                frame_type: raw.frame_type,
                channel: raw.channel,
                body: raw.body.clone(),
            };
            let _ = frames::decode_amqp(raw);
            let _ = frames::decode_sasl(copy);
        }
    });
});
