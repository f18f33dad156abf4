"""The release schedule under a board-like clock: the hand-over time carries nothing of the draw.

On a board, drawing the noise costs time that grows with |Y| (more rounds of the sampler's
loop), and ``sleep_ms`` sleeps from its call. ``BoardClock`` models both: a microsecond
counter that every random word the firmware draws moves on by ``DRAW_US``, and sleeps that
count from the moment they are called. A schedule that sleeps from the end of the draw to
the next tick hands the record over at the tick plus the sub-millisecond phase of the
draw's end (what issue 22 measured on the unix port); the firmware must hand every record
over at the same phase of its tick whatever its noise. Deterministic: no false failures.
"""
from tests.portable import fwutil
from app import App
from ledger import provision
from boards import pico
from shared_protocol.config import validate
from shared_protocol import wire

DRAW_US = 3          # per random word; a draw with |Y| ~ 300 at scale 100 takes a few dozen


class BoardClock:
    """``time``-shaped: ticks in microseconds, sleeps counted from their call."""

    def __init__(self):
        self.us = 5 * 10 ** 6 + 123       # boot at an arbitrary phase

    def ticks_us(self):
        return self.us

    def ticks_ms(self):
        return self.us // 1000

    def ticks_diff(self, a, b):
        return a - b

    def ticks_add(self, a, b):
        return a + b

    def time(self):
        return self.us // 10 ** 6

    def sleep_ms(self, ms):
        self.us += 1000 * ms

    def sleep_us(self, us):
        self.us += max(1, us)             # a poll of the clock costs a microsecond


def _handovers(n, period_ms, name):
    cfg = validate({
        "board": "pico", "device_id": 7,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -10, "raw_max": 10, "delta_q": 100}],
        "epsilon": "1", "centre": [0], "window_records": 10 ** 6, "window_cap": "1000000",
        "lifetime_cap": "1000000", "period_ms": period_ms, "stimulus": [[0]] * n,
        "corrections": "plaintext",
        "ring_path": fwutil.scratch(name + "-ring"), "ledger_path": fwutil.scratch(name + "-ledger"),
    }, pico.PROFILE)
    provision(cfg["ledger_path"])
    clock = BoardClock()
    app = App(cfg, pico.PROFILE, lambda s: None, (lambda b: None, lambda: None), clock)
    words = app.rng.getrandbits

    def costly(k):
        clock.us += DRAW_US
        return words(k)

    app.rng.getrandbits = costly
    out = []

    def handoff(reading, correction):
        out.append((clock.us, abs(wire.decode(reading)[1][5][0])))

    app.transport = handoff
    app.run()
    app.ledger.close()
    for suffix in ("-ring", "-ledger"):
        fwutil.remove(fwutil.scratch(name + suffix))
    return out


def test_every_record_leaves_at_the_same_phase_of_its_tick_whatever_its_noise():
    got = _handovers(300, 2, "sched-a")
    assert len(got) == 300
    ys = [y for _, y in got]
    assert max(ys) >= 200 and min(ys) < 25          # the draws took from 1 to dozens of words
    phases = set(t % 1000 for t, _ in got)
    assert phases == {0}, sorted(phases)[:10]
    ticks = [t // 1000 for t, _ in got]
    assert all(b - a == 2 for a, b in zip(ticks, ticks[1:]))


def test_the_model_sees_the_draw_without_a_schedule():
    # Power: released as soon as drawn (period 0), the hand-over time carries the draw's cost.
    got = _handovers(300, 0, "sched-b")
    gaps = [(b - a, y) for (a, _), (b, y) in zip(got, got[1:])]
    big = [g for g, y in gaps if y >= 200]
    small = [g for g, y in gaps if y < 25]
    assert big and small and sum(big) / len(big) > sum(small) / len(small) + 4 * DRAW_US
