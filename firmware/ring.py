"""Flash-backed ring buffer of released records that the cloud has not acknowledged.

    ring = Ring("ring.bin", room=34, records=64, max_bytes=8192)
    o = ring.put(reading, correction)      # on flash before anything is sent
    reading, correction, parts = ring.get(o)
    ring.ack(o, 0); ring.ack(o, 1)         # the cloud committed both records
    ring.sync()                            # persist acknowledgements (batched)

A record is the pair (reading record, correction record) of one release, with an
ordinal that counts records over the file's lifetime. A retransmission reads the
stored bytes back, so it repeats the same noise and token: re-perturbing the same
reading would spend its privacy budget twice.

File layout (shared_protocol/ringlayout.py, which the config checker sizes rings
with): a 16-byte header (magic ``DPR1``, slot size u16, slot count u16, dropped u32,
reserved u32), then fixed-size slots, ordinal ``o`` in slot ``o % n``: state u8,
reading length u8, reserved u16, ordinal u32, the reading padded to ``room`` bytes,
then the correction (28 bytes, or 48 sealed). State 0 is an unused slot; 0x80 a used one, plus bit 0
while the reading and bit 1 while the correction is unacknowledged.

Guarantees: ``put`` returns after the slot is written (a whole slot in one write,
which LittleFS commits atomically and a killed process cannot tear), so a record is
never lost to a reset. Acknowledgements stay in RAM until ``sync`` (flash wear); a
reset before it only resends records the cloud already has, and the cloud stores a
(device, boot, seq) once. When all slots hold unacknowledged records, ``put`` drops
the oldest and counts it in ``dropped`` (persisted in the header).
"""

import struct

try:
    from shared_protocol.layout import CORRECTION_SIZE, READING_KEY_AT
    from shared_protocol.ringlayout import (HEAD, HEAD_SIZE, MAGIC, SLOT_HEAD, SLOT_HEAD_SIZE,
                                           slot_count, slot_size)
except ImportError:
    from layout import CORRECTION_SIZE, READING_KEY_AT
    from ringlayout import HEAD, HEAD_SIZE, MAGIC, SLOT_HEAD, SLOT_HEAD_SIZE, slot_count, slot_size

_USED = 0x80
_PENDING = 0x03
_SYNC_EVERY = 32            # acknowledgements kept in RAM at most before a flash write


class Ring:
    """The ring file and a RAM copy of each slot's state (one byte per slot)."""

    def __init__(self, path, room, records, max_bytes, corr=CORRECTION_SIZE):
        if room < 1 or room > 255:
            raise ValueError("room must be 1..255 bytes")
        n = slot_count(room, records, max_bytes, corr)
        if n < 2:
            raise ValueError("ring holds fewer than 2 records")
        self.path = path
        self.room = room
        self.n = n
        self.slot = slot_size(room, corr)
        self.corr = corr            # correction record bytes: plain, or sealed (48)
        self.dropped = 0
        self.lost_on_open = 0       # unsent records of an older layout (config change)
        self.head = 0               # next ordinal to write
        self.tail = 0               # oldest unacknowledged ordinal (== head when none)
        self.pending = 0
        self._states = bytearray(n)
        self._dirty = []
        self._f = None
        self._open()

    # -- opening -----------------------------------------------------------------------------
    def _open(self):
        try:
            f = open(self.path, "r+b")
        except OSError:
            self._create(0)
            return
        head = f.read(HEAD_SIZE)
        if len(head) == HEAD_SIZE:
            magic, slot, n, dropped, _ = struct.unpack(HEAD, head)
        else:
            magic, slot, n, dropped = b"", 0, 0, 0
        if magic != MAGIC or slot != self.slot or n != self.n:
            lost = _count_pending(f, slot, n) if magic == MAGIC else 0
            f.close()
            self.lost_on_open = lost
            self._create(dropped + lost if magic == MAGIC else 0)
            return
        self._f = f
        self.dropped = dropped
        self._scan()

    def _create(self, dropped):
        f = open(self.path, "wb")
        f.write(struct.pack(HEAD, MAGIC, self.slot, self.n, dropped, 0))
        blank = bytes(self.slot)
        for _ in range(self.n):
            f.write(blank)      # preallocated: the file never grows afterwards
        f.close()
        self._f = open(self.path, "r+b")
        self.dropped = dropped

    def _scan(self):
        f = self._f
        assert f is not None        # open from __init__ until close()
        n = self.n
        st = self._states
        head = 0
        for i in range(n):
            f.seek(HEAD_SIZE + i * self.slot)
            state, rlen, _, o = struct.unpack(SLOT_HEAD, f.read(SLOT_HEAD_SIZE))
            if state & _USED and rlen <= self.room:
                st[i] = state
                if o + 1 > head:
                    head = o + 1
            else:
                st[i] = 0
        self.head = head
        self.tail = head
        first = head - n if head > n else 0
        for o in range(first, head):
            i = o % n
            if st[i] & _PENDING:
                f.seek(HEAD_SIZE + i * self.slot + 4)
                if struct.unpack("<I", f.read(4))[0] != o:
                    st[i] = _USED        # a stale slot from before a wrap
                    continue
                if self.tail == head:
                    self.tail = o
                self.pending += 1

    # -- records -----------------------------------------------------------------------------
    def put(self, reading, correction):
        """Store one record; returns its ordinal. Drops (and counts) the oldest when full."""
        if len(reading) > self.room or len(correction) != self.corr:
            raise ValueError("record does not fit the ring's slots")
        f = self._f
        assert f is not None
        n = self.n
        o = self.head
        if o - self.tail >= n:
            self._states[self.tail % n] = _USED
            self.pending -= 1
            self.dropped += 1
            self._advance()
            f.seek(8)                   # header: dropped u32
            f.write(struct.pack("<I", self.dropped))
        i = o % n
        buf = bytearray(self.slot)
        struct.pack_into(SLOT_HEAD, buf, 0, _USED | _PENDING, len(reading), 0, o)
        buf[SLOT_HEAD_SIZE:SLOT_HEAD_SIZE + len(reading)] = reading
        buf[SLOT_HEAD_SIZE + self.room:] = correction
        f.seek(HEAD_SIZE + i * self.slot)
        f.write(buf)
        f.flush()
        self._states[i] = _USED | _PENDING
        self.head = o + 1
        if self.pending == 0:
            self.tail = o
        self.pending += 1
        return o

    def parts(self, o):
        """Bits of ``o`` still unacknowledged (1: reading, 2: correction); 0 if gone."""
        if o < self.tail or o >= self.head:
            return 0
        return self._states[o % self.n] & _PENDING

    def get(self, o):
        """``(reading, correction, parts)`` exactly as stored, or None if not pending."""
        parts = self.parts(o)
        if not parts:
            return None
        f = self._f
        assert f is not None
        f.seek(HEAD_SIZE + (o % self.n) * self.slot)
        buf = f.read(self.slot)
        rlen = buf[1]
        r = SLOT_HEAD_SIZE
        return bytes(buf[r:r + rlen]), bytes(buf[r + self.room:]), parts

    def key(self, o):
        """``(boot_id, seq)`` of the reading stored under ordinal ``o`` (read from flash)."""
        f = self._f
        assert f is not None
        f.seek(HEAD_SIZE + (o % self.n) * self.slot + SLOT_HEAD_SIZE + READING_KEY_AT)
        return struct.unpack("<II", f.read(8))

    def ack(self, o, part):
        """The cloud acknowledged message ``part`` (0 reading, 1 correction) of ``o``."""
        bit = 1 << part
        if not self.parts(o) & bit:
            return
        i = o % self.n
        self._states[i] &= ~bit & 0xFF
        self._dirty.append(i)
        if len(self._dirty) >= _SYNC_EVERY:
            self.sync()
        if not self._states[i] & _PENDING:
            self.pending -= 1
            if o == self.tail:
                self._advance()

    def _advance(self):
        st = self._states
        n = self.n
        t = self.tail + 1
        while t < self.head and not st[t % n] & _PENDING:
            t += 1
        self.tail = t

    def dirty(self):
        return len(self._dirty) > 0

    def sync(self):
        """Write the acknowledgement states changed since the last sync."""
        f = self._f
        assert f is not None
        for i in self._dirty:
            f.seek(HEAD_SIZE + i * self.slot)
            f.write(bytes([self._states[i]]))
        if self._dirty:
            f.flush()
        self._dirty = []

    def close(self):
        if self._f is not None:
            self.sync()
            self._f.close()
            self._f = None


def _count_pending(f, slot, n):
    k = 0
    for i in range(n):
        f.seek(HEAD_SIZE + i * slot)
        b = f.read(1)
        if b and b[0] & _USED and b[0] & _PENDING:
            k += 1
    return k
