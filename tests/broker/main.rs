//! The one integration-test binary: a real broker, real clients.

mod fe2o3_client;
mod support;
