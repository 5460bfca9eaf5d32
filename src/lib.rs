//! Tidebus: an AMQP 1.0 message broker with Azure Service Bus semantics.
#![deny(missing_docs)]

pub mod config;
