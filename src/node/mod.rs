//! What links attach to: the address router and the Service Bus wire names.

pub mod router;
pub mod wire;
