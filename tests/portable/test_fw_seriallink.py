"""firmware/seriallink.py and app.py on a serial board: ring, framed lines, polls, acks, resends."""
from tests.portable import fwutil
from ring import Ring
from seriallink import ACKS, DRAIN, POLL_MS, QUIET, REPEAT_MAX_MS, REPEAT_MS, SerialLink, heard, tell, token_hex
from shared_protocol import __version__
from shared_protocol.config import validate
from app import App
from ledger import provision
from boards import pico

POLL = b"!12"     # the poll line of a board with room for 12 acknowledgements (docs/protocol.md 2.1)

try:
    from shared_protocol import wire
    from shared_protocol.framing import frame, unframe
except ImportError:
    import wire
    from framing import frame, unframe


class Console:
    """The board's stdout (``out``) and stdin (``feed``); ``answer(line)`` (optional)
    plays the gateway: it sees each line the board writes and returns the bytes to send back."""

    def __init__(self, answer=None):
        self.out = bytearray()
        self.inq = b""
        self.answer = answer
        self._part = b""

    def write(self, b):
        self.out += b
        if self.answer is not None:
            data = self._part + bytes(b)
            lines = data.split(b"\n")
            self._part = lines.pop()
            for line in lines:
                self.inq += self.answer(line)

    def read(self):
        d = self.inq
        self.inq = b""
        return d

    def feed(self, data):
        self.inq += data

    def lines(self):
        return bytes(self.out).split(b"\n")[:-1]


class AckAll:
    """A gateway whose broker acknowledges every record at once (unless ``mute``)."""

    def __init__(self):
        self.ready = []
        self.records = 0
        self.mute = False

    def __call__(self, line):
        if line == POLL:
            if self.mute:
                return b""
            out = b"".join(b"!" + t + b"\n" for t in self.ready[:12]) + b"!\n"
            self.ready = self.ready[12:]
            return out
        if line[:1] == b"~":
            payload = unframe(line)
            if payload[1] == wire.KIND_READING:
                self.records += 1
                self.ready.append(token_hex(payload))
        return b""


def _rec(i):
    tok = bytes([i, 1, 2, 3, 4, 5, 6, 7])
    return wire.encode_reading(7, 1, i, tok, 0, [i, -i]), wire.encode_correction(7, 1, i, tok, i)


def _lines(*recs):
    out = []
    for r, c in recs:
        out += [frame(r)[:-1], frame(c)[:-1]]
    return out


def _link(path, console, records=8):
    ring = Ring(path, wire.reading_size(2), records, 1 << 20)
    clock = fwutil.FakeClock(1000)
    return ring, clock, SerialLink(ring, console.write, console.read, clock)


def _sent(name, n=3, records=8):
    """A link on a fresh ring that has sent records 0..n-1 and polled once."""
    p = fwutil.scratch(name)
    con = Console()
    ring, clock, link = _link(p, con, records)
    recs = [_rec(i) for i in range(n)]
    for rc in recs:
        link.send(*rc)
    link.service()
    return p, con, ring, clock, link, recs


def test_records_go_to_the_ring_then_out_as_framed_lines_then_the_board_polls():
    p = fwutil.scratch("sl1")
    con = Console()
    ring, clock, link = _link(p, con)
    r, c = _rec(0)
    link.send(r, c)
    assert ring.pending == 1 and ring.get(0) == (r, c, 3)
    link.service()
    assert con.lines() == _lines((r, c)) + [POLL]
    link.service()
    assert con.lines().count(POLL) == 1            # one poll at a time
    clock.ms += POLL_MS                             # unanswered: the next poll goes out
    link.service()
    assert con.lines().count(POLL) == 2
    ring.close()
    fwutil.remove(p)


def test_an_ack_by_token_takes_the_record_out_of_the_ring_and_is_persisted():
    p, con, ring, clock, link, recs = _sent("sl2")
    con.feed(b"!" + token_hex(recs[1][0]) + b"\n!0123456789abcdef\nhello\n!" + b"0" * 20 + b"\n!\n")
    link.service()
    assert (ring.pending, ring.parts(0), ring.parts(1), ring.parts(2)) == (2, 3, 0, 3)
    assert link.acked == 1 and not ring.dirty()     # synced after the acknowledgements
    con.feed(b"!" + token_hex(recs[1][0]) + b"\r\n!\r\n")      # twice: harmless
    link.service()
    assert ring.pending == 2 and link.acked == 1
    ring.close()
    ring = Ring(p, wire.reading_size(2), 8, 1 << 20)
    assert (ring.pending, ring.parts(1), ring.get(2)) == (2, 0, recs[2] + (3,))
    ring.close()
    fwutil.remove(p)


def _quiet_polls(link, clock, con, answered):
    """Service until the first resend; the polls written before it."""
    polls = 0
    for _ in range(200):
        before = len(con.lines())
        link.service()
        new = con.lines()[before:]
        if link.resent:
            return polls + new[:new.index(POLL)].count(POLL) if POLL in new else polls
        if POLL in new:
            polls += 1
            if answered:
                con.feed(b"!\n")
        clock.ms += 50
    raise AssertionError("no resend")


def test_a_full_answer_is_followed_by_the_next_poll_at_once_a_partial_one_waits():
    p, con, ring, clock, link, recs = _sent("sl7", ACKS + 3, 32)
    assert con.lines().count(POLL) == 1
    con.feed(b"".join(b"!" + token_hex(r) + b"\n" for r, _ in recs[:ACKS]) + b"!\n")
    link.service()                                  # a full answer: the next poll goes out now
    link.service()
    assert ring.pending == 3 and con.lines().count(POLL) == 2
    con.feed(b"!" + token_hex(recs[ACKS][0]) + b"\n!\n")
    link.service()
    link.service()
    assert ring.pending == 2 and con.lines().count(POLL) == 2     # partial: waits POLL_MS
    clock.ms += POLL_MS
    link.service()
    assert con.lines().count(POLL) == 3
    ring.close()
    fwutil.remove(p)


def test_after_quiet_polls_every_pending_record_is_written_again_byte_for_byte():
    for answered in (True, False):
        p, con, ring, clock, link, recs = _sent("sl3")
        con.feed(b"!" + token_hex(recs[0][0]) + b"\n!\n")    # record 0 acknowledged
        link.service()
        clock.ms += POLL_MS
        mark = len(con.lines())
        assert _quiet_polls(link, clock, con, answered) == QUIET
        again = [x for x in con.lines()[mark:] if x[:1] == b"~"]
        assert again == _lines(recs[1], recs[2])
        assert (link.resent, link.rounds, ring.pending) == (2, 1, 2)
        ring.close()
        fwutil.remove(p)


def test_records_left_by_an_earlier_boot_are_written_again_at_boot_and_acked_by_token():
    p, con, ring, clock, link, recs = _sent("sl4")
    con.feed(b"!" + token_hex(recs[0][0]) + b"\n!\n")
    link.service()
    ring.close()                                    # reset
    con2 = Console()
    ring, clock, link = _link(p, con2)
    assert ring.pending == 2
    link.start()
    assert con2.lines() == _lines(recs[1], recs[2]) and link.resent == 2
    link.service()
    con2.feed(b"!" + token_hex(recs[2][0]) + b"\n!" + token_hex(recs[1][0]) + b"\n!\n")
    link.service()
    assert ring.pending == 0 and link.idle()
    ring.close()
    fwutil.remove(p)


def test_the_drain_gives_up_after_DRAIN_resend_rounds_and_keeps_the_records():
    p = fwutil.scratch("sl5")
    con = Console()
    ring, clock, link = _link(p, con)
    for i in range(2):
        link.send(*_rec(i))
    link.finish()
    for _ in range(2000):
        link.service()
        if link.idle():
            break
        clock.ms += 50
    assert link.gave_up and link.rounds == DRAIN and link.resent == 2 * DRAIN
    assert ring.pending == 2
    n = len(con.lines())
    clock.ms += 10 * POLL_MS
    link.service()
    assert len(con.lines()) == n                    # no more polls once given up
    ring.close()
    ring = Ring(p, wire.reading_size(2), 8, 1 << 20)
    assert ring.pending == 2                        # kept for the next boot
    ring.close()
    fwutil.remove(p)


def test_a_full_ring_drops_the_oldest_and_forgets_its_token():
    p = fwutil.scratch("sl6")
    con = Console()
    ring, clock, link = _link(p, con, records=2)
    recs = [_rec(i) for i in range(3)]
    for rc in recs:
        link.send(*rc)
    assert (ring.dropped, ring.pending) == (1, 2)
    con.feed(b"!" + token_hex(recs[0][0]) + b"\n!\n")
    link.service()
    assert ring.pending == 2 and link.acked == 0
    ring.close()
    fwutil.remove(p)


# -- the whole firmware on a serial board (Pico profile) -----------------------------------

def _pico_cfg(name, rows):
    return validate({
        "board": "pico", "device_id": 7,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -1000, "raw_max": 1000, "delta_q": 50},
                    {"num": 1, "den": 1, "offset": 0, "raw_min": -1000, "raw_max": 1000, "delta_q": 50}],
        "epsilon": "0.5", "centre": [0, 0], "window_records": 100, "window_cap": "100",
        "period_ms": 0, "stimulus": rows,
        "ring_path": fwutil.scratch(name + "-ring"), "ledger_path": fwutil.scratch(name + "-ledger"),
        "seal_key_path": fwutil.seal_key(name + "-key"),
    }, pico.PROFILE)


def _run_app(cfg, answer):
    try:
        open(cfg["ledger_path"]).close()      # a second boot keeps its ledger
    except OSError:
        provision(cfg["ledger_path"])
    logs = []
    con = Console(answer)
    app = App(cfg, pico.PROFILE, logs.append, (con.write, con.read), fwutil.FakeClock(1000))
    app.boot()
    app.run()
    app.ledger.close()
    return app, logs, con


def test_the_pico_firmware_keeps_each_record_until_the_gateway_acknowledges_it():
    cfg = _pico_cfg("app1", [[i, -i] for i in range(3)])
    gw = AckAll()
    app, logs, con = _run_app(cfg, gw)
    boot = logs[0]
    assert boot.startswith("boot ok: board=pico device=7 boot=%d entropy=" % app.boot_id), boot
    assert boot.endswith(" eps_record=1 pending=0 dropped=0 version=%s sensor=stimulus"
                         % __version__), boot
    # The status lines go to the gateway on the serial link (said until heard), not to the log.
    status = [x.decode() for x in con.lines() if x.startswith(b"status: ")]
    assert status[0].startswith('status: {"event":"boot"') and status[0].endswith(',"sensor":"stimulus"}')
    assert ',"version":"%s",' % __version__ in status[0], status[0]
    assert '"last_seq"' not in status[0]                # nothing released yet
    assert status[-1].startswith('status: {"event":"done"') and ',"last_seq":2' in status[-1], status
    assert logs[-1] == "idle: all 3 records acknowledged (0 resent)", logs
    assert logs[-2].startswith("stimulus done: 3 readings, 3 released, ")
    assert gw.records == 3 and app.ring.pending == 0
    assert len([x for x in con.lines() if x[:1] == b"~"]) == 6
    for k in ("ring_path", "ledger_path", "seal_key_path"):
        fwutil.remove(cfg[k])


def test_unacknowledged_records_are_kept_and_resent_identically_at_the_next_boot():
    cfg = _pico_cfg("app2", [[i, -i] for i in range(3)])
    gw = AckAll()
    gw.mute = True                                   # no gateway answers this boot
    app, logs, con = _run_app(cfg, gw)
    assert logs[-1] == "idle: 3 records not acknowledged, kept for the next boot (%d resent)" % (3 * DRAIN)
    sent = [x for x in con.lines() if x[:1] == b"~"][:6]
    cfg2 = dict(cfg)
    cfg2["stimulus"] = [[9, 9]]
    gw2 = AckAll()
    app2, logs2, con2 = _run_app(cfg2, gw2)
    assert " pending=3 dropped=0 " in logs2[0]
    assert '"pending":3' in [x.decode() for x in con2.lines() if x.startswith(b"status: ")][0]
    assert [x for x in con2.lines() if x[:1] == b"~"][:6] == sent     # never re-perturbed
    assert logs2[-1] == "idle: all 1 records acknowledged (3 resent)", logs2
    assert app2.ring.pending == 0 and gw2.records == 4
    for k in ("ring_path", "ledger_path", "seal_key_path"):
        fwutil.remove(cfg[k])


class Quiet:
    """A console no gateway answers until ``up``; then it answers status and stop lines."""

    def __init__(self):
        self.out = []
        self.up = False
        self.inq = b""

    def write(self, b):
        for line in bytes(b).split(b"\n")[:-1]:
            self.out.append(line)
            if self.up and (line.startswith(b"status: ") or line.startswith(b"config error: ")):
                self.inq += heard(line) + b"\n"

    def read(self):
        d, self.inq = self.inq, b""
        return d


def test_a_status_line_is_said_again_with_backoff_until_the_gateway_hears_it():
    con = Quiet()
    ring, clock, link = _link(fwutil.scratch("say-ring"), con)
    link.say(b'status: {"event":"boot"}')
    at = []
    for _ in range(40000 // 10):
        clock.ms += 10
        n = len(con.out)
        link.service()
        if len(con.out) > n:
            at.append(clock.ms - 1000)
    # Written at 0, then 1, 2, 4, 8, 16, 16 s later: a gateway attached late hears it within 16 s.
    assert at == [1000, 3000, 7000, 15000, 31000], at
    assert REPEAT_MS == 1000 and REPEAT_MAX_MS == 16000
    con.up = True
    while link.unheard:
        clock.ms += 10
        link.service()
    n = len(con.out)
    for _ in range(4000):
        clock.ms += 10
        link.service()
    assert len(con.out) == n and con.out[-1] == b'status: {"event":"boot"}'     # heard: said no more
    # The oldest and the newest line not heard yet are kept; each is heard by its own answer.
    con.up = False
    for k in (1, 2, 3):
        link.say(b"status: {%d}" % k)
    n = len(con.out)
    for _ in range(200):
        clock.ms += 10
        link.service()
    assert sorted(con.out[n:]) == [b"status: {1}", b"status: {3}"]
    con.inq = heard(b"status: {1}") + b"\n"
    for _ in range(400):
        clock.ms += 10
        link.service()
    assert con.out[-1] == b"status: {3}" and link.unheard
    ring.close()
    fwutil.remove(fwutil.scratch("say-ring"))


def test_the_line_a_board_stops_on_is_told_until_heard():
    con = Quiet()
    clock = fwutil.FakeClock(0)
    assert not tell(b"config error: epsilon: must be > 0", con.write, con.read, clock, rounds=3)
    assert con.out == [b"config error: epsilon: must be > 0"] * 3
    assert clock.ms >= 1000 + 2000 + 4000                  # backoff between the writes
    con.up = True
    assert tell(b"config error: epsilon: must be > 0", con.write, con.read, clock)
    assert len(con.out) == 4
