//! SASL: the broker offers `MSSBCBS` (what the .NET SDK insists on; treated like `ANONYMOUS`,
//! authorisation then comes from CBS), `ANONYMOUS` and `PLAIN`. Credentials are not checked in
//! this version (README says so); the user name is logged, the password never.

use bytes::BytesMut;
use fe2o3_amqp::frames::sasl;
use fe2o3_amqp::types::primitives::{Array, Binary, Symbol};
use fe2o3_amqp::types::sasl::{SaslCode, SaslMechanisms, SaslOutcome};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::amqp::frames::{self, FrameReader};
use crate::amqp::header::HandshakeError;

/// Mechanisms offered, in order of preference.
const MECHANISMS: [&str; 3] = ["MSSBCBS", "ANONYMOUS", "PLAIN"];

/// Runs the SASL exchange that follows the SASL protocol header.
///
/// # Errors
/// A [`HandshakeError`] when the client breaks the exchange or picks an unknown mechanism.
pub async fn authenticate<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut W,
) -> Result<(), HandshakeError>
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
                    "expected sasl-init, got {other:?}"
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
    let code = if MECHANISMS.contains(&mechanism) {
        tracing::debug!(
            mechanism,
            user = plain_user(&init.initial_response),
            "SASL accepted"
        );
        SaslCode::Ok
    } else {
        tracing::info!(mechanism, "SASL mechanism not offered");
        SaslCode::Auth
    };
    let outcome = SaslOutcome {
        code: code.clone(),
        additional_data: None,
    };
    send(writer, &sasl::Frame::Outcome(outcome)).await?;
    if code != SaslCode::Ok {
        return Err(HandshakeError::Sasl(format!(
            "mechanism {mechanism} is not supported"
        )));
    }
    Ok(())
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

/// The user name of a PLAIN initial response (`authzid NUL authcid NUL password`).
fn plain_user(response: &Option<Binary>) -> Option<String> {
    let bytes = response.as_ref()?;
    let mut parts = bytes.split(|b| *b == 0);
    let _authzid = parts.next()?;
    parts
        .next()
        .map(|user| String::from_utf8_lossy(user).into_owned())
}
