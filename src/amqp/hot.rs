//! Hand-written codec for the two performatives every message crosses, `transfer` and
//! `disposition` (design.md D1): serde_amqp spent about a quarter of the broker's
//! instructions per message on them. Only their everyday shape is handled here; anything else
//! (a described outcome other than `accepted`, a settle mode, a descriptor written as a
//! symbol, an unusual encoding) returns `None` and goes through fe2o3-amqp as before, so what
//! is accepted and how it is refused do not change.

use bytes::{BufMut, BytesMut};
use fe2o3_amqp::types::definitions::{Handle, Role};
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState};
use fe2o3_amqp::types::performatives::{Disposition, Transfer};
use fe2o3_amqp::types::primitives::Binary;

/// Descriptor code of `transfer`.
const TRANSFER: u8 = 0x14;
/// Descriptor code of `disposition`.
const DISPOSITION: u8 = 0x15;
/// Descriptor code of the `accepted` outcome.
const ACCEPTED: u8 = 0x24;
/// Fields of a `transfer`.
const TRANSFER_FIELDS: usize = 11;
/// Fields of a `disposition`.
const DISPOSITION_FIELDS: usize = 6;

/// Reads a `transfer` at the start of a frame body; returns it and the length of its
/// encoding (the payload follows). `None`: not a transfer, or not in the shape read here.
pub fn decode_transfer(body: &[u8]) -> Option<(Transfer, usize)> {
    let mut fields = Fields::open(body, TRANSFER, TRANSFER_FIELDS)?;
    let transfer = Transfer {
        handle: Handle(fields.uint()??),
        delivery_id: fields.uint()?,
        delivery_tag: fields.binary()?.map(Binary::from),
        message_format: fields.uint()?,
        settled: fields.boolean()?,
        more: fields.boolean()?.unwrap_or(false),
        rcv_settle_mode: fields.null()?,
        state: fields.null()?,
        resume: fields.boolean()?.unwrap_or(false),
        aborted: fields.boolean()?.unwrap_or(false),
        batchable: fields.boolean()?.unwrap_or(false),
    };
    Some((transfer, fields.close()?))
}

/// Reads a whole frame body as a `disposition` whose state is none or `accepted`. `None`:
/// anything else.
pub fn decode_disposition(body: &[u8]) -> Option<Disposition> {
    let mut fields = Fields::open(body, DISPOSITION, DISPOSITION_FIELDS)?;
    let disposition = Disposition {
        role: match fields.boolean()?? {
            false => Role::Sender,
            true => Role::Receiver,
        },
        first: fields.uint()??,
        last: fields.uint()?,
        settled: fields.boolean()?.unwrap_or(false),
        state: fields.accepted()?,
        batchable: fields.boolean()?.unwrap_or(false),
    };
    (fields.close()? == body.len()).then_some(disposition)
}

/// Whether this codec writes `transfer` (else serde_amqp does).
fn writes_transfer(transfer: &Transfer) -> bool {
    transfer.rcv_settle_mode.is_none()
        && transfer.state.is_none()
        && !transfer.resume
        && !transfer.aborted
        && !transfer.batchable
}

/// The bytes of the six fields [`encode_transfer`] writes.
fn transfer_fields_len(transfer: &Transfer) -> usize {
    uint_len(transfer.handle.0)
        + transfer.delivery_id.map_or(1, uint_len)
        + transfer
            .delivery_tag
            .as_ref()
            .map_or(1, |tag| binary_len(tag.len()))
        + transfer.message_format.map_or(1, uint_len)
        + 2
}

/// How many bytes `transfer` takes on the wire, whoever writes it (a multi-frame delivery
/// is cut to fit the frame size with it).
pub fn transfer_len(transfer: &Transfer) -> usize {
    if writes_transfer(transfer) {
        list_len(transfer_fields_len(transfer))
    } else {
        serde_amqp::serialized_size(transfer).unwrap_or(64)
    }
}

/// Appends `transfer` as it is encoded on the wire; `false` (nothing written) for a shape
/// this codec does not write.
pub fn encode_transfer(transfer: &Transfer, out: &mut BytesMut) -> bool {
    if !writes_transfer(transfer) {
        return false;
    }
    put_list_header(out, TRANSFER, transfer_fields_len(transfer), 6);
    put_uint(out, transfer.handle.0);
    put_option(out, transfer.delivery_id, put_uint);
    put_option(
        out,
        transfer.delivery_tag.as_ref().map(|tag| tag.as_slice()),
        put_binary,
    );
    put_option(out, transfer.message_format, put_uint);
    put_option(out, transfer.settled, put_boolean);
    put_boolean(out, transfer.more);
    true
}

/// Appends `disposition` as it is encoded on the wire; `false` (nothing written) for a state
/// other than none or `accepted`.
pub fn encode_disposition(disposition: &Disposition, out: &mut BytesMut) -> bool {
    let accepted = match &disposition.state {
        None => false,
        Some(DeliveryState::Accepted(_)) => true,
        Some(_) => return false,
    };
    let fields_len = 1
        + uint_len(disposition.first)
        + disposition.last.map_or(1, uint_len)
        + 1
        + if accepted { ACCEPTED_STATE.len() } else { 1 }
        + 1;
    put_list_header(out, DISPOSITION, fields_len, 6);
    put_boolean(out, matches!(disposition.role, Role::Receiver));
    put_uint(out, disposition.first);
    put_option(out, disposition.last, put_uint);
    put_boolean(out, disposition.settled);
    match accepted {
        true => out.put_slice(&ACCEPTED_STATE),
        false => out.put_u8(0x40),
    }
    put_boolean(out, disposition.batchable);
    true
}

/// A described list being read field by field: each read returns `None` when the field is
/// not in a shape this codec reads, `Some(None)` for a field that is null or absent.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
    end: usize,
    remaining: usize,
}

impl<'a> Fields<'a> {
    /// Checks the descriptor (`0x00 0x53 code`) and the list header; the list must hold at
    /// most `max_fields` fields and fit in `bytes`.
    fn open(bytes: &'a [u8], code: u8, max_fields: usize) -> Option<Self> {
        if bytes.get(..3)? != [0x00, 0x53, code] {
            return None;
        }
        let (count, end, at) = match *bytes.get(3)? {
            0xc0 => {
                let size = usize::from(*bytes.get(4)?);
                (usize::from(*bytes.get(5)?), 5 + size, 6)
            }
            0xd0 => {
                let size = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
                let count = u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?) as usize;
                (count, 8usize.checked_add(size)?, 12)
            }
            _ => return None,
        };
        if count > max_fields || end > bytes.len() || at > end {
            return None;
        }
        Some(Fields {
            bytes: &bytes[..end],
            at,
            end,
            remaining: count,
        })
    }

    /// The next field's format code, `None` once the list's fields are all read (the rest
    /// are absent, which reads as null).
    fn next_code(&mut self) -> Option<u8> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let code = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(code)
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let taken = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(taken)
    }

    /// The end of the list, once every field was read and they fill it exactly.
    fn close(self) -> Option<usize> {
        (self.remaining == 0 && self.at == self.end).then_some(self.end)
    }

    fn uint(&mut self) -> Option<Option<u32>> {
        match self.next_code() {
            None | Some(0x40) => Some(None),
            Some(0x43) => Some(Some(0)),
            Some(0x52) => Some(Some(u32::from(self.take(1)?[0]))),
            Some(0x70) => Some(Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))),
            Some(_) => None,
        }
    }

    fn boolean(&mut self) -> Option<Option<bool>> {
        match self.next_code() {
            None | Some(0x40) => Some(None),
            Some(0x41) => Some(Some(true)),
            Some(0x42) => Some(Some(false)),
            Some(0x56) => match self.take(1)?[0] {
                0 => Some(Some(false)),
                1 => Some(Some(true)),
                _ => None,
            },
            Some(_) => None,
        }
    }

    fn binary(&mut self) -> Option<Option<&'a [u8]>> {
        match self.next_code() {
            None | Some(0x40) => Some(None),
            Some(0xa0) => {
                let len = usize::from(self.take(1)?[0]);
                Some(Some(self.take(len)?))
            }
            Some(0xb0) => {
                let len = u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize;
                Some(Some(self.take(len)?))
            }
            Some(_) => None,
        }
    }

    /// A field that must be null or absent (`T` is never read).
    fn null<T>(&mut self) -> Option<Option<T>> {
        match self.next_code() {
            None | Some(0x40) => Some(None),
            Some(_) => None,
        }
    }

    /// A delivery state that is null, absent or `accepted` (an empty list).
    fn accepted(&mut self) -> Option<Option<DeliveryState>> {
        match self.next_code() {
            None | Some(0x40) => return Some(None),
            Some(0x00) => {}
            Some(_) => return None,
        }
        if self.take(2)? != [0x53, ACCEPTED] {
            return None;
        }
        match self.take(1)?[0] {
            0x45 => {}
            0xc0 if self.take(2)? == [0x01, 0x00] => {}
            0xd0 if self.take(8)? == [0, 0, 0, 4, 0, 0, 0, 0] => {}
            _ => return None,
        }
        Some(Some(DeliveryState::Accepted(Accepted {})))
    }
}

/// The `accepted` outcome: its descriptor and an empty list.
const ACCEPTED_STATE: [u8; 4] = [0x00, 0x53, ACCEPTED, 0x45];

/// Bytes of a described list whose fields take `fields_len` bytes: descriptor, header
/// (`list8` when the count and fields fit in 255 bytes, else `list32`) and fields.
fn list_len(fields_len: usize) -> usize {
    match fields_len <= 254 {
        true => 3 + 3 + fields_len,
        false => 3 + 9 + fields_len,
    }
}

/// Writes the descriptor `0x00 0x53 code` and the header of a list of `count` fields that
/// take `fields_len` bytes.
fn put_list_header(out: &mut BytesMut, code: u8, fields_len: usize, count: u8) {
    out.put_slice(&[0x00, 0x53, code]);
    match u8::try_from(fields_len + 1) {
        Ok(size) => out.put_slice(&[0xc0, size, count]),
        Err(_) => {
            out.put_u8(0xd0);
            out.put_u32(u32::try_from(fields_len + 4).unwrap_or(u32::MAX));
            out.put_u32(u32::from(count));
        }
    }
}

fn uint_len(value: u32) -> usize {
    match value {
        0 => 1,
        1..=255 => 2,
        _ => 5,
    }
}

fn binary_len(len: usize) -> usize {
    match len < 256 {
        true => 2 + len,
        false => 5 + len,
    }
}

fn put_uint(out: &mut BytesMut, value: u32) {
    match value {
        0 => out.put_u8(0x43),
        1..=255 => out.put_slice(&[0x52, value as u8]),
        _ => {
            out.put_u8(0x70);
            out.put_u32(value);
        }
    }
}

fn put_boolean(out: &mut BytesMut, value: bool) {
    out.put_u8(if value { 0x41 } else { 0x42 });
}

fn put_binary(out: &mut BytesMut, value: &[u8]) {
    match u8::try_from(value.len()) {
        Ok(len) => out.put_slice(&[0xa0, len]),
        Err(_) => {
            out.put_u8(0xb0);
            out.put_u32(u32::try_from(value.len()).unwrap_or(u32::MAX));
        }
    }
    out.put_slice(value);
}

fn put_option<T>(out: &mut BytesMut, value: Option<T>, put: fn(&mut BytesMut, T)) {
    match value {
        Some(value) => put(out, value),
        None => out.put_u8(0x40),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::definitions::{AmqpError, ReceiverSettleMode};
    use fe2o3_amqp::types::messaging::{Modified, Rejected};

    fn transfers() -> Vec<Transfer> {
        let plain = Transfer {
            handle: Handle(0),
            delivery_id: Some(7),
            delivery_tag: Some(Binary::from(vec![1, 2, 3, 4])),
            message_format: Some(0),
            settled: Some(false),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        vec![
            plain.clone(),
            Transfer {
                handle: Handle(300),
                delivery_id: Some(u32::MAX),
                delivery_tag: Some(Binary::from(vec![9; 300])),
                message_format: Some(0x8001_3700),
                settled: Some(true),
                more: true,
                ..plain.clone()
            },
            Transfer {
                delivery_id: None,
                delivery_tag: None,
                message_format: None,
                settled: None,
                more: true,
                ..plain.clone()
            },
            Transfer {
                batchable: true,
                ..plain.clone()
            },
            // Fields of 254 and 255 bytes: the last list8 and the first list32.
            Transfer {
                delivery_tag: Some(Binary::from(vec![5; 246])),
                ..plain.clone()
            },
            Transfer {
                delivery_tag: Some(Binary::from(vec![5; 247])),
                ..plain.clone()
            },
        ]
    }

    #[test]
    fn transfers_read_as_serde_amqp_writes_them() {
        for transfer in transfers() {
            let encoded = serde_amqp::to_vec(&transfer).unwrap();
            let mut framed = encoded.clone();
            framed.extend_from_slice(b"payload");
            assert_eq!(
                decode_transfer(&framed),
                Some((transfer.clone(), encoded.len())),
                "{transfer:?}"
            );
        }
    }

    #[test]
    fn transfers_written_here_read_back_through_serde_amqp() {
        for transfer in transfers() {
            let mut out = BytesMut::new();
            if encode_transfer(&transfer, &mut out) {
                let read: Transfer = serde_amqp::from_slice(&out).unwrap();
                assert_eq!(read, transfer);
                assert_eq!(transfer_len(&transfer), out.len());
                assert_eq!(decode_transfer(&out), Some((transfer, out.len())));
            } else {
                assert!(out.is_empty());
                assert!(transfer.batchable);
                let encoded = serde_amqp::to_vec(&transfer).unwrap();
                assert_eq!(transfer_len(&transfer), encoded.len());
            }
        }
    }

    #[test]
    fn other_transfer_shapes_are_left_to_serde_amqp() {
        let with_state = Transfer {
            state: Some(DeliveryState::Accepted(Accepted {})),
            ..transfers()[0].clone()
        };
        let with_mode = Transfer {
            rcv_settle_mode: Some(ReceiverSettleMode::Second),
            ..transfers()[0].clone()
        };
        for transfer in [with_state, with_mode] {
            let encoded = serde_amqp::to_vec(&transfer).unwrap();
            assert_eq!(decode_transfer(&encoded), None);
            assert!(!encode_transfer(&transfer, &mut BytesMut::new()));
        }
        let mut encoded = serde_amqp::to_vec(&transfers()[0]).unwrap();
        // A list that claims more bytes than there are.
        encoded[4] = encoded[4].wrapping_add(200);
        assert_eq!(decode_transfer(&encoded), None);
        assert_eq!(decode_transfer(&[0x00, 0x53]), None);
        assert_eq!(decode_transfer(&[0x00, 0x53, TRANSFER, 0x45]), None);
    }

    #[test]
    fn dispositions_round_trip_and_other_outcomes_are_left_to_serde_amqp() {
        let accepted = Disposition {
            role: Role::Receiver,
            first: 3,
            last: Some(900),
            settled: true,
            state: Some(DeliveryState::Accepted(Accepted {})),
            batchable: false,
        };
        let none = Disposition {
            role: Role::Sender,
            last: None,
            settled: false,
            state: None,
            ..accepted.clone()
        };
        for disposition in [accepted, none] {
            let encoded = serde_amqp::to_vec(&disposition).unwrap();
            assert_eq!(decode_disposition(&encoded), Some(disposition.clone()));
            let mut out = BytesMut::new();
            assert!(encode_disposition(&disposition, &mut out));
            let read: Disposition = serde_amqp::from_slice(&out).unwrap();
            assert_eq!(read, disposition);
            assert_eq!(decode_disposition(&out), Some(disposition));
        }
        let error = fe2o3_amqp::types::definitions::Error::new(
            AmqpError::InternalError,
            Some("x".to_string()),
            None,
        );
        for state in [
            DeliveryState::Rejected(Rejected { error: Some(error) }),
            DeliveryState::Modified(Modified {
                delivery_failed: Some(true),
                undeliverable_here: None,
                message_annotations: None,
            }),
        ] {
            let disposition = Disposition {
                role: Role::Receiver,
                first: 1,
                last: None,
                settled: true,
                state: Some(state),
                batchable: false,
            };
            let encoded = serde_amqp::to_vec(&disposition).unwrap();
            assert_eq!(decode_disposition(&encoded), None);
            assert!(!encode_disposition(&disposition, &mut BytesMut::new()));
        }
        // Bytes after the list are not a disposition's.
        let mut encoded = serde_amqp::to_vec(&none_settled()).unwrap();
        encoded.push(0x40);
        assert_eq!(decode_disposition(&encoded), None);
    }

    fn none_settled() -> Disposition {
        Disposition {
            role: Role::Receiver,
            first: 0,
            last: None,
            settled: true,
            state: None,
            batchable: false,
        }
    }
}
