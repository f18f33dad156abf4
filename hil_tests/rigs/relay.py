"""A TCP relay between the device and the broker that keeps every byte the device sends.

    relay = TcpRelay("127.0.0.1", broker_port, capture_dir)
    relay.start()              # the device connects to relay.port instead of the broker
    relay.mute()               # on the open connections, broker -> device bytes are dropped
    relay.unmute()             # cut the muted connections (new ones are never muted)
    publishes(relay)           # every PUBLISH the device sent, per connection, in order

Dropping bytes in the middle of an MQTT stream would desynchronise it, so a muted
connection stays muted until it is cut. When the broker side closes (broker stopped)
the relay closes the device side, which is how the device notices the outage.
With ``tls`` (a server SSLContext) the relay terminates TLS: the device talks TLS to
it, the broker plain MQTT, and the capture holds the decrypted bytes.
"""
from __future__ import annotations

import select
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Connection:
    number: int
    opened: float
    up: bytearray = field(default_factory=bytearray)       # device -> broker
    down: bytearray = field(default_factory=bytearray)     # broker -> device (as received)
    refused: bool = False                                  # broker unreachable: closed at once
    muted: bool = False
    closed: bool = False
    error: str = ""
    socks: list[socket.socket] = field(default_factory=list)


@dataclass(frozen=True)
class Publish:
    connection: int
    dup: bool
    qos: int
    topic: str
    pid: int
    payload: bytes


class TcpRelay:
    def __init__(self, upstream_host: str, upstream_port: int, capture_dir: Path,
                 tls: ssl.SSLContext | None = None, bind: str = "127.0.0.1") -> None:
        self.tls = tls
        self.upstream = (upstream_host, upstream_port)
        self.capture_dir = Path(capture_dir)
        self.capture_dir.mkdir(parents=True, exist_ok=True)
        self.connections: list[Connection] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((bind, 0))       # 0.0.0.0 for a board on the LAN
        self._listener.listen(16)
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]

    def start(self) -> None:
        self._spawn(self._accept_loop)

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                dev, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                conn = Connection(len(self.connections), time.monotonic())
                self.connections.append(conn)
            try:
                dev.settimeout(5)
                if self.tls is not None:
                    dev = self.tls.wrap_socket(dev, server_side=True)
                up = socket.create_connection(self.upstream, timeout=2)
                up.settimeout(5)
            except (OSError, ssl.SSLError) as e:
                conn.refused = True
                conn.closed = True
                conn.error = "%s: %s" % (type(e).__name__, e)
                dev.close()
                continue
            conn.socks = [dev, up]
            self._spawn(self._serve, conn, dev, up)

    def _serve(self, conn: Connection, dev: socket.socket, up: socket.socket) -> None:
        # One thread per connection, both directions: an SSL socket must not be read
        # and written from two threads at once.
        try:
            while not conn.closed:
                readable, _, _ = select.select([dev, up], [], [], 0.2)
                for src in readable:
                    while True:
                        data = src.recv(65536)
                        if not data:
                            raise EOFError
                        if src is dev:
                            conn.up += data
                            up.sendall(data)
                        else:
                            conn.down += data
                            if not conn.muted:
                                dev.sendall(data)
                        if not (isinstance(src, ssl.SSLSocket) and src.pending()):
                            break
        except (OSError, ValueError, EOFError):
            pass
        self._close(conn)

    def _close(self, conn: Connection) -> None:
        with self._lock:
            if conn.closed:
                return
            conn.closed = True
        for s in conn.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        (self.capture_dir / ("conn-%03d-up.bin" % conn.number)).write_bytes(bytes(conn.up))

    def mute(self) -> None:
        """Lose every PUBACK (and PINGRESP) on the connections open now."""
        with self._lock:
            for c in self.connections:
                c.muted = True

    def unmute(self) -> None:
        with self._lock:
            live = [c for c in self.connections if c.muted and not c.closed]
        for c in live:
            self._close(c)

    def cut(self) -> None:
        for c in list(self.connections):
            self._close(c)

    def device_bytes(self) -> bytes:
        """Everything the device sent, all connections, in connection order."""
        with self._lock:
            return b"".join(bytes(c.up) for c in self.connections)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        self.cut()
        for t in self._threads:
            t.join(5)


def parse_packets(data: bytes) -> list[tuple[int, bytes]]:
    """``(first byte, body)`` of each complete MQTT packet; a cut-off tail is ignored."""
    out = []
    i = 0
    while i < len(data):
        first = data[i]
        j = i + 1
        n = shift = 0
        while True:
            if j >= len(data):
                return out
            b = data[j]
            j += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if j + n > len(data):
            return out
        out.append((first, bytes(data[j:j + n])))
        i = j + n
    return out


def publishes(relay: TcpRelay) -> list[Publish]:
    """Every PUBLISH the device sent through the relay, in order."""
    out = []
    with relay._lock:
        conns = [(c.number, bytes(c.up)) for c in relay.connections]
    for number, data in conns:
        v5 = False
        for first, body in parse_packets(data):
            if first & 0xF0 == 0x10:
                # CONNECT: protocol name, then the level (5: MQTT v5, as the gateway speaks).
                (nl,) = struct.unpack_from("!H", body, 0)
                v5 = body[2 + nl] == 5
            if first & 0xF0 != 0x30:
                continue
            qos = (first >> 1) & 3
            (tl,) = struct.unpack_from("!H", body, 0)
            topic = body[2:2 + tl].decode()
            pid = struct.unpack_from("!H", body, 2 + tl)[0] if qos else 0
            at = 2 + tl + (2 if qos else 0)
            if v5:                          # the properties: their length (a varint), then them
                n = shift = 0
                while True:
                    b = body[at]
                    at += 1
                    n |= (b & 0x7F) << shift
                    shift += 7
                    if not b & 0x80:
                        break
                at += n
            out.append(Publish(number, bool(first & 0x08), qos, topic, pid, body[at:]))
    return out
