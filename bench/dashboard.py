"""What a dashboard refresh costs over an SQLite analyst store, as a markdown table.

    python bench/dashboard.py                   # 100,000 readings, one closed window; about 15 s
    python bench/dashboard.py --readings 20000  # quicker

The store holds ``--readings`` readings from 10 devices (2 columns) and one closed window over
all of them with 5% candidates. Rows, each the median of ``--repeat`` runs:

* baseline: the reads ``dpsense status`` makes (count, gaps, dead letters, window results) on a
  freshly opened store, measured in the same run;
* the dashboard's first refresh (a new ``StoreSource``: every reading and the window's rows read
  once);
* one page poll afterwards with nothing new (summary, windows, devices), and with 1,000 new
  readings;
* the chosen window's candidates once cached.
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

from dpsense.cloud.dashboard.data import StoreSource
from dpsense.cloud.storage import AnalystStore, Reading, open_analyst_store

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
            rows = list(range(1, a.readings + 1))
            cands = rows[::20]
            s.save_window_result(0, {"window": 0, "first_row": 1, "last_row": a.readings, "n": a.readings,
                                     "presumed": len(cands), "fp": 0, "fn": 0, "candidates": len(cands),
                                     "missing_corrections": 0, "split_accepted": True, "presumed_rows": cands,
                                     "candidate_rows": cands, "round_s": 0.1})

        def status() -> None:
            with open_analyst_store(url) as s:
                s.count(), s.gaps(), s.dead_letter_count(), s.window_results()

        def opener() -> AnalystStore:
            return open_analyst_store(url)

        def first() -> None:
            StoreSource(opener, min_interval=0).summary()

        source = StoreSource(opener, min_interval=0)
        source.summary()

        def poll() -> None:
            source.summary(), source.windows(20), source.devices()

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
            ("first refresh (every reading read once)", _median(first, a.repeat)),
            ("page poll, nothing new", _median(poll, a.repeat)),
        ]
        for _ in range(a.repeat):
            poll_new()
        cells.append(("page poll, 1,000 new readings", statistics.median(timed)))
        cells.append(("candidates of the window, cached", _median(lambda: source.candidates(0), a.repeat)))
    print("%d readings from %d devices, one closed window with %d candidates; median of %d runs\n"
          % (a.readings, DEVICES, len(cands), a.repeat))
    print("| what | seconds |\n|---|---:|")
    for what, sec in cells:
        print("| %s | %.4f |" % (what, sec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
