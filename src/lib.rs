//! Tidebus: an AMQP 1.0 message broker with Azure Service Bus semantics.
//!
//! Map of the crate (design.md §2):
//! - [`config`]: the TOML schema, the embedded default and validation.
//! - [`server`]: the accept loop; [`shutdown`]: one signal and a task tracker.
//! - [`amqp`]: our own AMQP 1.0 engine over fe2o3-amqp frames: protocol header and SASL,
//!   connections, sessions, links, and the message splice.
//! - [`node`]: what links attach to (the address router, Service Bus wire names).
//! - [`entity`]: queues as actors (handle, pure state, task, registry).
#![deny(missing_docs)]

pub mod amqp;
pub mod config;
pub mod entity;
pub mod node;
pub mod server;
pub mod shutdown;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::amqp::connection::Shared;
use crate::config::{Config, Durability};
use crate::entity::registry::Registry;
use crate::shutdown::Shutdown;

/// Runs the broker on a bound listener until `shutdown` resolves, then closes every
/// connection and waits for every task up to the configured shutdown timeout.
/// `on_ready` is called with the bound address once entities exist and the listener accepts.
///
/// # Errors
/// Fails when the listener's address cannot be read.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    if config.broker.durability != Durability::Memory {
        tracing::warn!(
            durability = ?config.broker.durability,
            "this version keeps messages in memory only: nothing survives a restart"
        );
    }
    let tasks = Shutdown::default();
    let registry = Registry::start(&config, &tasks.token, &tasks.tracker);
    let shared = Arc::new(Shared {
        registry,
        max_frame_size: config.broker.max_frame_size,
        idle_timeout: config.broker.idle_timeout,
        max_message_size: config.broker.max_message_size,
        next_link_id: AtomicU64::new(1),
    });
    let entities = shared.registry.len();
    let accept = tokio::spawn(server::accept_loop(
        listener,
        shared,
        config.broker.max_connections,
        tasks.clone(),
    ));
    tracing::info!(%address, entities, "listening");
    on_ready(address);
    shutdown.await;
    tracing::info!("shutting down");
    let finished = tasks.drain(config.broker.shutdown_timeout).await;
    let _ = accept.await;
    if finished {
        tracing::info!("stopped");
    } else {
        tracing::warn!(timeout = ?config.broker.shutdown_timeout, "some tasks did not stop in time");
    }
    Ok(())
}
