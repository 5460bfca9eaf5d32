//! The real binary under a service manager's notification socket (systemd `Type=notify`).

use std::os::unix::net::UnixDatagram;

use crate::child::ChildBroker;
use crate::support::DEADLINE;

/// The datagrams the broker sends, until one starts with `prefix` (returned last).
fn until(socket: &UnixDatagram, prefix: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        let n = socket
            .recv(&mut buffer)
            .unwrap_or_else(|e| panic!("no {prefix} within {DEADLINE:?} (got {seen:?}): {e}"));
        let state = String::from_utf8_lossy(&buffer[..n]).into_owned();
        let done = state.starts_with(prefix);
        seen.push(state);
        if done {
            return seen;
        }
    }
}

#[test]
fn ready_comes_once_clients_can_connect_then_status_then_stopping_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).expect("bind");
    socket.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let config = "[broker]\nallow_anonymous = true\n\n[[queues]]\nname = \"q\"\n";
    let mut broker = ChildBroker::start_with_env(dir.path(), config, &[("NOTIFY_SOCKET", &path)]);
    let first = until(&socket, "READY=1");
    assert_eq!(first, ["READY=1"], "nothing before READY=1");
    std::net::TcpStream::connect(broker.addr).expect("a client connects once READY=1 came");
    let status = until(&socket, "STATUS=");
    let status = status.last().expect("a status");
    assert!(
        status.ends_with(" connections, 1 entities"),
        "connections and entities counted: {status}"
    );
    broker.hang_up();
    assert!(
        socket.recv(&mut [0u8; 512]).is_ok(),
        "the broker still reports after SIGHUP"
    );
    let exit = broker.terminate();
    assert!(exit.success(), "{exit}");
    until(&socket, "STOPPING=1");
}

/// `systemd-analyze verify` accepts the unit file (with `ExecStart` naming the binary built
/// here, since verify checks that the program exists). Skipped, saying so, where the tool is
/// not installed.
#[test]
fn the_unit_file_verifies() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/tidebus.service"
    ))
    .expect("config/tidebus.service");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tidebus.service");
    let unit = unit.replace("/usr/local/bin/tidebus", env!("CARGO_BIN_EXE_tidebus"));
    std::fs::write(&path, unit).expect("write");
    let output = match std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
    {
        Ok(output) => output,
        Err(error) => {
            eprintln!("systemd-analyze is not installed ({error}): the unit file is not verified");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "{stderr}"
    );
}
