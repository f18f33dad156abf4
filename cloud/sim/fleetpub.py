"""The simulated fleet's MQTT side: one connection per virtual device, spread over worker processes.

    pub = FleetPublisher(settings, passwords, devices)      # passwords: account -> password
    pub.connect()                                            # every device connected, or an error
    seconds = pub.publish(enc)                               # QoS 1; returns when the cloud committed
                                                             # every record (both acknowledgements)
    seconds = pub.publish(enc, wait="broker")                # ... when the broker PUBACKed each once
    pub.send([(device_id, topic, payload), ...])             # or stream messages and poll pub.acked
    pub.stream(enc)                                          # or hand records out and poll pub.committed
    pub.stream_records([(device_id, reading, correction), ...])
    uncommitted = pub.close()                                # records the cloud never acknowledged

Why processes. A paho client costs tens of microseconds of Python per QoS 1 message (build
and send the PUBLISH, parse the PUBACK); one interpreter holding every connection, with a
network thread per client contending for the GIL, published about 2,800 readings (5,600
messages) per second. Each worker here is a process that owns the connections of its devices
(device ``d`` goes to worker ``(d - 1) % processes``) and drives them from one thread with
paho's external-loop calls (``loop_read``, ``loop_write``, ``loop_misc`` on ``select``), so
no thread switch and no wake-up byte per message. The clients are cloud/transport/mqttio.py's
``BufferedClient`` with coalesced writes: a connection's PUBLISH packets of one slice leave in
one ``send`` and its PUBACKs are read in blocks, not three ``recv`` calls each.
bench/simulator.py measures the rate.

Why one account per connection. The broker makes a connection's client id its account name
(``use_username_as_clientid``, cloud/deploy/broker.py), so two connections under one account would
take each other's session. Each simulated device therefore connects as its own device
account (``d1``, ``d2``, ...), as a board does; ``Broker.add_devices`` makes the accounts and
returns their passwords, which travel to the workers over their pipes and are kept nowhere.

Books. Like a board (docs/protocol.md 3.1), each worker keeps every record of ``publish`` until
the cloud has committed both of its records: each simulated device subscribes to its own
acknowledgement topic, and a record whose acknowledgements are still missing
``COMMIT_TIMEOUT_S`` after it was (re)sent is published again, the same bytes. ``committed``
counts the records whose both acknowledgements arrived, each once, and ``publish`` waits for
them: a record is done when the cloud committed it, never on the broker's PUBACK (the broker
acknowledges what it may still lose, and a resend is acknowledged again). ``acked`` counts
PUBACKs of first sends only, so resends never inflate it; it measures the broker, not delivery.
``close`` returns how many records the books still held, which callers must say. A connection
lost after start-up (a broker restart, or the broker dropping the client) is reported through
``on_event`` and reconnected every ``_RETRY_S``, as a board does; on reconnecting, a device
sends again everything its books still hold. A device that stays away ``RECONNECT_FOR_S`` ends
the run with an error.

Order. A device's messages leave in the order given, over its one connection, so the broker
sees each device's readings and correction records in that order, as before. Messages of
different devices interleave as the workers run.
"""
from __future__ import annotations

import os
import select
import struct
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, Callable, Protocol

import numpy.typing as npt
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.config import Settings
from dpsense.cloud.transport.mqttio import BufferedClient
from dpsense.protocol import wire
from dpsense.protocol.layout import READING_KEY_AT

Message = tuple[int, str, bytes]        # (device id, topic, payload)


class Records(Protocol):
    """What ``publish`` reads of cloud/sim/simulate.py's ``Encoded``: per record its device, its
    reading and its correction record, in publishing order."""

    @property
    def device_ids(self) -> npt.NDArray[Any]: ...
    @property
    def readings(self) -> list[bytes]: ...
    @property
    def corrections(self) -> list[bytes]: ...

_CHUNK = 2000               # messages per pipe transfer to a worker
_READ_EVERY = 256           # messages published between two looks at the sockets
_REPORT_S = 0.02            # a worker reports its PUBACK count at most this often
_INFLIGHT = 1000            # unacknowledged messages per connection, on average over a worker's
COMMIT_TIMEOUT_S = 5.0      # a record not committed this long after it was sent is sent again
RECONNECT_FOR_S = 60.0      # how long a device tries to get its broker back
_RETRY_S = 0.5              # between two reconnection attempts


class FleetPublisher:
    """The fleet's connections in ``processes`` worker processes (default: one per CPU, at most
    one per device); see the module docstring."""

    def __init__(self, settings: Settings, passwords: dict[str, str], devices: int,
                 processes: int | None = None, commit_timeout_s: float = COMMIT_TIMEOUT_S,
                 on_event: Callable[[str], None] | None = None) -> None:
        if devices < 1:
            raise ValueError("devices must be >= 1")
        if processes is not None and processes < 1:
            raise ValueError("processes must be >= 1")
        self.settings = settings
        self.devices = devices
        self.processes = min(devices, processes or os.cpu_count() or 1)
        self.commit_timeout_s = commit_timeout_s
        self._accounts: list[list[tuple[int, str, str]]] = [[] for _ in range(self.processes)]
        for d in range(1, devices + 1):
            name = topics.device_username(d)
            if name not in passwords:
                raise ValueError("no password for simulated device %s" % name)
            self._accounts[(d - 1) % self.processes].append((d, name, passwords[name]))
        self._pipes: list[Connection] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._acked = 0
        self._committed = 0
        self._handed = 0
        self._uncommitted_at_close = 0
        self.on_event = on_event
        self.events: list[str] = []         # connection losses and returns, in order

    def _worker_of(self, device_id: int) -> int:
        if not 1 <= device_id <= self.devices:
            raise ValueError("no simulated device %d" % device_id)
        return (device_id - 1) % self.processes

    def connect(self, timeout: float = 10.0) -> None:
        """Start the workers and connect every device; ``ConnectionError`` says which failed."""
        for accounts in self._accounts:
            # A fresh interpreter per worker (``python -m``), whatever threads or main module the
            # caller has; the passwords go over the socket pair, never on a command line.
            mine, theirs = socket.socketpair()
            p = subprocess.Popen([sys.executable, "-m", "dpsense.cloud.sim.fleetpub", str(theirs.fileno())],
                                 pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
            theirs.close()
            pipe = Connection(mine.detach())
            self._pipes.append(pipe)
            self._procs.append(p)
            pipe.send((self.settings.broker_host, self.settings.broker_port, self.settings.tls_ca, accounts,
                       timeout, self.commit_timeout_s))
        for pipe in self._pipes:
            reply = self._recv(pipe, timeout + 30)
            if reply[0] != "connected":
                self.close()
                raise ConnectionError(str(reply[1]))

    def _recv(self, pipe: Connection, timeout: float) -> tuple[object, ...]:
        if not pipe.poll(timeout):
            raise ConnectionError("a publisher process did not answer within %.0f s" % timeout)
        try:
            reply: tuple[object, ...] = pipe.recv()
        except EOFError:
            raise ConnectionError("a publisher process ended unexpectedly") from None
        return reply

    def send(self, messages: Sequence[Message]) -> None:
        """Hand ``messages`` to the workers of their devices; they publish with QoS 1 in order."""
        self._hand_out("messages", messages)

    def _hand_out(self, kind: str, items: Sequence[tuple[int, object, bytes]]) -> None:
        per: list[list[tuple[int, object, bytes]]] = [[] for _ in self._pipes]
        for m in items:
            per[self._worker_of(m[0])].append(m)
        # Chunk by chunk, round robin; a worker takes a chunk in between two slices of publishing.
        for i in range(0, max(len(ms) for ms in per), _CHUNK):
            for pipe, ms in zip(self._pipes, per):
                if i < len(ms):
                    self._poll()
                    pipe.send((kind, ms[i:i + _CHUNK]))

    def _poll(self) -> None:
        """Take in the workers' PUBACK counts (and their errors)."""
        for pipe in self._pipes:
            while pipe.poll():
                try:
                    kind, value = pipe.recv()
                except EOFError:
                    raise ConnectionError("a publisher process ended unexpectedly") from None
                if kind == "acked":
                    self._acked += int(value)
                elif kind == "committed":
                    self._committed += int(value)
                elif kind == "event":
                    self.events.append(str(value))
                    if self.on_event is not None:
                        self.on_event(str(value))
                elif kind == "closed":
                    self._uncommitted_at_close += int(value)
                else:
                    raise ConnectionError(str(value))

    @property
    def acked(self) -> int:
        """Messages the broker acknowledged so far, first sends only (a resend's PUBACK is not
        counted again)."""
        self._poll()
        return self._acked

    @property
    def committed(self) -> int:
        """Records of ``publish`` whose both records the cloud acknowledged as committed."""
        self._poll()
        return self._committed

    def stream(self, enc: Records) -> None:
        """Hand every record of ``enc`` to the workers and return at once; ``committed`` tells
        how many the cloud has committed (the books keep and resend the rest)."""
        self.stream_records([(int(d), r, c) for d, r, c in zip(enc.device_ids, enc.readings, enc.corrections)])

    def stream_records(self, records: Sequence[tuple[int, bytes, bytes]]) -> None:
        """``stream`` for (device id, reading, correction record) triples."""
        self._handed += len(records)
        # Records travel as (device, reading, correction); the worker knows the two topics.
        self._hand_out("records", records)

    @property
    def uncommitted(self) -> int:
        """Records handed to ``publish``/``stream`` whose acknowledgements have not both arrived."""
        return self._handed - self.committed

    def wait_committed(self, timeout: float, progress: Callable[[int, int], None] | None = None) -> bool:
        """Wait until every record handed out so far is committed; False when ``timeout`` ran out
        first (``uncommitted`` says how many are missing)."""
        deadline = time.monotonic() + timeout
        step = max(1, self._handed // 10)
        said = self.committed // step * step
        while self.committed < self._handed:
            if progress and self.committed // step > said // step:
                said = self.committed // step * step
                progress(said, self._handed)
            if time.monotonic() > deadline:
                return False
            for pipe in self._pipes:
                pipe.poll(0.005)
        return True

    def publish(self, enc: Records, progress: Callable[[int, int], None] | None = None,
                timeout: float = 600.0, wait: str = "committed") -> float:
        """Publish every record of ``enc`` (reading, then its correction record); seconds until
        the cloud committed every record (``wait="committed"``, the default, which needs both
        ingests running), or until the broker acknowledged each message once (``wait="broker"``:
        a measure of the broker, not delivery). ``TimeoutError`` says how many were not."""
        if wait not in ("committed", "broker"):
            raise ValueError("wait must be 'committed' or 'broker'")
        n = len(enc.readings)
        t0 = time.perf_counter()
        if wait == "committed":
            start = self.committed
            self.stream(enc)
            if not self.wait_committed(timeout, progress):
                raise TimeoutError("only %d of %d records committed within %.0f s"
                                   % (self.committed - start, n, timeout))
            return time.perf_counter() - t0
        start = self.acked
        total = 2 * n
        step = max(1, n // 10)
        self.stream(enc)
        deadline = time.monotonic() + timeout
        said = 0
        while True:
            done = self.acked - start
            if progress and done // 2 // step > said // step:
                said = done // 2 // step * step
                progress(min(said, n), n)
            if done >= total:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("only %d of %d messages acknowledged by the broker" % (done, total))
            for pipe in self._pipes:
                pipe.poll(0.005)
        return time.perf_counter() - t0

    def close(self) -> int:
        """Stop the workers; returns how many records their books still held (never committed)."""
        for pipe in self._pipes:
            try:
                pipe.send(("close", None))
            except OSError:
                pass
        for pipe in self._pipes:
            try:
                while pipe.poll(10):
                    kind, value = pipe.recv()
                    if kind == "closed":
                        self._uncommitted_at_close += int(value)
                        break
                    if kind == "committed":
                        self._committed += int(value)
            except (EOFError, OSError):
                pass
        for p in self._procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pipe in self._pipes:
            pipe.close()
        self._pipes, self._procs = [], []
        left, self._uncommitted_at_close = self._uncommitted_at_close, 0
        return left


# -- worker process ---------------------------------------------------------------------------

def _worker_main(pipe: Connection) -> None:
    try:
        host, port, tls_ca, accounts, timeout, commit_timeout_s = pipe.recv()
    except EOFError:
        return
    try:
        w = _Worker(pipe, host, port, tls_ca, accounts, commit_timeout_s)
        w.connect(timeout)
    except (OSError, ConnectionError, ValueError) as e:
        pipe.send(("error", "simulated devices could not connect to the broker at %s:%d: %s"
                   % (host, port, e)))
        return
    pipe.send(("connected", len(accounts)))
    w.started = True
    try:
        w.run()
    except EOFError:            # the parent is gone: nobody waits for the PUBACKs
        pass
    except (OSError, ConnectionError) as e:
        try:
            pipe.send(("error", "a simulated device lost the broker: %s" % e))
        except OSError:
            pass
    finally:
        w.close()


class _Worker:
    """The connections of some devices, driven from one thread by paho's external-loop calls."""

    def __init__(self, pipe: Connection, host: str, port: int, tls_ca: str | None,
                 accounts: list[tuple[int, str, str]], commit_timeout_s: float = COMMIT_TIMEOUT_S) -> None:
        self.pipe = pipe
        self.commit_timeout_s = commit_timeout_s
        self.host = host
        self.port = port
        self.clients: dict[int, BufferedClient] = {}
        self.refused: list[str] = []
        self.published = 0
        self.pubacks = 0                        # every PUBACK: the window of unacknowledged messages
        self.acked = 0                          # PUBACKs of first sends: what ``acked`` reports
        self.resend_mids: dict[int, set[int]] = {d: set() for d, _, _ in accounts}
        # (device, topic, payload, a resend?)
        self.todo: deque[tuple[int, str, bytes, bool]] = deque()
        self.reading_topic = {d: topics.READINGS % name for d, name, _ in accounts}
        # device -> (boot, seq) -> [reading, correction, bits not committed (1, 2), last sent]
        self.books: dict[int, dict[tuple[int, int], list[Any]]] = {d: {} for d, _, _ in accounts}
        self.committed = 0
        self.resent = 0
        self.subscribed: set[str] = set()
        self.device_of = {name: d for d, name, _ in accounts}
        self.down: dict[int, float] = {}        # device -> when it lost the broker
        self._retry_at = 0.0
        self.started = False                    # connect() done: losses are retried from now on
        for d, name, password in accounts:
            c = BufferedClient(CallbackAPIVersion.VERSION2, client_id=name, clean_session=True,
                               protocol=mqtt.MQTTv311, coalesce_writes=True)
            c.username_pw_set(name, password)
            if tls_ca:
                c.tls_set(ca_certs=tls_ca)
            # paho's own limit rescans every unacknowledged message at each PUBACK (its
            # _update_inflight), quadratic in the window; the worker keeps the window instead.
            c.max_inflight_messages_set(0)
            c.max_queued_messages_set(0)
            c.on_publish = self._on_publish
            c.on_connect = self._on_connect
            c.on_subscribe = self._on_subscribe
            c.on_message = self._on_message
            c.user_data_set(name)
            self.clients[d] = c

    def _on_connect(self, client: mqtt.Client, userdata: object, flags: object, reason: ReasonCode,
                    props: object) -> None:
        if reason.is_failure:
            self.refused.append("%s: %s" % (userdata, reason))
            return
        client.subscribe(topics.ACK % userdata, qos=0)
        d = self.device_of[str(userdata)]
        since = self.down.pop(d, None)
        if since is not None:
            self._event("%s reconnected after %.1f s; sending again the %d records its books hold"
                        % (userdata, time.monotonic() - since, len(self.books[d])))
            self._resend_all(d)

    def _on_subscribe(self, client: mqtt.Client, userdata: object, mid: int, reasons: Any,
                      props: object) -> None:
        if any(r.is_failure for r in reasons):
            self.refused.append("%s: acknowledgement topic refused" % userdata)
        else:
            self.subscribed.add(str(userdata))

    def _on_message(self, client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        try:
            # Of the kind its topic names only, as a board takes it (docs/protocol.md 3.1).
            of, device, boot, ranges = wire.decode_ack(msg.payload, msg.topic)
        except wire.ProtocolError:
            return
        book = self.books.get(device)
        if book is None:
            return
        bit = 1 if of == wire.KIND_READING else 2
        for first, last in ranges:
            seqs = range(first, last + 1) if last - first < len(book) else [s for b, s in book if b == boot]
            for s in seqs:
                e = book.get((boot, s))
                if e is not None and first <= s <= last and e[2] & bit:
                    e[2] &= ~bit
                    if not e[2]:
                        del book[(boot, s)]
                        self.committed += 1

    def _on_publish(self, client: mqtt.Client, userdata: object, mid: int, reason: object, props: object) -> None:
        self.pubacks += 1
        resent = self.resend_mids[self.device_of[str(userdata)]]
        if mid in resent:
            resent.discard(mid)
        else:
            self.acked += 1

    def _event(self, text: str) -> None:
        try:
            self.pipe.send(("event", text))
        except OSError:
            pass

    def connect(self, timeout: float) -> None:
        for c in self.clients.values():
            # Never loop() or loop_start(): either would make paho's wake-up socket pair, one
            # extra send per message.
            c.connect(self.host, self.port, keepalive=30)
        deadline = time.monotonic() + timeout
        while not (all(c.is_connected() for c in self.clients.values())
                   and len(self.subscribed) == len(self.clients)):
            if self.refused:
                raise ConnectionError("refused: " + ", ".join(self.refused))
            if time.monotonic() > deadline:
                raise ConnectionError("no CONNACK within %.0f s" % timeout)
            try:
                self._service(0.05)
            except ConnectionError:
                if self.refused:        # the broker closes the connection after a refusal
                    raise ConnectionError("refused: " + ", ".join(self.refused)) from None
                raise

    def _lost(self, d: int, why: str) -> None:
        """Device ``d`` lost the broker: before start-up an error, afterwards retried."""
        if not self.started:
            raise ConnectionError(why)
        if d not in self.down:
            self.down[d] = time.monotonic()
            self.resend_mids[d].clear()         # a new connection numbers its messages anew
            # The broker's log says why it dropped a client (Mosquitto 2.0.11 logs some plain
            # disconnects as "out of memory"); the device itself only sees the connection end.
            self._event("d%d lost the broker (%s); reconnecting, %d records not yet committed"
                        % (d, why, len(self.books[d])))

    def _reconnect(self) -> None:
        now = time.monotonic()
        if not self.down or now < self._retry_at:
            return
        self._retry_at = now + _RETRY_S
        for d, since in list(self.down.items()):
            if now - since > RECONNECT_FOR_S:
                raise ConnectionError("device d%d: no broker for %.0f s" % (d, now - since))
            c = self.clients[d]
            if c.socket() is not None:
                continue                        # connecting: on_connect marks it up
            try:
                c.reconnect()
            except OSError:
                pass

    def _resend_all(self, d: int) -> None:
        """After a reconnect, everything the books of ``d`` hold goes out again, the same bytes."""
        now = time.monotonic()
        for e in self.books[d].values():
            e[3] = now
            if e[2] & 1:
                self.todo.append((d, self.reading_topic[d], e[0], True))
            if e[2] & 2:
                self.todo.append((d, topics.CORRECTIONS, e[1], True))

    def _service(self, wait: float) -> None:
        """Read what the sockets hold (PUBACKs, CONNACKs), write what paho could not send yet;
        wait up to ``wait`` s for either, or for the parent's next message."""
        socks: dict[int, BufferedClient] = {}
        device: dict[int, int] = {}
        buffered: list[int] = []
        wants: list[int] = []
        for d, c in self.clients.items():
            sock = c.buffered_socket()
            if sock is None:
                self._lost(d, "connection lost")
                continue
            fd = sock.fileno()
            socks[fd] = c
            device[fd] = d
            # What publish() put in the socket's buffer leaves now, in one send.
            if sock.unflushed:
                sock.flush()
            if sock.pending():
                buffered.append(fd)
            if c.want_write() or sock.unflushed:
                wants.append(fd)
        pipe = self.pipe.fileno()
        r, w, _ = select.select([*socks, pipe], wants, [], 0 if buffered else wait)
        for fd in set(r) | set(buffered):
            if fd != pipe:
                rc = socks[fd].loop_read()
                if rc != mqtt.MQTT_ERR_SUCCESS:
                    self._lost(device[fd], mqtt.error_string(rc))
        for fd in w:
            c = socks[fd]
            if c.buffered_socket() is None:
                continue                        # lost while reading
            c.loop_write()
            sock = c.buffered_socket()
            if sock is not None:
                sock.flush()

    def run(self) -> None:
        reported = committed_said = 0
        last_report = last_misc = time.monotonic()
        pipe, todo = self.pipe, self.todo
        while True:
            # Take in whatever the parent sent, so its sends to the other workers never wait on a
            # busy one for long.
            if pipe.poll():
                kind, value = pipe.recv()
                if kind == "close":
                    pipe.send(("committed", self.committed - committed_said))
                    pipe.send(("closed", sum(len(b) for b in self.books.values())))
                    break
                if kind == "records":
                    now = time.monotonic()
                    for d, reading, correction in value:
                        self.books[d][struct.unpack_from("<II", reading, READING_KEY_AT)] = \
                            [reading, correction, 3, now]
                        todo.append((d, self.reading_topic[d], reading, False))
                        todo.append((d, topics.CORRECTIONS, correction, False))
                else:
                    todo.extend((d, t, p, False) for d, t, p in value)
            room = _INFLIGHT * len(self.clients) - (self.published - self.pubacks)
            for _ in range(max(0, min(_READ_EVERY, len(todo), room))):
                d, topic, payload, resend = todo.popleft()
                if d in self.down:
                    continue                    # its books resend it on reconnecting
                info = self.clients[d].publish(topic, payload, qos=1)
                if info.rc != mqtt.MQTT_ERR_SUCCESS:
                    self._lost(d, "device d%d: %s" % (d, mqtt.error_string(info.rc)))
                    continue
                if resend:
                    self.resend_mids[d].add(info.mid)
                self.published += 1
            self._service(0 if todo and room > 0 else 0.05)
            self._reconnect()
            now = time.monotonic()
            if self.acked != reported and (now - last_report >= _REPORT_S or self.pubacks == self.published):
                pipe.send(("acked", self.acked - reported))
                reported = self.acked
                last_report = now
            if self.committed != committed_said and (now - last_report >= _REPORT_S or not todo):
                pipe.send(("committed", self.committed - committed_said))
                committed_said = self.committed
            if now - last_misc >= 1.0:
                for c in self.clients.values():
                    c.loop_misc()
                self._resend_overdue(now)
                last_misc = now

    def _resend_overdue(self, now: float) -> None:
        """Publish again, the same bytes, what is still not committed ``commit_timeout_s`` after
        it was sent (a message the broker lost, an acknowledgement lost, an ingest restart)."""
        for d, book in self.books.items():
            for e in book.values():
                if now - e[3] > self.commit_timeout_s:
                    e[3] = now
                    self.resent += 1
                    if e[2] & 1:
                        self.todo.append((d, self.reading_topic[d], e[0], True))
                    if e[2] & 2:
                        self.todo.append((d, topics.CORRECTIONS, e[1], True))

    def close(self) -> None:
        for c in self.clients.values():
            c.disconnect()
            try:
                self._service(0)
            except (OSError, ValueError):
                pass


if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[1])))
