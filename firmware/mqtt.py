"""A small MQTT 3.1.1 client for a sensor: QoS 1 publishing, keepalive, one QoS 0 subscription.

    c = MQTTClient("dpsense-d7", "d7", "secret", keepalive=60, clock=time)
    c.connect(open_socket("broker.local", 1883))    # raises OSError (MQTTError) on failure
    c.publish(b"dpsense/readings/d7", payload, pid=1)
    c.poll()                                         # (PUBACK, 1) once the broker has it

The caller chooses every packet id, so a message resent after a reconnect goes out
with the same id, DUP set and the caller's stored payload bytes (the ring buffer's),
never a re-encoded one. CONNECT uses clean_session=False: the broker keeps the
session across connection losses. ``subscribe`` asks for one topic filter at QoS 0 (the cloud's
acknowledgements); ``poll`` returns a message on it as ``(PUBLISH, payload, topic)``.

Every network problem is an ``OSError`` (``MQTTError`` is one): it leaves the client
closed and the caller reconnects (firmware/uplink.py does, with backoff).
"""

import struct

CONNECT = 0x10
CONNACK = 0x20
PUBLISH = 0x30
PUBACK = 0x40
SUBSCRIBE = 0x82
SUBACK = 0x90
PINGREQ = 0xC0
PINGRESP = 0xD0
DISCONNECT = 0xE0
_DUP = 0x08
_QOS1 = 0x02
MAX_REMAINING = 268435455          # 4-byte remaining-length varint


class MQTTError(OSError):
    """The broker refused us or broke the protocol; handled like any network error."""


def varint(n):
    """MQTT remaining length: 7 bits per byte, least significant first, bit 7 = more."""
    if n < 0 or n > MAX_REMAINING:
        raise ValueError("remaining length out of range: %d" % n)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(s):
    if isinstance(s, str):
        s = s.encode()
    if len(s) > 0xFFFF:
        raise ValueError("string field longer than 65535 bytes")
    return struct.pack("!H", len(s)) + s


def connect_packet(client_id, user=None, password=None, keepalive=60, clean=False):
    """CONNECT, protocol level 4 (3.1.1); a password needs a user name (3.1.1 rule)."""
    if password is not None and user is None:
        raise ValueError("a password needs a user name")
    if keepalive < 0 or keepalive > 0xFFFF:
        raise ValueError("keepalive must be 0..65535 s")
    flags = 0x02 if clean else 0
    if user is not None:
        flags |= 0x80
    if password is not None:
        flags |= 0x40
    body = bytearray(b"\x00\x04MQTT\x04")
    body.append(flags)
    body += struct.pack("!H", keepalive)
    body += _field(client_id)
    if user is not None:
        body += _field(user)
    if password is not None:
        body += _field(password)
    return bytes([CONNECT]) + varint(len(body)) + body


def publish_header(topic, pid, payload_len, dup=False):
    """Fixed and variable header of a QoS 1 PUBLISH; the payload follows unchanged."""
    if pid < 1 or pid > 0xFFFF:
        raise ValueError("packet id must be 1..65535")
    t = _field(topic)
    first = PUBLISH | _QOS1 | (_DUP if dup else 0)
    return bytes([first]) + varint(len(t) + 2 + payload_len) + t + struct.pack("!H", pid)


def open_socket(host, port, tls=False, ca=None, timeout_s=5, insecure=False):
    """A connected TCP socket, wrapped in TLS when asked (``ca``: CA certificate file, DER).
    TLS without ``ca`` is refused unless ``insecure`` (tests only: the broker is not checked)."""
    if tls and ca is None and not insecure:
        raise MQTTError("TLS: no CA certificate to check the broker with (broker_ca)")
    import socket
    addr = socket.getaddrinfo(host, port)[0][-1]
    s = socket.socket()
    try:
        s.settimeout(timeout_s)
        s.connect(addr)
        if tls:
            try:
                s = _wrap_tls(s, host, ca)
            except ValueError as e:
                # mbedTLS reports a failed verification (or a bad CA file) as ValueError.
                raise MQTTError("TLS: %s" % str(e).strip())
    except BaseException:
        s.close()
        raise
    return s


def _wrap_tls(sock, host, ca):
    try:
        import ssl
    except ImportError:
        import ussl as ssl   # type: ignore[no-redef]  # MicroPython before 1.20
    if ca is None:
        # broker_tls_insecure: encrypted, but anyone can be the broker. Tests only.
        return ssl.wrap_socket(sock, server_hostname=host)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # The ports' stubs leave verify_mode out of tls.SSLContext; MicroPython's ssl docs have it.
    ctx.verify_mode = ssl.CERT_REQUIRED  # type: ignore[attr-defined]
    ctx.load_verify_locations(cafile=ca)
    return ctx.wrap_socket(sock, server_hostname=host)


class MQTTClient:
    """One connection at a time over a socket-like object (``read``/``write``/``setblocking``)."""

    def __init__(self, client_id, user=None, password=None, keepalive=60, timeout_ms=5000,
                 clock=None):
        if clock is None:
            import time as clock
        self.client_id = client_id
        self.user = user
        self.password = password
        self.keepalive = keepalive
        self.timeout_ms = timeout_ms
        self.clock = clock
        self.sock = None
        self._last_tx = 0
        self._ping_at = None

    def connect(self, sock):
        """Send CONNECT on ``sock`` and wait for CONNACK; returns the session-present flag."""
        self.sock = sock
        try:
            # Non-blocking for good, timeouts kept here: TLS sockets have no settimeout,
            # and a blocking read could hang the board on a half-open connection.
            sock.setblocking(False)
            self._write(connect_packet(self.client_id, self.user, self.password, self.keepalive))
            kind, body = self._read_packet(True)
            if kind != CONNACK or len(body) != 2:
                raise MQTTError("expected CONNACK, got packet type 0x%02x" % kind)
            if body[1] != 0:
                raise MQTTError("broker refused the connection: return code %d" % body[1])
        except BaseException:
            self.close()
            raise
        self._ping_at = None
        return body[0] & 1

    def publish(self, topic, payload, pid, dup=False):
        # One write per packet: a header and a payload in two small segments would
        # stall on Nagle's algorithm (MicroPython offers no TCP_NODELAY).
        self._write(publish_header(topic, pid, len(payload), dup) + payload)

    def subscribe(self, topic, pid):
        """SUBSCRIBE to ``topic`` at QoS 0; the SUBACK comes through ``poll``."""
        body = struct.pack("!H", pid) + _field(topic) + b"\x00"
        self._write(bytes([SUBSCRIBE]) + varint(len(body)) + body)

    def poll(self):
        """One received packet as ``(type, packet id or 0)``, a QoS 0 message as
        ``(PUBLISH, payload, topic)``, or None if nothing is waiting."""
        kind, body = self._read_packet(False)
        if kind is None:
            return None
        if kind == PUBLISH:
            # QoS 0 only (the subscription's): no packet id after the topic.
            if len(body) < 2:
                raise MQTTError("PUBLISH with %d bytes" % len(body))
            end = 2 + ((body[0] << 8) | body[1])
            return (PUBLISH, body[end:], body[2:end])
        if kind == SUBACK:
            if len(body) != 3 or body[2] & 0x80:
                raise MQTTError("subscription refused")
            return (SUBACK, (body[0] << 8) | body[1])
        if kind == PINGRESP:
            self._ping_at = None
            return (PINGRESP, 0)
        if kind == PUBACK:
            if len(body) != 2:
                raise MQTTError("PUBACK with %d bytes" % len(body))
            return (PUBACK, (body[0] << 8) | body[1])
        return (kind, 0)

    def keepalive_due(self, now_ms):
        """Ping when half the keepalive passed without sending; OSError when a ping went unanswered."""
        if not self.keepalive:
            return
        ka = self.keepalive * 1000
        if self._ping_at is not None:
            if self.clock.ticks_diff(now_ms, self._ping_at) > ka:
                raise MQTTError("no PINGRESP within %d s" % self.keepalive)
        elif self.clock.ticks_diff(now_ms, self._last_tx) >= ka // 2:
            self._write(b"\xc0\x00")
            self._ping_at = now_ms

    def disconnect(self):
        try:
            self._write(b"\xe0\x00")
        finally:
            self.close()

    def close(self):
        s = self.sock
        self.sock = None
        if s is not None:
            try:
                s.close()
            except OSError:
                pass

    # -- bytes ---------------------------------------------------------------------------
    def _deadline(self):
        return self.clock.ticks_add(self.clock.ticks_ms(), self.timeout_ms)

    def _wait(self, deadline, what):
        c = self.clock
        if c.ticks_diff(deadline, c.ticks_ms()) <= 0:
            raise MQTTError("%s timed out after %d ms" % (what, self.timeout_ms))
        c.sleep_ms(1)

    def _write(self, data):
        s = self.sock
        if s is None:
            raise MQTTError("not connected")
        mv = memoryview(data)
        deadline = self._deadline()
        while len(mv):
            n = s.write(mv)
            if n:
                mv = mv[n:]
            else:
                self._wait(deadline, "write")
        self._last_tx = self.clock.ticks_ms()

    def _read_exact(self, n, deadline):
        s = self.sock
        if s is None:
            raise MQTTError("not connected")
        out = b""
        while len(out) < n:
            chunk = s.read(n - len(out))
            if chunk is None:
                self._wait(deadline, "read")
            elif not chunk:
                raise MQTTError("connection closed by the broker")
            else:
                out += chunk
        return out

    def _read_packet(self, block):
        s = self.sock
        if s is None:
            raise MQTTError("not connected")
        deadline = self._deadline()
        first = s.read(1)
        if first is None:
            if not block:
                return None, None
            first = self._read_exact(1, deadline)
        elif not first:
            raise MQTTError("connection closed by the broker")
        n = 0
        shift = 0
        while True:
            b = self._read_exact(1, deadline)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 21:
                raise MQTTError("malformed remaining length")
        return first[0] & 0xF0, self._read_exact(n, deadline) if n else b""
