//! Tidebus: an AMQP 1.0 message broker with Azure Service Bus semantics.
//!
//! Map of the crate (design.md §2):
//! - [`config`]: the TOML schema (and the emulator's `Config.json`), the embedded default and
//!   validation; [`reload`]: a changed file applied while running (SIGHUP).
//! - [`transport`]: the accept loops and the transports they serve (plain AMQP, TLS,
//!   WebSockets), told apart by a connection's first byte; [`shutdown`]: one signal and a task
//!   tracker.
//! - [`auth`]: shared access policies, tokens and SASL PLAIN credentials, and what each
//!   connection may do.
//! - [`amqp`]: our own AMQP 1.0 engine over fe2o3-amqp frames: protocol header and SASL,
//!   connections, sessions that keep the books, and the link roles they dispatch to (attach,
//!   inbound, outbound, outcome, requests, and the transaction coordinator).
//! - [`message`]: the message codec (inspect on arrival, the header/annotation splice on the
//!   way out); [`encoding`]: the bounded check of AMQP encodings every client byte passes.
//! - [`clock`]: wall-clock milliseconds.
//! - [`node`]: what links attach to (the address router, `$cbs` and `$management` requests);
//!   [`wire`]: every Service Bus wire name and the entity path of an address, a leaf.
//! - [`entity`]: queues and topics as actors (handle, the pure core, task, setup, registry).
//! - [`filter`]: the subscription rule language (correlation and SQL filters, SQL actions).
//! - [`store`]: the sled message log, versioned records and group commit.
//! - [`admin`]: the administration endpoint (Service Bus's ATOM management API over HTTPS,
//!   `/health`, `/metrics`); [`metrics`]: the broker-wide counters, a leaf (the per-entity
//!   figures are read at scrape time).
//! - [`notify`]: systemd's readiness and status notifications.
//! - [`sweeper`]: the TTL sweeper; [`reaper`]: auto-delete on idle; [`trimmer`]: gives freed
//!   heap memory back (background ticks).
#![deny(missing_docs)]

pub mod admin;
pub mod admin_call;
pub mod amqp;
pub mod auth;
pub mod clock;
pub mod config;
pub mod container;
pub mod encoding;
pub mod entity;
pub mod filter;
pub mod message;
pub mod metrics;
pub mod node;
pub mod notify;
pub mod reaper;
pub mod reload;
pub mod shutdown;
pub mod store;
pub mod sweeper;
pub mod transport;
pub mod trimmer;
pub mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::amqp::connection::Shared;
use crate::auth::Policies;
use crate::config::{Config, Durability, TestClock};
use crate::entity::registry::Registry;
use crate::shutdown::Shutdown;
use crate::store::{Store, StoreError};
use crate::transport::listener::{accept_loop, Acceptance, Transports};

/// Why the broker could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The message store could not be opened or recovered, or its last flush failed.
    #[error("message store: {0}")]
    Store(#[from] StoreError),
}

/// The bound sockets the broker serves. The plain and WebSocket listeners serve AMQP and AMQP
/// over WebSockets, each also inside TLS when there is a TLS acceptor; the TLS listener serves
/// both inside TLS only. Without a plain listener every listener requires TLS.
pub struct Listeners {
    /// The plain AMQP listener (`broker.listen`).
    pub plain: Option<TcpListener>,
    /// The TLS listener and its acceptor.
    pub tls: Option<(TcpListener, TlsAcceptor)>,
    /// The listeners of `broker.websocket_listen`: the ports the SDKs dial for WebSockets.
    pub websocket: Vec<TcpListener>,
    /// The administration endpoint's listener (HTTPS with the TLS listener's acceptor, when
    /// there is one).
    pub admin: Option<TcpListener>,
}

impl From<TcpListener> for Listeners {
    fn from(plain: TcpListener) -> Self {
        Listeners {
            plain: Some(plain),
            tls: None,
            websocket: Vec::new(),
            admin: None,
        }
    }
}

/// Where the listeners are bound, as `on_ready` learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The plain listener's address.
    pub plain: Option<SocketAddr>,
    /// The TLS listener's address.
    pub tls: Option<SocketAddr>,
    /// The WebSocket listeners' addresses.
    pub websocket: Vec<SocketAddr>,
    /// The administration endpoint's address.
    pub admin: Option<SocketAddr>,
}

/// How the start line names the listeners: `amqp 127.0.0.1:5672, amqps …, ws …, admin …`.
impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = (self.plain.iter().map(|addr| ("amqp", addr)))
            .chain(self.tls.iter().map(|addr| ("amqps", addr)))
            .chain(self.websocket.iter().map(|addr| ("ws", addr)))
            .chain(self.admin.iter().map(|addr| ("admin", addr)));
        for (i, (kind, addr)) in named.enumerate() {
            let separator = if i == 0 { "" } else { ", " };
            write!(f, "{separator}{kind} {addr}")?;
        }
        Ok(())
    }
}

/// Applies each reloaded config in turn until `stop`, logging what it did and kept.
async fn apply_reloads(
    registry: Arc<Registry>,
    mut running: Config,
    mut reloads: tokio::sync::mpsc::Receiver<Config>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let new = tokio::select! {
            _ = stop.cancelled() => return,
            new = reloads.recv() => match new {
                Some(new) => new,
                None => return,
            },
        };
        let (report, baseline) = reload::apply(&registry, &running, &new).await;
        for line in &report.applied {
            tracing::info!("reload: {line}");
        }
        for line in &report.kept {
            tracing::warn!("reload: {line}");
        }
        tracing::info!(
            applied = report.applied.len(),
            kept = report.kept.len(),
            "reload applied"
        );
        running = baseline;
    }
}

/// How often the service manager hears the broker's status.
const STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a stopping broker waits for its flusher thread to let go of the database.
const FLUSHER_EXIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Tells the service manager the connections and entities every [`STATUS_INTERVAL`], and pings
/// its watchdog when it asked for pings, until `stop`.
async fn report_status(
    notifier: Arc<notify::Notifier>,
    acceptance: Acceptance,
    stop: tokio_util::sync::CancellationToken,
) {
    let every = notifier
        .watchdog
        .map_or(STATUS_INTERVAL, |watchdog| watchdog.min(STATUS_INTERVAL));
    let mut ticks = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let connections = acceptance.max_connections - acceptance.permits.available_permits();
        let entities = acceptance.shared.registry.len();
        notifier.send(&format!(
            "STATUS={connections} connections, {entities} entities"
        ));
        if notifier.watchdog.is_some() {
            notifier.send("WATCHDOG=1");
        }
    }
}

/// Runs the broker on bound listeners until `shutdown` resolves, then closes every
/// connection, waits for every task up to the configured shutdown timeout and flushes the
/// store. `on_ready` is called with the bound addresses once every entity is recovered and the
/// listeners accept.
///
/// # Errors
/// A [`RunError`] when the store cannot be opened or recovered, or the final flush fails.
pub async fn run(
    config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(Bound),
) -> Result<(), RunError> {
    let (_, reloads) = tokio::sync::mpsc::channel(1);
    run_with_reloads(config, listeners, shutdown, reloads, on_ready).await
}

/// Like [`run`], applying each config that `reloads` brings (the daemon's SIGHUP) through
/// [`reload::apply`].
///
/// # Errors
/// As [`run`].
pub async fn run_with_reloads(
    config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()>,
    reloads: tokio::sync::mpsc::Receiver<Config>,
    on_ready: impl FnOnce(Bound),
) -> Result<(), RunError> {
    let starting = std::time::Instant::now();
    let listeners = listeners.into();
    let bound = Bound {
        plain: listeners
            .plain
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?,
        tls: listeners
            .tls
            .as_ref()
            .map(|(listener, _)| listener.local_addr())
            .transpose()?,
        websocket: listeners
            .websocket
            .iter()
            .map(TcpListener::local_addr)
            .collect::<Result<_, _>>()?,
        admin: listeners
            .admin
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?,
    };
    let tasks = Shutdown::default();
    let store = Store::open(&config.broker)?;
    if config.testing.clock == TestClock::Controlled {
        // The controlled clock never goes back, not even across a restart.
        if let Some(reached_ms) = store.test_clock()? {
            clock::move_to(reached_ms);
        }
    }
    let (flusher, flusher_thread) = store.flusher()?.unzip();
    let interval = (config.broker.durability == Durability::Interval)
        .then_some(flusher.clone())
        .flatten();
    if let Some(flusher) = interval {
        tasks.tracker.spawn(store::commit::flush_every(
            flusher,
            config.broker.flush_interval,
            tasks.token.clone(),
        ));
    }
    let registry = Arc::new(Registry::start(
        &config,
        &store,
        flusher.as_ref(),
        &tasks.token,
        &tasks.tracker,
    )?);
    // JMS non-durable subscriptions live as long as their links: none outlives the broker.
    match registry
        .remove_subscriptions_named(amqp::jms::is_non_durable)
        .await
    {
        Ok(0) => {}
        Ok(gone) => tracing::info!(
            subscriptions = gone,
            "JMS non-durable subscriptions of the last run deleted"
        ),
        Err(error) => tracing::error!(%error, "JMS non-durable subscriptions of the last run kept"),
    }
    // What the start wrote (recovery, entity trees, declarations) is on disk before the broker
    // says it is ready.
    if let Some(flusher) = flusher {
        flusher
            .request(0)
            .await
            .map_err(|_| StoreError::Sled("the flusher has stopped".into()))??;
    }
    tasks
        .tracker
        .spawn(sweeper::run(registry.clone(), tasks.token.clone()));
    tasks
        .tracker
        .spawn(reaper::run(registry.clone(), tasks.token.clone()));
    tasks.tracker.spawn(trimmer::run(tasks.token.clone()));
    let entity_policies = {
        let registry = registry.clone();
        Arc::new(move || registry.entity_policies())
    };
    let shared = Arc::new(Shared {
        registry,
        max_frame_size: config.broker.max_frame_size,
        idle_timeout: config.broker.idle_timeout,
        max_message_size: config.broker.max_message_size,
        handshake_timeout: config.broker.handshake_timeout,
        connection_buffer: usize::try_from(config.broker.connection_buffer).unwrap_or(usize::MAX),
        write_timeout: config.broker.write_timeout,
        consumer_window: config.broker.consumer_window,
        max_links_per_connection: config.broker.max_links_per_connection,
        transaction_timeout: config.broker.transaction_timeout,
        next_link_id: AtomicU64::new(1),
        policies: Arc::new(Policies::live(&config, entity_policies)),
        jms: amqp::jms::Links::default(),
    });
    let entities = shared.registry.len();
    let acceptance = Acceptance {
        shared,
        permits: Arc::new(Semaphore::new(config.broker.max_connections)),
        max_connections: config.broker.max_connections,
        shutdown: tasks.clone(),
    };
    let admin_tls = listeners.tls.as_ref().map(|(_, acceptor)| acceptor.clone());
    let admin = listeners.admin.map(|listener| {
        let admin = Arc::new(admin::Admin {
            registry: acceptance.shared.registry.clone(),
            policies: acceptance.shared.policies.clone(),
            max_message_size: config.broker.max_message_size,
            started_ms: clock::real_ms(),
            https: admin_tls.is_some(),
            shutdown: tasks.token.clone(),
            max_connections: config.admin.max_connections,
            request_timeout: config.admin.request_timeout,
            hosts: config
                .admin
                .hosts
                .iter()
                .cloned()
                .chain(admin::machine_name())
                .collect(),
            testing: config.testing.clone(),
            clock_moves: tokio::sync::Mutex::new(()),
        });
        tokio::spawn(admin::accept_loop(
            listener,
            admin_tls,
            admin,
            acceptance.clone(),
        ))
    });
    // The TLS listener stays TLS only, so a plain listener kept on loopback does not open
    // plaintext on the TLS port; the WebSocket ones serve plaintext when the plain one does.
    let acceptor = listeners.tls.as_ref().map(|(_, acceptor)| acceptor.clone());
    let transports = |plaintext| Transports {
        tls: acceptor.clone(),
        plaintext,
    };
    let plaintext = listeners.plain.is_some();
    let accepts: Vec<_> = listeners
        .plain
        .map(|listener| (listener, transports(true)))
        .into_iter()
        .chain(
            listeners
                .tls
                .map(|(listener, _)| (listener, transports(false))),
        )
        .chain(
            listeners
                .websocket
                .into_iter()
                .map(|listener| (listener, transports(plaintext))),
        )
        .map(|(listener, transports)| {
            let accept = accept_loop(listener, transports, acceptance.clone());
            tokio::spawn(accept)
        })
        .chain(admin)
        .collect();
    let data_dir = match config.broker.durability {
        Durability::Memory => "none (memory)".to_owned(),
        _ => config.broker.data_dir.display().to_string(),
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        listeners = %bound,
        data_dir,
        durability = config.broker.durability.name(),
        entities,
        messages = acceptance.shared.registry.recovered_messages(),
        allow_anonymous = config.broker.allow_anonymous,
        took = ?starting.elapsed(),
        "started"
    );
    for feature in config.testing.features() {
        tracing::warn!(
            feature,
            "testing feature on: for a broker under a test suite, never one holding data to keep"
        );
    }
    if config.testing.clock == TestClock::Controlled {
        let now_ms = clock::now_ms();
        tracing::warn!(
            now = %admin::atom::time(now_ms),
            ahead_ms = clock::ahead_ms(),
            "the broker's clock is controlled: a test may move it forward (/$testing/clock)"
        );
    }
    tasks.tracker.spawn(apply_reloads(
        acceptance.shared.registry.clone(),
        config.clone(),
        reloads,
        tasks.token.clone(),
    ));
    on_ready(bound);
    let notifier = notify::Notifier::from_env().map(Arc::new);
    if let Some(notifier) = &notifier {
        notifier.send("READY=1");
        tasks.tracker.spawn(report_status(
            notifier.clone(),
            acceptance.clone(),
            tasks.token.clone(),
        ));
    }
    shutdown.await;
    tracing::info!("shutting down");
    if let Some(notifier) = &notifier {
        notifier.send("STOPPING=1");
    }
    let finished = tasks.drain(config.broker.shutdown_timeout).await;
    for accept in accepts {
        let _ = accept.await;
    }
    acceptance.shared.registry.close();
    if !finished {
        tracing::warn!(timeout = ?config.broker.shutdown_timeout, "some tasks did not stop in time");
    }
    tokio::task::spawn_blocking(move || {
        store.flush_blocking()?;
        drop(store);
        // Stopped means the database is closed, so that it can be opened again at once; a
        // task that did not stop in time may still hold the flusher, and is not waited for.
        if let Some(thread) = flusher_thread.filter(|_| finished) {
            if !thread.wait(FLUSHER_EXIT_TIMEOUT) {
                tracing::warn!("the flusher thread did not end; the database may stay open");
            }
        }
        Ok::<(), StoreError>(())
    })
    .await
    .map_err(|e| StoreError::Sled(format!("final flush task: {e}")))??;
    tracing::info!("stopped");
    Ok(())
}
