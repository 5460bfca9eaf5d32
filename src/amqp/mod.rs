//! The AMQP 1.0 protocol engine: our own connection, session and link state machines over
//! fe2o3-amqp's frame transport (design.md D1).

pub mod connection;
pub mod header;
pub mod link;
pub mod message;
pub mod sasl;
pub mod session;
