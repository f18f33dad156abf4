"""Every benchmark of bench/, each with its full size and a tiny size: `make bench` and its smoke test.

    .venv/bin/python bench/suite.py                 # every benchmark at its full size (make bench)
    .venv/bin/python bench/suite.py ingest e2e      # only these
    .venv/bin/python bench/suite.py --tiny          # every one at a tiny size, side by side (smoke run)

Each benchmark prints its own table with its baseline measured in the same run (bench/README.md).
A full run goes one benchmark after the other, each under a ``## bench/<name>.py`` heading; it
exits 1 when one of them failed (a detector or a bound disagreeing with its baseline counts as
failing). ``--tiny`` checks that every script still runs, not its figures; its benchmarks run
``--jobs`` at a time (default 4), since most of their time is waiting for brokers and
subprocesses. tests/unit/test_bench_suite.py runs ``--tiny`` and checks that every script in bench/
is listed here.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Bench:
    script: str
    full: tuple[str, ...]
    tiny: tuple[str, ...]
    micropython: bool = False           # runs under the MicroPython unix port, not CPython
    # The test that already runs it at a reduced size in make test: --tiny skips it, not to run it twice.
    tested_by: str = ""


BENCHES = (
    Bench("sampler.py", (), ("--budget-ms", "5")),
    Bench("detection.py", (), ("--size", "2000", "--epsilons", "1")),
    Bench("smooth.py", (), ("--sizes", "50", "--paper-sizes", "10", "--limit", "5")),
    Bench("correction.py", ("--quick",), ("--size", "2000", "--repeats", "2", "--secure-n", "100",
                                          "--epsilons", "1")),
    Bench("storage.py", ("--quick",), ("--budget", "0.05")),
    Bench("ingest.py", ("--rounds", "3"), ("--n", "500", "--rounds", "1", "--no-postgres")),
    Bench("simulator.py", ("--processes", "1", "2", "--rounds", "2"),
          ("--n", "500", "--processes", "1", "--rounds", "1")),
    Bench("e2e.py", (), ("--rates", "300", "--duration", "4", "--window", "1", "--devices", "4",
                         "--limit-messages", "2000")),
    Bench("sealed_ingest.py", (), ("--records", "500", "--devices", "10")),
    Bench("analyst_idle.py", ("--seconds", "10"), ("--seconds", "0.5", "--readings", "2000", "--warmup", "1")),
    Bench("dashboard.py", ("--readings", "20000"), ("--readings", "500", "--repeat", "1")),
    Bench("aggregate.py", ("--quick",), ("--n", "2000")),
    Bench("firmware.py", (), ("--n", "20", "--no-qemu")),
    Bench("upy_seal.py", (), (), micropython=True),
    Bench("demo_loaded.py", ("--runs", "3", "--n", "20000"), ("--runs", "1", "--n", "1000", "--hog", "0")),
    Bench("faults.py", ("--readings", "30000", "--runs", "10"), (), tested_by="tests/integration/test_faults.py"),
)
#: Run by another benchmark, never on their own.
HELPERS = ("upy_sampler.py", "upy_firmware.py", "suite.py")


def command(b: Bench, tiny: bool) -> list[str] | None:
    if b.micropython:
        upy = Path(sys.executable).parent / "micropython"
        exe = str(upy) if upy.exists() else shutil.which("micropython")
        if exe is None:
            return None
        return [exe, str(HERE / b.script), str(HERE.parent)]
    return [sys.executable, str(HERE / b.script), *(b.tiny if tiny else b.full)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: all), e.g. ingest e2e")
    ap.add_argument("--tiny", action="store_true", help="a tiny size each, side by side: does it still run?")
    ap.add_argument("--jobs", type=int, default=4, help="with --tiny: benchmarks at a time (default 4)")
    args = ap.parse_args(argv)
    chosen = [b for b in BENCHES if not args.names or b.script.removesuffix(".py") in args.names]
    unknown = set(args.names) - {b.script.removesuffix(".py") for b in BENCHES}
    if unknown:
        print("bench/suite.py: no benchmark %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    if args.tiny:
        return tiny(chosen, args.jobs)
    status = 0
    for b in chosen:
        print("## bench/%s\n" % b.script, flush=True)
        cmd = command(b, False)
        if cmd is None:
            print("skipped: no micropython binary\n", flush=True)
            continue
        if subprocess.run(cmd, cwd=HERE.parent).returncode != 0:
            status = 1
        print(flush=True)
    return status


def tiny(chosen: list[Bench], jobs: int) -> int:
    def one(b: Bench) -> tuple[Bench, int, float, float, str]:
        if b.tested_by:
            return b, 0, 0.0, 0.0, "run at a reduced size by %s" % b.tested_by
        cmd = command(b, True)
        if cmd is None:
            return b, 0, 0.0, 0.0, "skipped: no micropython binary"
        t0 = time.monotonic()
        with tempfile.TemporaryFile() as out:
            p = subprocess.Popen(cmd, cwd=HERE.parent, stdout=out, stderr=subprocess.STDOUT)
            # wait4: the CPU time of the benchmark and of every process it waited for.
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            text = out.read().decode(errors="replace")
        return b, p.returncode, time.monotonic() - t0, usage.ru_utime + usage.ru_stime, text

    status = 0
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for b, rc, secs, cpu, out in pool.map(one, chosen):
            if b.tested_by:
                print("bench/%s: %s" % (b.script, out), flush=True)
                continue
            print("bench/%s: %s in %.1f s (%.1f s CPU)" % (b.script, "ok" if rc == 0 else "FAILED (exit %d)" % rc,
                                                          secs, cpu), flush=True)
            if rc != 0:
                status = 1
                print(out[-3000:], flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
