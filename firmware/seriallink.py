"""Ring -> gateway over the console: framed lines out, acknowledgements in (docs/protocol.md 2.1).

    link = SerialLink(ring, write, read, time)      # write(bytes); read(): bytes ready, or None
    link.start()               # boot: writes every record the ring still holds again
    send = link.send           # Node's send: on flash first, then two framed lines
    while True:
        link.service()         # polls, reads answers, acknowledges, resends; never blocks

Each released record goes into the ring (flash) before its two framed lines are
written. While records are pending the board polls the gateway with the line ``!12``
(every ``POLL_MS``, and at once after sending); the gateway answers with lines
``!<token hex>`` (at most 12) for records the broker has (both messages), then ``!``. Such a line
acknowledges both parts of that record in the ring. After ``QUIET`` polls in a row
that acknowledged nothing (answered or not), every pending record is written again,
its stored bytes: same noise, same token; the cloud stores each record once. At boot
the records left by an earlier boot are written again the same way.

``finish()`` starts the drain at the end of a stimulus: ``idle()`` is then true once
the ring is empty, or after ``DRAIN`` resend rounds did not empty it (``gave_up``:
the records stay in the ring for the next boot).

A board is heard from its first line (docs/protocol.md 2.3): bytes written while no gateway
holds the port are lost (a Pico's USB serial drops them, a UART keeps none), so
``say(line)`` writes a status line and writes it again, ``REPEAT_MS`` later, then twice as
long each time up to ``REPEAT_MAX_MS``, until the gateway answers ``!=`` and the line's
CRC-16 (``heard()``). Of the lines not heard yet it keeps the oldest (the boot status) and
the newest: every status message holds the whole state. ``tell()`` does the same for the line a board
stops on (``config error: ...``), blocking, before it exits.
"""

try:
    from shared_protocol import wire
    from shared_protocol.framing import LineSplitter, crc16, frame
    from shared_protocol.layout import TOKEN_SIZE
except ImportError:
    import wire  # type: ignore[no-redef]  # flat file system: the same module
    from framing import LineSplitter, crc16, frame
    from layout import TOKEN_SIZE

POLL_MS = 300      # between polls, and how long an answer may take
QUIET = 8          # polls in a row that acknowledged nothing before a resend
DRAIN = 4          # resend rounds the end of a stimulus waits through
_ACK_LINE = 1 + 2 * TOKEN_SIZE     # "!" and the token in hex
_TOKEN_HEX = "%02x" * TOKEN_SIZE
# A poll asks for up to ACKS acknowledgements (docs/protocol.md 2.1): 12 x 18 bytes and
# the end line fit the ~256-byte stdin buffer of the ESP32 and RP2040 ports.
ACKS = 12
_POLL = ("!%d\n" % ACKS).encode()
REPEAT_MS = 1000       # first repeat of a status line the gateway has not answered
REPEAT_MAX_MS = 16000  # the longest wait between two repeats


def heard(line):
    """The gateway's answer to the text line ``line`` (bytes, no newline): ``!=`` and its CRC-16."""
    return ("!=%04x" % crc16(line)).encode()


def token_hex(reading):
    """The token of a reading record as the lowercase hex digits the gateway writes."""
    return (_TOKEN_HEX % tuple(wire.decode_reading(reading)[3])).encode()


class SerialLink:
    """See the module docstring. ``clock`` is ``time``-shaped (ticks_ms, ticks_diff)."""

    def __init__(self, ring, write, read, clock):
        self.ring = ring
        self.write = write
        self.read = read
        self.clock = clock
        self.resent = 0
        self.rounds = 0             # resend rounds (boot resend not counted)
        self.acked = 0
        self.gave_up = False
        self._drain = None          # resend rounds left once the stimulus is done
        self._tokens = {}           # token hex -> ordinal, for every pending record
        self._lines = LineSplitter(40)
        self._asked = None          # when the unanswered poll was written
        self._got = 0               # records acknowledged since that poll
        self._quiet = 0
        self._due = clock.ticks_ms()
        # Status lines not heard yet, at most two: the oldest (the boot status) and the newest;
        # each [line, its answer, when to repeat, wait, repeats since the stimulus ended].
        self._said = []
        for o in range(ring.tail, ring.head):
            rec = ring.get(o)
            if rec is not None:
                self._tokens[token_hex(rec[0])] = o

    @property
    def pending(self):
        return self.ring.pending

    def start(self):
        """Write every record the ring holds again (a reset may have cut them off)."""
        self.resent += self._resend()

    def send(self, reading, correction):
        ring = self.ring
        dropped = ring.dropped
        o = ring.put(reading, correction)
        if ring.dropped != dropped:
            self._forget()
        self._tokens[token_hex(reading)] = o
        self.write(frame(reading))
        self.write(frame(correction))
        if self._asked is None:
            self._due = self.clock.ticks_ms()

    def say(self, line):
        """Write the status line ``line`` (bytes, no newline) now, and again until heard."""
        self.write(line + b"\n")
        e = [line, heard(line), self.clock.ticks_add(self.clock.ticks_ms(), REPEAT_MS), REPEAT_MS, 0]
        if len(self._said) > 1:
            self._said[1] = e
        else:
            self._said.append(e)

    @property
    def unheard(self):
        """A status line the gateway has not answered yet."""
        return bool(self._said)

    def finish(self):
        """The stimulus is done: give up after ``DRAIN`` more resend rounds, and on a status
        line not heard after ``DRAIN`` more repeats (from ``REPEAT_MS`` apart again)."""
        if self._drain is None:
            self._drain = DRAIN
            for e in self._said:
                e[3] = REPEAT_MS // 2

    def idle(self):
        return (not self.ring.pending or self.gave_up) and not self._said

    def service(self):
        c = self.clock
        data = self.read()
        if data:
            for line in self._lines.feed(data):
                if line is not None:
                    self._line(line)
        if self.ring.dirty():
            self.ring.sync()
        now = c.ticks_ms()
        for e in self._said[:]:
            if c.ticks_diff(now, e[2]) < 0:
                continue
            if self._drain is not None:
                e[4] += 1
                if e[4] > DRAIN:
                    self._said.remove(e)    # no gateway answers: the line is given up
                    continue
            self.write(e[0] + b"\n")
            e[3] = min(2 * e[3], REPEAT_MAX_MS)
            e[2] = c.ticks_add(now, e[3])
        if self._asked is not None and c.ticks_diff(now, self._asked) >= POLL_MS:
            self._answered()            # no answer in time counts as one that acknowledged nothing
        if self._quiet >= QUIET and self.ring.pending:
            self._quiet = 0
            if self._drain is not None:
                if not self._drain:
                    self.gave_up = True
                    return
                self._drain -= 1
            self.rounds += 1
            self.resent += self._resend()
            self._due = now
        if (self._asked is None and self.ring.pending and not self.gave_up
                and c.ticks_diff(now, self._due) >= 0):
            self.write(_POLL)
            self._asked = now
            self._got = 0
            self._due = c.ticks_add(now, POLL_MS)

    def _line(self, line):
        if line[-1:] == b"\r":
            line = line[:-1]
        if line == b"!":
            if self._asked is not None:
                self._answered()
        elif line[:2] == b"!=":
            self._said = [e for e in self._said if e[1] != line]
        elif len(line) == _ACK_LINE and line[0] == 33:
            o = self._tokens.pop(line[1:], None)
            if o is not None:
                ring = self.ring
                if ring.parts(o):
                    ring.ack(o, 0)
                    ring.ack(o, 1)
                    self.acked += 1
                    self._got += 1

    def _answered(self):
        self._quiet = 0 if self._got else self._quiet + 1
        if self._got >= ACKS:
            self._due = self.clock.ticks_ms()     # a full answer: more may be waiting
        self._asked = None

    def _resend(self):
        ring = self.ring
        k = 0
        for o in range(ring.tail, ring.head):
            rec = ring.get(o)
            if rec is None:
                continue
            if rec[2] & 1:
                self.write(frame(rec[0]))
            if rec[2] & 2:
                self.write(frame(rec[1]))
            k += 1
        return k

    def _forget(self):
        # A full ring dropped its oldest record: its token can no longer be acknowledged.
        ring = self.ring
        for t in list(self._tokens):
            if not ring.parts(self._tokens[t]):
                del self._tokens[t]


def tell(line, write, read, clock, rounds=-1):
    """Write the line a board stops on (``config error: ...``) until the gateway answers it
    (``heard``), waiting ``REPEAT_MS``, then twice as long each time up to ``REPEAT_MAX_MS``;
    ``rounds`` > 0: give up after that many writes. True once heard."""
    answer = heard(line)
    lines = LineSplitter(40)
    wait = REPEAT_MS
    while rounds:
        rounds -= 1
        write(line + b"\n")
        until = clock.ticks_add(clock.ticks_ms(), wait)
        while clock.ticks_diff(until, clock.ticks_ms()) > 0:
            data = read()
            if data:
                for got in lines.feed(data):
                    if got is not None and got.rstrip(b"\r") == answer:
                        return True
            clock.sleep_ms(10)
        wait = min(2 * wait, REPEAT_MAX_MS)
    return False


def stdio():
    """``(write, read)`` on the console: read() returns the bytes waiting on stdin, or
    None, without blocking; a port without ``select`` reads nothing (records then stay
    in the ring and are resent at the next boot)."""
    import sys
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        write = out.write
    else:
        write = lambda b: sys.stdout.write(b.decode())
    try:
        import select
    except ImportError:
        try:
            import uselect as select  # type: ignore[no-redef]  # MicroPython before 1.20
        except ImportError:
            return write, lambda: None
    inp = getattr(sys.stdin, "buffer", sys.stdin)
    p = select.poll()
    p.register(sys.stdin, select.POLLIN)
    state = [True]

    def read():
        if not state[0]:
            return None
        got = bytearray()
        while len(got) < 256 and p.poll(0):
            b = inp.read(1)
            if not b:
                state[0] = False      # end of input: stop asking (poll would say ready forever)
                break
            got += b if isinstance(b, bytes) else b.encode()
        return bytes(got)
    return write, read
