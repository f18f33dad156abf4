"""The analyst's CPU while it waits, with 100,000 readings pending, as a markdown table.

    python bench/analyst_idle.py                  # about 2 minutes: three 30 s measurements
    python bench/analyst_idle.py --seconds 10     # quicker, coarser

An SQLite analyst store is filled with 100,000 readings from 10 devices; the window is 200,000
readings, so none closes and every poll finds the same 100,000 pending. Three processes are
measured one after the other, each for ``--seconds`` after a 5 s warm-up, by their CPU time
(user + system, /proc/<pid>/stat):

* baseline: the polling of dpsense before time windows, reproduced here: every 0.2 s it read
  up to a window of rows after the last processed one (``readings_after``) to count them, and
  counted the whole table (``count``);
* ``dpsense analyst --no-ingest``: the detection loop alone (an index lookup per poll);
* ``dpsense analyst``: the whole service, with its two idle ingest threads and MQTT clients.

A Mosquitto on a free loopback port serves the two analyst processes (they connect before they
poll). The per-poll column is the median time of one poll in this process: the baseline's two
queries, and ``Analyst.poll`` with nothing new.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from dpsense.cloud.analyst.service import Analyst, AnalystParams
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.transport.session import Connection
from dpsense.cloud.storage import Reading, open_analyst_store
from dpsense.cloud.analyst.windows import WindowSpec

PENDING = 100_000
WINDOW = 200_000
POLL = 0.2


def fill(url: str) -> None:
    now = time.time()
    with open_analyst_store(url) as store:
        batch = []
        for i in range(PENDING):
            d = i % 10 + 1
            batch.append(Reading(d, 1, i // 10, os.urandom(8), 1, (i % 5000, -(i % 3000)),
                                 "dpsense/readings/d%d" % d, now + i * 1e-4))
            if len(batch) == 5000:
                store.add_batch(batch, [])
                batch = []


def baseline_loop(url: str) -> None:
    """The idle path of the analyst's loop before time windows (window not full: sleep, poll again)."""
    store = open_analyst_store(url)
    start, last_count = 1, -1
    while True:
        avail = len(store.readings_after(start - 1, WINDOW))
        count = store.count()
        if count != last_count:
            last_count = count
        assert avail < WINDOW
        time.sleep(POLL)


def cpu_seconds(pid: int) -> float:
    fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(cmd: list[str], seconds: float, log: Path, env: dict[str, str] | None = None,
            warmup: float = 5.0) -> float:
    with open(log, "ab") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=f, env=env)
    try:
        time.sleep(warmup)
        if p.poll() is not None:
            raise SystemExit("bench: %s exited early (log: %s)" % (cmd[0:4], log))
        c0, t0 = cpu_seconds(p.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds(p.pid), time.monotonic()
    finally:
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return (c1 - c0) / (t1 - t0)


def per_poll(url: str) -> tuple[float, float]:
    """Median seconds of one baseline poll and of one idle ``Analyst.poll``."""
    with open_analyst_store(url) as store:
        old = []
        for _ in range(5):
            t = time.perf_counter()
            len(store.readings_after(0, WINDOW))
            store.count()
            old.append(time.perf_counter() - t)
        a = Analyst(Connection("127.0.0.1", 1, "analyst", "-", "bench"), lambda: store,
                    AnalystParams(eps_q=1200.0, min_samples=60, window=WindowSpec(count=WINDOW)), log=lambda s: None)
        a._stop = threading.Event()
        a.resume(store)
        new = []
        for _ in range(200):
            t = time.perf_counter()
            a.poll(store)
            new.append(time.perf_counter() - t)
    return statistics.median(old), statistics.median(new)


def main() -> int:
    global PENDING
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=30.0, help="CPU measured over this many seconds (default 30)")
    p.add_argument("--readings", type=int, default=PENDING,
                   help="readings pending (default %d; fewer for a smoke run)" % PENDING)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before each measurement (default 5)")
    p.add_argument("--baseline-loop", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args()
    PENDING = args.readings
    if args.baseline_loop:
        baseline_loop(args.baseline_loop)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="dpsense-bench-idle-"))
    try:
        rows = run(tmp, args.seconds, args.warmup)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n%d readings pending, window %d readings, SQLite; %s, Python %s, %d CPUs, load %.2f\n"
          % (PENDING, WINDOW, platform.machine(), platform.python_version(), os.cpu_count() or 0,
             os.getloadavg()[0]))
    print("| process | per poll (ms) | CPU over %g s, share of one core | x baseline |" % args.seconds)
    print("|---|---:|---:|---:|")
    for name, poll, share in rows:
        print("| %s | %s | %.2f%% | %.3f |" % (name, "%.3f" % (poll * 1e3) if poll is not None else "-",
                                             100 * share, share / rows[0][2] if rows[0][2] else float("nan")))
    return 0


def run(tmp: Path, seconds: float, warmup: float = 5.0) -> list[tuple[str, float | None, float]]:
    url = "sqlite:///%s" % (tmp / "analyst.db")
    print("bench: filling %s with %d readings" % (url, PENDING), file=sys.stderr, flush=True)
    fill(url)
    old_poll, new_poll = per_poll(url)
    broker = Broker(tmp, port=free_port())
    # The analyst's broker password travels in its environment only, as the services take it.
    env = dict(os.environ, DPSENSE_BROKER_PASSWORD=broker.add_account("analyst"))
    common = ["--data-dir", str(tmp), "--broker-port", str(broker.port), "--analyst-db", url, "--window", str(WINDOW)]
    dpsense = [sys.executable, "-m", "dpsense.cloud.cli", "analyst", *common]
    rows: list[tuple[str, float | None, float]] = []
    with broker.running():
        for name, cmd, poll in (
                ("baseline: `readings_after` + `count` every 0.2 s (before time windows)",
                 [sys.executable, __file__, "--baseline-loop", url], old_poll),
                ("`dpsense analyst --no-ingest` (detection loop)", dpsense + ["--no-ingest"], new_poll),
                ("`dpsense analyst` (with its ingest threads)", dpsense, None)):
            print("bench: %s, %g s" % (name, seconds), file=sys.stderr, flush=True)
            rows.append((name, poll, measure(cmd, seconds, tmp / "bench.log", env, warmup)))
    return rows


if __name__ == "__main__":
    sys.exit(main())
