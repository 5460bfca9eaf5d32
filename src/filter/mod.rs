//! Topic subscription rules: the filter and action language of Azure Service Bus.
//!
//! A [`CorrelationFilter`] selects messages by equality on named properties. Filters read a
//! [`MessageView`] of each message, with its application property [`Value`]s.

mod correlation;
mod value;
mod view;

pub use correlation::{CorrelationFilter, EmptyCorrelationFilter};
pub use value::Value;
pub use view::{MessageView, SystemProperty};
