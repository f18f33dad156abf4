"""What a dashboard refresh costs over an SQLite analyst store, as a markdown table.

    python bench/dashboard.py                   # 100,000 readings, one done window; about 10 s
    python bench/dashboard.py --readings 20000  # quicker

The store holds ``--readings`` readings from 10 devices (2 columns, one status message each)
and one done count window over all of them with 5% candidates, as the analyst stores it. Rows,
each the median of ``--repeat`` runs:

* baseline: the analyst-store reads ``dpsense status`` makes (count, gaps, dead letters, window
  counts) on a freshly opened store, measured in the same run;
* the dashboard's first refresh (a new ``StoreSource``: summary, windows, devices and events,
  what the page asks for on every poll);
* one page poll afterwards with nothing new, and with 1,000 new readings;
* the chosen window's candidates, read once (its members and verdicts), and once cached;
* the page's aggregates with a profile: each group's mean per 10 minutes over the last day
  (``/api/aggregates``) and the latest window's histogram (``/api/histogram``), and a page poll
  with them, against the same poll without them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from dpsense.cloud.ops.dashboard.data import StoreSource
from dpsense.cloud.storage import AnalystStore, DeviceStatus, Reading, Verdict, open_analyst_store
from dpsense.cloud.storage.records import WindowOutcome

DEVICES = 10


def _readings(start: int, n: int, now: float) -> list[Reading]:
    return [Reading(i % DEVICES + 1, 1, i // DEVICES, os.urandom(8), 1, ((i * 7919) % 20000 - 10000, i % 977),
                    "dpsense/readings/d%d" % (i % DEVICES + 1), now) for i in range(start, start + n)]


def _median(f: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--readings", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    if a.readings < 100 or a.repeat < 1:
        print("bench/dashboard.py: --readings must be >= 100 and --repeat >= 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        url = "sqlite:///%s" % (Path(tmp) / "analyst.db")
        now = time.time()
        with open_analyst_store(url) as s:
            s.add_batch(_readings(0, a.readings, now), [])
            s.add_statuses([DeviceStatus(d, 1, now, {"event": "boot", "entropy": "urandom", "eps_record": "1/2",
                                                     "eps_record_worst": "1", "window": 0, "spent": "1",
                                                     "cap": "100"}, "dpsense/status/d%d" % d)
                            for d in range(1, DEVICES + 1)], [])
            w = s.close_window("default", "count", upto_row=a.readings, closed_at=now)
            assert w is not None and w.n == a.readings
            cands = list(range(1, a.readings + 1, 20))       # row i is reading i - 1 of _readings
            verdicts = [Verdict(w.id, w.group, r, (r - 1) % DEVICES + 1, 1, (r - 1) // DEVICES, now, True, False,
                                False, True) for r in cands]
            s.complete_window(w.id, WindowOutcome(len(cands), 0, 0, len(cands), 0, 0.1, 0.1, now), verdicts, {})

        def status() -> None:
            with open_analyst_store(url) as s:
                s.count(), s.gaps(), s.dead_letter_count(), s.window_counts()

        def opener() -> AnalystStore:
            return open_analyst_store(url)

        def first() -> None:
            fresh = StoreSource(opener, min_interval=0, cost_share=None)
            fresh.summary(), fresh.windows(20), fresh.devices(), fresh.events(10)

        source = StoreSource(opener, min_interval=0, cost_share=None)

        def poll() -> None:
            source.summary(), source.windows(20), source.devices(), source.events(10)

        poll()

        def candidates_first() -> None:
            StoreSource(opener, min_interval=0, cost_share=None).candidates(0)

        added = [a.readings]

        def poll_new() -> None:
            with open_analyst_store(url) as s:
                s.add_batch(_readings(added[0], 1000, time.time()), [])
            added[0] += 1000
            t0 = time.perf_counter()
            poll()
            timed.append(time.perf_counter() - t0)

        timed: list[float] = []
        cells = [
            ("baseline: `dpsense status` reads, fresh store", _median(status, a.repeat)),
            ("first refresh (summary, windows, devices, events)", _median(first, a.repeat)),
            ("page poll, nothing new", _median(poll, a.repeat)),
        ]
        for _ in range(a.repeat):
            poll_new()
        cells.append(("page poll, 1,000 new readings", statistics.median(timed)))
        cells.append(("candidates of the window, first read", _median(candidates_first, a.repeat)))
        source.candidates(0)
        cells.append(("candidates of the window, cached", _median(lambda: source.candidates(0), a.repeat)))
        from dpsense.cloud.cli.commands.dashboard import latest_histogram, mean_bands
        from dpsense.cloud.deploy.profile import DeviceProfile, save_profile
        save_profile(tmp, DeviceProfile(quantum=0.01, domain=200.0, delta_q=(1250, 1250), epsilon="0.5",
                                        centre_q=(0, 0)))
        agg = StoreSource(opener, min_interval=0, cost_share=None, aggregator=mean_bands(Path(tmp)),
                          histogrammer=latest_histogram(Path(tmp)))
        cells.append(("means per group, 10 min windows over a day", _median(
            lambda: agg.aggregates(0, 600.0, 86400.0), a.repeat)))
        cells.append(("histogram of the latest window", _median(
            lambda: agg.histogram("default", 0, 600.0, 86400.0), a.repeat)))

        def poll_with_aggregates() -> None:
            agg.summary(), agg.windows(20), agg.devices(), agg.events(10)
            agg.aggregates(0, 600.0, 86400.0), agg.histogram("default", 0, 600.0, 86400.0)
        cells.append(("page poll with the aggregates", _median(poll_with_aggregates, a.repeat)))
    print("%d readings from %d devices, one done window with %d candidates; median of %d runs\n"
          % (a.readings, DEVICES, len(cands), a.repeat))
    print("| what | seconds |\n|---|---:|")
    for what, sec in cells:
        print("| %s | %.4f |" % (what, sec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
