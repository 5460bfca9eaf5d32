"""Hand-made AMQP 1.0 bytes over a plain socket, for what a well-behaved client never does."""

import socket
import struct
import time

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"

# Performative descriptor codes (AMQP 1.0 section 2.7).
OPEN = 0x10
CLOSE = 0x18
CLOSE_DESCRIPTOR = b"\x00\x53\x18"


def frame(body: bytes, channel: int = 0) -> bytes:
    """An AMQP frame: size, data offset 2 (no extended header), type 0, channel, body."""
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def open_frame(container_id: str) -> bytes:
    """A minimal `open`: a described list holding only the mandatory container-id.

    No idle-time-out is offered, so the broker owes us no heartbeats.
    """
    cid = container_id.encode()
    assert len(cid) < 200
    fields = b"\xa1" + bytes([len(cid)]) + cid  # str8-utf8
    listed = b"\xc0" + bytes([1 + len(fields), 1]) + fields  # list8: size, count, fields
    return frame(b"\x00\x53" + bytes([OPEN]) + listed)  # descriptor: smallulong 0x10


def connect(address, timeout: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, count: int, deadline: float) -> bytes:
    data = b""
    while len(data) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"got {len(data)} of {count} bytes before the deadline: {data!r}")
        sock.settimeout(remaining)
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"peer closed after {len(data)} of {count} bytes: {data!r}")
        data += chunk
    return data


def recv_until_closed(sock: socket.socket, deadline: float):
    """Read until the peer closes. Returns (bytes read, closed: bool); False means the deadline
    passed with the socket still open. A reset counts as closed."""
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return data, False
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return data, False
        except (ConnectionResetError, BrokenPipeError):
            return data, True
        if not chunk:
            return data, True
        data += chunk


def performatives(stream: bytes):
    """Descriptor codes of the frames in `stream` (bytes after the protocol header), in order.

    Empty frames (heartbeats) are skipped; a truncated last frame is ignored; a descriptor
    that is not a numeric ulong is reported as the raw body prefix.
    """
    codes = []
    offset = 0
    while offset + 8 <= len(stream):
        size, doff = struct.unpack_from(">IB", stream, offset)
        if size < 8 or offset + size > len(stream):
            break
        body = stream[offset + 4 * doff: offset + size]
        offset += size
        if not body:
            continue
        if body[:2] == b"\x00\x53" and len(body) >= 3:
            codes.append(body[2])
        elif body[:2] == b"\x00\x80" and len(body) >= 10:
            codes.append(struct.unpack_from(">Q", body, 2)[0])
        else:
            codes.append(body[:12])
    return codes
