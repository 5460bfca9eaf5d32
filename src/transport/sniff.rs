//! Telling transports apart by a connection's first byte (design D11): a TLS ClientHello, an
//! HTTP request (a WebSocket upgrade) or anything else, which the AMQP engine answers. Inside
//! TLS nothing can be peeked, so the byte is read ahead and [`Prefixed`] gives it back.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How a connection's first byte says it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// A TLS record (a ClientHello).
    Tls,
    /// An HTTP request: a WebSocket upgrade.
    Http,
    /// Anything else goes to the AMQP engine, which wants a protocol header.
    Amqp,
}

impl Opening {
    /// What a connection opening with `first` speaks: `0x16` opens a TLS handshake record,
    /// `G` an HTTP `GET`.
    pub fn of(first: u8) -> Self {
        match first {
            0x16 => Opening::Tls,
            b'G' => Opening::Http,
            _ => Opening::Amqp,
        }
    }
}

/// A stream whose first byte was read to learn what it speaks, and is read again first.
pub struct Prefixed<S> {
    /// The byte read ahead, until it is read again.
    first: Option<u8>,
    /// The stream after it.
    stream: S,
}

impl<S> Prefixed<S> {
    /// `stream`, with `first` (read from it ahead) to be read again before it.
    pub fn new(first: u8, stream: S) -> Self {
        Prefixed {
            first: Some(first),
            stream,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if buf.remaining() > 0 {
            if let Some(first) = self.first.take() {
                buf.put_slice(&[first]);
                return Poll::Ready(Ok(()));
            }
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
