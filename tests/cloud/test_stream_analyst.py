"""The analyst's loop on a store, with the correction server answering in-process (no broker).

A fake clock drives it: readings get arrival times, ``poll`` is called at chosen moments.
"""
from __future__ import annotations

import itertools
import time
import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dpsense.cloud.transport import topics
from dpsense.cloud.analyst.service import Analyst, AnalystParams
from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.rules import CorrectionParams
from dpsense.cloud.correction.server import CorrectionRounds
from dpsense.cloud.transport.session import Connection
from dpsense.cloud.storage import AnalystStore, Reading, open_analyst_store
from tests.cloud.roundkit import LOOSE, Exact, Wire
from dpsense.cloud.analyst.windows import WindowSpec

MIN_SAMPLES = 10            # floor: 20 readings


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class InProcessServer:
    """Takes the analyst's publishes: round messages get the correction server's answers (or
    nothing while it is ``down``), alerts are kept."""

    def __init__(self, d_diff: dict[bytes, int]) -> None:
        self.d_diff = d_diff
        self.down = False
        self.rounds = CorrectionRounds(CorrectionParams(w_o=200.0, normal_radius=10.0),
                                       lambda ts: {t: d_diff[t] for t in ts if t in d_diff}, grace=0,
                                       noise=Exact(), policy=LOOSE)
        self.wire = Wire()
        self.analyst: Analyst | None = None
        self.alerts: list[tuple[str, dict[str, Any]]] = []

    def publish(self, topic: str, payload: bytes, qos: int = 0) -> None:
        assert self.analyst is not None
        if topic == topics.ROUND_TO_CS:
            body = self.wire.take(payload)
            if not self.down and body is not None:
                reply = self.rounds.handle(body)
                if reply is not None:
                    self.analyst._q.put(msg.decode(reply))
        else:
            self.alerts.append((topic, json.loads(payload)))


def make_analyst(store: AnalystStore, server: InProcessServer, clock: Clock, window: WindowSpec,
                 **kw: Any) -> tuple[Analyst, list[str]]:
    logs: list[str] = []
    kw.setdefault("centre_q", (0.0, 0.0))      # the fleet's provisioned centre
    kw.setdefault("min_round", 2)
    kw.setdefault("min_presumed", 1)
    profile = kw.pop("profile", None)
    params = AnalystParams(eps_q=60.0, min_samples=MIN_SAMPLES, window=window, round_timeout=0.2, **kw)
    a = Analyst(Connection("127.0.0.1", 1, "analyst", "x", "t"), lambda: store, params, log=logs.append,
                clock=clock, profile=profile)
    a._client = server          # type: ignore[assignment]
    a._stop = threading.Event()
    server.analyst = a
    a.resume(store)
    return a, logs


class Fleet:
    """Readings with arrival times; a cluster round 0 with a far reading every 25th."""

    def __init__(self, seed: int = 3) -> None:
        self.rng = np.random.default_rng(seed)
        self.seq: dict[int, int] = {}
        self.d_diff: dict[bytes, int] = {}

    def readings(self, device: int, times: np.ndarray) -> list[Reading]:
        out = []
        for t in times:
            s = self.seq.get(device, 0)
            self.seq[device] = s + 1
            token = self.rng.bytes(8)
            far = s % 25 == 24
            v = self.rng.normal(0, 15, 2) + (2000 if far else 0)
            self.d_diff[token] = -5 if far else int(self.rng.normal(20, 10))
            out.append(Reading(device, 1, s, token, 1, tuple(int(x) for x in v), "dpsense/readings/d%d" % device,
                               float(t)))
        return out


_DATABASES = itertools.count()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[AnalystStore]:
    url = "sqlite://"
    if request.param == "postgresql":
        from tests.pgserver import create_database
        url = create_database(request.getfixturevalue("postgres_url"), "loop%d" % next(_DATABASES))
    with open_analyst_store(url) as s:
        yield s


def spread(t0: float, t1: float, n: int) -> np.ndarray:
    return np.linspace(t0, t1, n, endpoint=False)


def test_a_window_below_the_minimum_is_carried_never_scored(store: AnalystStore) -> None:
    fleet = Fleet()
    small = fleet.readings(1, spread(1000.0, 1005.0, 8))
    values = np.array([r.values for r in small], dtype=float)
    clock = Clock(1006.0)
    server = InProcessServer(fleet.d_diff)
    a, logs = make_analyst(store, server, clock, WindowSpec(seconds=5))
    # The case the rule is for: scored on its own, this window would be all outliers.
    assert (a.detector().fit_predict(values) == -1).all()
    store.add_batch(small, [])
    assert a.poll(store) == 0
    assert store.windows() == []
    (event,) = store.events()
    assert event.kind == "carried" and "8 readings, fewer than the minimum window of 20" in event.text
    assert any("carried into the group's next window" in line for line in logs)
    assert a.poll(store) == 0 and len(store.events()) == 1        # said once

    store.add_batch(fleet.readings(1, spread(1005.0, 1010.0, 30)), [])
    clock.t = 1011.0
    assert a.poll(store) == 1
    (w,) = store.windows()
    assert (w.n, w.start, w.end, w.state) == (38, 1000.0, 1010.0, "done")
    assert 0 < w.presumed < w.n
    assert store.counters()["readings_carried"] == 8


def test_count_windows_flush_only_what_reaches_the_minimum(store: AnalystStore) -> None:
    fleet = Fleet()
    clock = Clock(2000.0)
    a, _ = make_analyst(store, InProcessServer(fleet.d_diff), clock, WindowSpec(count=100))
    store.add_batch(fleet.readings(1, spread(1990.0, 1999.0, 15)), [])
    assert a.poll(store, flush_when_idle=3) == 0
    clock.t = 2004.0
    assert a.poll(store, flush_when_idle=3) == 0
    assert store.windows() == [] and store.events()[0].kind == "carried"
    store.add_batch(fleet.readings(1, spread(2004.0, 2005.0, 30)), [])
    assert a.poll(store, flush_when_idle=3) == 0         # new readings: not idle yet
    clock.t = 2008.0
    assert a.poll(store, flush_when_idle=3) == 1
    assert [w.n for w in store.windows()] == [45]
    store.add_batch(fleet.readings(1, spread(2008.0, 2009.0, 250)), [])
    assert a.poll(store, flush_when_idle=3) + a.poll(store, flush_when_idle=3) == 2
    assert [w.n for w in store.windows()] == [45, 100, 100]
    assert a._flow.pending == {"default": 50}


def test_each_group_has_its_own_windows(store: AnalystStore) -> None:
    fleet = Fleet()
    store.set_device_group(3, "hall-a", 0.0)
    for d in (1, 2, 3):
        store.add_batch(fleet.readings(d, spread(3000.0, 3010.0, 60)), [])
    clock = Clock(3011.0)
    server = InProcessServer(fleet.d_diff)
    a, _ = make_analyst(store, server, clock, WindowSpec(seconds=5))
    while a.poll(store):
        pass
    got = sorted((w.group, w.seq, w.start, w.end, w.n) for w in store.windows())
    assert got == [("default", 0, 3000.0, 3005.0, 60), ("default", 1, 3005.0, 3010.0, 60),
                   ("hall-a", 0, 3000.0, 3005.0, 30), ("hall-a", 1, 3005.0, 3010.0, 30)]
    # Every verdict names a reading of its own group, and the alerts go to the group's topic.
    groups = {w.id: w.group for w in store.windows()}
    assert all((v.device_id == 3) == (groups[v.window] == "hall-a") for v in store.verdicts(candidates_only=False))
    assert {t for t, _ in server.alerts} <= {topics.ALERTS % "default", topics.ALERTS % "hall-a"}


def test_a_failed_round_holds_the_window_and_stores_nothing_until_it_completes(store: AnalystStore) -> None:
    fleet = Fleet()
    store.add_batch(fleet.readings(1, spread(4000.0, 4005.0, 50)), [])
    clock = Clock(4006.0)
    server = InProcessServer(fleet.d_diff)
    server.down = True
    a, logs = make_analyst(store, server, clock, WindowSpec(seconds=5))
    assert a.poll(store) == 0
    (w,) = store.windows()
    assert (w.state, w.attempts) == ("held", 1) and "no 'split' answer" in (w.last_error or "")
    assert store.window_results() == [] and store.verdicts(candidates_only=False) == []
    assert store.events()[0].kind == "held" and "retrying in 2 s" in logs[-1]
    assert a.poll(store) == 0 and store.windows()[0].attempts == 1      # waits for its retry time
    clock.t += 2.5
    assert a.poll(store) == 0
    assert store.windows()[0].attempts == 2 and "retrying in 4 s" in logs[-1]
    server.down = False
    clock.t += 4.5
    assert a.poll(store) == 1
    (w,) = store.windows()
    (round_id, result), = [(r["round"], r) for _, r in store.window_results()]
    assert (w.state, w.attempts, w.round_id) == ("done", 3, round_id)
    assert result["candidates"] == len(store.verdicts()) == w.candidates
    assert store.counters()["rounds_failed"] == 2


def test_a_held_windows_event_names_the_round_attempts_its_record_counts(store: AnalystStore) -> None:
    """Held before any round (no profile yet): 0 attempts, in the record, the event and the log
    alike (it said "attempt 2" while the dashboard said "held after 0 attempts")."""
    fleet = Fleet()
    store.add_batch(fleet.readings(1, spread(4100.0, 4105.0, 50)), [])
    clock = Clock(4106.0)
    server = InProcessServer(fleet.d_diff)
    a, logs = make_analyst(store, server, clock, WindowSpec(seconds=5), centre_q=None)
    assert a.poll(store) == 0
    (w,) = store.windows()
    (event,) = [e for e in store.events() if e.kind == "held"]
    assert (w.state, w.attempts) == ("held", 0)
    assert "held after 0 round attempts:" in event.text and "held after 0 round attempts:" in logs[-1], event.text
    server.down = True
    b, logs = make_analyst(store, server, clock, WindowSpec(seconds=5))
    assert b.poll(store) == 0
    assert store.windows()[0].attempts == 1
    assert "held after 1 round attempt:" in store.events()[0].text, store.events()[0].text


def test_missing_correction_records_hold_the_window_up_to_max_hold(store: AnalystStore) -> None:
    fleet = Fleet()
    batch = fleet.readings(1, spread(5000.0, 5005.0, 50))
    store.add_batch(batch, [])
    late = {r.token: fleet.d_diff.pop(r.token) for r in batch[:3]}
    clock = Clock(5006.0)
    a, _ = make_analyst(store, InProcessServer(fleet.d_diff), clock, WindowSpec(seconds=5), max_hold=60.0)
    assert a.poll(store) == 0
    assert "3 of 50 readings have no correction record" in (store.windows()[0].last_error or "")
    fleet.d_diff.update(late)                 # they arrive
    clock.t += 3
    assert a.poll(store) == 1
    assert store.windows()[0].missing == 0

    batch = fleet.readings(1, spread(5005.0, 5010.0, 50))
    store.add_batch(batch, [])
    fleet.d_diff.pop(batch[0].token)          # lost for good
    clock.t = 5011.0
    assert a.poll(store) == 0
    clock.t = 5011.0 + 61
    assert a.poll(store) == 1
    w = store.windows()[-1]
    assert (w.state, w.missing) == ("done", 1)
    assert "lacking a correction record" in store.events()[0].text


class CountingStore:
    """Records which store methods a poll calls."""

    def __init__(self, store: AnalystStore) -> None:
        self.store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if callable(attr):
            def call(*args: Any, **kw: Any) -> Any:
                self.calls.append(name)
                return attr(*args, **kw)
            return call
        return attr


@pytest.mark.parametrize("window", [WindowSpec(count=100_000), WindowSpec(seconds=3600)])
def test_an_idle_poll_is_one_index_lookup(store: AnalystStore, window: WindowSpec) -> None:
    fleet = Fleet()
    store.add_batch(fleet.readings(1, spread(7200.0, 7210.0, 5000)), [])
    clock = Clock(7211.0)
    a, _ = make_analyst(store, InProcessServer(fleet.d_diff), clock, window)
    a.poll(store)                                 # the hour's boundary check, once
    spy = CountingStore(store)
    for _ in range(3):
        clock.t += 1
        assert a.poll(spy, flush_when_idle=None) == 0    # type: ignore[arg-type]
    assert spy.calls == ["max_row_id"] * 3
    store.add_batch(fleet.readings(1, spread(7214.0, 7215.0, 10)), [])
    spy.calls.clear()
    a.poll(spy)                                   # type: ignore[arg-type]
    assert spy.calls == ["max_row_id", "pending_by_group"]     # counts the 10 new rows only
    assert a._flow.pending == {"default": 5010}


def test_alerts_name_readings_and_carry_no_values(store: AnalystStore) -> None:
    fleet = Fleet()
    batch = fleet.readings(4, spread(6000.0, 6005.0, 100))
    store.add_batch(batch, [])
    server = InProcessServer(fleet.d_diff)
    a, _ = make_analyst(store, server, Clock(6006.0), WindowSpec(seconds=5))
    assert a.poll(store) == 1
    (topic, doc), = server.alerts
    assert topic == "dpsense/alerts/default"
    cands = store.verdicts()
    assert len(doc["candidates"]) == len(cands) > 0
    assert {k for c in doc["candidates"] for k in c} == {"device", "boot", "seq", "received_at", "verdict"}
    assert set(doc) == {"window", "group", "group_window", "kind", "start", "end", "readings", "candidates"}
    assert {(c["device"], c["seq"]) for c in doc["candidates"]} == {(v.device_id, v.seq) for v in cands}
    far = {r.seq for r in batch if r.seq % 25 == 24}
    assert far <= {v.seq for v in cands}


def _sparse(device: int, times: np.ndarray, start_seq: int = 0) -> list[Reading]:
    """Readings 1,000 quanta apart: no reading has a neighbour within the radius."""
    return [Reading(device, 2, start_seq + i, bytes([device, i, 9, 9, 0, 0, 0, 0]), 1, (1000 * (start_seq + i), 0),
                    "dpsense/readings/d%d" % device, float(t)) for i, t in enumerate(times)]


class Counting(InProcessServer):
    def __init__(self, d_diff: dict[bytes, int]) -> None:
        super().__init__(d_diff)
        self.round_messages = 0

    def publish(self, topic: str, payload: bytes, qos: int = 0) -> None:
        self.round_messages += topic == topics.ROUND_TO_CS
        super().publish(topic, payload, qos)


def test_a_window_without_any_inlier_is_carried_without_a_round(store: AnalystStore) -> None:
    fleet = Fleet()
    sparse = _sparse(5, spread(8000.0, 8005.0, 30))
    fleet.d_diff.update({r.token: 10 for r in sparse})
    store.add_batch(sparse, [])
    clock = Clock(8006.0)
    server = Counting(fleet.d_diff)
    a, logs = make_analyst(store, server, clock, WindowSpec(seconds=5))
    assert a.poll(store) == 0
    (w,) = store.windows()
    assert (w.state, w.n) == ("carried", 30) and "flagged all 30 readings" in (w.last_error or "")
    assert server.round_messages == 0 and store.window_results() == []
    assert store.events()[0].kind == "carried" and "carried into the group's next window" in logs[-1]
    assert a.poll(store) == 0 and len(store.windows()) == 1          # not closed again on its own
    store.add_batch(fleet.readings(5, spread(8005.0, 8010.0, 40)), [])
    clock.t = 8011.0
    assert a.poll(store) == 1
    done = store.windows()[-1]
    assert (done.state, done.n, done.start, done.end) == ("done", 70, 8000.0, 8010.0)
    assert done.presumed < done.n


def test_an_idle_groups_carried_readings_are_carried_once_then_scored_with_its_next_readings(
        store: AnalystStore) -> None:
    """The rule of docs/operating.md ("Windows that end"): carried readings are scored with the
    next window of their group that has new readings; while the group is idle they are never
    closed again on their own, one interval after another (the issue's windows 8, 9, 10 each
    carrying the same 459 readings), nor by a restarted analyst."""
    fleet = Fleet()
    sparse = _sparse(5, spread(8000.0, 8005.0, 30))
    fleet.d_diff.update({r.token: 10 for r in sparse})
    store.add_batch(sparse, [])
    clock = Clock(8006.0)
    a, logs = make_analyst(store, Counting(fleet.d_diff), clock, WindowSpec(seconds=5))
    assert a.poll(store) == 0
    for k in range(1, 7):               # six idle intervals
        clock.t = 8006.0 + 5 * k
        assert a.poll(store) == 0
    assert [(w.state, w.n) for w in store.windows()] == [("carried", 30)]
    assert [e.kind for e in store.events()] == ["carried"]
    again, _ = make_analyst(store, Counting(fleet.d_diff), clock, WindowSpec(seconds=5))
    clock.t += 20
    assert again.poll(store) == 0 and len(store.windows()) == 1
    store.add_batch(fleet.readings(5, spread(8060.0, 8065.0, 40)), [])
    clock.t = 8066.0
    assert again.poll(store) == 1
    done = store.windows()[-1]
    assert (done.state, done.n, done.start, done.end) == ("done", 70, 8000.0, 8065.0)
    assert [e.kind for e in store.events()].count("carried") == 1


def test_an_idle_groups_small_partial_window_is_reported_once(store: AnalystStore) -> None:
    fleet = Fleet()
    store.add_batch(fleet.readings(1, spread(8100.0, 8102.0, 8)), [])
    clock = Clock(8106.0)
    a, logs = make_analyst(store, InProcessServer(fleet.d_diff), clock, WindowSpec(seconds=5))
    for k in range(8):
        clock.t = 8106.0 + 5 * k
        assert a.poll(store) == 0
    assert store.windows() == [] and [e.kind for e in store.events()] == ["carried"]
    assert sum("carried into the group's next window" in line for line in logs) == 1


def test_a_carried_count_window_grows_by_a_window(store: AnalystStore) -> None:
    fleet = Fleet()
    sparse = _sparse(5, spread(9000.0, 9001.0, 40))
    fleet.d_diff.update({r.token: 10 for r in sparse})
    store.add_batch(sparse, [])
    a, _ = make_analyst(store, InProcessServer(fleet.d_diff), Clock(9002.0), WindowSpec(count=40))
    assert a.poll(store) == 0 and store.windows()[0].state == "carried"
    store.add_batch(fleet.readings(5, spread(9002.0, 9003.0, 30)), [])
    assert a.poll(store) == 0 and len(store.windows()) == 1          # 70 pending: not 40 more yet
    store.add_batch(fleet.readings(5, spread(9003.0, 9004.0, 10)), [])
    assert a.poll(store) == 1
    assert [(w.state, w.n) for w in store.windows()] == [("carried", 40), ("done", 80)]


def test_a_restarted_analyst_takes_up_closed_windows(store: AnalystStore) -> None:
    fleet = Fleet()
    store.add_batch(fleet.readings(1, spread(10000.0, 10005.0, 50)), [])
    clock = Clock(10006.0)
    server = InProcessServer(fleet.d_diff)
    server.down = True
    first, _ = make_analyst(store, server, clock, WindowSpec(seconds=5))
    assert first.poll(store) == 0 and store.windows()[0].state == "held"
    server.down = False
    again, logs = make_analyst(store, server, clock, WindowSpec(seconds=5))     # a new process, same store
    assert "1 closed windows await their correction round (first: window 0)" in logs[0]
    assert again.poll(store) == 1
    (w,) = store.windows()
    assert (w.state, w.attempts, w.round_id) == ("done", 2, 2)       # a new round id for the new attempt


def _odd(device: int, seq: int, columns: int, t: float, config_id: int = 1) -> Reading:
    return Reading(device, 1, seq, bytes([device, seq, columns, 0, 0, 0, 0, 0]), config_id,
                   tuple(range(columns)), "dpsense/readings/d%d" % device, t)


def test_readings_of_1_2_and_16_columns_in_one_window_are_set_apart_not_fatal(store: AnalystStore) -> None:
    """Issue 15 item 7: the protocol allows 1..16 columns; a device using another count than
    the profile's must not stop the analyst nor be scored with the others."""
    fleet = Fleet()
    regular = fleet.readings(1, spread(5000.0, 5005.0, 50)) + fleet.readings(7, spread(5000.0, 5005.0, 10))
    odd = [_odd(7, 100, 1, 5001.0), _odd(7, 101, 16, 5002.0), _odd(7, 102, 16, 5003.0), _odd(9, 0, 1, 5004.0)]
    store.add_batch(regular + odd, [])
    clock = Clock(5006.0)
    server = InProcessServer(fleet.d_diff)
    a, logs = make_analyst(store, server, clock, WindowSpec(seconds=5))
    assert a.poll(store) == 1
    (w,) = store.windows()
    assert (w.state, w.n) == ("done", 64)
    (_, result), = store.window_results()
    assert (result["n"], result["set_apart"]) == (60, 4)
    top = store.max_row_id()                      # the odd readings were stored last
    assert set(store.window_members(w.id, columns=2).row_ids.tolist()) == set(range(top - 63, top - 3))
    assert not {v.row_id for v in store.verdicts(candidates_only=False)} & set(range(top - 3, top + 1))
    # The far readings of the regular population are still found.
    assert result["candidates"] >= 2
    assert store.set_apart_by_device() == {7: 3, 9: 1}
    assert store.counters()["readings_set_apart"] == 4
    texts = sorted(e.text for e in store.events() if e.kind == "set_apart")
    assert texts == ["window %d: 1 readings of device 9 set apart, not scored (1 columns, window has 2)" % w.id,
                     "window %d: 3 readings of device 7 set apart, not scored (1 columns, window has 2; "
                     "16 columns, window has 2)" % w.id]
    assert any("4 of 64 readings set apart" in line for line in logs)


def test_without_a_profile_the_window_s_majority_decides_and_config_is_checked(store: AnalystStore) -> None:
    fleet = Fleet()
    store.add_batch(fleet.readings(1, spread(6000.0, 6005.0, 30))
                    + [_odd(2, 0, 16, 6001.0), _odd(3, 0, 2, 6002.0, config_id=5)], [])
    store.close_window("default", "time", upto_row=store.max_row_id(), closed_at=6006.0, before=6006.0,
                       start=6000.0, end=6005.0)
    (w,) = store.windows()
    m = store.window_members(w.id)
    assert len(m.row_ids) == 31 and m.values.shape == (31, 2)
    assert [(o.device_id, o.reason) for o in m.odd] == [(2, "16 columns, window has 2")]
    m = store.window_members(w.id, columns=2, config_id=1)
    assert len(m.row_ids) == 30
    assert sorted((o.device_id, o.reason) for o in m.odd) == [(2, "16 columns, window has 2"),
                                                              (3, "config_id 5, profile has 1")]


def test_a_window_of_only_odd_readings_completes_unscored(store: AnalystStore) -> None:
    store.add_batch([_odd(4, s, 16, 7000.0 + s / 10) for s in range(25)], [])
    clock = Clock(7006.0)
    a, _ = make_analyst(store, InProcessServer({}), clock, WindowSpec(seconds=5))
    assert a.poll(store) == 1
    (w,) = store.windows()
    assert w.state == "done" and store.verdicts(candidates_only=False) == []
    assert store.set_apart_by_device() == {4: 25}


def test_a_held_group_never_delays_another_group(store: AnalystStore) -> None:
    """Group hall-a's window lacks correction records and is held (retry in 30 s, up to
    max_hold); the default group's next window gets its verdict at the next poll, while
    hall-a's own next window waits behind its held one and both complete in order."""
    fleet = Fleet()
    store.set_device_group(3, "hall-a", 0.0)
    store.add_batch(fleet.readings(1, spread(6000.0, 6005.0, 60)), [])
    held = fleet.readings(3, spread(6000.0, 6005.0, 60))
    store.add_batch(held, [])
    late = {r.token: fleet.d_diff.pop(r.token) for r in held[:3]}
    clock = Clock(6006.0)
    a, _ = make_analyst(store, InProcessServer(fleet.d_diff), clock, WindowSpec(seconds=5), max_hold=600.0,
                        retry_min=30.0)
    while a.poll(store):
        pass
    assert {w.group: w.state for w in store.windows()} == {"default": "done", "hall-a": "held"}
    for d in (1, 3):
        store.add_batch(fleet.readings(d, spread(6005.0, 6010.0, 60)), [])
    clock.t = 6011.0                          # hall-a still waits for its retry at 6036
    assert a.poll(store) == 1
    states = [(w.group, w.start, w.state) for w in sorted(store.windows(), key=lambda w: w.id)]
    assert ("default", 6005.0, "done") in states
    assert ("hall-a", 6000.0, "held") in states and ("hall-a", 6005.0, "closed") in states
    assert a.poll(store) == 0                 # nothing else is due
    fleet.d_diff.update(late)
    clock.t = 6037.0
    assert a.poll(store) + a.poll(store) == 2
    done = [(w.group, w.start) for w in sorted(store.windows(), key=lambda w: w.id) if w.state == "done"]
    assert len(done) == 4 and done.index(("hall-a", 6000.0)) < done.index(("hall-a", 6005.0))


class FlakyStore:
    """The store with a scripted outage, all in the loop's thread: after the first completed
    window it is unreachable for ``outage`` seconds (every call raises as a lost PostgreSQL
    connection does); the first call after that adds ``then`` (readings that came meanwhile);
    the second completed window sets ``stop``."""

    def __init__(self, store: AnalystStore, then: list[Reading], stop: threading.Event, outage: float) -> None:
        self._store = store
        self.then = then
        self.stop = stop
        self.outage = outage
        self.down_until: float | None = None
        self.completed = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*a: Any, **kw: Any) -> Any:
            if self.down_until is not None:
                if time.monotonic() < self.down_until:
                    from dpsense.cloud.errors import StorageUnavailable
                    raise StorageUnavailable("cannot read the newest row id in PostgreSQL: server closed the "
                                             "connection unexpectedly")
                self.down_until = None
                self._store.add_batch(self.then, [])
            out = attr(*a, **kw)
            if name == "complete_window":
                self.completed += 1
                if self.completed == 1:
                    self.down_until = time.monotonic() + self.outage
                else:
                    self.stop.set()
            return out
        return call

    def close(self) -> None:
        pass


class Offline(InProcessServer):
    """The in-process server as the analyst's MQTT client in ``run``."""

    def disconnect(self) -> None:
        pass

    def loop_stop(self) -> None:
        pass


def test_the_loop_rides_through_a_store_outage_and_says_so_once(store: AnalystStore) -> None:
    """The store is unreachable for 1.5 s (a database restart): the loop retries with backoff,
    logs the outage once and its end once, then takes up the store's state and scores what came
    meanwhile; it does not end."""
    fleet = Fleet()
    stop = threading.Event()
    store.add_batch(fleet.readings(1, spread(6990.0, 6999.0, 40)), [])
    flaky = FlakyStore(store, fleet.readings(1, spread(6999.0, 7000.0, 40)), stop, 1.5)
    server = Offline(fleet.d_diff)
    a, logs = make_analyst(flaky, server, Clock(7000.0), WindowSpec(count=40))  # type: ignore[arg-type]
    a.open_store = lambda: flaky                # type: ignore[method-assign]
    a.session.start = lambda client: None       # type: ignore[method-assign]
    guard = threading.Timer(30, stop.set)       # a loop that never gets there ends the test anyway
    guard.start()
    try:
        t0 = time.monotonic()
        a.run(stop)
    finally:
        guard.cancel()
    assert flaky.completed == 2 and time.monotonic() - t0 < 30, logs
    assert sum("the store is unavailable" in line for line in logs) == 1
    assert sum("the store answers again" in line for line in logs) == 1


def test_alerts_carry_the_windows_means_when_the_analyst_has_a_profile(store: AnalystStore) -> None:
    """With a profile the alert adds each column's mean over the window's released readings, in
    physical units, with its 95% interval from the exact noise law, and says it spends no budget;
    a reading's own value is still never in it."""
    from dpsense.cloud.deploy.profile import DeviceProfile
    from dpsense.cloud.privacy.aggregate import NoiseLaw, mean
    fleet = Fleet()
    batch = fleet.readings(4, spread(6000.0, 6005.0, 100))
    store.add_batch(batch, [])
    server = InProcessServer(fleet.d_diff)
    prof = DeviceProfile(quantum=0.5, domain=5000.0, delta_q=(20, 30), epsilon="1", centre_q=(0, 0))
    a, _ = make_analyst(store, server, Clock(6006.0), WindowSpec(seconds=5), profile=lambda: prof)
    assert a.poll(store) == 1
    (_, doc), = server.alerts
    assert set(doc) == {"window", "group", "group_window", "kind", "start", "end", "readings", "candidates",
                        "means", "means_privacy"}
    assert "no privacy budget" in doc["means_privacy"]
    released = np.array([r.values for r in batch], dtype=np.int64)
    for j, m in enumerate(doc["means"]):
        want = mean(released[:, j], NoiseLaw.for_column(prof.delta_q[j], prof.epsilon))
        assert m["column"] == j and m["level"] == 0.95
        assert (m["estimate"], m["lo"], m["hi"]) == pytest.approx((want.value * 0.5, want.lo * 0.5, want.hi * 0.5))
    assert {k for c in doc["candidates"] for k in c} == {"device", "boot", "seq", "received_at", "verdict"}
