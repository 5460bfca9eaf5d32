//! The 8-byte protocol header: plain AMQP straight away (the Python SDK in emulator mode), or
//! SASL first (everyone else). Leaves the connection ready for `open`.

use fe2o3_amqp::transport::protocol_header::{ProtocolHeader, ProtocolId};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::amqp::frames::{FrameError, FrameReader};
use crate::amqp::sasl::{self, Authenticated};
use crate::auth::Policies;

/// Why the protocol header exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The socket failed or closed.
    #[error("i/o error during the protocol header exchange: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something that is not an AMQP 1.0 header we serve.
    #[error("unsupported protocol header {0:02x?}")]
    UnsupportedHeader([u8; 8]),
    /// A SASL frame could not be read.
    #[error("SASL frame: {0}")]
    Frame(#[from] FrameError),
    /// SASL negotiation failed.
    #[error("SASL negotiation failed: {0}")]
    Sasl(String),
}

/// Reads the client's protocol header and answers it; runs SASL when asked for. Returns the
/// mechanism and the principal SASL PLAIN authenticated, if any (none without SASL or with
/// ANONYMOUS).
///
/// An unsupported header is answered with the AMQP header (AMQP 1.0 §2.2) before the error is
/// returned, so the client learns what the broker speaks.
///
/// # Errors
/// Any [`HandshakeError`]; the caller closes the socket.
pub async fn negotiate<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut W,
    policies: &Policies,
) -> Result<Authenticated, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let raw = reader.protocol_header().await?;
    match ProtocolHeader::try_from(raw).ok() {
        Some(header) if header.id == ProtocolId::Amqp && is_version_1_0(&header) => {
            write_header(writer, ProtocolHeader::amqp()).await?;
            Ok(Authenticated {
                mechanism: "none",
                principal: None,
            })
        }
        Some(header) if header.id == ProtocolId::Sasl && is_version_1_0(&header) => {
            write_header(writer, ProtocolHeader::sasl()).await?;
            let authenticated = sasl::authenticate(reader, writer, policies).await?;
            expect_amqp_header(reader, writer).await?;
            Ok(authenticated)
        }
        _ => {
            write_header(writer, ProtocolHeader::amqp()).await?;
            Err(HandshakeError::UnsupportedHeader(raw))
        }
    }
}

/// After SASL, the client starts AMQP with its AMQP header (it may have sent it with its
/// `sasl-init`; the reader kept those bytes).
async fn expect_amqp_header<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut W,
) -> Result<(), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let raw = reader.protocol_header().await?;
    write_header(writer, ProtocolHeader::amqp()).await?;
    match ProtocolHeader::try_from(raw).ok() {
        Some(header) if header.id == ProtocolId::Amqp && is_version_1_0(&header) => Ok(()),
        _ => Err(HandshakeError::UnsupportedHeader(raw)),
    }
}

async fn write_header<W: AsyncWrite + Unpin>(
    writer: &mut W,
    header: ProtocolHeader,
) -> Result<(), HandshakeError> {
    writer.write_all(&<[u8; 8]>::from(header)).await?;
    Ok(())
}

fn is_version_1_0(header: &ProtocolHeader) -> bool {
    (header.major, header.minor, header.revision) == (1, 0, 0)
}
