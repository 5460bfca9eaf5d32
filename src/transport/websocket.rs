//! AMQP over WebSockets (design D11; the OASIS "AMQP WebSocket Binding" and Service Bus's
//! `wss://namespace/$servicebus/websocket`): the RFC 6455 upgrade on [`PATH`] with the
//! subprotocol `AMQPWSB10` (or the binding's `amqp`), then a byte stream for the one
//! connection engine. Binary messages carry AMQP bytes with no alignment to frames.
//!
//! tungstenite does the framing, masking checks, ping/pong and the close handshake; it bounds
//! the upgrade request (64 KiB, 124 headers) and, as configured here, every message and
//! fragmented message to the broker's largest frame, and what it holds to write to twice that:
//! a peer that sends pings and never reads the pongs gets one pending pong, not a pile of them
//! (tungstenite keeps the latest when its buffer is full), and the AMQP bytes wait until what
//! is buffered has gone. A text message, an oversized message or
//! a protocol error closes the WebSocket with its close code (1003, 1009, 1002) and ends the
//! AMQP connection.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

/// The path Service Bus serves AMQP over WebSockets on, and the SDKs dial.
pub const PATH: &str = "/$servicebus/websocket";

/// The subprotocols served, in order of preference: Service Bus's and the OASIS binding's.
const SUBPROTOCOLS: [&str; 2] = ["AMQPWSB10", "amqp"];

/// Answers a WebSocket upgrade request on `stream` (its first bytes are the HTTP request);
/// a request for another path, or offering only other subprotocols, gets an HTTP error and
/// the stream is dropped. `max_message` bounds every message, fragmented or not.
///
/// # Errors
/// The upgrade failed or was refused (logged by the caller).
pub async fn upgrade<S>(stream: S, max_message: usize) -> Result<Bytestream<S>, WsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
        .read_buffer_size(64 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(2 * max_message);
    let socket =
        tokio_tungstenite::accept_hdr_async_with_config(stream, answer, Some(config)).await?;
    Ok(Bytestream {
        socket,
        unread: Bytes::new(),
        ending: None,
        max_message,
    })
}

/// The upgrade's answer: the subprotocol chosen, or why the request is refused. (The error's
/// type is tungstenite's callback's.)
#[allow(clippy::result_large_err)]
fn answer(request: &Request, mut response: Response) -> Result<Response, ErrorResponse> {
    if request.uri().path() != PATH {
        return Err(refusal(
            StatusCode::NOT_FOUND,
            format!("AMQP over WebSockets is served on {PATH}"),
        ));
    }
    let offered: Vec<&str> = request
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect();
    if offered.is_empty() {
        return Ok(response);
    }
    let Some(chosen) = SUBPROTOCOLS.iter().find(|ours| {
        offered
            .iter()
            .any(|theirs| theirs.eq_ignore_ascii_case(ours))
    }) else {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            format!("the subprotocol must be one of {}", SUBPROTOCOLS.join(", ")),
        ));
    };
    response
        .headers_mut()
        .insert("sec-websocket-protocol", HeaderValue::from_static(chosen));
    Ok(response)
}

/// An HTTP error answer with `reason` as its body.
fn refusal(status: StatusCode, reason: String) -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(reason));
    *response.status_mut() = status;
    response
}

/// A WebSocket seen as the byte stream it carries: reads take the binary messages' bytes in
/// order, each write goes out as one binary message, shutdown is the close handshake.
pub struct Bytestream<S> {
    /// The upgraded socket.
    socket: WebSocketStream<S>,
    /// What is left of the last binary message read.
    unread: Bytes,
    /// Set once the peer closed or broke the protocol: the error reads report after the
    /// socket flushed its close frame (`None` inside: a clean end).
    ending: Option<Option<io::Error>>,
    /// The largest message written: half of what the socket may hold to write.
    max_message: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Bytestream<S> {
    /// Starts closing with `code` because of `error`: the close frame is queued, and reads
    /// report `error` once it is flushed.
    fn fail(&mut self, code: CloseCode, error: io::Error, cx: &mut Context<'_>) {
        tracing::info!(%error, code = u16::from(code), "closing the WebSocket");
        let frame = CloseFrame {
            code,
            reason: error
                .to_string()
                .chars()
                .take(100)
                .collect::<String>()
                .into(),
        };
        let socket = Pin::new(&mut self.socket);
        if let Poll::Ready(Ok(())) = socket.poll_ready(cx) {
            let _ = Pin::new(&mut self.socket).start_send(Message::Close(Some(frame)));
        }
        self.ending = Some(Some(error));
    }
}

/// What a tungstenite read error means for the peer: the close code it gets.
fn close_code(error: &WsError) -> Option<CloseCode> {
    match error {
        WsError::Capacity(_) => Some(CloseCode::Size),
        WsError::Protocol(_) => Some(CloseCode::Protocol),
        WsError::Utf8(_) => Some(CloseCode::Invalid),
        _ => None,
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Bytestream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.unread.is_empty() {
                let take = self.unread.len().min(buf.remaining());
                buf.put_slice(&self.unread[..take]);
                self.unread.advance(take);
                return Poll::Ready(Ok(()));
            }
            if self.ending.is_some() {
                // The close frame (ours or the answer to theirs) goes out before the end.
                let _ = ready!(Pin::new(&mut self.socket).poll_flush(cx));
                return Poll::Ready(match self.ending.take().flatten() {
                    Some(error) => Err(error),
                    None => Ok(()),
                });
            }
            match ready!(Pin::new(&mut self.socket).poll_next(cx)) {
                Some(Ok(Message::Binary(bytes))) => self.unread = bytes,
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None => self.ending = Some(None),
                Some(Ok(Message::Text(_))) => {
                    let error = io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a text message: AMQP travels in binary messages",
                    );
                    self.fail(CloseCode::Unsupported, error, cx);
                }
                Some(Err(error)) => match close_code(&error) {
                    Some(code) => self.fail(code, io::Error::other(error), cx),
                    None => return Poll::Ready(Err(io::Error::other(error))),
                },
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Bytestream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // What is buffered (pongs among it) goes first, so a message always has room.
        let take = buf.len().min(self.max_message);
        let mut socket = Pin::new(&mut self.socket);
        ready!(socket.as_mut().poll_flush(cx)).map_err(io::Error::other)?;
        ready!(socket.as_mut().poll_ready(cx)).map_err(io::Error::other)?;
        socket
            .start_send(Message::Binary(Bytes::copy_from_slice(&buf[..take])))
            .map_err(io::Error::other)?;
        Poll::Ready(Ok(take))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket)
            .poll_flush(cx)
            .map_err(io::Error::other)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match ready!(Pin::new(&mut self.socket).poll_close(cx)) {
            Ok(()) | Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Poll::Ready(Ok(())),
            Err(error) => Poll::Ready(Err(io::Error::other(error))),
        }
    }
}
