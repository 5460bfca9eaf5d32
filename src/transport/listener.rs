//! The accept loops: `TCP_NODELAY` on every socket, one connection limit shared by every
//! listener, one task per connection, served in the transport its first byte opens
//! (`sniff`): TLS (when `[broker.tls]` is set), a WebSocket upgrade
//! ([`super::websocket`]) or AMQP; inside TLS the first byte tells AMQP from a WebSocket
//! again. A TLS handshake and a WebSocket upgrade count toward the connection's
//! `handshake_timeout`, as the AMQP header, SASL and `open` do.

use std::sync::Arc;

use fe2o3_amqp::types::definitions::AmqpError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use super::sniff::{Opening, Prefixed};
use super::websocket;
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

/// The transports a listener serves besides WebSockets, which every listener serves.
#[derive(Clone)]
pub struct Transports {
    /// TLS, when `[broker.tls]` is set.
    pub tls: Option<TlsAcceptor>,
    /// Whether clients may connect without TLS (the broker has a plain listener).
    pub plaintext: bool,
}

/// Which transport serves an accepted connection, before any TLS.
#[derive(Debug, PartialEq, Eq)]
enum Route<A> {
    /// TLS, through the listener's acceptor `A`.
    Tls(A),
    /// None: the listener serves no plaintext and has no TLS acceptor.
    Refused,
    /// A WebSocket upgrade, in plaintext.
    WebSocket,
    /// AMQP, in plaintext.
    Amqp,
}

/// The route of a connection whose first byte says `opening`, on a listener with the TLS
/// acceptor `tls` that serves plaintext or not. A TLS-only listener hands whatever came to
/// the acceptor, which answers anything but a ClientHello with an alert; a plaintext listener
/// without TLS hands a ClientHello to the AMQP engine, which answers with its protocol header.
fn route<A>(opening: Opening, tls: Option<A>, plaintext: bool) -> Route<A> {
    match (opening, tls) {
        (opening, Some(acceptor)) if opening == Opening::Tls || !plaintext => Route::Tls(acceptor),
        _ if !plaintext => Route::Refused,
        (Opening::Http, _) => Route::WebSocket,
        _ => Route::Amqp,
    }
}

/// Accepts connections on `listener` until shutdown, serving what `transports` allow.
/// Connections over `max_connections` are answered with a `close` carrying
/// `amqp:resource-limit-exceeded`.
pub async fn accept_loop(listener: TcpListener, transports: Transports, acceptance: Acceptance) {
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
            tls = tracing::field::Empty,
            websocket = tracing::field::Empty,
            container = tracing::field::Empty
        );
        let task = serve(stream, transports.clone(), permit, acceptance.clone());
        shutdown.tracker.spawn(task.instrument(span));
    }
}

/// Serves one accepted socket in whichever transport its first bytes open, holding its
/// `permit` (none: the client is refused).
async fn serve(
    stream: TcpStream,
    transports: Transports,
    permit: Option<OwnedSemaphorePermit>,
    acceptance: Acceptance,
) {
    let deadline = Instant::now() + acceptance.shared.handshake_timeout;
    let broker = metrics::broker();
    broker.connections_accepted.inc();
    let _open = Held::one(&broker.connections);
    let engine = Engine {
        refuse: permit.is_none().then(|| {
            amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "the broker accepts at most {} connections",
                    acceptance.max_connections
                ),
            )
        }),
        deadline,
        acceptance,
    };
    let mut first = [0u8; 1];
    let opening = match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
        Ok(Ok(1)) => Opening::of(first[0]),
        Ok(Ok(_)) => return,
        Ok(Err(error)) => {
            tracing::debug!(%error, "read failed before the first byte");
            return;
        }
        Err(_) => {
            tracing::info!("nothing received within the handshake timeout");
            return;
        }
    };
    match route(opening, transports.tls, transports.plaintext) {
        Route::Tls(acceptor) => {
            tracing::Span::current().record("tls", true);
            let accepted = tokio::time::timeout_at(deadline, acceptor.accept(stream)).await;
            let stream = match accepted {
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
            engine.serve_inside_tls(stream).await;
        }
        Route::Refused => tracing::info!("refused: not TLS, and TLS is not set up"),
        Route::WebSocket => engine.serve_websocket(stream).await,
        Route::Amqp => engine.serve_amqp(stream.into_split()).await,
    }
    drop(permit);
}

/// What the connection engine needs once the transport is set up.
struct Engine {
    /// Set when the client is over the connection limit: the error its `close` carries.
    refuse: Option<fe2o3_amqp::types::definitions::Error>,
    /// When the handshake (transport, AMQP header, SASL and `open`) must be done.
    deadline: Instant,
    /// What every connection shares.
    acceptance: Acceptance,
}

impl Engine {
    /// Serves AMQP over the two halves of a stream.
    async fn serve_amqp<R, W>(self, halves: (R, W))
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let token = self.acceptance.shutdown.token.child_token();
        connection::serve(
            halves,
            self.acceptance.shared,
            self.refuse,
            self.deadline,
            token,
        )
        .await;
    }

    /// Serves a TLS stream: AMQP, or a WebSocket when its first byte opens an HTTP request.
    async fn serve_inside_tls<S>(self, mut stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut first = [0u8; 1];
        let read = tokio::time::timeout_at(self.deadline, stream.read(&mut first)).await;
        match read {
            Ok(Ok(1)) => {}
            Ok(Ok(_)) | Ok(Err(_)) => return,
            Err(_) => {
                tracing::info!("nothing received inside TLS within the handshake timeout");
                return;
            }
        }
        let stream = Prefixed::new(first[0], stream);
        match Opening::of(first[0]) {
            Opening::Http => self.serve_websocket(stream).await,
            _ => self.serve_amqp(tokio::io::split(stream)).await,
        }
    }

    /// Upgrades an HTTP request to a WebSocket and serves AMQP inside it.
    async fn serve_websocket<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        tracing::Span::current().record("websocket", true);
        let max_message = self.acceptance.shared.max_frame_size as usize;
        let upgraded =
            tokio::time::timeout_at(self.deadline, websocket::upgrade(stream, max_message)).await;
        match upgraded {
            Ok(Ok(socket)) => self.serve_amqp(tokio::io::split(socket)).await,
            Ok(Err(error)) => tracing::info!(%error, "WebSocket upgrade refused"),
            Err(_) => tracing::info!("WebSocket upgrade not finished within the handshake timeout"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every opening on every kind of listener: with TLS and plaintext (the plain and
    /// WebSocket listeners when `[broker.tls]` is set), TLS only (the TLS listener), plaintext
    /// only, and neither.
    #[test]
    fn each_opening_takes_the_route_its_listener_allows() {
        use Opening::{Amqp, Http, Tls};
        let cases = [
            // TLS and plaintext: only a ClientHello goes to TLS.
            (Tls, Some("acceptor"), true, Route::Tls("acceptor")),
            (Http, Some("acceptor"), true, Route::WebSocket),
            (Amqp, Some("acceptor"), true, Route::Amqp),
            // TLS only: everything goes to the acceptor, which answers with an alert.
            (Tls, Some("acceptor"), false, Route::Tls("acceptor")),
            (Http, Some("acceptor"), false, Route::Tls("acceptor")),
            (Amqp, Some("acceptor"), false, Route::Tls("acceptor")),
            // Plaintext only: a ClientHello meets the AMQP engine's protocol header.
            (Tls, None, true, Route::Amqp),
            (Http, None, true, Route::WebSocket),
            (Amqp, None, true, Route::Amqp),
            // Neither: nothing is served.
            (Tls, None, false, Route::Refused),
            (Http, None, false, Route::Refused),
            (Amqp, None, false, Route::Refused),
        ];
        for (opening, tls, plaintext, expected) in cases {
            assert_eq!(
                route(opening, tls, plaintext),
                expected,
                "{opening:?} with TLS {tls:?}, plaintext {plaintext}"
            );
        }
    }
}
