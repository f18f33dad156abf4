"""Wall-clock steps: arrival stamps and time windows keep to the monotonic clock (cloud/ingest/clock.py).

The path: readings stamped by the ingest's clock, windows closed by the analyst's, both reading
one stepped wall clock (+1 h, then back), the way an NTP correction steps a server's clock.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from dpsense.cloud.analyst.windows import WindowSpec
from dpsense.cloud.ingest.clock import ArrivalClock
from dpsense.cloud.storage import AnalystStore, open_analyst_store
from tests.cloud.test_stream_analyst import Fleet, InProcessServer, make_analyst


class Clocks:
    """A monotonic clock and a wall clock that is the monotonic one plus a steppable offset."""

    def __init__(self) -> None:
        self.m = 0.0
        self.step = 0.0

    def mono(self) -> float:
        return self.m

    def wall(self) -> float:
        return 10_000.0 + self.m + self.step


def test_a_step_is_reported_once_and_never_moves_the_clock() -> None:
    c = Clocks()
    logs: list[str] = []
    steps: list[float] = []
    clock = ArrivalClock(c.wall, c.mono, log=logs.append, on_step=steps.append)
    seen = []
    for k in range(100):
        c.m = k * 0.5
        if k == 20:
            c.step = 3600.0
        if k == 60:
            c.step = -3600.0            # corrected back, and past the start: a 1 h step each way
        seen.append(clock())
    assert steps == [3600.0, -7200.0] and clock.steps == 2
    assert len(logs) == 2 and "stepped by +3600.0 s" in logs[0] and "stepped by -7200.0 s" in logs[1]
    d = np.diff(seen)
    assert (d >= 0).all()                                   # never backwards
    # Half a second a call, plus at most 5% of it towards the wall clock: never a jump.
    assert d.max() <= 0.5 * 1.05 + 1e-9
    # The wall clock is followed at the slew rate, 5% of the seconds passed: +1 s towards the
    # first step over 40 calls, then back towards the second over 40.
    assert clock.skew == pytest.approx(-3600.0 - 0.05 * 0.5 * 40 + 0.05 * 0.5 * 40, abs=1e-6)


def test_the_slew_reaches_the_wall_clock_and_stops_there() -> None:
    c = Clocks()
    clock = ArrivalClock(c.wall, c.mono, log=lambda s: None)
    c.step = 30.0
    for k in range(1, 1000):
        c.m = float(k)
        t = clock()
    assert t == pytest.approx(c.wall(), abs=1.0) and clock.steps == 1


def _run(store: AnalystStore, clocks: Clocks, ingest: Callable[[], float],
         analyst: Callable[[], float]) -> tuple[Any, Any]:
    """Six readings a (monotonic) second for 40 s, the wall clock stepped +1 h at 10 s and back
    at 25 s; the analyst polls every second, then 20 s more."""
    fleet = Fleet()
    server = InProcessServer(fleet.d_diff)
    a, logs = make_analyst(store, server, analyst, WindowSpec(seconds=5))
    for k in range(60):
        if k == 10:
            clocks.step = 3600.0
        if k == 25:
            clocks.step = 0.0
        if k < 40:
            times = []
            for i in range(6):
                clocks.m = k + i / 6
                times.append(ingest())
            store.add_batch(fleet.readings(1, np.array(times)), [])
        clocks.m = k + 1
        while a.poll(store):
            pass
    return a, logs


@pytest.mark.parametrize("kind", ["arrival", "wall"])
def test_time_windows_ride_through_a_clock_step_each_way(kind: str) -> None:
    c = Clocks()
    with open_analyst_store("sqlite://") as store:
        if kind == "arrival":
            ingest = ArrivalClock(c.wall, c.mono, slew=0.0)
            analyst = ArrivalClock(c.wall, c.mono, slew=0.0, log=lambda s: None,
                                   on_step=lambda j: None)
            a, logs = _run(store, c, ingest, analyst)
        else:
            # The wall clock itself, as before: the power check of this test.
            a, logs = _run(store, c, c.wall, c.wall)
        windows = store.windows()
        pending = store.pending_by_group(0, store.max_row_id())
        left = sum(p.count for p in pending.values())
        if kind == "wall":
            # Stepped back, the wall clock leaves the readings after the step waiting for an hour.
            assert left > 0
            return
        assert left == 0, "readings left unscored"
        assert [w.state for w in windows] == ["done"] * 8
        assert [w.n for w in windows] == [30] * 8           # none closed early, none merged
        assert all(w.end - w.start == 5.0 for w in windows)
        starts = [w.start for w in windows]
        assert starts == sorted(starts)                      # in order


def test_the_analyst_stores_each_step_as_an_event_and_a_counter() -> None:
    c = Clocks()
    with open_analyst_store("sqlite://") as store:
        logs: list[str] = []
        fleet = Fleet()
        server = InProcessServer(fleet.d_diff)
        a, logs = make_analyst(store, server, lambda: 0.0, WindowSpec(seconds=5))
        # The analyst's own clock, built as it builds it by default, on the test's clocks.
        a.clock = ArrivalClock(c.wall, c.mono, log=a.log, on_step=a._steps.append, who="analyst")
        c.m, c.step = 1.0, -3600.0
        a.poll(store)
        a.poll(store)
        (e,) = store.events()
        assert e.kind == "clock" and "stepped by -3600.0 s" in e.text
        assert store.counters()["clock_steps"] == 1
        assert sum("analyst: the wall clock stepped by -3600.0 s" in line for line in logs) == 1
