//! The handshake before `open`: the 8-byte protocol header, plain AMQP straight away (the
//! Python SDK in emulator mode) or SASL first (everyone else), then SASL itself. Leaves the
//! connection ready for `open`.
//!
//! SASL: the broker offers `MSSBCBS` (what the .NET SDK insists on; treated like `ANONYMOUS`,
//! authorisation then comes from CBS tokens), `ANONYMOUS` and `PLAIN`. PLAIN's user name is a
//! shared access policy's name and its password the policy's key, as with Service Bus; a wrong
//! pair gets the outcome `auth`. The user name is logged, the password never.

use bytes::BytesMut;
use fe2o3_amqp::frames::sasl;
use fe2o3_amqp::transport::protocol_header::{ProtocolHeader, ProtocolId};
use fe2o3_amqp::types::primitives::{Array, Binary, Symbol};
use fe2o3_amqp::types::sasl::{SaslCode, SaslMechanisms, SaslOutcome};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::amqp::frames::{self, FrameError, FrameReader};
use crate::auth::{Policies, Principal};

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
            let authenticated = authenticate(reader, writer, policies).await?;
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

/// Mechanisms offered, in order of preference.
const MECHANISMS: [&str; 3] = ["MSSBCBS", "ANONYMOUS", "PLAIN"];

/// Who a connection's handshake says the client is.
#[derive(Debug)]
pub struct Authenticated {
    /// The SASL mechanism it used (`none` without SASL).
    pub mechanism: &'static str,
    /// The policy its PLAIN credentials name; `None` without SASL, with ANONYMOUS or MSSBCBS
    /// (CBS tokens come later, per link).
    pub principal: Option<Principal>,
}

/// Runs the SASL exchange that follows the SASL protocol header. Returns the mechanism and
/// the principal of PLAIN credentials, or `None` for the anonymous mechanisms.
///
/// # Errors
/// A [`HandshakeError`] when the client breaks the exchange, picks an unknown mechanism, or
/// presents PLAIN credentials that name no policy.
pub async fn authenticate<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut W,
    policies: &Policies,
) -> Result<Authenticated, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mechanisms = SaslMechanisms {
        sasl_server_mechanisms: Array(MECHANISMS.iter().map(|m| Symbol::from(*m)).collect()),
    };
    send(writer, &sasl::Frame::Mechanisms(mechanisms)).await?;
    let init = match reader.frame().await? {
        Some(raw) => match frames::decode_sasl(raw)? {
            sasl::Frame::Init(init) => init,
            other => {
                return Err(HandshakeError::Sasl(format!(
                    "expected sasl-init, got {}",
                    frame_name(&other)
                )))
            }
        },
        None => {
            return Err(HandshakeError::Sasl(
                "connection closed before sasl-init".into(),
            ))
        }
    };
    let mechanism = init.mechanism.as_str();
    let outcome = match mechanism {
        "MSSBCBS" => Ok(("MSSBCBS", None)),
        "ANONYMOUS" => Ok(("ANONYMOUS", None)),
        "PLAIN" => match plain_credentials(&init.initial_response) {
            Some((user, password)) => match policies.authenticate(&user, password) {
                Some(principal) => Ok(("PLAIN", Some(principal))),
                None => Err(format!("SASL PLAIN: no policy named {user:?} has that key")),
            },
            None => {
                Err("SASL PLAIN: the initial response is not authzid NUL user NUL password".into())
            }
        },
        _ => Err(format!("mechanism {mechanism} is not offered")),
    };
    let code = match &outcome {
        Ok(_) => SaslCode::Ok,
        Err(_) => SaslCode::Auth,
    };
    let frame = sasl::Frame::Outcome(SaslOutcome {
        code,
        additional_data: None,
    });
    send(writer, &frame).await?;
    match outcome {
        Ok((mechanism, principal)) => Ok(Authenticated {
            mechanism,
            principal,
        }),
        Err(reason) => {
            crate::metrics::broker().sasl_failures.inc();
            tracing::info!(mechanism, %reason, "SASL refused");
            Err(HandshakeError::Sasl(reason))
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &sasl::Frame,
) -> Result<(), HandshakeError> {
    let mut out = BytesMut::new();
    frames::encode_sasl(frame, &mut out).map_err(|e| HandshakeError::Sasl(e.to_string()))?;
    writer.write_all(&out).await?;
    Ok(())
}

/// The user name and password of a PLAIN initial response (`authzid NUL authcid NUL
/// password`).
fn plain_credentials(response: &Option<Binary>) -> Option<(String, &[u8])> {
    let bytes = response.as_ref()?;
    let mut parts = bytes.splitn(3, |b| *b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?;
    Some((user.to_owned(), parts.next()?))
}

/// A SASL frame's name, for errors (the frames may carry credentials, so never their fields).
fn frame_name(frame: &sasl::Frame) -> &'static str {
    match frame {
        sasl::Frame::Mechanisms(_) => "sasl-mechanisms",
        sasl::Frame::Init(_) => "sasl-init",
        sasl::Frame::Challenge(_) => "sasl-challenge",
        sasl::Frame::Response(_) => "sasl-response",
        sasl::Frame::Outcome(_) => "sasl-outcome",
    }
}
