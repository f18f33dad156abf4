"""Per-reading cost of the board pipeline under the MicroPython unix port, and RAM after boot
on the emulated micro:bit.

    .venv/bin/python bench/firmware.py [--n 2000] [--no-qemu]

Rows come from bench/upy_firmware.py, run once under `micropython` and once under CPython
in the same run; the naive float Laplace row is the baseline on each interpreter.
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


def microbit_ram() -> str:
    sys.path.insert(0, str(ROOT))
    try:
        from tools.qemu import QemuMicrobit
    except ImportError as e:
        return "unavailable (%s)" % e
    try:
        with QemuMicrobit() as board:
            repl = board.repl()
            out = repl.exec("import gc\ngc.collect()\nprint(gc.mem_free())\n", timeout=20)
            return "%s bytes free after boot (MicroPython 1.9.2, nRF51 16 KB RAM)" % out.strip()
    except Exception as e:  # noqa: BLE001 - reported in the table
        return "unavailable (%s: %s)" % (type(e).__name__, e)


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
    if not args.no_qemu:
        print("\nemulated micro:bit (qemu-system-arm -M microbit): %s" % microbit_ram())
    return 0


if __name__ == "__main__":
    sys.exit(main())
