"""paho clients that read in blocks and write in one call, and a network thread that drives one.

    client = BufferedClient(CallbackAPIVersion.VERSION2, client_id=..., coalesce_writes=True)
    net = NetworkLoop(client, "ingest")     # instead of client.loop_start()
    client.connect(host, port); net.start()
    ...                                     # publish()/ack()/disconnect() from any thread
    net.stop()                              # disconnect, send what is queued, end the thread

Why. paho-mqtt 2.x reads each packet with three ``recv`` calls (command byte, length byte,
rest), sends each packet with its own ``send``, and its ``loop_forever`` runs one ``select``
per packet received (``loop_read`` reads one packet when nothing is in flight outwards). At a
few tens of thousands of QoS 1 messages per second those five system calls per message are
most of a subscriber's time (bench/ingest.py, bench/simulator.py). MQTT itself is still all
paho's: the packets are built, parsed and tracked by paho; only the socket under it changes.

``BufferedSocket`` wraps the socket paho opens (plain, TLS or websocket): ``recv`` is served
from one read of up to ``READ_SIZE`` bytes, and ``pending()`` says how many are buffered, which
paho's own loop already asks of TLS sockets, so ``loop_start``/``loop_forever`` stay correct
with it. With ``coalesce_writes`` its ``send`` only appends, and whoever drives the client calls
``flush()``: ``NetworkLoop`` and the fleet publisher's workers (cloud/sim/fleetpub.py) do; paho's
own loop does not, so a coalescing client must never be run with ``loop_start``.

The override is of paho's ``_create_socket`` (paho-mqtt 2.1 and 2.2, as pyproject.toml pins);
tests/integration/test_ingest.py checks that the ingest's socket is the buffered one.
"""
from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode

if TYPE_CHECKING:
    from paho.mqtt.client import SocketLike

READ_SIZE = 1 << 16         # one read takes in hundreds of small PUBLISH packets
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class BufferedSocket:
    """A socket for paho: block reads served piecewise, and (``coalesce``) writes kept until
    ``flush()``. A write error met by ``flush`` is raised by the next ``recv``, where paho
    treats it as a lost connection."""

    def __init__(self, sock: Any, coalesce: bool = False) -> None:
        self._sock = sock
        self._buf = b""
        self._pos = 0
        self._out = bytearray()
        self._error: OSError | None = None
        self.coalesce = coalesce
        if coalesce:
            # Writes are gathered here already; Nagle's algorithm would hold the next block back
            # until the broker acknowledged the last one at the TCP level.
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (AttributeError, OSError):
                pass        # not a TCP socket (unix socket, websocket wrapper)

    def recv(self, n: int) -> bytes:
        pos = self._pos
        if pos < len(self._buf):
            chunk = self._buf[pos:pos + n]
            self._pos = pos + len(chunk)
            return chunk
        if self._error is not None:
            raise self._error
        data: bytes = self._sock.recv(max(n, READ_SIZE))
        if len(data) <= n:
            return data
        self._buf, self._pos = data, n
        return data[:n]

    def pending(self) -> int:
        inner = getattr(self._sock, "pending", None)
        return len(self._buf) - self._pos + (inner() if inner is not None else 0)

    def send(self, data: bytes | bytearray) -> int:
        if not self.coalesce:
            sent: int = self._sock.send(data)
            return sent
        if self._error is not None:
            raise self._error
        self._out += data
        return len(data)

    @property
    def unflushed(self) -> int:
        return len(self._out)

    def flush(self) -> bool:
        """Send what ``send`` kept, as far as the socket takes it now; True when all is out."""
        out = self._out
        while out and self._error is None:
            try:
                n = self._sock.send(out)
            except _WOULD_BLOCK:
                return False
            except OSError as e:
                self._error = e
                return False
            del out[:n]
        return not out

    def close(self) -> None:
        # paho closes right after writing DISCONNECT: send it first, as far as it goes.
        self.flush()
        self._sock.close()

    def fileno(self) -> int:
        fd: int = self._sock.fileno()
        return fd

    def setblocking(self, flag: bool) -> None:
        self._sock.setblocking(flag)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class BufferedClient(mqtt.Client):
    """paho's client on a ``BufferedSocket``; see the module docstring."""

    def __init__(self, *args: Any, coalesce_writes: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.coalesce_writes = coalesce_writes

    def _create_socket(self) -> "SocketLike":
        return BufferedSocket(super()._create_socket(), self.coalesce_writes)

    def buffered_socket(self) -> BufferedSocket | None:
        sock = self.socket()
        return sock if isinstance(sock, BufferedSocket) else None


class NetworkLoop:
    """One thread that drives a coalescing ``BufferedClient``, in place of paho's ``loop_start``.

    Each turn it reads every packet already buffered (up to ``burst``) before it waits in
    ``select`` again, writes what paho queued with one ``send``, runs paho's keepalive once a
    second, and after a lost connection reconnects with the client's ``reconnect_delay_set``
    backoff (doubling from the minimum to the maximum, as ``loop_forever`` does). Other threads
    may publish, acknowledge and disconnect: paho queues the packet and calls
    ``on_socket_register_write``, which wakes this thread (paho writes from the calling thread
    only when no such callback is set)."""

    def __init__(self, client: BufferedClient, name: str, burst: int = 1000,
                 min_delay: float = 0.2, max_delay: float = 5.0) -> None:
        client.coalesce_writes = True
        self.client = client
        self.name = name
        self.burst = burst
        self.min_delay = min_delay
        self.max_delay = max_delay
        self._wake_r: socket.socket | None = None      # made by start(), closed by stop()
        self._wake_w: socket.socket | None = None
        self._stopping = threading.Event()
        self._woken = False     # a wake-up byte is on its way: the others need no system call
        self._thread: threading.Thread | None = None
        client.on_socket_register_write = lambda c, u, s: self.wake()

    def start(self) -> None:
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="mqtt-%s" % self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        w = self._wake_w
        if w is None or self._woken:
            return
        self._woken = True
        try:
            w.send(b"\0")
        except OSError:
            pass        # the wake socket is full (the loop is awake) or closed (it has ended)

    def stop(self, timeout: float = 10.0) -> None:
        """Disconnect (DISCONNECT after whatever is queued), then end the thread."""
        self._stopping.set()
        self.client.disconnect()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()
        self._wake_r = self._wake_w = None

    def _run(self) -> None:
        delay = self.min_delay
        while True:
            if self._serve():
                delay = self.min_delay
            if self._stopping.is_set() or self._stopping.wait(delay):
                return
            delay = min(delay * 2, self.max_delay)
            try:
                self.client.reconnect()
            except OSError:
                pass            # broker still away: wait longer

    def _serve(self) -> bool:
        """Run one connection until it is lost or closed; whether it was ever accepted."""
        c, wake = self.client, self._wake_r
        assert wake is not None
        accepted = False
        last_misc = time.monotonic()
        while True:
            found = c.buffered_socket()
            if found is None:
                return accepted
            sock: BufferedSocket = found
            accepted = accepted or c.is_connected()
            writing = c.want_write() or sock.unflushed > 0
            readable = sock.pending() > 0
            if not readable:
                fd, wake_fd = sock.fileno(), wake.fileno()
                try:
                    r, _, _ = select.select([fd, wake_fd], [fd] if writing else [], [], 1.0)
                except (OSError, ValueError):
                    r = [fd]            # closed under us: let paho's read find out
                if wake_fd in r:
                    try:
                        wake.recv(4096)
                    except OSError:
                        pass
                    # Cleared after the read: a packet queued before a skipped wake-up is seen
                    # by the want_write() of the next turn, which comes after this.
                    self._woken = False
                readable = fd in r
            if readable:
                for _ in range(self.burst):
                    if c.loop_read() != MQTTErrorCode.MQTT_ERR_SUCCESS or not self._current(sock):
                        break
                    if sock.pending() == 0:
                        break
            if self._current(sock) and (c.want_write() or sock.unflushed):
                c.loop_write()
                if self._current(sock):
                    sock.flush()
            now = time.monotonic()
            if now - last_misc >= 1.0 and self._current(sock):
                c.loop_misc()
                last_misc = now

    def _current(self, sock: BufferedSocket) -> bool:
        """Whether paho still uses ``sock`` (it drops it when the connection ends)."""
        return self.client.socket() is sock
