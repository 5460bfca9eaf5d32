//! The AMQP 1.0 protocol engine: our own connection, session and link state machines over
//! frames we read and write ourselves, with fe2o3-amqp's types (design.md D1).

pub mod connection;
pub mod frames;
pub mod handshake;
pub mod hot;
pub mod link;
pub mod session;
