//! The AMQP 1.0 protocol engine: our own connection, session and link state machines over
//! frames we read and write ourselves, with fe2o3-amqp's types (design.md D1).

pub mod attach;
pub mod connection;
pub mod coordinator;
#[cfg(test)]
mod fixtures;
pub mod frames;
pub mod handshake;
pub mod hot;
pub mod inbound;
pub mod jms;
pub mod link;
pub mod outbound;
pub mod outbox;
pub mod outcome;
pub mod requests;
pub mod session;
pub mod temporary;
pub mod transactions;
pub mod via;
