//! `[testing]`'s calls on the administration endpoint, for a broker under a test suite, each
//! authorized as the management API is (Manage) and answered 404 when its feature is off:
//! - `POST /$testing/reset` brings the namespace back to what the config declares;
//! - `GET /$testing/clock` reads the broker's clock, `POST /$testing/clock/advance` with
//!   `{"by": "24h"}` moves it forward by a duration, `POST /$testing/clock` with
//!   `{"to": "2030-01-01T00:00:00Z"}` moves it forward to a time (a controlled clock never
//!   goes back). A move answers once everything due at the new time has happened.

use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;

use super::{api, atom, respond, Admin};
use crate::clock::{self, millis};
use crate::config::{parse_duration, TestClock};

/// The path of the reset.
pub const RESET_PATH: &str = "/$testing/reset";
/// The path of the clock: read it (GET), or move it to a time (POST).
pub const CLOCK_PATH: &str = "/$testing/clock";
/// The path that moves the clock forward by a duration (POST).
pub const ADVANCE_PATH: &str = "/$testing/clock/advance";

/// Answers a request to a `/$testing/` path.
pub async fn handle(admin: &Admin, request: Request<Bytes>) -> Response<Full<Bytes>> {
    if let Err(detail) = api::authorize(admin, &request, "") {
        return api::error(StatusCode::UNAUTHORIZED, detail);
    }
    let path = request.uri().path().to_owned();
    let controlled = admin.testing.clock == TestClock::Controlled;
    match (request.method(), path.as_str()) {
        (&Method::POST, RESET_PATH) if admin.testing.reset => reset(admin).await,
        (_, RESET_PATH) if admin.testing.reset => only_post(RESET_PATH),
        (_, RESET_PATH) => api::error(
            StatusCode::NOT_FOUND,
            "the reset is off: [testing] reset = true (or --testing reset) turns it on".into(),
        ),
        (&Method::GET, CLOCK_PATH) if controlled => clock_now(StatusCode::OK, None),
        (&Method::POST, CLOCK_PATH | ADVANCE_PATH) if controlled => {
            let by = path == ADVANCE_PATH;
            match target(request.body(), by) {
                Ok(target) => move_clock(admin, target).await,
                Err(detail) => api::error(StatusCode::BAD_REQUEST, detail),
            }
        }
        (_, ADVANCE_PATH) if controlled => only_post(ADVANCE_PATH),
        (_, CLOCK_PATH) if controlled => api::error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{CLOCK_PATH} is read with GET and moved with POST"),
        ),
        (_, CLOCK_PATH | ADVANCE_PATH) => api::error(
            StatusCode::NOT_FOUND,
            "the controlled clock is off: [testing] clock = \"controlled\" (or --testing clock) \
             turns it on"
                .into(),
        ),
        (_, path) => api::error(
            StatusCode::NOT_FOUND,
            format!(
                "{path} is no testing call (there are {RESET_PATH}, {CLOCK_PATH} and \
                 {ADVANCE_PATH})"
            ),
        ),
    }
}

/// The refusal of another method than POST.
fn only_post(path: &str) -> Response<Full<Bytes>> {
    api::error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{path} is asked with POST"),
    )
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

/// Where a move asks the clock to go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Forward by this long.
    By(Duration),
    /// To this time, in ms since the Unix epoch.
    To(i64),
}

/// A move's body as written: `{"by": "<duration>"}` to advance, `{"to": "<RFC 3339 UTC>"}`
/// to set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Move {
    by: Option<String>,
    to: Option<String>,
}

/// Reads a move's body: `by` (humantime such as `"24h"`, or ISO 8601 such as `"P1D"`) for
/// [`ADVANCE_PATH`] (`advance`), `to` (RFC 3339 in UTC, `"2030-01-01T00:00:00Z"`) for
/// [`CLOCK_PATH`].
///
/// # Errors
/// Why the body is no such move.
fn target(body: &[u8], advance: bool) -> Result<Target, String> {
    let written: Move = serde_json::from_slice(body).map_err(|e| {
        let wanted = if advance {
            r#"{"by": "24h"}"#
        } else {
            r#"{"to": "2030-01-01T00:00:00Z"}"#
        };
        format!("the body is not a move of the clock such as {wanted}: {e}")
    })?;
    match (advance, written.by, written.to) {
        (true, Some(by), None) => parse_duration(&by).map(Target::By),
        (false, None, Some(to)) => humantime::parse_rfc3339_weak(&to)
            .map_err(|e| {
                format!(
                    "\"to\" is no time in RFC 3339 UTC such as 2030-01-01T00:00:00Z: {to:?} ({e})"
                )
            })
            .and_then(|at| {
                let ms = at
                    .duration_since(UNIX_EPOCH)
                    .map_err(|_| format!("{to:?} is before 1970"))?;
                Ok(Target::To(millis(ms)))
            }),
        (true, _, _) => Err(format!(
            r#"{ADVANCE_PATH} takes "by", a duration: {{"by": "24h"}}"#
        )),
        (false, _, _) => Err(format!(
            r#"{CLOCK_PATH} takes "to", a time: {{"to": "2030-01-01T00:00:00Z"}} ({ADVANCE_PATH} takes "by")"#
        )),
    }
}

/// How far `target` moves the clock from `now_ms`; refuses a time the clock has passed (it
/// never goes back).
///
/// # Errors
/// Why the clock cannot go there.
fn distance(target: Target, now_ms: i64) -> Result<i64, String> {
    match target {
        Target::By(by) => Ok(millis(by)),
        Target::To(to) if to >= now_ms => Ok(to - now_ms),
        Target::To(to) => Err(format!(
            "the broker's clock is at {}, past {}: a controlled clock never goes back",
            atom::time(now_ms),
            atom::time(to)
        )),
    }
}

/// Moves the clock; answers as [`clock_now`] once what is due at the new time has happened
/// (the entities' clock work, then auto-delete on idle). Moves are taken one at a time.
async fn move_clock(admin: &Admin, target: Target) -> Response<Full<Bytes>> {
    let _one_at_a_time = admin.clock_moves.lock().await;
    let started = Instant::now();
    let by_ms = match distance(target, clock::now_ms()) {
        Ok(by_ms) => by_ms,
        Err(detail) => return api::error(StatusCode::CONFLICT, detail),
    };
    if let Err(error) = admin.registry.move_clock(by_ms).await {
        tracing::error!(%error, "the clock did not move");
        return api::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the clock did not move: {error}"),
        );
    }
    crate::reaper::reap_once(&admin.registry).await;
    let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::warn!(now = %atom::time(clock::now_ms()), took_ms, "broker clock moved (testing)");
    clock_now(StatusCode::OK, Some(took_ms))
}

/// The broker's clock: its time, in RFC 3339 and in ms since the Unix epoch, how far ahead of
/// the machine's it is, and how long the move took, after one.
fn clock_now(status: StatusCode, took_ms: Option<u64>) -> Response<Full<Bytes>> {
    let now_ms = clock::now_ms();
    let mut body = serde_json::json!({
        "now": atom::time(now_ms),
        "nowMs": now_ms,
        "aheadMs": clock::ahead_ms(),
    });
    if let Some(took_ms) = took_ms {
        body["tookMs"] = took_ms.into();
    }
    respond(status, "application/json", body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advance_takes_a_duration_in_either_notation() {
        let day = Duration::from_secs(86_400);
        assert_eq!(target(br#"{"by": "24h"}"#, true), Ok(Target::By(day)));
        assert_eq!(target(br#"{"by": "P1D"}"#, true), Ok(Target::By(day)));
        assert_eq!(
            target(br#"{"by": "5m"}"#, true),
            Ok(Target::By(Duration::from_secs(300)))
        );
    }

    #[test]
    fn a_setting_takes_a_utc_time() {
        assert_eq!(
            target(br#"{"to": "2030-01-01T00:00:00Z"}"#, false),
            Ok(Target::To(1_893_456_000_000))
        );
        assert_eq!(
            target(br#"{"to": "2030-01-01T00:00:00.250Z"}"#, false),
            Ok(Target::To(1_893_456_000_250))
        );
    }

    #[test]
    fn a_body_that_is_no_move_says_what_is_wanted() {
        let refused = |body: &[u8], advance| target(body, advance).unwrap_err();
        assert!(refused(b"", true).contains(r#"{"by": "24h"}"#));
        assert!(refused(br#"{"by": "soon"}"#, true).contains("invalid duration"));
        assert!(refused(br#"{"to": "2030-01-01T00:00:00Z"}"#, true).contains(r#"takes "by""#));
        assert!(refused(br#"{"by": "1h"}"#, false).contains(r#"takes "to""#));
        assert!(refused(br#"{"to": "tomorrow"}"#, false).contains("RFC 3339"));
        assert!(refused(br#"{"to": "x", "by": "1h"}"#, false).contains(r#"takes "to""#));
        assert!(refused(br#"{"at": "x"}"#, false).contains("unknown field"));
    }

    #[test]
    fn the_clock_goes_forward_never_back() {
        let now = 1_893_456_000_000;
        let day = Duration::from_secs(86_400);
        assert_eq!(distance(Target::By(day), now), Ok(86_400_000));
        assert_eq!(distance(Target::To(now), now), Ok(0));
        assert_eq!(distance(Target::To(now + 1), now), Ok(1));
        let back = distance(Target::To(now - 1), now).unwrap_err();
        assert!(back.contains("never goes back"), "{back}");
        assert!(back.contains("2030-01-01T00:00:00.000Z"), "{back}");
    }
}
