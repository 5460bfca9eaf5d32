//! systemd's service notification protocol (`sd_notify`), by hand: a datagram to the Unix
//! socket named by `NOTIFY_SOCKET` (a path, or an abstract name after `@`). The broker sends
//! `READY=1` once its listeners accept, `STATUS=` with its connections and entities,
//! `WATCHDOG=1` at half of `WATCHDOG_USEC`, and `STOPPING=1` when it begins to stop. Without
//! `NOTIFY_SOCKET` nothing is sent.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Where the service manager listens.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    address: SocketAddr,
    /// How often to ping the watchdog, if the manager asked for pings.
    pub watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier the environment asks for, if any. A socket that cannot be set up is
    /// logged and ignored: the broker runs the same without a service manager.
    pub fn from_env() -> Option<Notifier> {
        let name = std::env::var_os("NOTIFY_SOCKET")?;
        let name = name.to_string_lossy().into_owned();
        let address = match name.strip_prefix('@') {
            Some(abstract_name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(abstract_name.as_bytes())
            }
            None => SocketAddr::from_pathname(&name),
        };
        let notifier = address.and_then(|address| {
            Ok(Notifier {
                socket: UnixDatagram::unbound()?,
                address,
                watchdog: watchdog_interval(),
            })
        });
        match notifier {
            Ok(notifier) => Some(notifier),
            Err(error) => {
                tracing::warn!(socket = %name, %error, "NOTIFY_SOCKET is set but unusable");
                None
            }
        }
    }

    /// Sends one state (`READY=1`, `STATUS=...`, ...); a failure is logged, never fatal.
    pub fn send(&self, state: &str) {
        if let Err(error) = self.socket.send_to_addr(state.as_bytes(), &self.address) {
            tracing::debug!(%error, state, "service manager not notified");
        }
    }
}

/// Half of `WATCHDOG_USEC`, when it is set for this process (`WATCHDOG_PID` absent or ours).
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let ours = std::env::var("WATCHDOG_PID")
        .ok()
        .is_none_or(|pid| pid == std::process::id().to_string());
    (ours && usec > 0).then(|| Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_arrive_as_datagrams_at_the_named_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let notifier = Notifier {
            socket: UnixDatagram::unbound().expect("socket"),
            address: SocketAddr::from_pathname(&path).expect("address"),
            watchdog: None,
        };
        notifier.send("READY=1");
        notifier.send("STATUS=2 connections, 3 entities");
        let mut buffer = [0u8; 128];
        for expected in ["READY=1", "STATUS=2 connections, 3 entities"] {
            let n = listener.recv(&mut buffer).expect("a datagram");
            assert_eq!(&buffer[..n], expected.as_bytes());
        }
    }
}
