"""Hourly aggregates over the analyst's store (``dpsense aggregate``), with baselines, as a markdown table.

    python bench/aggregate.py               # 1,000,000 readings over 24 hourly windows (about 1 min)
    python bench/aggregate.py --quick       # 100,000 readings

The store is SQLite, filled through ``add_batch`` (not timed) with two-column readings of one
group, spread evenly over 24 hours. Timed, each the best of three runs:

* baselines measured in the same run: one SQL ``AVG`` grouped by hour over the same rows (of
  ``received_at``: the values are packed int32 blobs that SQL cannot average), the same rows
  read through the store (``released_rows``, what every aggregate reads), and the naive
  per-window mean of the released values with numpy (no interval);
* ``aggregate`` with ``mean``, ``count-above``, ``histogram`` (12 bins) and ``quantile 0.5``,
  each for the 24 windows with its intervals.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dpsense.cloud.privacy.stream_aggregates import Stat, aggregate
from dpsense.cloud.deploy.profile import DeviceProfile
from dpsense.cloud.storage import Reading, open_analyst_store

HOURS = 24
PROFILE = DeviceProfile(quantum=0.01, domain=500.0, delta_q=(1240, 1240), epsilon="0.5", centre_q=(0, 0))


def fill(url: str, n: int) -> None:
    rng = np.random.default_rng(1)
    p = math.exp(-1 / 2480)
    q = np.rint(rng.normal(0, 6000, (n, 2))).astype(np.int64)
    y = q + (rng.geometric(1 - p, (n, 2)) - 1) - (rng.geometric(1 - p, (n, 2)) - 1)
    at = np.linspace(0, HOURS * 3600.0, n, endpoint=False)
    with open_analyst_store(url) as st:
        for s in range(0, n, 20_000):
            st.add_batch([Reading(1 + i % 100, 1, i, os.urandom(8), 1, (int(y[i, 0]), int(y[i, 1])),
                                  "dpsense/readings/d1", float(at[i])) for i in range(s, min(n, s + 20_000))], [])


def best(f: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 readings instead of 1,000,000")
    ap.add_argument("--n", type=int, default=None, help="readings (default 1,000,000)")
    a = ap.parse_args()
    n = a.n or (100_000 if a.quick else 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        url = "sqlite:///" + str(Path(tmp) / "analyst.db")
        fill(url, n)
        with open_analyst_store(url) as st:
            span = dict(group="default", window_s=3600.0, since=0.0, until=HOURS * 3600.0)

            def sql_avg() -> object:
                return st._rows("bench", "SELECT CAST(received_at / 3600 AS INTEGER), AVG(received_at), count(*)"
                                " FROM readings GROUP BY 1")

            def naive() -> object:
                rows = st.released_rows("default", 0.0, HOURS * 3600.0)
                k = np.array([int(r[0] // 3600) for r in rows])
                v = np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype="<i4").reshape(-1, 2)[:, 0]
                return np.bincount(k, weights=v) / np.bincount(k)

            cases: list[tuple[str, Callable[[], object]]] = [
                ("baseline: SQL AVG(received_at) per hour", sql_avg),
                ("baseline: read the rows (released_rows)", lambda: st.released_rows("default", 0.0, HOURS * 3600.0)),
                ("baseline: read + naive numpy mean, no interval", naive),
            ]
            for stat in (Stat("mean"), Stat("count-above", 40.0), Stat("histogram"), Stat("quantile", 0.5)):
                cases.append(("aggregate %s" % stat.describe(),
                              lambda s=stat: aggregate(st, PROFILE, column=0, stat=s, **span)))  # type: ignore[misc]
            print("%d readings, %d hourly windows; %s, Python %s, numpy %s\n"
                  % (n, HOURS, platform.machine(), platform.python_version(), np.__version__))
            print("| case | seconds (best of 3) | readings/s |")
            print("|---|---|---|")
            for name, f in cases:
                t = best(f)
                print("| %s | %.3f | %.3g |" % (name, t, n / t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
