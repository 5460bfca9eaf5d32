//! The administration endpoint (`[admin] listen`, the emulator's port 5300): Service Bus's
//! ATOM management API over HTTP/1.1, HTTPS with the broker's certificate when `[broker.tls]`
//! is set (the SDKs' administration clients speak HTTPS only). It has a connection limit of
//! its own (`[admin] max_connections`), so HTTP clients cannot take the AMQP listeners'
//! slots, and shares the broker's shutdown. A request must arrive whole within
//! `[admin] request_timeout` and name in `Host` a name the endpoint serves; it is authorized
//! as Service Bus does, with a `SharedAccessSignature` in `Authorization` granting Manage.
//!
//! `atom` writes and reads the documents; `api` maps requests to the registry; `observe`
//! answers `/health` and `/metrics`; `console` serves the web console and its JSON calls,
//! `peeked` shows a peeked message as JSON, `testing` answers `[testing]`'s calls.

mod api;
pub mod atom;
mod console;
mod observe;
pub mod peeked;
pub mod rules;
mod scrape;
mod testing;

pub use testing::RESET_PATH;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::auth::Policies;
use crate::config::TestingConfig;
use crate::entity::registry::Registry;
use crate::transport::listener::Acceptance;

/// Largest request body read.
const MAX_BODY: usize = 1024 * 1024;

/// What every administration request needs.
pub struct Admin {
    /// The entities.
    pub registry: Arc<Registry>,
    /// Who may manage them.
    pub policies: Arc<Policies>,
    /// Largest message the broker accepts, reported as `MaxMessageSizeInKilobytes`.
    pub max_message_size: u64,
    /// When the broker started (the namespace's creation time, and the times of an entity
    /// that went while it was described), in ms since the Unix epoch by the machine's clock.
    pub started_ms: i64,
    /// Whether the endpoint speaks HTTPS (the scheme of the URLs it writes).
    pub https: bool,
    /// Cancelled when the broker starts shutting down (`/health` answers 503 then).
    pub shutdown: CancellationToken,
    /// Most connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a whole request, head and body.
    pub request_timeout: Duration,
    /// Host names `Host` may name besides loopback names and IP addresses (lowercase; `*`
    /// for any), the machine's own name among them.
    pub hosts: Vec<String>,
    /// The testing features on (`[testing]`): the reset, the controlled clock.
    pub testing: TestingConfig,
    /// Taken while the controlled clock moves, so moves are one at a time.
    pub clock_moves: tokio::sync::Mutex<()>,
}

impl Admin {
    /// Whether `host` (a `Host` header: a name or address, with or without a port) is one
    /// this endpoint serves: an IP address, `localhost` or a name under it, or one of
    /// [`Admin::hosts`]. A DNS-rebinding page names its own host, which is none of these.
    fn serves_host(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            // An IPv6 address, with or without a port.
            Some(bracketed) => {
                return bracketed
                    .split_once(']')
                    .is_some_and(|(address, _)| address.parse::<std::net::Ipv6Addr>().is_ok())
            }
            None => host
                .rsplit_once(':')
                .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
                .map_or(host, |(name, _)| name),
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.hosts.iter().any(|host| host == "*" || *host == name)
    }
}

/// The machine's own host name, lowercase, if it has one.
pub fn machine_name() -> Option<String> {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let result = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let end = buffer.iter().position(|b| *b == 0)?;
    (result == 0 && end > 0).then(|| String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase())
}

/// Accepts administration connections until shutdown; at most [`Admin::max_connections`] are
/// served at once (beyond it, 503).
pub async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    admin: Arc<Admin>,
    acceptance: Acceptance,
) {
    let shutdown = acceptance.shutdown.clone();
    let permits = Arc::new(Semaphore::new(admin.max_connections));
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = shutdown.token.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let permit = permits.clone().try_acquire_owned().ok();
        let (admin, tls, token) = (admin.clone(), tls.clone(), shutdown.token.child_token());
        let deadline = acceptance.shared.handshake_timeout;
        let span = tracing::info_span!("admin", %peer);
        shutdown.tracker.spawn(
            async move {
                let full = permit.is_none();
                match tls {
                    None => serve(stream, admin, full, token).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => serve(stream, admin, full, token).await,
                            Ok(Err(error)) => tracing::info!(%error, "TLS handshake failed"),
                            Err(_) => tracing::info!("TLS handshake not finished in time"),
                        }
                    }
                }
                drop(permit);
            }
            .instrument(span),
        );
    }
}

/// Serves HTTP/1.1 requests on one connection until it closes or the broker stops; `full`:
/// every request is answered 503 and the connection closed (the connection limit is reached).
async fn serve<S>(stream: S, admin: Arc<Admin>, full: bool, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let request_timeout = admin.request_timeout;
    let service = service_fn(move |request: Request<Incoming>| {
        let admin = admin.clone();
        let deadline = tokio::time::Instant::now() + admin.request_timeout;
        async move {
            // Every body is read before its request is answered, refused ones too: an answer
            // sent before the body ends the connection after it without saying so, and a
            // client reusing the connection would find it closed.
            let response = match full {
                true => closing(api::busy()),
                false => match whole(request, deadline).await {
                    Ok(request) => route(&admin, request).await,
                    Err(detail) => closing(api::error(StatusCode::BAD_REQUEST, detail)),
                },
            };
            Ok::<Response<Full<Bytes>>, Infallible>(response)
        }
    });
    let connection = http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(request_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "admin connection ended");
            }
        }
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
        }
    }
}

/// The request with its whole body, at most [`MAX_BODY`] bytes, which must have arrived by
/// `deadline` ([`Admin::request_timeout`] after the head did; the head has as long again,
/// counted by hyper).
///
/// # Errors
/// Why the body does not read: too long, cut off, or not there in time.
async fn whole(
    request: Request<Incoming>,
    deadline: tokio::time::Instant,
) -> Result<Request<Bytes>, String> {
    let (head, body) = request.into_parts();
    let read = tokio::time::timeout_at(deadline, Limited::new(body, MAX_BODY).collect())
        .await
        .map_err(|_| "the body does not read: it did not arrive in time".to_owned())?
        .map_err(|e| format!("the body does not read: {e}"))?;
    Ok(Request::from_parts(head, read.to_bytes()))
}

/// `response` saying the connection ends after it: the rest of the request may not have
/// been read, so the connection cannot serve another.
fn closing(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Sends a request to what answers its path: `/health`, `/metrics` and the console's page `/`
/// (asked without an `api-version`, which every Service Bus client sends: an entity may be
/// named `health`), the console's files and calls (`/$console/...`: no entity name starts
/// with `$`), or the management API.
async fn route(admin: &Admin, request: Request<Bytes>) -> Response<Full<Bytes>> {
    let plain_get = request.method() == Method::GET
        && !request
            .uri()
            .query()
            .is_some_and(|query| query.contains("api-version="));
    let host = request
        .headers()
        .get(HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or_default();
    if !admin.serves_host(host) {
        return api::error(
            StatusCode::BAD_REQUEST,
            format!(
                "this endpoint does not serve the host {host:?}; name it in [admin] hosts to \
                 reach the broker by that name"
            ),
        );
    }
    let path = request.uri().path();
    match (plain_get, path) {
        (true, "/health") => observe::health(admin),
        (true, "/metrics") => observe::metrics(admin).await,
        (true, "/") => console::handle(admin, request).await,
        _ if path.starts_with("/$console/") => console::handle(admin, request).await,
        _ if path.starts_with("/$testing/") => testing::handle(admin, request).await,
        _ => api::handle(admin, request).await,
    }
}

/// A response with a body of `content_type`.
fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
