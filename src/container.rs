//! Running as the container image runs (`tidebus --container`, the image's entrypoint), so that
//! it drops in for Microsoft's Service Bus emulator image: its `Config.json` at the emulator's
//! path, every listener on all interfaces, the data in `/data`, the emulator's environment
//! accepted, and the line the Testcontainers modules wait for once ready.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::config::Config;

/// Where Microsoft's emulator image reads its entities from; read when no `--config` is given.
pub const EMULATOR_CONFIG: &str = "/ServiceBus_Emulator/ConfigFiles/Config.json";

/// The line the emulator logs once it serves, which the Testcontainers modules (.NET, Java,
/// Go, Python) and compose health checks wait for.
pub const READY_LINE: &str = "Emulator Service is Successfully Up!";

/// Where the image keeps the store (a volume).
pub const DATA_DIR: &str = "/data";

/// The environment the emulator image takes for its SQL Server, which Tidebus does not need.
const EMULATOR_ENVIRONMENT: [&str; 4] = [
    "ACCEPT_EULA",
    "SQL_SERVER",
    "MSSQL_SA_PASSWORD",
    "SQL_WAIT_INTERVAL",
];

/// The WebSocket ports the SDKs dial without being told one.
const WEBSOCKET_PORTS: [u16; 2] = [80, 443];

/// The config file to load: `given`, else the emulator's `Config.json` when it exists, else
/// none (the embedded default).
pub fn config_path(given: Option<PathBuf>) -> Option<PathBuf> {
    given.or_else(|| {
        let emulator = Path::new(EMULATOR_CONFIG);
        emulator.exists().then(|| emulator.to_path_buf())
    })
}

/// Adapts `config` to a container: a loopback listener would be unreachable from outside, so
/// each listens on all interfaces at its port; the WebSocket ports are served unless the
/// config names its own; the store is [`DATA_DIR`].
pub fn adapt(config: &mut Config) {
    let broker = &mut config.broker;
    for address in broker
        .listen
        .iter_mut()
        .chain(broker.tls.as_mut().map(|tls| &mut tls.listen))
        .chain(config.admin.listen.iter_mut())
        .chain(broker.websocket_listen.iter_mut())
    {
        *address = everywhere(*address);
    }
    if broker.websocket_listen.is_empty() {
        broker.websocket_listen = WEBSOCKET_PORTS
            .iter()
            .map(|&port| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
            .collect();
    }
    broker.data_dir = PathBuf::from(DATA_DIR);
}

/// `address` on all interfaces when it is a loopback one.
fn everywhere(address: SocketAddr) -> SocketAddr {
    match address.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), address.port())
        }
        IpAddr::V6(ip) if ip.is_loopback() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), address.port())
        }
        _ => address,
    }
}

/// The emulator's variables set in this environment (their names only: one holds a password).
pub fn ignored_environment() -> Vec<&'static str> {
    EMULATOR_ENVIRONMENT
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_listeners_move_to_all_interfaces_and_the_websocket_ports_are_added() {
        let mut config = Config::embedded_default();
        config.broker.listen = Some("127.0.0.1:5672".parse().unwrap());
        config.admin.listen = Some("[::1]:5300".parse().unwrap());
        adapt(&mut config);
        assert_eq!(config.broker.listen, Some("0.0.0.0:5672".parse().unwrap()));
        assert_eq!(config.admin.listen, Some("[::]:5300".parse().unwrap()));
        let websocket: Vec<SocketAddr> = ["0.0.0.0:80", "0.0.0.0:443"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(config.broker.websocket_listen, websocket);
        assert_eq!(config.broker.data_dir, PathBuf::from("/data"));
    }

    #[test]
    fn a_config_that_names_its_addresses_keeps_them() {
        let mut config = Config::embedded_default();
        config.broker.listen = Some("10.1.2.3:5672".parse().unwrap());
        config.broker.websocket_listen = vec!["127.0.0.1:8443".parse().unwrap()];
        adapt(&mut config);
        assert_eq!(config.broker.listen, Some("10.1.2.3:5672".parse().unwrap()));
        assert_eq!(
            config.broker.websocket_listen,
            vec!["0.0.0.0:8443".parse::<SocketAddr>().unwrap()]
        );
    }
}
