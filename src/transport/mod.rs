//! The transports: how a client's bytes reach the one AMQP connection engine (design D11).
//! Every listener serves every transport it is allowed: plain AMQP, TLS, and AMQP over
//! WebSockets, plain or inside TLS, told apart by a connection's first byte.
//!
//! - [`listener`]: the accept loops, the connection limit, one task per connection, and the
//!   transport each connection is served in.
//! - `sniff`: what a connection's first byte says it speaks.
//! - [`tls`]: the TLS acceptor from `[broker.tls]`, and `gen-cert`'s development certificates.
//! - [`websocket`]: the WebSocket upgrade, and a WebSocket as a byte stream.

pub mod listener;
mod sniff;
pub mod tls;
pub mod websocket;
