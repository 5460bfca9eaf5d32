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

#[cfg(test)]
mod tests {
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};

    use super::*;

    /// An upgrade request for `path` offering each of `protocols` in a header of its own.
    fn request(path: &str, protocols: &[&str]) -> Request {
        protocols
            .iter()
            .fold(Request::builder().uri(path), |builder, protocol| {
                builder.header("sec-websocket-protocol", *protocol)
            })
            .body(())
            .expect("request")
    }

    /// The subprotocol `answer` chooses for `protocols`, or the refusal's status.
    fn chosen(protocols: &[&str]) -> Result<Option<String>, StatusCode> {
        answer(&request(PATH, protocols), Response::default())
            .map(|response| {
                let chosen = response.headers().get("sec-websocket-protocol");
                chosen.map(|value| value.to_str().expect("ASCII").to_owned())
            })
            .map_err(|refusal| refusal.status())
    }

    #[test]
    fn the_upgrade_is_served_on_the_service_bus_path_only() {
        assert!(answer(&request(PATH, &[]), Response::default()).is_ok());
        let with_query = format!("{PATH}?sdk=1");
        assert!(answer(&request(&with_query, &[]), Response::default()).is_ok());
        for other in [
            "/",
            "/$servicebus",
            "/$servicebus/websocket/",
            "/$SERVICEBUS/websocket",
        ] {
            let refusal = answer(&request(other, &[]), Response::default())
                .expect_err("another path is refused");
            assert_eq!(refusal.status(), StatusCode::NOT_FOUND, "{other}");
            let body = refusal.body().as_deref().unwrap_or_default();
            assert!(body.contains(PATH), "{other}: {body}");
        }
    }

    #[test]
    fn the_subprotocol_answered_is_ours_in_our_order_of_preference() {
        assert_eq!(chosen(&[]), Ok(None), "none offered, none answered");
        assert_eq!(chosen(&["amqp"]), Ok(Some("amqp".into())));
        assert_eq!(chosen(&["amqp, AMQPWSB10"]), Ok(Some("AMQPWSB10".into())));
        assert_eq!(chosen(&["mqtt", "amqp"]), Ok(Some("amqp".into())));
        assert_eq!(chosen(&[" amqpwsb10 "]), Ok(Some("AMQPWSB10".into())));
        assert_eq!(chosen(&["mqtt, wamp"]), Err(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn read_errors_map_to_their_close_codes() {
        let too_long = CapacityError::MessageTooLong {
            size: 2,
            max_size: 1,
        };
        let unmasked = ProtocolError::UnmaskedFrameFromClient;
        assert_eq!(
            close_code(&WsError::Capacity(too_long)),
            Some(CloseCode::Size)
        );
        assert_eq!(
            close_code(&WsError::Protocol(unmasked)),
            Some(CloseCode::Protocol)
        );
        assert_eq!(
            close_code(&WsError::Utf8("bad".into())),
            Some(CloseCode::Invalid)
        );
        assert_eq!(close_code(&WsError::ConnectionClosed), None);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(close_code(&WsError::Io(reset)), None);
    }

    /// The broker's end of an upgraded WebSocket with messages of at most `max_message` bytes,
    /// and a client's, over a pipe.
    async fn upgraded(
        max_message: usize,
    ) -> (Bytestream<DuplexStream>, WebSocketStream<DuplexStream>) {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let url = format!("ws://localhost{PATH}");
        let (ours, theirs) = tokio::join!(
            upgrade(ours, max_message),
            tokio_tungstenite::client_async(url, theirs)
        );
        let (theirs, _) = theirs.expect("the client's handshake");
        (ours.expect("upgraded"), theirs)
    }

    /// `future`'s output, or a panic when a broken rule leaves it waiting.
    async fn within<F: std::future::Future>(future: F) -> F::Output {
        tokio::time::timeout(std::time::Duration::from_secs(10), future)
            .await
            .expect("done within 10 s")
    }

    /// What a broker whose messages are at most `max_message` bytes does with a client's
    /// `message` that breaks the binding: the error its read fails with, and the code of the
    /// close frame the client receives past any other message (`None`: the stream ended
    /// first).
    async fn refused(max_message: usize, message: Message) -> (io::Error, Option<CloseCode>) {
        let (mut broker, mut client) = upgraded(max_message).await;
        client.send(message).await.expect("sent");
        let read = within(broker.read(&mut [0u8; 16])).await;
        let error = read.expect_err("refused");
        drop(broker);
        while let Some(received) = client.next().await {
            if let Message::Close(frame) = received.expect("a message") {
                return (error, frame.map(|frame| frame.code));
            }
        }
        (error, None)
    }

    #[tokio::test]
    async fn binary_messages_read_as_one_stream_and_writes_split_at_the_largest_message() {
        let (mut broker, mut client) = upgraded(8).await;
        for message in [
            Message::Binary(Bytes::from_static(b"AM")),
            Message::Ping(Bytes::from_static(b"ping")),
            Message::Binary(Bytes::from_static(b"QP\x00\x01\x00")),
            Message::Binary(Bytes::from_static(b"\x00")),
        ] {
            client.send(message).await.expect("sent");
        }
        let mut header = [0u8; 8];
        within(broker.read_exact(&mut header)).await.expect("read");
        assert_eq!(&header, b"AMQP\x00\x01\x00\x00");

        let frames: Vec<u8> = (0..20).collect();
        broker.write_all(&frames).await.expect("written");
        broker.flush().await.expect("flushed");
        drop(broker);
        let mut received: Vec<Vec<u8>> = Vec::new();
        while received.concat().len() < frames.len() {
            match client.next().await.expect("open").expect("a message") {
                Message::Binary(bytes) => received.push(bytes.to_vec()),
                Message::Pong(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let sizes: Vec<usize> = received.iter().map(Vec::len).collect();
        assert_eq!(sizes, [8, 8, 4]);
        assert_eq!(received.concat(), frames);
    }

    #[tokio::test]
    async fn a_text_message_fails_the_read_and_closes_with_1003() {
        let (error, code) = refused(64, Message::text("AMQP")).await;
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert_eq!(code, Some(CloseCode::Unsupported));
    }

    #[tokio::test]
    async fn an_oversized_message_fails_the_read_and_closes_with_1009() {
        // The smallest `max_frame_size`: the close frame and its reason fit what the socket
        // may hold to write.
        let oversized = Message::Binary(Bytes::from(vec![0u8; 513]));
        let (_, code) = refused(512, oversized).await;
        assert_eq!(code, Some(CloseCode::Size));
    }

    #[tokio::test]
    async fn the_peer_closing_ends_the_stream_cleanly() {
        let (mut broker, mut client) = upgraded(64).await;
        client
            .send(Message::Binary(Bytes::from_static(b"AMQP")))
            .await
            .expect("sent");
        client.close(None).await.expect("close sent");
        let mut read = Vec::new();
        within(broker.read_to_end(&mut read))
            .await
            .expect("a clean end");
        assert_eq!(read, b"AMQP");
        drop(broker);
        let answer = client.next().await.expect("the close answered");
        assert!(matches!(answer, Ok(Message::Close(_))), "{answer:?}");
    }
}
