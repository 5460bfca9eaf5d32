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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn the_first_byte_tells_tls_from_http_from_amqp() {
        assert_eq!(Opening::of(0x16), Opening::Tls, "a TLS handshake record");
        assert_eq!(Opening::of(b'G'), Opening::Http, "GET");
        assert_eq!(Opening::of(b'A'), Opening::Amqp, "the AMQP protocol header");
        for other in [0x00, 0x15, 0x17, b'g', b'P', b'H', 0xff] {
            assert_eq!(Opening::of(other), Opening::Amqp, "{other:#04x}");
        }
    }

    #[tokio::test]
    async fn the_byte_read_ahead_comes_back_first_and_writes_go_straight_through() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        theirs.write_all(b"ET / HTTP/1.1").await.expect("write");
        theirs.shutdown().await.expect("their write side closed");
        let mut prefixed = Prefixed::new(b'G', ours);
        // An empty read must not take the byte read ahead.
        assert_eq!(prefixed.read(&mut []).await.expect("empty read"), 0);
        let mut read = Vec::new();
        prefixed.read_to_end(&mut read).await.expect("read");
        assert_eq!(read, b"GET / HTTP/1.1");

        prefixed.write_all(b"HTTP/1.1 101").await.expect("write");
        prefixed.shutdown().await.expect("our write side closed");
        let mut written = Vec::new();
        theirs.read_to_end(&mut written).await.expect("read back");
        assert_eq!(written, b"HTTP/1.1 101");
    }
}
