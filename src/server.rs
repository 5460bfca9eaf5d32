//! The accept loops: `TCP_NODELAY` on every socket, one connection limit shared by the plain
//! and the TLS listener, one task per connection. A TLS connection's handshake counts toward
//! its `handshake_timeout`, as the AMQP header, SASL and `open` do.

use std::sync::Arc;

use fe2o3_amqp::types::definitions::AmqpError;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use crate::amqp::connection::{self, Shared};
use crate::amqp::link::amqp_error;
use crate::metrics::{self, Held};
use crate::shutdown::Shutdown;

/// What every accept loop shares.
#[derive(Clone)]
pub struct Acceptance {
    /// What every connection shares.
    pub shared: Arc<Shared>,
    /// One permit per connection, `max_connections` in all.
    pub permits: Arc<Semaphore>,
    /// The configured limit, for the refusal's description.
    pub max_connections: usize,
    /// Shutdown signal and task tracker.
    pub shutdown: Shutdown,
}

/// Accepts connections on `listener` until shutdown; with `tls`, each socket's TLS handshake
/// comes first. Connections over `max_connections` are answered with a `close` carrying
/// `amqp:resource-limit-exceeded`.
pub async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, acceptance: Acceptance) {
    let shutdown = acceptance.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.token.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                // Out of file descriptors and the like: keep serving the others.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
        let permit = acceptance.permits.clone().try_acquire_owned().ok();
        let span = tracing::info_span!(
            "connection",
            %peer,
            tls = tls.is_some(),
            container = tracing::field::Empty
        );
        let task = serve(stream, tls.clone(), permit, acceptance.clone());
        shutdown.tracker.spawn(task.instrument(span));
    }
}

/// Serves one accepted socket, through TLS when `tls` is set, holding its `permit` (none: the
/// client is refused).
async fn serve(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    permit: Option<OwnedSemaphorePermit>,
    acceptance: Acceptance,
) {
    let deadline = Instant::now() + acceptance.shared.handshake_timeout;
    let broker = metrics::broker();
    broker.connections_accepted.inc();
    let _open = Held::one(&broker.connections);
    let refuse = permit.is_none().then(|| {
        amqp_error(
            AmqpError::ResourceLimitExceeded,
            format!(
                "the broker accepts at most {} connections",
                acceptance.max_connections
            ),
        )
    });
    let (shared, token) = (acceptance.shared, acceptance.shutdown.token.child_token());
    match tls {
        None => {
            connection::serve(stream.into_split(), shared, refuse, deadline, token).await;
        }
        Some(acceptor) => {
            let stream = match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::info!(%error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::info!("TLS handshake not finished within the handshake timeout");
                    return;
                }
            };
            connection::serve(tokio::io::split(stream), shared, refuse, deadline, token).await;
        }
    }
    drop(permit);
}
