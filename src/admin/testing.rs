//! `[testing]`'s calls on the administration endpoint, for a broker under a test suite:
//! `POST /$testing/reset` brings the namespace back to what the config declares. Authorized
//! as the management API is (Manage); answered 404 when the feature is off.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::{api, respond, Admin};

/// The path of the reset.
pub const RESET_PATH: &str = "/$testing/reset";

/// Answers a request to a `/$testing/` path.
pub async fn handle(admin: &Admin, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Err(detail) = api::authorize(admin, &request, "") {
        return api::error(StatusCode::UNAUTHORIZED, detail);
    }
    match (request.method(), request.uri().path()) {
        (&Method::POST, RESET_PATH) if admin.testing_reset => reset(admin).await,
        (_, RESET_PATH) if admin.testing_reset => api::error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{RESET_PATH} is asked with POST"),
        ),
        (_, RESET_PATH) => api::error(
            StatusCode::NOT_FOUND,
            "the reset is off: [testing] reset = true (or --testing reset) turns it on".into(),
        ),
        (_, path) => api::error(
            StatusCode::NOT_FOUND,
            format!("{path} is no testing call (there is {RESET_PATH})"),
        ),
    }
}

/// Resets the namespace: 200 with the entities recreated and the time taken, once durable.
async fn reset(admin: &Admin) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let declared = (admin.registry.entries().into_iter())
        .filter_map(|entry| entry.file)
        .collect();
    match admin.registry.reset(declared).await {
        Ok(entities) => {
            let took_ms = started.elapsed().as_millis();
            tracing::warn!(entities, took_ms, "namespace reset (testing)");
            let body = serde_json::json!({ "entities": entities, "tookMs": took_ms });
            respond(StatusCode::OK, "application/json", body.to_string())
        }
        Err(error) => {
            tracing::error!(%error, "namespace reset failed");
            api::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the reset failed, the namespace may be partly reset: {error}"),
            )
        }
    }
}
