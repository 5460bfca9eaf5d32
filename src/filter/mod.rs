//! Topic subscription rules: the filter and action language of Azure Service Bus.
//!
//! What rules read: a [`MessageView`] of each message, with its application property
//! [`Value`]s.

mod value;
mod view;

pub use value::Value;
pub use view::{MessageView, SystemProperty};
