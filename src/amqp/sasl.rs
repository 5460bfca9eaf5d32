//! SASL: the broker offers `MSSBCBS` (what the .NET SDK insists on; treated like `ANONYMOUS`,
//! authorisation then comes from CBS), `ANONYMOUS` and `PLAIN`. Credentials are not checked in
//! this version (README says so); the user name is logged, the password never.

use fe2o3_amqp::frames::{amqp, sasl};
use fe2o3_amqp::transport::protocol_header::ProtocolHeaderCodec;
use fe2o3_amqp::transport::Transport;
use fe2o3_amqp::types::primitives::{Array, Symbol};
use fe2o3_amqp::types::sasl::{SaslCode, SaslMechanisms, SaslOutcome};
use fe2o3_amqp::types::states::ConnectionState;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;

use crate::amqp::header::{HandshakeError, MIN_MAX_FRAME_SIZE};

/// Mechanisms offered, in order of preference.
const MECHANISMS: [&str; 3] = ["MSSBCBS", "ANONYMOUS", "PLAIN"];

/// Runs the SASL exchange after the SASL header, then the AMQP header exchange.
///
/// # Errors
/// A [`HandshakeError`] when the client breaks the exchange or picks an unknown mechanism.
pub async fn authenticate(
    stream: TcpStream,
) -> Result<Transport<TcpStream, amqp::Frame>, HandshakeError> {
    let mut transport: Transport<TcpStream, sasl::Frame> =
        Transport::bind(stream, MIN_MAX_FRAME_SIZE, None);
    let mechanisms = SaslMechanisms {
        sasl_server_mechanisms: Array(MECHANISMS.iter().map(|m| Symbol::from(*m)).collect()),
    };
    transport
        .send(sasl::Frame::Mechanisms(mechanisms))
        .await
        .map_err(|e| HandshakeError::Sasl(format!("{e:?}")))?;
    let init = match transport.next().await {
        Some(Ok(sasl::Frame::Init(init))) => init,
        Some(Ok(other)) => {
            return Err(HandshakeError::Sasl(format!(
                "expected sasl-init, got {other:?}"
            )))
        }
        Some(Err(e)) => return Err(HandshakeError::Sasl(format!("{e:?}"))),
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
    transport
        .send(sasl::Frame::Outcome(SaslOutcome {
            code: code.clone(),
            additional_data: None,
        }))
        .await
        .map_err(|e| HandshakeError::Sasl(format!("{e:?}")))?;
    if code != SaslCode::Ok {
        return Err(HandshakeError::Sasl(format!(
            "mechanism {mechanism} is not supported"
        )));
    }
    let (writer, reader) = transport.into_framed_codec();
    let writer = writer.map_encoder(|_| ProtocolHeaderCodec::new());
    let reader = reader.map_decoder(|_| ProtocolHeaderCodec::new());
    let mut state = ConnectionState::Start;
    Transport::negotiate_amqp_header(writer, reader, &mut state, None)
        .await
        .map_err(|e| HandshakeError::Sasl(format!("AMQP header after SASL: {e:?}")))
}

/// The user name of a PLAIN initial response (`authzid NUL authcid NUL password`).
fn plain_user(response: &Option<fe2o3_amqp::types::primitives::Binary>) -> Option<String> {
    let bytes = response.as_ref()?;
    let mut parts = bytes.split(|b| *b == 0);
    let _authzid = parts.next()?;
    parts
        .next()
        .map(|user| String::from_utf8_lossy(user).into_owned())
}
