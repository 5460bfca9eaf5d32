//! The 8-byte protocol header: plain AMQP straight away (the Python SDK in emulator mode), or
//! SASL first (everyone else). Returns a frame transport ready for `open`.

use fe2o3_amqp::frames::amqp;
use fe2o3_amqp::transport::protocol_header::{ProtocolHeader, ProtocolId};
use fe2o3_amqp::transport::Transport;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::amqp::sasl;

/// The frame size every transport starts with, until `open` negotiates another.
pub const MIN_MAX_FRAME_SIZE: usize = 512;

/// Why the protocol header exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The socket failed or closed.
    #[error("i/o error during the protocol header exchange: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something that is not an AMQP 1.0 header we serve.
    #[error("unsupported protocol header {0:02x?}")]
    UnsupportedHeader([u8; 8]),
    /// SASL negotiation failed.
    #[error("SASL negotiation failed: {0}")]
    Sasl(String),
}

/// Reads the client's protocol header and answers it; runs SASL when asked for.
///
/// An unsupported header is answered with the AMQP header (AMQP 1.0 §2.2) before the error is
/// returned, so the client learns what the broker speaks.
///
/// # Errors
/// Any [`HandshakeError`]; the caller closes the socket.
pub async fn negotiate(
    mut stream: TcpStream,
) -> Result<Transport<TcpStream, amqp::Frame>, HandshakeError> {
    let mut raw = [0u8; 8];
    stream.read_exact(&mut raw).await?;
    let header = ProtocolHeader::try_from(raw).ok();
    match header {
        Some(header) if header.id == ProtocolId::Amqp && is_version_1_0(&header) => {
            stream
                .write_all(&<[u8; 8]>::from(ProtocolHeader::amqp()))
                .await?;
            Ok(Transport::bind(stream, MIN_MAX_FRAME_SIZE, None))
        }
        Some(header) if header.id == ProtocolId::Sasl && is_version_1_0(&header) => {
            stream
                .write_all(&<[u8; 8]>::from(ProtocolHeader::sasl()))
                .await?;
            sasl::authenticate(stream).await
        }
        _ => {
            stream
                .write_all(&<[u8; 8]>::from(ProtocolHeader::amqp()))
                .await?;
            Err(HandshakeError::UnsupportedHeader(raw))
        }
    }
}

fn is_version_1_0(header: &ProtocolHeader) -> bool {
    (header.major, header.minor, header.revision) == (1, 0, 0)
}
