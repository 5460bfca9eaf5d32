//! AMQP 1.0 type encodings (AMQP 1.0 §1.6) read without trusting them.
//!
//! serde_amqp allocates whatever a declared length asks for and recurses once per nesting
//! level, so a frame of 18 bytes can make it allocate 4 GiB, and a run of nested lists can
//! overflow the stack. Every byte a client sends passes through [`check_value`] (frame
//! bodies through [`check_frame_body`]) before serde_amqp sees it: each declared size and
//! count is checked against the bytes actually present, every element of every compound value
//! is walked, and nesting stops at [`MAX_DEPTH`]. A value that passes decodes with
//! allocations bounded by its own length.
//!
//! [`value_len`] is the cheap form for the hot path: it measures one value (its descriptor
//! included) and checks that it fits, without walking the elements of a compound value.

/// Deepest nesting accepted: described values, lists, maps and arrays inside one another.
/// Performatives nest about five levels (attach → source → filter set → described filter →
/// value); client payloads that go through serde_amqp (management requests) a few more.
pub const MAX_DEPTH: usize = 32;

/// Why bytes are not one well-formed AMQP value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodingError {
    /// The bytes end inside a value (a declared length runs past them).
    #[error("a value at byte {at} runs past the end of its {len} bytes")]
    Truncated {
        /// Where the value (or the field that overruns) starts.
        at: usize,
        /// How many bytes there are.
        len: usize,
    },
    /// A byte that starts no AMQP value.
    #[error("invalid AMQP type code 0x{code:02x} at byte {at}")]
    BadTypeCode {
        /// The offending byte.
        code: u8,
        /// Its offset.
        at: usize,
    },
    /// Values nested deeper than [`MAX_DEPTH`].
    #[error("values nested deeper than {MAX_DEPTH} levels at byte {0}")]
    TooDeep(usize),
    /// A list, map or array whose element count does not fit its declared size, or whose
    /// elements do not fill it exactly.
    #[error(
        "the {kind} at byte {at} declares {count} elements in {size} bytes, which do not match"
    )]
    CountMismatch {
        /// `list`, `map` or `array`.
        kind: &'static str,
        /// Where it starts.
        at: usize,
        /// Declared element count.
        count: usize,
        /// Declared size in bytes.
        size: usize,
    },
    /// A frame body that is not one described performative.
    #[error("the frame body does not start with a described performative")]
    NotAPerformative,
}

/// Checks a frame body (after the frame header and its extended header) before it is decoded:
/// it must start with one described value (the performative), which must be well formed to
/// every depth. What follows it (a transfer's payload) is not looked at.
///
/// # Errors
/// The first problem found.
pub fn check_frame_body(body: &[u8]) -> Result<usize, EncodingError> {
    if body.first() != Some(&0x00) {
        return Err(EncodingError::NotAPerformative);
    }
    check_value(body, 0)
}

/// Checks the value at `at` to every depth and returns its length (constructor included).
///
/// # Errors
/// The first problem found.
pub fn check_value(bytes: &[u8], at: usize) -> Result<usize, EncodingError> {
    Walker::deep().value(bytes, at, 0)
}

/// Checks an item of a described list or map (a message section's field or entry) to every
/// depth, as [`check_value`] checks it as part of its section, and returns its length.
///
/// # Errors
/// The first problem found.
pub fn check_item(bytes: &[u8], at: usize) -> Result<usize, EncodingError> {
    // The section is at depth 0, its descriptor and its items one level down.
    Walker::deep().value(bytes, at, 1)
}

/// The length of the value at `at` (its constructor included), checked to fit in `bytes`;
/// the elements of a compound value are not walked.
///
/// # Errors
/// The value runs past `bytes`, starts with an invalid type code, or its descriptors nest
/// deeper than [`MAX_DEPTH`].
pub fn value_len(bytes: &[u8], at: usize) -> Result<usize, EncodingError> {
    Walker::shallow().value(bytes, at, 0)
}

/// Checks the value at `at` like [`check_value`] and returns the offsets of the map keys in
/// it, at every depth, that are encoded as strings (`str8` or `str32`). A string and a symbol
/// differ only in their format code, so a caller can turn such keys into symbols in place.
///
/// # Errors
/// The first problem found.
pub fn string_map_keys(bytes: &[u8], at: usize) -> Result<Vec<usize>, EncodingError> {
    let mut walker = Walker::deep();
    walker.string_keys = Some(Vec::new());
    walker.value(bytes, at, 0)?;
    Ok(walker.string_keys.unwrap_or_default())
}

/// The byte at `at`.
///
/// # Errors
/// [`EncodingError::Truncated`] when `bytes` ends before it.
pub fn byte_at(bytes: &[u8], at: usize) -> Result<u8, EncodingError> {
    bytes.get(at).copied().ok_or(truncated(bytes, at))
}

/// The big-endian `u32` at `at`.
///
/// # Errors
/// [`EncodingError::Truncated`] when `bytes` ends before its last byte.
pub fn read_u32(bytes: &[u8], at: usize) -> Result<u32, EncodingError> {
    Ok(u32::from_be_bytes(array_at(bytes, at)?))
}

/// The big-endian `u64` at `at`.
///
/// # Errors
/// [`EncodingError::Truncated`] when `bytes` ends before its last byte.
pub fn read_u64(bytes: &[u8], at: usize) -> Result<u64, EncodingError> {
    Ok(u64::from_be_bytes(array_at(bytes, at)?))
}

fn array_at<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], EncodingError> {
    at.checked_add(N)
        .and_then(|end| bytes.get(at..end))
        .and_then(|raw| raw.try_into().ok())
        .ok_or(truncated(bytes, at))
}

fn truncated(bytes: &[u8], at: usize) -> EncodingError {
    EncodingError::Truncated {
        at,
        len: bytes.len(),
    }
}

/// One walk over a value: whether it looks inside compound values, and where it notes the
/// string-encoded map keys it meets (when asked to).
struct Walker {
    deep: bool,
    string_keys: Option<Vec<usize>>,
}

impl Walker {
    fn deep() -> Self {
        Self {
            deep: true,
            string_keys: None,
        }
    }

    fn shallow() -> Self {
        Self {
            deep: false,
            string_keys: None,
        }
    }

    /// A constructor (AMQP 1.0 §1.2): a format code, or `0x00`, a descriptor value and a
    /// constructor. Returns the format code and the constructor's length.
    fn constructor(
        &mut self,
        bytes: &[u8],
        at: usize,
        depth: usize,
    ) -> Result<(u8, usize), EncodingError> {
        let mut len = 0;
        let mut level = depth;
        loop {
            let code = byte_at(bytes, at + len)?;
            if code != 0x00 {
                return Ok((code, len + 1));
            }
            level += 1;
            if level > MAX_DEPTH {
                return Err(EncodingError::TooDeep(at + len));
            }
            len += 1 + self.value(bytes, at + len + 1, level)?;
        }
    }

    fn value(&mut self, bytes: &[u8], at: usize, depth: usize) -> Result<usize, EncodingError> {
        let (code, constructor) = self.constructor(bytes, at, depth)?;
        let data_at = at + constructor;
        let data = self
            .data(code, bytes, data_at, depth)
            .map_err(|error| match error {
                // This value's own format code is the byte before its data.
                EncodingError::BadTypeCode { code: bad, at } if at == data_at && bad == code => {
                    EncodingError::BadTypeCode { code, at: at - 1 }
                }
                other => other,
            })?;
        Ok(constructor + data)
    }

    /// The length of the data of a `code` value that starts at `at` (after its constructor).
    fn data(
        &mut self,
        code: u8,
        bytes: &[u8],
        at: usize,
        depth: usize,
    ) -> Result<usize, EncodingError> {
        let (header, size) = match code {
            0x40..=0x45 => (0, 0),
            0x50..=0x56 => (0, 1),
            0x60 | 0x61 => (0, 2),
            0x70..=0x74 => (0, 4),
            0x80..=0x84 => (0, 8),
            0x94 | 0x98 => (0, 16),
            0xa0 | 0xa1 | 0xa3 | 0xc0 | 0xc1 | 0xe0 => (1, usize::from(byte_at(bytes, at)?)),
            0xb0 | 0xb1 | 0xb3 | 0xd0 | 0xd1 | 0xf0 => (4, read_u32(bytes, at)? as usize),
            _ => return Err(EncodingError::BadTypeCode { code, at }),
        };
        let len = header + size;
        if at.checked_add(len).is_none_or(|end| end > bytes.len()) {
            return Err(truncated(bytes, at));
        }
        if self.deep && matches!(code, 0xc0 | 0xc1 | 0xd0 | 0xd1 | 0xe0 | 0xf0) {
            let content = &bytes[..at + len];
            self.compound(code, content, at, header, size, depth + 1)?;
        }
        Ok(len)
    }

    /// Walks the elements of a list, map or array whose `size` bytes (count included) start
    /// at `at + width`, where `width` is the size field's width. They must fill `size`
    /// exactly.
    fn compound(
        &mut self,
        code: u8,
        bytes: &[u8],
        at: usize,
        width: usize,
        size: usize,
        depth: usize,
    ) -> Result<(), EncodingError> {
        if depth > MAX_DEPTH {
            return Err(EncodingError::TooDeep(at));
        }
        let kind = match code {
            0xc0 | 0xd0 => "list",
            0xc1 | 0xd1 => "map",
            _ => "array",
        };
        let count_at = at + width;
        let end = count_at + size;
        let mismatch = |count| EncodingError::CountMismatch {
            kind,
            at,
            count,
            size,
        };
        if size < width {
            return Err(mismatch(0));
        }
        let count = if width == 1 {
            usize::from(byte_at(bytes, count_at)?)
        } else {
            read_u32(bytes, count_at)? as usize
        };
        // Every element takes at least one byte, but for arrays of zero-width values; those
        // are bounded by the size all the same, so that the decoder's work stays linear.
        if count > size || (kind == "map" && count % 2 != 0) {
            return Err(mismatch(count));
        }
        let mut next = count_at + width;
        if kind == "array" {
            if count == 0 && next == end {
                return Ok(());
            }
            let (element, constructor) = self.constructor(bytes, next, depth)?;
            next += constructor;
            for _ in 0..count {
                next += self.data(element, bytes, next, depth)?;
            }
        } else {
            for index in 0..count {
                if kind == "map" && index % 2 == 0 && matches!(bytes.get(next), Some(0xa1 | 0xb1)) {
                    if let Some(keys) = &mut self.string_keys {
                        keys.push(next);
                    }
                }
                next += self.value(bytes, next, depth)?;
            }
        }
        if next != end {
            return Err(mismatch(count));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::performatives::{Attach, Transfer};
    use fe2o3_amqp::types::primitives::{Array, Value};

    fn deep(bytes: &[u8]) -> Result<usize, EncodingError> {
        check_value(bytes, 0)
    }

    /// Encodings of every variable-size type, each declaring one byte more than it holds.
    fn overruns() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("vbin8", vec![0xa0, 0x03, 1, 2]),
            ("str8", vec![0xa1, 0x03, b'a', b'b']),
            ("sym8", vec![0xa3, 0x03, b'a', b'b']),
            ("vbin32", vec![0xb0, 0, 0, 0, 3, 1, 2]),
            ("str32", vec![0xb1, 0, 0, 0, 3, b'a', b'b']),
            ("sym32", vec![0xb3, 0, 0, 0, 3, b'a', b'b']),
            ("list8", vec![0xc0, 0x03, 0x02, 0x40]),
            ("map8", vec![0xc1, 0x05, 0x04, 0x40, 0x40, 0x40]),
            ("array8", vec![0xe0, 0x04, 0x02, 0x50, 0x01]),
            ("list32", vec![0xd0, 0, 0, 0, 6, 0, 0, 0, 2, 0x40]),
            (
                "map32",
                vec![0xd1, 0, 0, 0, 8, 0, 0, 0, 4, 0x40, 0x40, 0x40],
            ),
            ("array32", vec![0xf0, 0, 0, 0, 7, 0, 0, 0, 2, 0x50, 0x01]),
        ]
    }

    #[test]
    fn every_variable_size_type_that_declares_more_than_it_holds_is_refused() {
        for (name, bytes) in overruns() {
            assert!(
                matches!(deep(&bytes), Err(EncodingError::Truncated { .. })),
                "{name}: {:?}",
                deep(&bytes)
            );
            assert!(value_len(&bytes, 0).is_err(), "{name} shallow");
            // The same declaration, one byte shorter, fits.
            let mut fixed = bytes.clone();
            fixed.push(if name.starts_with("map") || name.starts_with("list") {
                0x40
            } else {
                0x01
            });
            assert_eq!(deep(&fixed), Ok(fixed.len()), "{name} fixed");
        }
    }

    #[test]
    fn the_eighteen_byte_frame_that_declared_four_gib_is_refused() {
        let body = [0x00, 0xb3, 0xff, 0xff, 0xff, 0xff, 0x61, 0x62, 0x63, 0x64];
        assert!(matches!(
            check_frame_body(&body),
            Err(EncodingError::Truncated { at: 2, .. })
        ));
        assert!(matches!(
            check_frame_body(&[0xb1, 0x7f, 0xff, 0xff, 0xff]),
            Err(EncodingError::NotAPerformative)
        ));
    }

    #[test]
    fn a_declared_length_inside_a_nested_value_is_checked_too() {
        // A list holding a map holding a str32 that declares 2 GiB; the outer sizes are right.
        let inner = [0xb1, 0x7f, 0xff, 0xff, 0xff, b'x'];
        let mut map = vec![0xc1, 2 + inner.len() as u8, 0x02, 0x40];
        map.extend_from_slice(&inner);
        let mut list = vec![0xc0, 1 + map.len() as u8, 0x01];
        list.extend_from_slice(&map);
        assert!(value_len(&list, 0).is_ok(), "shallow does not look inside");
        assert!(matches!(deep(&list), Err(EncodingError::Truncated { .. })));
    }

    #[test]
    fn counts_must_fit_the_size_and_elements_must_fill_it() {
        // list32 of 4 bytes that claims 2^32-1 elements.
        let huge = [0xd0, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff];
        assert!(
            matches!(deep(&huge), Err(EncodingError::CountMismatch { count, .. }) if count == u32::MAX as usize)
        );
        // array32 of zero-width nulls claiming 2^32-1 of them.
        let nulls = [0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40];
        assert!(matches!(
            deep(&nulls),
            Err(EncodingError::CountMismatch { .. })
        ));
        // A map with an odd count.
        assert!(matches!(
            deep(&[0xc1, 0x02, 0x01, 0x40]),
            Err(EncodingError::CountMismatch { .. })
        ));
        // A list whose elements leave bytes over.
        assert!(matches!(
            deep(&[0xc0, 0x03, 0x01, 0x40, 0x40]),
            Err(EncodingError::CountMismatch { .. })
        ));
        // A size too small for its own count field.
        assert!(matches!(
            deep(&[0xd0, 0, 0, 0, 2, 0, 0]),
            Err(EncodingError::CountMismatch { .. })
        ));
    }

    #[test]
    fn nesting_stops_at_the_limit_for_descriptors_lists_and_arrays() {
        let descriptors = vec![0x00; 100_000];
        assert!(matches!(deep(&descriptors), Err(EncodingError::TooDeep(_))));
        assert!(matches!(
            value_len(&descriptors, 0),
            Err(EncodingError::TooDeep(_))
        ));
        // Lists nested MAX_DEPTH + 1 deep, every size right.
        let mut nested = vec![0x45];
        for _ in 0..=MAX_DEPTH {
            let mut outer = vec![0xd0];
            outer.extend_from_slice(&(nested.len() as u32 + 4).to_be_bytes());
            outer.extend_from_slice(&1u32.to_be_bytes());
            outer.extend_from_slice(&nested);
            nested = outer;
        }
        assert!(matches!(deep(&nested), Err(EncodingError::TooDeep(_))));
        // Arrays of arrays of ... (a constructor per level).
        let mut arrays = vec![0xe0, 0x01, 0x00];
        for _ in 0..=MAX_DEPTH {
            let mut outer = vec![0xe0, arrays.len() as u8 + 1, 0x01];
            outer.extend_from_slice(&arrays[..]);
            arrays = outer;
            if arrays.len() > 250 {
                break;
            }
        }
        assert!(matches!(deep(&arrays), Err(EncodingError::TooDeep(_))));
    }

    #[test]
    fn string_map_keys_are_found_at_every_depth_and_only_in_key_position() {
        // list[ map{str8 "a": str8 "v", sym8 "b": null}, map{str32 "c": null} ]
        let first = [
            0xc1, 0x0b, 0x04, 0xa1, 0x01, b'a', 0xa1, 0x01, b'v', 0xa3, 0x01, b'b', 0x40,
        ];
        let second = [0xc1, 0x08, 0x02, 0xb1, 0, 0, 0, 1, b'c', 0x40];
        let mut list = vec![0xc0, (1 + first.len() + second.len()) as u8, 0x02];
        list.extend_from_slice(&first);
        list.extend_from_slice(&second);
        assert_eq!(string_map_keys(&list, 0), Ok(vec![6, 19]));
        assert_eq!(string_map_keys(&[0xa1, 0x01, b'x'], 0), Ok(vec![]));
        assert!(string_map_keys(&[0xc1, 0x03, 0x02, 0xa1, 0x05], 0).is_err());
    }

    #[test]
    fn unknown_type_codes_are_named_with_their_offset() {
        assert_eq!(
            deep(&[0xc0, 0x02, 0x01, 0x99]),
            Err(EncodingError::BadTypeCode { code: 0x99, at: 3 })
        );
    }

    #[test]
    fn what_fe2o3_encodes_passes_to_every_depth() {
        let attach: Attach = serde_amqp::from_slice(&[
            0x00, 0x53, 0x12, 0xc0, 0x08, 0x03, 0xa1, 0x01, b'l', 0x43, 0x42,
        ])
        .expect("attach");
        let encoded = serde_amqp::to_vec(&attach).expect("encode");
        assert_eq!(check_frame_body(&encoded), Ok(encoded.len()));
        let transfer = Transfer {
            handle: 1.into(),
            delivery_id: Some(7),
            delivery_tag: Some(vec![1u8; 16].into()),
            message_format: Some(0),
            settled: Some(false),
            more: true,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        let mut body = serde_amqp::to_vec(&transfer).expect("encode");
        let performative = body.len();
        body.extend_from_slice(b"payload is not looked at");
        assert_eq!(check_frame_body(&body), Ok(performative));
        let value = Value::List(vec![
            Value::Array(Array(vec![Value::Long(1), Value::Long(2)])),
            Value::Map(
                [(
                    Value::String("k".into()),
                    Value::Binary(vec![0u8; 300].into()),
                )]
                .into_iter()
                .collect(),
            ),
            Value::Array(Array(vec![
                Value::String("a".into()),
                Value::String("bc".into()),
            ])),
            Value::Array(Array(vec![
                Value::List(vec![Value::Int(1)]),
                Value::List(vec![Value::Int(2), Value::Null]),
            ])),
        ]);
        let encoded = serde_amqp::to_vec(&value).expect("encode");
        assert_eq!(deep(&encoded), Ok(encoded.len()));
    }
}
