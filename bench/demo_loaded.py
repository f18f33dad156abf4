"""`make demo` on a busy machine: the README's first command, run K times with every core busy.

    .venv/bin/python bench/demo_loaded.py                 # 1 quiet run, then 10 under the hog
    .venv/bin/python bench/demo_loaded.py --runs 3 --n 20000

The hog is one process per core spinning in pure Python (``--hog 0``: none), started by this
script and stopped at the end, so the demo's broker, services and fleet share every core with
it, as on a loaded 2-core machine. Each run is ``dpsense demo --no-sweep`` (the sweep is an
in-process experiment after the services stopped: it adds minutes of CPU and nothing to what
is measured) in a folder of its own. A run passes when it exits 0 and its report says that
every reading and every correction record was stored; its time is the wall clock of the whole
command. The baseline is one run of the same command without the hog, in the same invocation.
Prints a markdown table and exits 1 when any run failed.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DPSENSE = Path(sys.executable).with_name("dpsense")
DELIVERY = re.compile(r"delivery\s+(\d+) readings and (\d+) correction records stored")


def _spin() -> None:
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def _demo(out: Path, n: int) -> tuple[bool, float, str]:
    t0 = time.perf_counter()
    r = subprocess.run([str(DPSENSE), "demo", "--no-sweep", "--n", str(n), "--out", str(out)],
                       capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - t0
    m = DELIVERY.search(r.stdout)
    stored = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    ok = r.returncode == 0 and stored == (n, n)
    why = "" if ok else (r.stderr.strip().splitlines() or ["rc %d" % r.returncode])[-1][:120]
    return ok, seconds, "%d / %d stored%s" % (stored[0], stored[1], "" if ok else "; " + why)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs under the hog (default 10)")
    ap.add_argument("--n", type=int, default=100_000, help="readings per demo (default 100000, as make demo)")
    ap.add_argument("--hog", type=int, default=os.cpu_count() or 2,
                    help="spinning processes (default: one per core)")
    args = ap.parse_args()
    if args.runs < 1 or args.n < 1000 or args.hog < 0:
        print("demo_loaded: --runs >= 1, --n >= 1000, --hog >= 0", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="dpsense-demo-loaded-") as tmp:
        rows.append(("baseline, no hog", *_demo(Path(tmp) / "quiet", args.n)))
        hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hog)]
        for h in hogs:
            h.start()
        try:
            for i in range(args.runs):
                rows.append(("run %d, %d spinning" % (i + 1, args.hog), *_demo(Path(tmp) / ("run%d" % i), args.n)))
                print("  %s: %s in %.1f s" % (rows[-1][0], "ok" if rows[-1][1] else "FAILED", rows[-1][2]),
                      file=sys.stderr, flush=True)
        finally:
            for h in hogs:
                h.terminate()
                h.join()
    print("`dpsense demo --no-sweep --n %d` on %d cores (%s)\n" % (args.n, os.cpu_count() or 0, sys.platform))
    print("| run | result | seconds | delivery |")
    print("|---|---|---:|---|")
    for name, ok, seconds, what in rows:
        print("| %s | %s | %.1f | %s |" % (name, "ok" if ok else "**failed**", seconds, what))
    loaded = [s for _, _, s, _ in rows[1:]]
    passed = sum(ok for _, ok, _, _ in rows[1:])
    print("\nunder the hog: %d of %d passed; median %.1f s (baseline %.1f s, %.2fx)"
          % (passed, len(loaded), statistics.median(loaded), rows[0][2], statistics.median(loaded) / rows[0][2]))
    return 0 if passed == len(loaded) and rows[0][1] else 1


if __name__ == "__main__":
    sys.exit(main())
