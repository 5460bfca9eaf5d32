//! The accept loop: `TCP_NODELAY` on every socket, a connection limit, one task per connection.

use std::sync::Arc;

use fe2o3_amqp::types::definitions::AmqpError;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::amqp::connection::{self, Shared};
use crate::amqp::link::amqp_error;
use crate::shutdown::Shutdown;

/// Accepts connections until shutdown. Connections over `max_connections` are answered with
/// a `close` carrying `amqp:resource-limit-exceeded`.
pub async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    max_connections: usize,
    shutdown: Shutdown,
) {
    let permits = Arc::new(Semaphore::new(max_connections));
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
        let permit = permits.clone().try_acquire_owned().ok();
        let refuse = permit.is_none().then(|| {
            amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!("the broker accepts at most {max_connections} connections"),
            )
        });
        let span = tracing::info_span!("connection", %peer);
        let task = connection::serve(stream, shared.clone(), refuse, shutdown.token.child_token());
        shutdown.tracker.spawn(
            async move {
                task.await;
                drop(permit);
            }
            .instrument(span),
        );
    }
}
