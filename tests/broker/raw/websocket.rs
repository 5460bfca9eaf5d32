//! AMQP over WebSockets with hand-made HTTP and WebSocket frames against the real binary: the
//! upgrade's checks, AMQP bytes with no alignment to messages, ping, the close handshake, and
//! the WebSocket twins of the hostile tests (close codes, bounded messages, deadlines, memory,
//! a bystander served meanwhile). The SDK suites (tests/python/test_websockets.py,
//! tests/js/websockets.test.js) cover real clients.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use super::hostile::{config, Bystander, MEMORY_BOUND_KIB};
use crate::child::ChildBroker;
use crate::support::DEADLINE;

const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;
const CONTINUATION: u8 = 0x0;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xa;
const AMQP_HEADER: [u8; 8] = [b'A', b'M', b'Q', b'P', 0, 1, 0, 0];

/// The upgrade request for `path`, offering `protocol` if any.
fn upgrade_request(path: &str, protocol: Option<&str>) -> String {
    let offered = protocol.map_or(String::new(), |protocol| {
        format!("Sec-WebSocket-Protocol: {protocol}\r\n")
    });
    format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{offered}\r\n"
    )
}

/// A WebSocket client made of bytes: it writes frames as given (masked or not) and reads the
/// broker's (never masked).
struct Peer {
    stream: TcpStream,
    read: Vec<u8>,
}

impl Peer {
    /// Connects and sends `request`; returns the peer and the broker's answer head.
    async fn request(addr: SocketAddr, request: &str) -> (Self, String) {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut peer = Peer {
            stream,
            read: Vec::new(),
        };
        let head = timeout(DEADLINE, async {
            loop {
                if let Some(end) = peer.read.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&peer.read[..end]).into_owned();
                    peer.read.drain(..end + 4);
                    return head;
                }
                if !peer.fill().await {
                    return String::from_utf8_lossy(&peer.read).into_owned();
                }
            }
        })
        .await
        .expect("answered in time");
        (peer, head)
    }

    /// An upgraded peer (`AMQPWSB10`).
    async fn upgraded(addr: SocketAddr) -> Self {
        let (peer, head) = Peer::request(addr, &upgrade_request(PATH, Some("AMQPWSB10"))).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        peer
    }

    /// Reads more bytes; `false` at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(read) => {
                self.read.extend_from_slice(&chunk[..read]);
                true
            }
        }
    }

    /// Writes one frame.
    async fn send(&mut self, opcode: u8, fin: bool, masked: bool, payload: &[u8]) {
        let frame = frame(opcode, fin, masked, payload.len() as u64, payload);
        self.stream.write_all(&frame).await.expect("write frame");
    }

    /// The next frame from the broker, `None` once it closed the stream.
    async fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        timeout(DEADLINE, async {
            loop {
                if let Some((opcode, payload, used)) = parse(&self.read) {
                    self.read.drain(..used);
                    return Some((opcode, payload));
                }
                if !self.fill().await {
                    return None;
                }
            }
        })
        .await
        .expect("a frame or the end in time")
    }

    /// Reads frames until the broker's close frame; returns its code, and checks the stream
    /// ends after it.
    async fn close_code(&mut self) -> u16 {
        loop {
            match self.next().await {
                Some((CLOSE, payload)) => {
                    assert!(payload.len() >= 2, "a close frame with a code");
                    return u16::from_be_bytes([payload[0], payload[1]]);
                }
                Some(_) => continue,
                None => panic!("closed without a close frame"),
            }
        }
    }

    /// The broker's bytes of AMQP, gathered from binary messages until `count` arrived.
    async fn amqp_bytes(&mut self, count: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        while bytes.len() < count {
            match self.next().await {
                Some((BINARY, payload)) => bytes.extend(payload),
                other => panic!("expected binary messages, got {other:?}"),
            }
        }
        bytes
    }
}

const PATH: &str = "/$servicebus/websocket";

/// A frame with `declared` as its payload length and `payload` after the header.
fn frame(opcode: u8, fin: bool, masked: bool, declared: u64, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![(u8::from(fin) << 7) | opcode];
    let mask_bit = u8::from(masked) << 7;
    match declared {
        0..=125 => frame.push(mask_bit | declared as u8),
        126..=0xffff => {
            frame.push(mask_bit | 126);
            frame.extend((declared as u16).to_be_bytes());
        }
        _ => {
            frame.push(mask_bit | 127);
            frame.extend(declared.to_be_bytes());
        }
    }
    let key = [0x12, 0x34, 0x56, 0x78];
    if masked {
        frame.extend(key);
    }
    frame.extend(payload.iter().enumerate().map(|(index, byte)| {
        if masked {
            byte ^ key[index % 4]
        } else {
            *byte
        }
    }));
    frame
}

/// A whole unmasked frame at the start of `bytes`: opcode, payload, bytes used.
fn parse(bytes: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    let (first, second) = (*bytes.first()?, *bytes.get(1)?);
    assert_eq!(second & 0x80, 0, "the broker masks nothing");
    let (length, start) = match second & 0x7f {
        126 => (
            u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?) as usize,
            4,
        ),
        127 => (
            u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize,
            10,
        ),
        short => (short as usize, 2),
    };
    let payload = bytes.get(start..start + length)?.to_vec();
    Some((first & 0x0f, payload, start + length))
}

/// The upgrade is checked (path, subprotocol, an HTTP request that is no upgrade), AMQP bytes
/// need no alignment to messages (a header split over two messages is answered), a ping is
/// answered with its payload, and a close is answered with a close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_are_checked_and_amqp_bytes_cross_message_boundaries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config(""));

    let (_, head) = Peer::request(broker.addr, &upgrade_request("/elsewhere", None)).await;
    assert!(head.starts_with("HTTP/1.1 404"), "another path: {head}");
    let (_, head) = Peer::request(broker.addr, &upgrade_request(PATH, Some("mqtt"))).await;
    assert!(
        head.starts_with("HTTP/1.1 400"),
        "another subprotocol: {head}"
    );
    let (mut plain_get, head) = Peer::request(
        broker.addr,
        &format!("GET {PATH} HTTP/1.1\r\nHost: x\r\n\r\n"),
    )
    .await;
    assert!(!head.starts_with("HTTP/1.1 101"), "not an upgrade: {head}");
    assert!(plain_get.next().await.is_none(), "and closed");
    for (offered, chosen) in [("AMQPWSB10", "AMQPWSB10"), ("amqp", "amqp")] {
        let (_, head) = Peer::request(broker.addr, &upgrade_request(PATH, Some(offered))).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains(&format!(
                "sec-websocket-protocol: {}",
                chosen.to_ascii_lowercase()
            )),
            "{head}"
        );
    }

    let mut peer = Peer::upgraded(broker.addr).await;
    peer.send(BINARY, true, true, &AMQP_HEADER[..3]).await;
    peer.send(BINARY, true, true, &AMQP_HEADER[3..]).await;
    assert_eq!(
        peer.amqp_bytes(8).await,
        AMQP_HEADER,
        "the header, answered"
    );
    peer.send(PING, true, true, b"still there?").await;
    assert_eq!(peer.next().await, Some((PONG, b"still there?".to_vec())));
    peer.send(CLOSE, true, true, &1000u16.to_be_bytes()).await;
    assert_eq!(peer.close_code().await, 1000, "the close, answered");
    assert!(peer.next().await.is_none(), "then the stream ends");
}

/// A peer that sends a text message, an unmasked frame, a continuation out of place, a frame
/// declaring 2^40 bytes or a fragmented message past the broker's largest frame is closed at
/// once with the close code for it; the broker allocates nothing for the declared sizes and a
/// bystander is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_websocket_peers_get_their_close_code_and_cost_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config(""));
    let bystander = Bystander::start(broker.addr).await;
    let (_, idle_peak) = broker.memory_kib();
    let chunk = vec![0u8; 16 * 1024];
    let cases: [(&str, Vec<Vec<u8>>, u16); 5] = [
        (
            "a text message",
            vec![frame(TEXT, true, true, 4, b"AMQP")],
            1003,
        ),
        (
            "an unmasked frame",
            vec![frame(BINARY, true, false, 8, &AMQP_HEADER)],
            1002,
        ),
        (
            "a continuation with no message begun",
            vec![frame(CONTINUATION, true, true, 8, &AMQP_HEADER)],
            1002,
        ),
        (
            "a frame declaring 2^40 bytes",
            vec![frame(BINARY, true, true, 1 << 40, b"abcd")],
            1009,
        ),
        (
            "a message fragmented past the largest frame",
            std::iter::once(frame(BINARY, false, true, chunk.len() as u64, &chunk))
                .chain((0..8).map(|_| frame(CONTINUATION, false, true, chunk.len() as u64, &chunk)))
                .collect(),
            1009,
        ),
    ];
    for (what, frames, code) in cases {
        let mut peer = Peer::upgraded(broker.addr).await;
        let started = Instant::now();
        for frame in frames {
            if peer.stream.write_all(&frame).await.is_err() {
                break;
            }
        }
        assert_eq!(peer.close_code().await, code, "{what}");
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_secs(1),
            "{what}: closed after {elapsed:?}"
        );
        eprintln!("{what}: closed with {code} after {elapsed:?}");
    }
    let (_, peak) = broker.memory_kib();
    eprintln!("broker peak memory: {idle_peak} KiB before, {peak} KiB after");
    assert!(
        peak < idle_peak + MEMORY_BOUND_KIB,
        "peak memory grew from {idle_peak} to {peak} KiB"
    );
    bystander.finish().await;
}

/// An upgrade request never finished, one whose headers run past 64 KiB, and a WebSocket that
/// never sends the AMQP header are all closed by `handshake_timeout`, which counts the upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_upgrades_and_silent_websockets_close_at_the_handshake_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ChildBroker::start(dir.path(), &config("handshake_timeout = \"1s\""));
    let started = Instant::now();
    let half_request = format!("GET {PATH} HTTP/1.1\r\nHost: localhost\r\n");
    let mut half = TcpStream::connect(broker.addr).await.expect("connect");
    half.write_all(half_request.as_bytes())
        .await
        .expect("write");
    let mut silent = Peer::upgraded(broker.addr).await;
    let mut sink = Vec::new();
    timeout(DEADLINE, half.read_to_end(&mut sink))
        .await
        .expect("the half request is closed in time")
        .expect("read");
    assert!(
        silent.next().await.is_none(),
        "the silent WebSocket is closed"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(4),
        "closed only after {elapsed:?}"
    );

    let mut flood = TcpStream::connect(broker.addr).await.expect("connect");
    flood
        .write_all(half_request.as_bytes())
        .await
        .expect("write");
    let header = format!("X-Filler: {}\r\n", "x".repeat(1000));
    let flooded = Instant::now();
    let mut written = 0;
    while written < 256 * 1024 {
        if flood.write_all(header.as_bytes()).await.is_err() {
            break;
        }
        written += header.len();
    }
    let mut sink = Vec::new();
    let _ = timeout(DEADLINE, flood.read_to_end(&mut sink)).await;
    assert!(
        flooded.elapsed() < Duration::from_secs(1),
        "headers past 64 KiB closed at once, not at the deadline: {:?}",
        flooded.elapsed()
    );
}

/// A peer that writes pings and never reads the pongs (issue 51: 400 MiB of pings took the
/// broker to 392 MiB): what the broker holds for it stays bounded however much it sends (its
/// pongs wait as one), and a bystander is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_pings_and_never_reads_the_pongs_costs_bounded_memory() {
    const FLOOD: usize = 160 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    // The peer never opens its AMQP connection: the longest handshake timeout, so a slow
    // machine's flood is not cut short by it (the default 10 s was, on a loaded CI machine).
    let broker = ChildBroker::start(dir.path(), &config("handshake_timeout = \"5m\""));
    let bystander = Bystander::start(broker.addr).await;
    let (_, idle_peak) = broker.memory_kib();
    let mut peer = Peer::upgraded(broker.addr).await;
    peer.send(BINARY, true, true, &AMQP_HEADER).await;
    let burst = frame(PING, true, true, 125, &[0x70; 125]).repeat(8192);
    let mut sent = 0;
    while sent < FLOOD {
        let written = timeout(DEADLINE, peer.stream.write_all(&burst)).await;
        assert!(
            matches!(written, Ok(Ok(()))),
            "the broker stopped reading pings after {sent} bytes"
        );
        sent += burst.len();
    }
    let (_, peak) = broker.memory_kib();
    eprintln!("broker peak memory: {idle_peak} KiB before, {peak} KiB after {sent} bytes of pings");
    assert!(
        peak < idle_peak + MEMORY_BOUND_KIB,
        "peak memory grew from {idle_peak} to {peak} KiB"
    );
    bystander.finish().await;
}
