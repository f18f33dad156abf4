"""Per-reading cost of the board pipeline under the MicroPython unix port, the heap the full
firmware's modules take there, and RAM after boot on the emulated micro:bit.

    .venv/bin/python bench/firmware.py [--n 2000] [--no-qemu]

Rows come from bench/upy_firmware.py, run once under `micropython` and once under CPython
in the same run; the naive float Laplace row is the baseline on each interpreter. The heap
rows import each set of modules into a fresh unix-port interpreter (64-bit: a 32-bit board
needs less for the same objects) and give the bytes still allocated after a collection.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(exe: str, n: int) -> list[dict]:
    tmp = tempfile.mkdtemp(prefix="dpsense-fw-")
    res = subprocess.run([exe, "bench/upy_firmware.py", str(n), tmp], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    if res.returncode != 0:
        raise SystemExit("%s failed:\n%s" % (exe, res.stderr or res.stdout))
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


# Module sets a board imports, and the modules they are made of; each in a fresh interpreter.
HEAP_ROWS = (
    ("full firmware, MQTT board (app, ring, mqtt, uplink)", "app, ring, mqtt, uplink"),
    ("full firmware, serial board (app, ring, seriallink)", "app, ring, seriallink"),
    ("shared_protocol.wire (with layout)", "shared_protocol.wire"),
    ("shared_protocol.layout", "shared_protocol.layout"),
    ("shared_protocol.ringlayout (with layout)", "shared_protocol.ringlayout"),
    ("shared_protocol.topics", "shared_protocol.topics"),
)
_HEAP = ("import gc, sys\nsys.path.insert(0, 'firmware')\nsys.path.append('.')\nimport shared_protocol\n"
         "gc.collect()\na = gc.mem_alloc()\nimport %s\ngc.collect()\nprint(gc.mem_alloc() - a)")


def heap_rows(upy: str) -> list[tuple[str, str]]:
    """Bytes allocated by importing each of HEAP_ROWS (after ``import shared_protocol``)."""
    rows = []
    for label, modules in HEAP_ROWS:
        res = subprocess.run([upy, "-c", _HEAP % modules], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        rows.append((label, res.stdout.strip() if res.returncode == 0 else "failed: %s" % res.stderr[-200:]))
    return rows


def microbit_ram() -> list[tuple[str, str]]:
    """Free heap on the emulated micro:bit: after boot, after importing the node's modules
    (tools/deploy.MICROBIT_IMPORTS), and in the boot that checks a two-column config."""
    # this file is bench/firmware.py: keep its folder from shadowing the firmware package
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.modules.pop("firmware", None)
    sys.path.insert(0, str(ROOT))
    try:
        from dpsense.tools import microbit as mb
        from dpsense.tools.deploy import (BOARDS, MICROBIT_CHECKER, MICROBIT_IMPORTS, default_uploads,
                                  deploy, plan, resolve_sources)
        from dpsense.tools.provision import microbit_config_text
        from dpsense.tools.qemu import QemuMicrobit
    except ImportError as e:
        return [("unavailable", str(e))]
    free = "import gc\ngc.collect()\nprint(gc.mem_free())"
    col = {"num": 1, "den": 1, "offset": 0, "raw_min": -5000, "raw_max": 5000, "delta_q": 25}
    cfg = {"device_id": 7, "config_id": 0, "columns": [col, col], "epsilon": "0.5",
           "centre": [0, 0], "window_records": 600, "window_cap": "60"}
    rows = []
    try:
        with QemuMicrobit() as board:
            profile = BOARDS["qemu-microbit"]
            repl = board.repl(profile.chunk_size, profile.pause)
            repl.enter()
            rows.append(("after boot", repl.exec(free, 20).strip()))
            deploy(repl, profile, default_uploads(profile)
                   + plan(profile, resolve_sources([MICROBIT_CHECKER])), log=lambda s: None)
            repl.write_file("config.txt", microbit_config_text(cfg).encode())
            repl.soft_reset()
            for i, step in enumerate(mb.MICROBIT_CHECK):
                repl.exec(step, 30)
                if i == 1:
                    rows.append(("config check: after import mbcfg", repl.exec(free, 20).strip()))
            repl.soft_reset()
            repl.exec(MICROBIT_IMPORTS, 30)
            rows.append(("node: after importing mbutil, mbio, noise, mbnode",
                         repl.exec(free, 20).strip()))
    except Exception as e:  # noqa: BLE001 - reported in the table
        rows.append(("unavailable", "%s: %s" % (type(e).__name__, e)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="readings per row (default 2000)")
    ap.add_argument("--no-qemu", action="store_true", help="skip the emulated micro:bit")
    args = ap.parse_args()
    upy = shutil.which("micropython", path=str(Path(sys.executable).parent)) or shutil.which("micropython")
    print("\nFirmware pipeline, 2 columns, %d readings per row (µs per reading)\n" % args.n)
    print("| interpreter | row | µs/reading | × baseline |")
    print("|---|---|---:|---:|")
    for label, exe in (("MicroPython unix port", upy), ("CPython %d.%d" % sys.version_info[:2], sys.executable)):
        if exe is None:
            print("| %s | not installed | - | - |" % label)
            continue
        rows = run(exe, args.n)
        base = rows[0]["us"]
        for r in rows:
            print("| %s | %s | %.1f | %.1f |" % (label, r["row"], r["us"], r["us"] / base))
    if upy is not None:
        print("\nHeap taken by importing the full firmware's modules (MicroPython unix port)\n")
        print("| modules | bytes |")
        print("|---|---:|")
        for what, value in heap_rows(upy):
            print("| %s | %s |" % (what, value))
    if not args.no_qemu:
        print("\nEmulated micro:bit (qemu-system-arm -M microbit, MicroPython 1.9.2, nRF51 16 KB RAM)\n")
        print("| moment | gc.mem_free() bytes |")
        print("|---|---:|")
        for what, value in microbit_ram():
            print("| %s | %s |" % (what, value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
