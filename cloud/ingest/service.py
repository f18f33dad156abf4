"""The MQTT ingest loop: QoS 1, persistent session, acknowledgement only after commit.

    svc = IngestService.for_analyst(conn, store)     # or .for_correction(conn, store)
    svc.run(stop_event)

paho-mqtt's network thread only queues messages. This loop takes up to ``batch_size``
of them (or what arrived within ``batch_wait`` seconds), classifies each one, commits
records and dead letters in one transaction, and only then sends the PUBACKs. A crash
before the commit leaves the messages unacknowledged, so the broker redelivers them
to the same persistent session; storage is idempotent on (device, boot, seq) or token,
so a redelivery after a crash between commit and acknowledgement stores nothing twice.

Everything that must follow a commit, and only follow it, is in ``_committed``: the
end-to-end acknowledgement (``acks.Acknowledger``: each device learns which of the batch's
records the store now holds, docs/protocol.md 3.1; a board keeps a record until both of its
records are acknowledged so, never on the broker's PUBACK alone), then the PUBACKs of the
batch. What to acknowledge comes from the insert itself (the store's ``last_conflicted``),
not from reading the batch back; while more messages wait, the acknowledgements of several
batches go out together (``ACK_EVERY_S``), one message per device and boot.

The client is cloud/transport/mqttio.py's: its socket reads in blocks and writes the PUBACKs of a batch
in one call, and its network thread (``NetworkLoop``, not paho's ``loop_start``) reads every
buffered packet before it waits again; paho still builds, parses and tracks every packet.
The commit runs in the caller's thread, so the network thread keeps reading while SQLite or
PostgreSQL waits on the disk.

PUBACKs carry per-connection packet ids: after a reconnect, messages received on the
old connection are not acknowledged (the broker redelivers them; storing is idempotent).

A commit that fails for a reason that may pass (``RETRYABLE``: a busy or locked
database, a lost database connection, an OS error) is logged and retried with a
capped backoff that ``stop`` interrupts; the batch stays unacknowledged meanwhile.
Anything else (a damaged store, a schema mismatch, a bug) ends ``run`` with a
``DpsenseError`` whose text is one line. A broker that cannot be reached at start-up
raises ``BrokerUnreachable`` (cloud/transport/session.py).
"""
from __future__ import annotations

import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.errors import DpsenseError, ServiceError, StorageUnavailable, UsageError
from dpsense.cloud.ingest.acks import Acknowledger
from dpsense.cloud.ingest.classify import classify_correction, classify_reading
from dpsense.cloud.ingest.clock import ArrivalClock
from dpsense.cloud.transport import topics
from dpsense.cloud.transport.mqttio import BufferedClient, NetworkLoop
from dpsense.cloud.transport.session import Connection, Session
from dpsense.cloud.storage.repository import DeadLetter

# Errors of a commit that a later try of the same batch may not meet.
RETRYABLE = (StorageUnavailable, OSError)
# A busy ingest (more messages waiting after a commit) sends the end-to-end acknowledgements
# of its committed batches at least this often, or once this many records wait for one; an
# idle one at once. Boards resend what stays unacknowledged after seconds (docs/protocol.md 3.1).
ACK_EVERY_S = 0.1
ACK_MOST = 20000


@dataclass
class IngestStats:
    received: int = 0
    stored: int = 0
    duplicates: int = 0
    dead: int = 0
    batches: int = 0
    reconnects: int = 0
    acked: int = 0                  # records acknowledged to their devices (resends included)
    started: float = field(default_factory=time.monotonic)


class _Msg(NamedTuple):
    topic: str
    payload: bytes
    mid: int
    qos: int
    gen: int
    received_at: float


class _Inbox:
    """Messages from paho's thread to the loop: a deque (append and popleft are atomic) and an
    event set when a message lands in an empty inbox, so the loop sleeps while there is nothing
    to do and a busy inbox costs no lock per message (``queue.Queue`` takes two)."""

    def __init__(self) -> None:
        self._items: deque[_Msg] = deque()
        self._arrived = threading.Event()

    def put(self, m: _Msg) -> None:
        items = self._items
        items.append(m)
        if len(items) == 1:
            self._arrived.set()

    def empty(self) -> bool:
        return not self._items

    def take(self, most: int, first_wait: float, more_wait: float) -> list[_Msg]:
        """Up to ``most`` messages: wait up to ``first_wait`` s for one, then up to ``more_wait``
        s more while fewer than ``most`` are in."""
        items = self._items
        if not self._wait(first_wait):
            return []
        batch: list[_Msg] = []
        deadline = time.monotonic() + more_wait
        while True:
            take = min(most - len(batch), len(items))
            batch.extend(items.popleft() for _ in range(take))
            if len(batch) >= most:
                return batch
            left = deadline - time.monotonic()
            if left <= 0 or not self._wait(left):
                return batch

    def _wait(self, timeout: float) -> bool:
        if self._items:
            return True
        # Cleared before the second look: a put() after that look sets it again.
        self._arrived.clear()
        return bool(self._items) or (self._arrived.wait(timeout) and bool(self._items))


def shared_filter(share: str | None, topic_filter: str) -> str:
    """``topic_filter`` itself, or as a member of the MQTT shared subscription ``share``.

    The broker hands each message of a shared subscription to one of the group's sessions
    (docs/scale-out.md): N ingest workers with the same ``share`` split the stream between them,
    each acknowledging only what it committed.
    """
    if share is None:
        return topic_filter
    if not share or any(c in share for c in "/+#"):
        raise UsageError("a shared subscription group is a non-empty name without '/', '+' or '#', got %r"
                         % share)
    return "$share/%s/%s" % (share, topic_filter)


class IngestService:
    """Subscribe to one topic filter and store what arrives; see the module docstring."""

    def __init__(self, conn: Connection, topic_filter: str, classify: Callable[[str, bytes, float], Any],
                 store: Any, batch_size: int = 500, batch_wait: float = 0.05,
                 log: Callable[[str], None] | None = None, progress_every: float = 5.0,
                 retire: bool = False,
                 acknowledger: Callable[[Callable[[str, bytes], None]], Acknowledger] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.conn = conn
        self.topic_filter = topic_filter
        # Retire a shared-subscription worker: leave the group, then store what its session holds.
        self.retire = retire
        self.classify = classify
        self.store = store
        self.batch_size = batch_size
        self.batch_wait = batch_wait
        self.stats = IngestStats()
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        # Arrival stamps: a wall-clock step must not reorder readings nor move their windows.
        self.clock = clock or ArrivalClock(log=self.log, who="ingest")
        self.progress_every = progress_every
        self._q = _Inbox()
        self._gen = 0
        self.session = Session(conn, "ingest", self.log)
        self._client = self._make_client()
        self._net = NetworkLoop(self._client, "ingest", min_delay=0.2, max_delay=5.0)
        self.acker = acknowledger(self._publish_ack) if acknowledger is not None else None
        self._acks_at = time.monotonic()

    @classmethod
    def for_analyst(cls, conn: Connection, store: Any, share: str | None = None, **kw: Any) -> "IngestService":
        kw.setdefault("acknowledger", Acknowledger.for_readings)
        return cls(conn, shared_filter(share, topics.READINGS_ALL), classify_reading, store, **kw)

    @classmethod
    def for_correction(cls, conn: Connection, store: Any, share: str | None = None, **kw: Any) -> "IngestService":
        """Plain correction records, unchecked for their device: the services run
        cloud/correction/sealed.py's ``sealed_ingest`` instead (sealed records, no downgrade)."""
        kw.setdefault("acknowledger", Acknowledger.for_corrections)
        return cls(conn, shared_filter(share, topics.CORRECTIONS), classify_correction, store, **kw)

    def _publish_ack(self, topic: str, payload: bytes) -> None:
        # QoS 0: a lost acknowledgement costs the board a resend, which is acknowledged again.
        self._client.publish(topic, payload, qos=0)

    # -- paho callbacks (network thread) ------------------------------------------------
    def _make_client(self) -> BufferedClient:
        c = BufferedClient(CallbackAPIVersion.VERSION2, client_id=self.conn.client_id,
                           clean_session=False, protocol=mqtt.MQTTv311, manual_ack=True,
                           coalesce_writes=True)
        self.conn.apply(c)
        c.max_inflight_messages_set(1000)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe
        return c

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not self.session.accepted(reason):
            return
        self._gen += 1
        if self._gen > 1:
            self.stats.reconnects += 1
        if self.retire:
            # The broker stops giving this session a share at once; what it queued for it before
            # is still delivered, and is stored and acknowledged as usual.
            client.unsubscribe(self.topic_filter)
            self.log("ingest: retiring session %s: left %s; storing what it still holds"
                     % (self.conn.client_id, self.topic_filter))
            return
        client.subscribe(self.topic_filter, qos=1)

    def _on_subscribe(self, client: mqtt.Client, userdata: Any, mid: int, reason_codes: Any, props: Any) -> None:
        if any(rc.is_failure for rc in reason_codes):
            self.log("ingest: subscription to %s refused: %s" % (self.topic_filter, reason_codes))
        else:
            self.log("ingest: subscribed to %s (session %s)" % (self.topic_filter, self.conn.client_id))

    def _on_disconnect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.session.lost(reason)

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        self._q.put(_Msg(msg.topic, bytes(msg.payload), msg.mid, msg.qos, self._gen, self.clock()))

    # -- main loop ------------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> None:
        self.session.start(self._client, timeout, loop=self._net)

    def _take_batch(self) -> list[_Msg]:
        return self._q.take(self.batch_size, 0.2, self.batch_wait)

    def process(self, batch: list[_Msg], stop: threading.Event | None = None) -> bool:
        """Store ``batch`` and acknowledge it; False if ``stop`` was set while a failed commit
        waited for its retry (the batch is then left to the broker to redeliver)."""
        records: list[Any] = []
        dead: list[DeadLetter] = []
        for m in batch:
            r = self.classify(m.topic, m.payload, m.received_at)
            (dead if isinstance(r, DeadLetter) else records).append(r)
        delay = 0.1
        while True:
            try:
                inserted = self.store.add_batch(records, dead)
                break
            except RETRYABLE as e:
                self.log("ingest: commit of %d messages failed (%s: %s); retrying in %.1f s"
                         % (len(batch), type(e).__name__, e, delay))
            if stop is None:
                time.sleep(delay)
            elif stop.wait(delay):
                self.log("ingest: stopping; %d messages left unacknowledged, the broker redelivers them"
                         % len(batch))
                return False
            delay = min(delay * 2, 5.0)
        s = self.stats
        s.received += len(batch)
        s.stored += inserted
        # A record whose key is stored with other content is dead-lettered, not a duplicate.
        conflicts = self.store.last_conflicts
        s.duplicates += len(records) - inserted - conflicts
        s.dead += len(dead) + conflicts
        s.batches += 1
        self._committed(batch, records)
        return True

    def _committed(self, batch: list[_Msg], records: list[Any]) -> None:
        """After the commit of ``batch``, and only then: tell the devices which of ``records``
        the store holds (all but the store's ``last_conflicted``), then acknowledge the batch
        to the broker. paho queues each message and PUBACK; the network thread, woken once,
        writes them in one call."""
        acker = self.acker
        if acker is not None:
            acker.add(records, self.store.last_conflicted)
            now = time.monotonic()
            # While more waits in the inbox, several batches share one message per device.
            if self._q.empty() or now - self._acks_at >= ACK_EVERY_S or acker.pending >= ACK_MOST:
                acker.flush()
                self._acks_at = now
                self.stats.acked = acker.acked
        gen = self._gen
        client = self._client
        for m in batch:
            if m.qos > 0 and m.gen == gen:
                client.ack(m.mid, m.qos)
        self._net.wake()

    def run(self, stop: threading.Event, idle_exit: float | None = None) -> IngestStats:
        """Process until ``stop`` is set (or nothing arrived for ``idle_exit`` seconds).
        An error that is not retried ends it as a ``DpsenseError``."""
        self.start()
        last_progress = last_msg = time.monotonic()
        try:
            while not stop.is_set():
                batch = self._take_batch()
                now = time.monotonic()
                if batch:
                    self.process(batch, stop)
                    last_msg = now
                elif idle_exit is not None and now - last_msg > idle_exit:
                    break
                if now - last_progress >= self.progress_every:
                    self._progress()
                    last_progress = now
            while not self._q.empty():
                if not self.process(self._take_batch(), stop):
                    break
            if self.acker is not None:
                self.acker.flush()
                self.stats.acked = self.acker.acked
        except DpsenseError:
            raise
        except Exception as e:  # a bug or an unforeseen failure: one line, the cause chained
            raise ServiceError("ingest stopped: %s: %s" % (type(e).__name__, e)) from e
        finally:
            self._net.stop()
        self._progress()
        return self.stats

    def _progress(self) -> None:
        s = self.stats
        rate = s.received / max(1e-9, time.monotonic() - s.started)
        self.log("ingest %s: %d received, %d stored, %d duplicates, %d dead letters, %d acknowledged"
                 " (%.0f msg/s)" % (self.topic_filter, s.received, s.stored, s.duplicates, s.dead, s.acked, rate))
