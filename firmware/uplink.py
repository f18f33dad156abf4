"""Moves records from the ring buffer to the broker, and survives losing the broker.

    up = Uplink(client, ring, opener, b"dpsense/readings/d7", b"dpsense/status/d7", clock, rng)
    while True:
        up.service()          # connect when due, publish, read PUBACKs, ping; never raises OSError

Each record is two QoS 1 messages: the reading on the device's readings topic and the
correction on the shared corrections topic. Their packet ids derive from the record's
ordinal, so a resend reuses them. A record leaves the ring only when both PUBACKs
arrived; until then it is resent after every reconnect, from the ring's bytes, with
DUP set (everything at or past the first resend point may have reached the broker).
A PUBACK overdue by ``ack_timeout_ms`` means a dead connection: reconnect, resend.

Reconnects back off exponentially from ``backoff_min_ms`` to ``backoff_max_ms``, with
up to 25% random jitter so a fleet does not return in lockstep after a broker restart.
The backoff resets only once a connection has moved the ring on (a record's PUBACK), or
carried any answer while nothing of the ring was outstanding, so a broker that accepts and
then drops us is not hammered.

Mosquitto 2.0 answers a publish it refuses (too large, not permitted) by closing the
connection, and would do so again for every resend of the same bytes: a reconnect storm
that also blocks every record behind it. A record that was the oldest unacknowledged one
when ``REFUSED_AFTER`` connections in a row ended is taken as refused: it leaves the ring,
is counted in ``refused`` and logged, and is never sent again (docs/protocol.md, section 11).
Status messages (small JSON texts) are QoS 1 too but live in RAM only: the newest few
are kept while the broker is away.
"""

from mqtt import PUBACK, MQTTError

try:
    from shared_protocol import topics
except ImportError:
    import topics  # type: ignore[no-redef]  # flat file system: the same module

CORRECTIONS = topics.CORRECTIONS.encode()
_STATUS_PID0 = 65001        # record ids use 1..65000
_STATUS_KEEP = 4
_SYNC_MS = 500
REFUSED_AFTER = 4           # connections in a row lost with the same oldest record unacknowledged


def record_pid(o, part):
    return (2 * o + part) % 65000 + 1


class Uplink:
    """See the module docstring; ``opener()`` returns a connected socket or raises OSError."""

    def __init__(self, client, ring, opener, reading_topic, status_topic, clock, rng,
                 max_inflight=8, ack_timeout_ms=10000, backoff_min_ms=250,
                 backoff_max_ms=30000, link_up=None, log=print):
        self.client = client
        self.ring = ring
        self.opener = opener
        self.reading_topic = reading_topic
        self.status_topic = status_topic
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
        self.connects = 0
        self.published = 0
        self.resent = 0
        self.refused = 0
        self._suspect = -1               # oldest record outstanding when connections were lost
        self._suspect_losses = 0

    def status(self, payload):
        """Queue a status text; the oldest is forgotten beyond a few unsent ones."""
        if len(self._status) >= _STATUS_KEEP:
            self._status.pop(0)
        self._status.append([self._status_pid, payload, 0, False])
        self._status_pid = self._status_pid + 1 if self._status_pid < 65535 else _STATUS_PID0

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
                    moved = got[0] == PUBACK and self._acked(got[1])
                    if (moved or not self.inflight) and not self._healthy:
                        self._healthy = True
                        self._backoff = self.backoff_min_ms
                self.client.keepalive_due(now)
                for pid in self.inflight:
                    if c.ticks_diff(now, self.inflight[pid][2]) > self.ack_timeout_ms:
                        raise MQTTError("no PUBACK within %d ms" % self.ack_timeout_ms)
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
        self.log("mqtt: connected (session present %d, %d records to send)"
                 % (present, self.ring.pending))

    def _lost(self, now, e):
        oldest = -1
        for v in self.inflight.values():
            if oldest < 0 or v[0] < oldest:
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
        rec = self.inflight.pop(pid, None)
        if rec is None:
            return False
        self.ring.ack(rec[0], rec[1])
        if rec[0] == self._suspect:
            self._suspect = -1
            self._suspect_losses = 0
        return True


def _reason(e):
    return "%s %s" % (type(e).__name__, e.args[0] if e.args else "")
