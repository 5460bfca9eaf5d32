//! The subcommands that call a running broker's administration endpoint over plain HTTP:
//! `tidebus health` (the container image's health check) and `tidebus reset`.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::admin::RESET_PATH;
use crate::auth::sas;

/// Most of an answer read.
const MAX_ANSWER: u64 = 64 * 1024;
/// How long a call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the signature of a call lasts.
const TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// `GET /health`: `Ok` when it answers 200 within 5 s, else why not.
///
/// # Errors
/// Why the endpoint is not healthy (or did not answer).
pub async fn health(address: SocketAddr) -> Result<(), String> {
    let request = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let (status, _) = tokio::time::timeout(Duration::from_secs(5), exchange(address, request))
        .await
        .map_err(|_| format!("{address} did not answer within 5 s"))??;
    match status.split(' ').nth(1) {
        Some("200") => Ok(()),
        _ => Err(format!("{address} answered {status:?}")),
    }
}

/// `POST /$testing/reset`, signed with the policy `key_name`'s `key` (unsigned without one,
/// for a broker that lets anonymous clients in): the answer's body when it is 200.
///
/// # Errors
/// The status and body of any other answer, or why there was none.
pub async fn reset(
    address: SocketAddr,
    key_name: &str,
    key: Option<&str>,
) -> Result<String, String> {
    let authorization = match key {
        Some(key) => {
            let expiry = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .saturating_add(TOKEN_LIFETIME)
                .as_secs();
            let token = sas::sign(
                &format!("http://{address}/"),
                key_name,
                key.as_bytes(),
                expiry,
            );
            format!("Authorization: {token}\r\n")
        }
        None => String::new(),
    };
    let request = format!(
        "POST {RESET_PATH} HTTP/1.1\r\nHost: localhost\r\n{authorization}Content-Length: 0\r\n\
         Connection: close\r\n\r\n"
    );
    let (status, body) = tokio::time::timeout(CALL_TIMEOUT, exchange(address, &request))
        .await
        .map_err(|_| format!("{address} did not answer within {CALL_TIMEOUT:?}"))??;
    match status.split(' ').nth(1) {
        Some("200") => Ok(body),
        _ => Err(format!("{address} answered {status:?}: {body}")),
    }
}

/// Sends `request` to `address` and reads the answer: its status line and body.
async fn exchange(address: SocketAddr, request: &str) -> Result<(String, String), String> {
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|e| format!("cannot connect to {address}: {e}"))?;
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot ask {address}: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("no answer from {address}: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or_default().to_owned();
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .trim()
        .to_owned();
    Ok((status, body))
}
