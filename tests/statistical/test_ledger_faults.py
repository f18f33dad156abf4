"""No window releases more than its cap, and no board more than its lifetime cap, across
SIGKILL at random moments, a damaged ledger file and a clock set back (issue 12, item 4).

The firmware's own loop (``App.run``, firmware/ledger.py on a real file) runs under the
MicroPython unix port, one process per boot (tests/statistical/ledger_faults.py). Between
boots the ledger file may get one random byte flipped, be cut short, or be deleted; a boot
is killed with SIGKILL after a random delay within its run (or runs to its end); with
seconds windows the clock the ledger reads restarts near 0 at some boots and steps back
by up to two windows during others. A damaged or missing ledger must release nothing until
it is provisioned again (a fresh file: a new lifetime, so the counts start over).

What is checked, per provisioning: every record that reached the transport is counted in
the window it was charged to (records windows: the window the ledger names; seconds
windows: the clock's second // 60, from the second the ledger saw), and no window holds
more than its cap (3), no provisioning more than its lifetime cap (30); a boot that finds
its ledger damaged releases nothing.

False failures: none. Each check is an exact bound that a correct ledger meets on every
interleaving of kills, damage and clock; the randomness only chooses which interleavings
are tried (a fixed seed; the kill moments also depend on the machine's timing). Power:
against firmware/ledger.py as it was before this test (commit c0fad01), which dropped a
seconds window's spend when the clock at boot was in another window and charged a lost
slot's record to the older slot's full window, the seconds case failed in 3 runs of 3 and
the records case in 4 of 4 (a window with 4 or 6 records against a cap of 3); the fixed
ledger passed every run. Both faults also have deterministic cases in
tests/portable/test_fw_ledger.py. About 40 s.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from dpsense.protocol.ledgerfile import SLOT_SIZE, fresh

ROOT = Path(__file__).resolve().parents[2]
UPY = shutil.which("micropython") or str(Path(sys.executable).parent / "micropython")
CAP = 3                 # records per window (ledger_faults.py: epsilon 1 a record, cap 3)
LIFETIME = 30
WINDOW_SECONDS = 60
# Boots per mode: a lost slot after a full records window (the rarer fault) needs more.
BOOTS = {"records": 300, "seconds": 220}
SEED = 20261125

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(UPY), reason="no micropython (unix port) on PATH")]


def _clocks(rng: random.Random, now: int, n: int) -> tuple[list[int], int]:
    """The ledger clock's seconds for ``n`` readings and the true time after them: it
    advances 0-30 s a reading; at some boots it restarts near 0 or starts up to two windows
    behind, within others it steps back."""
    out = []
    r = rng.random()
    offset = -now + rng.randrange(0, 30) if r < 0.1 else -rng.randrange(1, 2 * WINDOW_SECONDS) if r < 0.35 else 0
    for _ in range(n):
        now += rng.randrange(0, 31)
        if rng.random() < 0.05:
            offset -= rng.randrange(1, 2 * WINDOW_SECONDS)
        out.append(max(0, now + offset))
    return out, now


def _damage(rng: random.Random, ledger: Path) -> str:
    r = rng.random()
    if not ledger.exists():
        return ""
    if r < 0.5:
        data = bytearray(ledger.read_bytes())
        if data:
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
            ledger.write_bytes(bytes(data))
            return "flip"
    elif r < 0.55:
        ledger.write_bytes(ledger.read_bytes()[:rng.randrange(2 * SLOT_SIZE)])
        return "cut"
    elif r < 0.6:
        ledger.unlink()
        return "delete"
    return ""


def _boot(base: Path, mode: str, clocks: list[int], kill_after: float | None) -> list[str]:
    clock_file = Path(str(base) + "-clocks")
    clock_file.write_text(" ".join(map(str, clocks)))
    p = subprocess.Popen([UPY, "tests/statistical/ledger_faults.py", str(base), mode, str(clock_file)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        time.sleep(kill_after)
        p.send_signal(signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    if kill_after is None or p.returncode != -signal.SIGKILL:
        assert p.returncode == 0, out[-2000:] + err[-2000:]
    return out.splitlines()


@pytest.mark.parametrize("mode", ["records", "seconds"])
def test_no_window_over_its_cap_across_kills_damage_and_a_clock_set_back(mode: str, tmp_path: Path) -> None:
    rng = random.Random("%d-%s" % (SEED, mode))
    base = tmp_path / "board"
    ledger = Path(str(base) + "-ledger")
    ledger.write_bytes(fresh())
    per_window: Counter[int] = Counter()
    where: dict[int, list[str]] = defaultdict(list)
    total = 0
    now = 10 ** 6
    stopped_boots = provisions = killed = released = damaged = 0
    whole = [0.15]
    history: list[str] = []
    for boot in range(BOOTS[mode]):
        n = rng.randrange(5, 60)
        clocks, now = _clocks(rng, now, n)
        # A kill somewhere in the run (its length as the last whole runs took), or none.
        run_s = sorted(whole)[len(whole) // 2]
        kill_after = rng.uniform(0.3, 1.0) * run_s if rng.random() < 0.7 else None
        t0 = time.monotonic()
        lines = _boot(base, mode, clocks, kill_after)
        if kill_after is None:
            whole = (whole + [time.monotonic() - t0])[-9:]
        killed += "E" not in lines
        if not lines or not lines[0].startswith("B "):
            history.append("boot %d: killed before its ledger was read" % boot)
            continue
        state = lines[0][2:]
        records = [ln.split() for ln in lines[1:] if ln.startswith("R ")]
        history.append("boot %d: %s, %d readings, %d released%s" % (
            boot, state, n, len(records), "" if "E" in lines else ", killed"))
        if state != "ok":
            assert not records, "a boot with the ledger %r released %d records\n%s" % (
                state, len(records), "\n".join(history[-20:]))
            if state.startswith("damaged"):
                stopped_boots += 1
                ledger.write_bytes(fresh())       # provisioned again: a new lifetime
                provisions += 1
                per_window.clear()
                where.clear()
                total = 0
            continue
        for _, w, second in records:
            key = int(w) if mode == "records" else int(second) // WINDOW_SECONDS
            per_window[key] += 1
            where[key].append("boot %d at %s" % (boot, second))
        total += len(records)
        released += len(records)
        worst = max(per_window.values(), default=0)
        assert worst <= CAP, "a window released %d records (cap %d): %s\n%s" % (
            worst, CAP, max(where.values(), key=len), "\n".join(history[-20:]))
        assert total <= LIFETIME, "%d records released under one lifetime cap of %d" % (total, LIFETIME)
        if total == LIFETIME and rng.random() < 0.5:
            # Spent: provisioned again, so that later boots release (and can overrun) again.
            ledger.write_bytes(fresh())
            provisions += 1
            per_window.clear()
            where.clear()
            total = 0
            continue
        hurt = _damage(rng, ledger) if rng.random() < 0.5 else ""
        damaged += bool(hurt)
        history[-1] += " (%s)" % hurt if hurt else ""
    print("\n  %s windows: %d boots, %d killed, %d ledgers damaged, %d boots found theirs unusable, "
          "%d provisions, %d released" % (mode, BOOTS[mode], killed, damaged, stopped_boots, provisions, released))
    # The faults were met, or the test proves nothing.
    assert killed >= BOOTS[mode] // 5 and damaged >= 10 and stopped_boots >= 1 and provisions >= 5 and released >= 300
