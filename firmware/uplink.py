"""Moves records from the ring buffer to the broker, and survives losing the broker.

    up = Uplink(client, ring, opener, b"dpsense/readings/d7", b"dpsense/status/d7",
                b"dpsense/ack/d7/+", clock, rng)
    while True:
        up.service()          # connect when due, publish, read PUBACKs and acks, ping; never raises OSError

Each record is two QoS 1 messages: the reading on the device's readings topic and the
correction on the shared corrections topic. Their packet ids derive from the record's
ordinal, so a resend reuses them. A PUBACK only says the broker has a message (Mosquitto
writes its store asynchronously, so a broker crash can lose it): a record leaves the ring
only when the cloud has *committed* both of its records, which each ingest says on the
device's acknowledgement topics, one per kind (docs/protocol.md 3.1; subscribed at QoS 0
on every connect; an acknowledgement of the other kind than its topic's is ignored). Until then it is resent from the ring's bytes, never re-encoded, with DUP set:
after every reconnect, and when the oldest record in the ring stayed unacknowledged for
``commit_timeout_ms`` although the broker had it (everything still pending from there is
sent again; the cloud stores a record once and acknowledges duplicates).
A PUBACK overdue by ``ack_timeout_ms`` means a dead connection: reconnect, resend.

Reconnects back off exponentially from ``backoff_min_ms`` to ``backoff_max_ms``, with
up to 25% random jitter so a fleet does not return in lockstep after a broker restart.
The backoff resets only once a connection has moved the ring on (a record's PUBACK, or a
committed acknowledgement that freed a record), or carried any answer while nothing of the
ring was outstanding, so a broker that accepts and then drops us is not hammered.

Mosquitto 2.0 answers a publish it refuses (too large, not permitted) by closing the
connection, and would do so again for every resend of the same bytes: a reconnect storm
that also blocks every record behind it. The suspect of a lost connection is the oldest
record with a message sent on it that the broker has never PUBACKed, on this connection or
an earlier one; a record the broker PUBACKed and that only waits for the cloud's commit
never is. A record that was the suspect when ``REFUSED_AFTER`` connections in a row ended
is taken as refused: it leaves the ring, is counted in ``refused`` and logged, and is never
sent again (docs/protocol.md, section 11). A broker that is down (connects fail) or killed
once while a record is in flight, or a slow ingest, never gets a record dropped: failed
connects do not count, and a record's first PUBACK clears it.
Status messages (small JSON texts) are QoS 1 too but live in RAM only: the newest few
are kept while the broker is away.
"""

from mqtt import PUBACK, PUBLISH, MQTTError

try:
    from shared_protocol import topics, wire
except ImportError:
    import topics  # type: ignore[no-redef]  # flat file system: the same module
    import wire  # type: ignore[no-redef]

CORRECTIONS = topics.CORRECTIONS.encode()
_SUB_PID = 65535            # the acknowledgement topic's SUBSCRIBE
_STATUS_PID0 = 65001        # record ids use 1..65000, status 65001..65534
_STATUS_KEEP = 4
_SYNC_MS = 500
REFUSED_AFTER = 4           # connections in a row lost with the same oldest record unacknowledged


def record_pid(o, part):
    return (2 * o + part) % 65000 + 1


class Uplink:
    """See the module docstring; ``opener()`` returns a connected socket or raises OSError."""

    def __init__(self, client, ring, opener, reading_topic, status_topic, ack_topic, clock, rng,
                 max_inflight=8, ack_timeout_ms=10000, backoff_min_ms=250,
                 backoff_max_ms=30000, link_up=None, log=print, commit_timeout_ms=15000):
        self.client = client
        self.ring = ring
        self.opener = opener
        self.reading_topic = reading_topic
        self.status_topic = status_topic
        self.ack_topic = ack_topic
        self.commit_timeout_ms = commit_timeout_ms
        self.clock = clock
        self.rng = rng
        self.max_msgs = 2 * max_inflight
        self.ack_timeout_ms = ack_timeout_ms
        self.backoff_min_ms = backoff_min_ms
        self.backoff_max_ms = backoff_max_ms
        self.link_up = link_up
        self.log = log
        self.up = False
        self.inflight = {}               # pid -> (ordinal, part, sent at)
        self._next = ring.tail
        # Records found in the ring at boot may have reached the broker before the reset.
        self._sent_upto = ring.head
        self._status = []                # [pid, payload, times sent, sent on this connection]
        self._status_pid = _STATUS_PID0
        self._backoff = backoff_min_ms
        self._healthy = False
        self._retry_at = clock.ticks_ms()
        self._synced_at = self._retry_at
        self._tail = ring.tail
        self._tail_since = self._retry_at
        self.connects = 0
        self.published = 0
        self.resent = 0
        self.refused = 0
        self._suspect = -1               # oldest record outstanding when connections were lost
        self._suspect_losses = 0
        self._took = {}                  # ordinal -> parts the broker has PUBACKed at least once
        self.acks = 0               # acknowledgement messages taken
        self.bad_acks = 0           # acknowledgement messages that did not decode

    def status(self, payload):
        """Queue a status text; the oldest is forgotten beyond a few unsent ones."""
        if len(self._status) >= _STATUS_KEEP:
            self._status.pop(0)
        self._status.append([self._status_pid, payload, 0, False])
        self._status_pid = self._status_pid + 1 if self._status_pid < _SUB_PID - 1 else _STATUS_PID0

    def service(self):
        c = self.clock
        now = c.ticks_ms()
        if not self.up and c.ticks_diff(now, self._retry_at) >= 0:
            self._connect(now)
        if self.up:
            try:
                self._pump(now)
                while True:
                    got = self.client.poll()
                    if got is None:
                        break
                    if got[0] == PUBACK:
                        moved = self._acked(got[1])
                    elif got[0] == PUBLISH:
                        moved = self._committed(got[1], got[2])
                    else:
                        moved = False
                    if (moved or not self.inflight) and not self._healthy:
                        self._healthy = True
                        self._backoff = self.backoff_min_ms
                self.client.keepalive_due(now)
                for pid in self.inflight:
                    if c.ticks_diff(now, self.inflight[pid][2]) > self.ack_timeout_ms:
                        raise MQTTError("no PUBACK within %d ms" % self.ack_timeout_ms)
                self._check_commit(now)
            except OSError as e:
                self._lost(now, e)
        if self.ring.dirty() and (not self.ring.pending
                                  or c.ticks_diff(now, self._synced_at) >= _SYNC_MS):
            self.ring.sync()
            self._synced_at = now

    def idle(self):
        """Nothing waits to be sent or acknowledged."""
        return self.up and not self.ring.pending and not self._status

    def _connect(self, now):
        try:
            if self.link_up is not None:
                self.link_up()
            present = self.client.connect(self.opener())
        except OSError as e:
            self.client.close()
            delay = self._back_off(now)
            self.log("mqtt: connect failed (%s); retry in %d ms" % (_reason(e), delay))
            return
        self.up = True
        self._healthy = False
        self.connects += 1
        self.inflight = {}
        self._next = self.ring.tail
        self._tail_since = now
        try:
            self.client.subscribe(self.ack_topic, _SUB_PID)
        except OSError as e:
            self._lost(now, e)
            return
        self.log("mqtt: connected (session present %d, %d records to send)"
                 % (present, self.ring.pending))

    def _lost(self, now, e):
        # The suspect: the oldest record with a message sent on this connection that the
        # broker has never PUBACKed (on any connection). A message it took once it would take
        # again, so records kept only for the cloud's commit never count.
        self._forget_taken()
        oldest = -1
        for v in self.inflight.values():
            if not self._took.get(v[0], 0) & (1 << v[1]) and (oldest < 0 or v[0] < oldest):
                oldest = v[0]
        if oldest >= 0:
            if oldest == self._suspect:
                self._suspect_losses += 1
            else:
                self._suspect = oldest
                self._suspect_losses = 1
            if self._suspect_losses >= REFUSED_AFTER:
                self.ring.ack(oldest, 0)
                self.ring.ack(oldest, 1)
                self.refused += 1
                self._suspect = -1
                self._suspect_losses = 0
                self.log("mqtt: record %d dropped: the broker closed %d connections in a row while it "
                         "was unacknowledged (refused?); never resent" % (oldest, REFUSED_AFTER))
        self.client.close()
        self.up = False
        self.inflight = {}
        for s in self._status:
            s[3] = False
        if self._healthy:
            self._retry_at = now
        else:
            self._back_off(now)
        self.log("mqtt: connection lost (%s); %d records kept" % (_reason(e), self.ring.pending))

    def _back_off(self, now):
        delay = self._backoff
        delay += self.rng.getrandbits(16) * (delay // 4) >> 16
        self._retry_at = self.clock.ticks_add(now, delay)
        self._backoff = min(2 * self._backoff, self.backoff_max_ms)
        return delay

    def _pump(self, now):
        cl = self.client
        for s in self._status:
            if not s[3]:
                cl.publish(self.status_topic, s[1], s[0], s[2] > 0)
                s[2] += 1
                s[3] = True
        ring = self.ring
        while len(self.inflight) + 2 <= self.max_msgs and self._next < ring.head:
            o = self._next
            self._next = o + 1
            if o < ring.tail:
                self._next = ring.tail
                continue
            rec = ring.get(o)
            if rec is None:
                continue
            dup = o < self._sent_upto
            if dup:
                self.resent += 1
            else:
                self._sent_upto = o + 1     # before writing: a failed write may still arrive
            for part in (0, 1):
                if rec[2] & (1 << part):
                    pid = record_pid(o, part)
                    cl.publish(self.reading_topic if part == 0 else CORRECTIONS, rec[part], pid, dup)
                    self.inflight[pid] = (o, part, now)
                    self.published += 1

    def _acked(self, pid):
        if pid >= _STATUS_PID0:
            for s in self._status:
                if s[0] == pid:
                    self._status.remove(s)
                    return False
            return False
        # The broker has the message; the record stays in the ring until the cloud commits it.
        rec = self.inflight.pop(pid, None)
        if rec is None:
            return False
        self._took[rec[0]] = self._took.get(rec[0], 0) | (1 << rec[1])
        if rec[0] == self._suspect:
            self._suspect = -1
            self._suspect_losses = 0
        return True

    def _committed(self, payload, topic):
        """An acknowledgement from the cloud: drop each acknowledged message from the ring;
        True if the ring moved. One of another kind than its topic names is a bad one: each
        ingest may publish only its own kind's topic (docs/protocol.md 3.1)."""
        try:
            of, _, boot, ranges = wire.decode_ack(payload, topic)
        except ValueError:
            self.bad_acks += 1
            return False
        self.acks += 1
        part = 0 if of == wire.KIND_READING else 1
        bit = 1 << part
        ring = self.ring
        tail = ring.tail
        for o in range(ring.tail, ring.head):
            if ring.parts(o) & bit:
                b, seq = ring.key(o)
                if b == boot:
                    for first, last in ranges:
                        if first <= seq <= last:
                            ring.ack(o, part)
                            break
        if len(self._took) > self.max_msgs:
            self._forget_taken()
        return ring.tail != tail

    def _forget_taken(self):
        tail = self.ring.tail
        for o in [o for o in self._took if o < tail]:
            del self._took[o]

    def _check_commit(self, now):
        """Resend from the oldest record once it stayed unacknowledged ``commit_timeout_ms``
        after the broker had it (a lost block at the broker, a lost acknowledgement)."""
        ring = self.ring
        c = self.clock
        if ring.tail != self._tail or not ring.pending:
            self._tail = ring.tail
            self._tail_since = now
        elif (not self.inflight and self._next >= ring.head and ring.tail < self._sent_upto
              and c.ticks_diff(now, self._tail_since) > self.commit_timeout_ms):
            self.log("mqtt: %d records not committed within %d ms; resending"
                     % (ring.pending, self.commit_timeout_ms))
            self._next = ring.tail
            self._tail_since = now


def _reason(e):
    return "%s %s" % (type(e).__name__, e.args[0] if e.args else "")
