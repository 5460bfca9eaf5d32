//! Frames on the socket (AMQP 1.0 §2.3): reading them with every length checked, encoding
//! them, and the writer task with its bounded buffer.
//!
//! fe2o3-amqp's `Transport` decodes frame bodies with serde_amqp straight from the socket
//! buffer, which allocates whatever a declared length asks for. The broker reads frames itself
//! instead: the frame size is checked against the negotiated maximum before anything is
//! buffered, the body's encoding is checked by [`encoding::check_frame_body`], and only then
//! is the performative decoded by fe2o3's types from that bounded slice (design.md D1).

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use fe2o3_amqp::frames::amqp::{Frame, FrameBody};
use fe2o3_amqp::frames::sasl;
use fe2o3_amqp::types::performatives::Performative;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};

use crate::amqp::hot;
use crate::encoding::{self, EncodingError};

/// The frame size every connection starts with, until `open` negotiates another (§2.4.1).
pub const MIN_MAX_FRAME_SIZE: usize = 512;
/// Frame type of AMQP frames.
const AMQP_FRAME: u8 = 0x00;
/// Frame type of SASL frames.
const SASL_FRAME: u8 = 0x01;
/// Size of the frame header: size (4), doff (1), type (1), channel (2).
const HEADER_LEN: usize = 8;
/// A read buffer larger than this is given back to the allocator once it is empty, so that
/// one large frame does not pin its buffer for the connection's lifetime.
const KEEP_READ_BUFFER: usize = 64 * 1024;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The declared frame size is larger than the negotiated maximum.
    #[error("frame of {size} bytes is larger than the max-frame-size of {max} bytes")]
    TooLarge {
        /// The declared size.
        size: usize,
        /// The maximum in force.
        max: usize,
    },
    /// The frame header is malformed (a size below the header, a bad data offset).
    #[error("malformed frame header: {0}")]
    Framing(String),
    /// A frame of the wrong type for this stage of the connection.
    #[error("{0}")]
    WrongType(&'static str),
    /// The frame body's encoding is malformed.
    #[error("malformed frame body: {0}")]
    Encoding(#[from] EncodingError),
    /// The body is well formed but is not the performative fe2o3's types expect.
    #[error("malformed frame body: {0}")]
    Decode(String),
}

/// One frame as read, before its body is decoded.
#[derive(Debug)]
pub struct RawFrame {
    /// The frame type (`0` AMQP, `1` SASL).
    pub frame_type: u8,
    /// The channel (AMQP frames).
    pub channel: u16,
    /// The body, after the extended header.
    pub body: Bytes,
}

/// Reads protocol headers and frames from a socket's read half.
///
/// Every read goes into one buffer whose growth is bounded by the frame size in force: a
/// frame's size is checked before room for it is reserved.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    buffer: BytesMut,
    max_frame_size: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader that accepts frames of up to [`MIN_MAX_FRAME_SIZE`] bytes.
    pub fn new(io: R) -> Self {
        Self {
            io,
            buffer: BytesMut::new(),
            max_frame_size: MIN_MAX_FRAME_SIZE,
        }
    }

    /// Sets the largest frame accepted from now on (never below [`MIN_MAX_FRAME_SIZE`]).
    pub fn set_max_frame_size(&mut self, max: usize) {
        self.max_frame_size = max.max(MIN_MAX_FRAME_SIZE);
    }

    /// Reads an 8-byte protocol header.
    ///
    /// # Errors
    /// The socket failed or closed before 8 bytes arrived.
    pub async fn protocol_header(&mut self) -> std::io::Result<[u8; 8]> {
        if !self.fill(8).await? {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let mut header = [0u8; 8];
        header.copy_from_slice(&self.buffer.split_to(8));
        Ok(header)
    }

    /// Reads the next frame; `None` when the client closed the socket between frames.
    ///
    /// # Errors
    /// A [`FrameError`]; the connection cannot go on after one.
    ///
    /// # Cancel safety
    /// Cancel safe: bytes read so far stay in the reader's buffer.
    pub async fn frame(&mut self) -> Result<Option<RawFrame>, FrameError> {
        if !self.fill(4).await? {
            return Ok(None);
        }
        let size = encoding::read_u32(&self.buffer, 0).map_err(FrameError::Encoding)? as usize;
        if size > self.max_frame_size {
            return Err(FrameError::TooLarge {
                size,
                max: self.max_frame_size,
            });
        }
        if size < HEADER_LEN {
            return Err(FrameError::Framing(format!(
                "a frame size of {size} is smaller than the frame header"
            )));
        }
        if !self.fill(size).await? {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        let frame = self.buffer.split_to(size).freeze();
        if self.buffer.is_empty() && self.buffer.capacity() > KEEP_READ_BUFFER {
            self.buffer = BytesMut::new();
        }
        let offset = usize::from(frame[4]) * 4;
        if offset < HEADER_LEN || offset > size {
            return Err(FrameError::Framing(format!(
                "data offset {} does not fit a frame of {size} bytes",
                frame[4]
            )));
        }
        Ok(Some(RawFrame {
            frame_type: frame[5],
            channel: u16::from_be_bytes([frame[6], frame[7]]),
            body: frame.slice(offset..),
        }))
    }

    /// Reads until the buffer holds `needed` bytes; `false` when the socket closed before any
    /// of them arrived.
    async fn fill(&mut self, needed: usize) -> Result<bool, std::io::Error> {
        while self.buffer.len() < needed {
            self.buffer.reserve(
                (needed - self.buffer.len())
                    .max(4096)
                    .min(self.max_frame_size),
            );
            if self.io.read_buf(&mut self.buffer).await? == 0 {
                if self.buffer.is_empty() {
                    return Ok(false);
                }
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(true)
    }
}

/// Decodes an AMQP frame; its body was not yet checked.
///
/// # Errors
/// A SASL frame, a malformed body, or a body that is not a performative.
pub fn decode_amqp(raw: RawFrame) -> Result<Frame, FrameError> {
    if raw.frame_type != AMQP_FRAME {
        return Err(FrameError::WrongType(if raw.frame_type == SASL_FRAME {
            "a SASL frame arrived after the SASL exchange had ended"
        } else {
            "a frame of an unknown type arrived"
        }));
    }
    if raw.body.is_empty() {
        return Ok(Frame::new(raw.channel, FrameBody::Empty));
    }
    if let Some((performative, length)) = hot::decode_transfer(&raw.body) {
        let payload = raw.body.slice(length..);
        return Ok(Frame::new(
            raw.channel,
            FrameBody::Transfer {
                performative,
                payload,
            },
        ));
    }
    if let Some(disposition) = hot::decode_disposition(&raw.body) {
        return Ok(Frame::new(raw.channel, FrameBody::Disposition(disposition)));
    }
    let length = encoding::check_frame_body(&raw.body)?;
    let encoded = &raw.body[..length];
    let performative = match serde_amqp::from_slice::<Performative>(encoded) {
        Ok(performative) => performative,
        Err(strict) => {
            lenient_performative(encoded).ok_or_else(|| FrameError::Decode(strict.to_string()))?
        }
    };
    let body = match performative {
        Performative::Open(open) => FrameBody::Open(open),
        Performative::Begin(begin) => FrameBody::Begin(begin),
        Performative::Attach(attach) => FrameBody::Attach(attach),
        Performative::Flow(flow) => FrameBody::Flow(flow),
        Performative::Transfer(performative) => FrameBody::Transfer {
            performative,
            payload: raw.body.slice(length..),
        },
        Performative::Disposition(disposition) => FrameBody::Disposition(disposition),
        Performative::Detach(detach) => FrameBody::Detach(detach),
        Performative::End(end) => FrameBody::End(end),
        Performative::Close(close) => FrameBody::Close(close),
    };
    Ok(Frame::new(raw.channel, body))
}

/// A performative whose map keys are strings where AMQP's `fields` and annotation maps ask for
/// symbols, read as if they were symbols: rhea (the JavaScript SDK's AMQP library) encodes a
/// JavaScript object's keys as strings, e.g. the `info` of a dead-letter's `rejected` error
/// and the `message-annotations` of an abandon's `modified` (amqp-dialect.md §17), and
/// Service Bus accepts them. A string and a symbol differ only in their format code.
fn lenient_performative(encoded: &[u8]) -> Option<Performative> {
    let keys = encoding::string_map_keys(encoded, 0).ok()?;
    if keys.is_empty() {
        return None;
    }
    let mut symbols = encoded.to_vec();
    for at in keys {
        symbols[at] = if symbols[at] == 0xa1 { 0xa3 } else { 0xb3 };
    }
    let performative = serde_amqp::from_slice(&symbols).ok()?;
    tracing::debug!("performative with string map keys read as symbols");
    Some(performative)
}

/// Decodes a SASL frame; its body was not yet checked.
///
/// # Errors
/// An AMQP frame, a malformed body, or a body that is not a SASL frame.
pub fn decode_sasl(raw: RawFrame) -> Result<sasl::Frame, FrameError> {
    if raw.frame_type != SASL_FRAME {
        return Err(FrameError::WrongType(
            "an AMQP frame arrived during the SASL exchange",
        ));
    }
    let length = encoding::check_frame_body(&raw.body)?;
    serde_amqp::from_slice(&raw.body[..length])
        .map_err(|error| FrameError::Decode(error.to_string()))
}

/// Appends an encoded AMQP frame to `out`.
///
/// # Errors
/// A performative that does not encode (a value fe2o3's types cannot write).
pub fn encode_amqp(frame: Frame, out: &mut BytesMut) -> Result<(), serde_amqp::Error> {
    let start = begin_frame(out, AMQP_FRAME, frame.channel);
    match frame.body {
        FrameBody::Open(open) => serialize(&open, out)?,
        FrameBody::Begin(begin) => serialize(&begin, out)?,
        FrameBody::Attach(attach) => serialize(&attach, out)?,
        FrameBody::Flow(flow) => serialize(&flow, out)?,
        FrameBody::Transfer {
            performative,
            payload,
        } => {
            if !hot::encode_transfer(&performative, out) {
                serialize(&performative, out)?;
            }
            out.extend_from_slice(&payload);
        }
        FrameBody::Disposition(disposition) => {
            if !hot::encode_disposition(&disposition, out) {
                serialize(&disposition, out)?;
            }
        }
        FrameBody::Detach(detach) => serialize(&detach, out)?,
        FrameBody::End(end) => serialize(&end, out)?,
        FrameBody::Close(close) => serialize(&close, out)?,
        FrameBody::Empty => {}
    }
    end_frame(out, start);
    Ok(())
}

/// Appends an encoded SASL frame to `out`.
///
/// # Errors
/// A frame that does not encode.
pub fn encode_sasl(frame: &sasl::Frame, out: &mut BytesMut) -> Result<(), serde_amqp::Error> {
    let start = begin_frame(out, SASL_FRAME, 0);
    serialize(frame, out)?;
    end_frame(out, start);
    Ok(())
}

fn begin_frame(out: &mut BytesMut, frame_type: u8, channel: u16) -> usize {
    let start = out.len();
    out.put_u32(0);
    out.put_u8(2);
    out.put_u8(frame_type);
    out.put_u16(channel);
    start
}

fn end_frame(out: &mut BytesMut, start: usize) {
    let size = u32::try_from(out.len() - start).unwrap_or(u32::MAX);
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

fn serialize<T: Serialize>(value: &T, out: &mut BytesMut) -> Result<(), serde_amqp::Error> {
    let mut serializer = serde_amqp::ser::Serializer::from(out.writer());
    value.serialize(&mut serializer)
}

/// The connection's end of its writer task. What the broker has encoded for one client but
/// the socket has not taken yet is bounded by a byte budget: [`Outbound::send`] waits for
/// room, so a client that does not read stops the connection task, which then stops reading
/// that client's socket and taking its entity events (back-pressure).
#[derive(Debug)]
pub struct Outbound {
    /// Encoded bytes for the writer, each with the permits it holds of `room`. Unbounded as a
    /// channel, bounded in bytes by `room`: only [`Outbound::send_unbudgeted`] (one `close`
    /// frame at the end) bypasses it.
    chunks: mpsc::UnboundedSender<(Bytes, u32)>,
    room: Arc<Semaphore>,
    budget: usize,
}

/// The writer task has stopped (the socket failed or closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the connection's writer has stopped")]
pub struct WriterGone;

impl Outbound {
    /// Starts the writer task on `io` with a buffer of `budget` bytes. The task ends when
    /// the [`Outbound`] is dropped (after writing what it was given) or the socket fails.
    pub fn spawn<W>(io: W, budget: usize) -> (Self, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let budget = budget.clamp(1, Semaphore::MAX_PERMITS);
        let room = Arc::new(Semaphore::new(budget));
        let (chunks, receiver) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_chunks(io, receiver, room.clone()));
        (
            Self {
                chunks,
                room,
                budget,
            },
            task,
        )
    }

    /// Hands `bytes` to the writer once the buffer has room for them, waiting at most
    /// `timeout` for it. A chunk larger than the whole budget waits for an empty buffer.
    ///
    /// # Errors
    /// `Ok(false)` when the buffer stayed full for `timeout`; [`WriterGone`] when the writer
    /// has stopped.
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled call has sent nothing.
    pub async fn send(&self, bytes: Bytes, timeout: Duration) -> Result<bool, WriterGone> {
        let permits = permits_for(bytes.len(), self.budget);
        let acquired = tokio::time::timeout(timeout, self.room.acquire_many(permits)).await;
        match acquired {
            Err(_) => Ok(false),
            Ok(Err(_)) => Err(WriterGone),
            Ok(Ok(permit)) => {
                permit.forget();
                self.chunks.send((bytes, permits)).map_err(|_| WriterGone)?;
                Ok(true)
            }
        }
    }

    /// Hands `bytes` to the writer without waiting for room: for the last frame of a
    /// connection, which must not wait behind a client that does not read.
    pub fn send_unbudgeted(&self, bytes: Bytes) {
        let _ = self.chunks.send((bytes, 0));
    }

    /// Bytes waiting for the socket.
    pub fn buffered(&self) -> usize {
        self.budget - self.room.available_permits().min(self.budget)
    }
}

fn permits_for(len: usize, budget: usize) -> u32 {
    u32::try_from(len.min(budget)).unwrap_or(u32::MAX)
}

async fn write_chunks<W: AsyncWrite + Unpin>(
    mut io: W,
    mut chunks: mpsc::UnboundedReceiver<(Bytes, u32)>,
    room: Arc<Semaphore>,
) {
    while let Some((chunk, permits)) = chunks.recv().await {
        // The flush makes a buffering transport (a WebSocket's frames) send the chunk now.
        let written = match io.write_all(&chunk).await {
            Ok(()) => io.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            tracing::debug!(%error, "write failed");
            room.close();
            return;
        }
        room.add_permits(permits as usize);
    }
    let _ = io.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::performatives::{Close, Transfer};

    async fn read_one(bytes: &[u8], max: usize) -> Result<Option<RawFrame>, FrameError> {
        let mut reader = FrameReader::new(bytes);
        reader.set_max_frame_size(max);
        reader.frame().await
    }

    #[tokio::test]
    async fn a_frame_over_the_maximum_is_refused_before_it_is_buffered() {
        let error = read_one(&[0xff, 0xff, 0xff, 0xff, 2, 0], 4096).await;
        assert!(matches!(
            error,
            Err(FrameError::TooLarge {
                size: 0xffff_ffff,
                max: 4096
            })
        ));
    }

    #[tokio::test]
    async fn sizes_below_the_header_and_bad_offsets_are_framing_errors() {
        for frame in [
            &[0, 0, 0, 4][..],
            &[0, 0, 0, 7, 2, 0, 0],
            &[0, 0, 0, 8, 1, 0, 0, 0],
            &[0, 0, 0, 8, 3, 0, 0, 0],
        ] {
            assert!(
                matches!(read_one(frame, 512).await, Err(FrameError::Framing(_))),
                "{frame:?}"
            );
        }
        assert!(matches!(read_one(&[], 512).await, Ok(None)));
        assert!(matches!(
            read_one(&[0, 0, 0, 9, 2, 0], 512).await,
            Err(FrameError::Io(_))
        ));
    }

    #[tokio::test]
    async fn the_four_gib_symbol_is_refused_without_allocating_it() {
        let frame = [
            0, 0, 0, 0x12, 2, 0, 0, 0, 0x00, 0xb3, 0xff, 0xff, 0xff, 0xff, 0x61, 0x62, 0x63, 0x64,
        ];
        let raw = read_one(&frame, 65536).await.expect("read").expect("frame");
        assert!(matches!(
            decode_amqp(raw),
            Err(FrameError::Encoding(EncodingError::Truncated { .. }))
        ));
    }

    #[tokio::test]
    async fn frames_round_trip_through_the_encoder_and_the_reader() {
        let mut out = BytesMut::new();
        let transfer = Transfer {
            handle: 3.into(),
            delivery_id: Some(1),
            delivery_tag: Some(vec![9u8; 16].into()),
            message_format: Some(0),
            settled: Some(true),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        let payload = Bytes::from_static(b"\x00\x53\x77\xa1\x02hi");
        encode_amqp(
            Frame::new(
                5u16,
                FrameBody::Transfer {
                    performative: transfer,
                    payload: payload.clone(),
                },
            ),
            &mut out,
        )
        .expect("encode");
        encode_amqp(Frame::empty(), &mut out).expect("encode");
        encode_amqp(
            Frame::new(0u16, FrameBody::Close(Close { error: None })),
            &mut out,
        )
        .expect("encode");
        let bytes = out.freeze();
        let mut reader = FrameReader::new(&bytes[..]);
        let frame =
            decode_amqp(reader.frame().await.expect("read").expect("frame")).expect("decode");
        assert_eq!(frame.channel, 5);
        assert!(matches!(frame.body, FrameBody::Transfer { payload: p, .. } if p == payload));
        let frame =
            decode_amqp(reader.frame().await.expect("read").expect("frame")).expect("decode");
        assert!(matches!(frame.body, FrameBody::Empty));
        let frame =
            decode_amqp(reader.frame().await.expect("read").expect("frame")).expect("decode");
        assert!(matches!(frame.body, FrameBody::Close(_)));
        assert!(reader.frame().await.expect("end").is_none());
    }

    /// What `@azure/service-bus` 7.9.5 sends for `deadLetterMessage` (through rhea): the
    /// rejected error's `info` keyed by `str8` strings.
    #[test]
    fn a_dead_letter_with_string_keys_in_its_info_is_read_as_symbols() {
        fn str8(text: &str) -> Vec<u8> {
            let mut out = vec![0xa1, text.len() as u8];
            out.extend_from_slice(text.as_bytes());
            out
        }
        fn list8(items: &[Vec<u8>]) -> Vec<u8> {
            let content: Vec<u8> = items.concat();
            let mut out = vec![0xc0, content.len() as u8 + 1, items.len() as u8];
            out.extend_from_slice(&content);
            out
        }
        let mut info = vec![0xc1];
        let entries = [
            str8("DeadLetterReason"),
            str8("why"),
            str8("DeadLetterErrorDescription"),
            str8("what"),
        ]
        .concat();
        info.extend_from_slice(&[entries.len() as u8 + 1, 4]);
        info.extend_from_slice(&entries);
        let mut condition = vec![0xa3, 25];
        condition.extend_from_slice(b"com.microsoft:dead-letter");
        let error = [
            vec![0x00, 0x53, 0x1d],
            list8(&[condition, vec![0x40], info]),
        ]
        .concat();
        let rejected = [vec![0x00, 0x53, 0x25], list8(&[error])].concat();
        let disposition = [
            vec![0x00, 0x53, 0x15],
            list8(&[vec![0x41], vec![0x52, 7], vec![0x40], vec![0x42], rejected]),
        ]
        .concat();
        assert!(
            serde_amqp::from_slice::<Performative>(&disposition).is_err(),
            "fe2o3's types refuse string keys in fields"
        );
        let raw = RawFrame {
            frame_type: AMQP_FRAME,
            channel: 1,
            body: Bytes::from(disposition),
        };
        let frame = decode_amqp(raw).expect("read leniently");
        let FrameBody::Disposition(disposition) = frame.body else {
            panic!("not a disposition: {:?}", frame.body)
        };
        assert_eq!(disposition.first, 7);
        let Some(fe2o3_amqp::types::messaging::DeliveryState::Rejected(rejected)) =
            disposition.state
        else {
            panic!("not rejected")
        };
        let info = rejected.error.and_then(|e| e.info).expect("info");
        let reason = info
            .get(&fe2o3_amqp::types::primitives::Symbol::from(
                "DeadLetterReason",
            ))
            .expect("reason");
        assert_eq!(
            reason,
            &fe2o3_amqp::types::primitives::Value::String("why".into())
        );
    }

    #[tokio::test]
    async fn a_sasl_frame_after_the_exchange_is_named_as_such() {
        let raw = RawFrame {
            frame_type: SASL_FRAME,
            channel: 0,
            body: Bytes::new(),
        };
        let error = decode_amqp(raw).expect_err("refused");
        assert!(error.to_string().contains("SASL frame"), "{error}");
    }

    #[tokio::test]
    async fn the_outbound_buffer_waits_for_room_and_gives_up_after_its_timeout() {
        let (client, server) = tokio::io::duplex(64);
        let (outbound, _task) = Outbound::spawn(server, 1000);
        let short = Duration::from_millis(50);
        assert_eq!(
            outbound.send(Bytes::from(vec![1u8; 600]), short).await,
            Ok(true)
        );
        // The duplex holds 64 bytes and nobody reads: the writer is stuck with 536 unwritten.
        assert_eq!(
            outbound.send(Bytes::from(vec![2u8; 600]), short).await,
            Ok(false)
        );
        assert!(outbound.buffered() >= 536, "{}", outbound.buffered());
        let mut client = client;
        let mut sink = vec![0u8; 600];
        client.read_exact(&mut sink).await.expect("read");
        assert_eq!(
            outbound
                .send(Bytes::from(vec![2u8; 600]), Duration::from_secs(30))
                .await,
            Ok(true)
        );
    }
}
