"""docs/deploying.md, walked as written: its ```sh blocks run in order in a scratch folder.

Two data dirs as the two trust zones ($A, $CS), each with an OS user of its own that runs its
services when the test runs as root (dpsense-lc-a, dpsense-lc-cs; else both are the test's), a
real Mosquitto (`dpsense broker run` from the page), two stand-in boards (the MicroPython unix port, provisioned from `curator calibrate`'s
profile by `dpsense-flash all --from-profile`). The test writes only what the page says the
operator brings (reference.csv, the boards' stimulus files d1.rows, d2.rows) and sets the
page's variables (VARS); everything else is the page's commands, so a
change to a command, an option or a message the page waits for fails here.

Checked against the stores: every reading and correction record stored once, every window
scored (the done windows' readings add up to the readings stored, none held or closed), every
board's epsilon known (no ``unknown`` in ``dpsense results devices``), `dpsense status` and
/metrics agreeing with the stores; after re-provisioning, the new keys open the new boot's
correction records; after retiring, the account and keys are gone; with two users, each
service's database is its zone user's and the analyst's user cannot read the key store.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from dpsense.cloud.deploy.broker import free_port
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from tests.integration.procs import ROOT

DOC = ROOT / "docs" / "deploying.md"
N = 300                     # readings per board and boot (the emulated micro:bit: M)
M = 40
VARS = ("A", "CS", "PORT", "DASH_PORT", "BOARDS", "A_USER", "CS_USER", "AS_A", "AS_CS")
# Run as root, the page's two zones get two users of their own (made once, kept: system users
# without a home or a login shell).
ZONE_USERS = ("dpsense-lc-a", "dpsense-lc-cs")

pytestmark = [
    pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                       reason="Debian package 'mosquitto' is not installed"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed"),
]


def steps(text: str) -> list[tuple[str, str]]:
    """``(section heading, block)`` for every ```sh block, in the page's order."""
    out, section = [], ""
    for m in re.finditer(r"^## ([^\n]+)$|^```sh\n(.*?)^```$", text, re.M | re.S):
        if m.group(1):
            section = m.group(1).strip()
        else:
            out.append((section, m.group(2)))
    return out


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


def _rows(seed: int, n: int) -> np.ndarray:
    from dpsense.cloud.sim.datasets import paper1_synthetic
    return paper1_synthetic(n, 220.0, "scale", seed=seed).x


class Page:
    """Runs the page's blocks; each block's process group is ended at the close (the services
    and boards the page starts in the background are in it)."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env
        self.groups: list[int] = []
        self.started: list[subprocess.Popen[bytes]] = []
        self.outputs: dict[str, str] = {}

    def run(self, section: str, block: str) -> str:
        p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block], cwd=self.work, env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        self.groups.append(p.pid)
        try:
            out, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            pytest.fail("%s: timed out:\n%s\n%s" % (section, block, out[-3000:] + self.logs()))
        if p.returncode != 0:
            pytest.fail("%s: exit status %d:\n%s\n%s" % (section, p.returncode, block, out[-3000:] + self.logs()))
        self.outputs[section] = self.outputs.get(section, "") + out
        return out

    def start(self, argv: list[str], cwd: Path, log: Path) -> None:
        """A process of the test's own (not the page's), ended with the page's."""
        with open(log, "wb") as out:
            p = subprocess.Popen(argv, cwd=cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.started.append(p)
        self.groups.append(p.pid)

    def _reaped(self, g: int) -> bool:
        """True when ``g`` leads one of ``started`` that has ended (reaped here, or its zombie
        would keep the group alive)."""
        return any(p.pid == g and p.poll() is not None for p in self.started)

    def logs(self) -> str:
        return "".join("\n--- %s\n%s" % (f.name, f.read_text(errors="replace")[-1500:])
                       for f in sorted(self.work.glob("*.log")))

    def close(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [g for g in self.groups if _signal_group(g, sig)]
            if not alive or _wait(lambda: not any(_group_alive(g) for g in alive if not self._reaped(g)), 15):
                break
        for p in self.started:
            p.wait(15)


def _signal_group(g: int, sig: int) -> bool:
    try:
        os.killpg(g, sig)
        return True
    except ProcessLookupError:
        return False


def _group_alive(g: int) -> bool:
    try:
        os.killpg(g, 0)
        return True
    except ProcessLookupError:
        return False


def test_the_deploying_page_walked_as_written(tmp_path: Path) -> None:
    from dpsense.tools.deploy import micropython_binary
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    t0 = time.monotonic()
    text = DOC.read_text()
    used = set(re.findall(r"\$\{?([A-Z_]+)\}?", "".join(b for _, b in steps(text)))) - {"PWD", "OLDPWD"}
    assert used <= set(VARS), "the page uses variables its table does not define: %s" % (used - set(VARS))
    for v in VARS:
        assert "| `%s` |" % v in text, v
    users = _zone_users()
    # The zones' users must reach their folders: pytest's tmp_path is private to root, so the
    # page gets a folder of its own that others may pass through (not list).
    base = Path(tempfile.mkdtemp(prefix="dpsense-lifecycle-")) if users else tmp_path
    if users:
        base.chmod(0o711)
    work = base / "ops"
    work.mkdir()
    work.chmod(0o711)
    me = pwd.getpwuid(os.geteuid()).pw_name
    a_user, cs_user = users or (me, me)
    env = dict(os.environ, A=str(base / "analyst"), CS=str(base / "cs"), PORT=str(free_port()),
               DASH_PORT=str(free_port()), BOARDS=str(base / "boards"), A_USER=a_user, CS_USER=cs_user,
               AS_A="runuser -u %s --" % a_user if users else "", AS_CS="runuser -u %s --" % cs_user if users else "",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               PYTHONPATH=str(ROOT))
    env.pop("DPSENSE_DATA_DIR", None)
    env.pop("DPSENSE_CORRECTION_DIR", None)
    a, cs = Path(env["A"]), Path(env["CS"])
    # What the operator brings: reference data (data units) and each stand-in's readings in
    # raw units, which for the unix port are quanta of the profile (0.01).
    ref = _rows(1001, 6000)
    np.savetxt(work / "reference.csv", ref, delimiter=",", header="a,b", comments="", fmt="%.2f")
    for d in (1, 2, 3, 4):
        raw = np.rint(_rows(2000 + d, M if d == 4 else N) / 0.01).astype(int)
        (work / ("d%d.rows" % d)).write_text("".join("%d,%d\n" % tuple(r) for r in raw))

    from dpsense.tools.qemu import missing_reason
    qemu_missing = missing_reason()
    m = 0 if qemu_missing else M           # without QEMU the micro:bit's block is left out
    page = Page(work, env)
    analyst_db = "sqlite:///%s" % (a / "analyst.db")
    correction_db = "sqlite:///%s" % (cs / "correction.db")
    try:
        for section, block in steps(text):
            if qemu_missing and "--board qemu-microbit" in block:
                continue
            if section.startswith("6."):
                # Watch once both boots were acknowledged end to end and every window has a verdict.
                _settled(a, analyst_db, correction_db, 3 * N + m, page)
            if section.startswith("7."):
                _check_watch(page.outputs, analyst_db, correction_db, 3 * N + m,
                             {1, 2, 3} | (set() if qemu_missing else {4}))
            out = page.run(section, block)
            if section.startswith("2."):
                import json
                prof = json.loads((work / "profile.json").read_text())
                assert prof["w_o_q"] > 0 and len(prof["delta_q"]) == 2, prof
            if section.startswith("4."):
                assert not (a / "correction-keys").exists()
                assert re.search(r"^700 \S+ .*correction-keys$", out, re.M), out
                assert re.search(r"^600 \S+ .*keys\.json$", out, re.M), out
        # Step 7 restarted device 1 with new keys: its second boot is stored and opened too.
        assert "8." in " ".join(page.outputs), "the page has no step 8"
        _settled(a, analyst_db, correction_db, 4 * N + m, page)
        from dpsense.cloud.ops import results
        with open_analyst_store(analyst_db) as s:
            boots = {d.device_id: d.boots for d in results.devices(s)}
        assert boots == {1: 2, 2: 1, 3: 1, **({} if qemu_missing else {4: 1})}, boots
        accounts = (a / "broker" / "accounts.json").read_text()
        assert '"d1"' in accounts and '"d2"' not in accounts
        keys = (cs / "correction-keys" / "keys.json").read_text()
        assert '"1"' in keys and '"2"' not in keys
        # The retired board, switched on again with its old config, is turned away by the broker.
        log = tmp_path / "retired-d2.log"
        page.start(["micropython", "main.py", "config.json"], Path(env["BOARDS"]) / "d2", log)
        assert _wait(lambda: "broker refused the connection" in log.read_text(), 30), log.read_text()
        if users:
            # Each service ran as its zone's user: its database is that user's, and the analyst's
            # user cannot open the correction server's key store.
            assert (a / "analyst.db").stat().st_uid == pwd.getpwnam(a_user).pw_uid
            assert (cs / "correction.db").stat().st_uid == pwd.getpwnam(cs_user).pw_uid
            assert (cs / "correction-keys" / "keys.json").stat().st_uid == pwd.getpwnam(cs_user).pw_uid
            peek = subprocess.run(["runuser", "-u", a_user, "--", "cat", str(cs / "correction-keys" / "keys.json")],
                                  capture_output=True, text=True)
            assert peek.returncode != 0 and "Permission denied" in peek.stderr, peek
    finally:
        page.close()
        if users:
            shutil.rmtree(base, ignore_errors=True)
    assert time.monotonic() - t0 < 240
    if qemu_missing:
        # Every other step ran and passed; say which one did not.
        pytest.skip("walked every step but the emulated micro:bit's: QEMU %s" % qemu_missing)


def _zone_users() -> tuple[str, str] | None:
    """The two zone users when this test can have them (root, with useradd and runuser), made
    if missing; None otherwise (both zones are then the test's own user's)."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        return None
    for name in ZONE_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                                  capture_output=True, text=True)
            if made.returncode != 0 and "already exists" not in made.stderr:
                return None
    # The project's files must be readable by them (a checkout in a private folder is not).
    probe = subprocess.run(["runuser", "-u", ZONE_USERS[0], "--", sys.executable, "-c", "import dpsense.cloud"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return (ZONE_USERS[0], ZONE_USERS[1]) if probe.returncode == 0 else None


def _settled(a: Path, analyst_db: str, correction_db: str, n: int, page: Page) -> None:
    """Every reading and correction record stored once, no dead letter, every window done."""
    def state() -> tuple[int, int, int, int, int]:
        with open_analyst_store(analyst_db) as s:
            wins = s.windows()
            done = sum(w.n for w in wins if w.state == "done")
            open_ = sum(1 for w in wins if w.state in ("closed", "held"))
            readings = s.count()
        with open_correction_store(correction_db) as c:
            corr, dead = c.count(), c.dead_letter_messages()
        return readings, corr, dead, done, open_

    ok = _wait(lambda: (lambda r: r[0] == n and r[1] == n and r[3] == n and r[4] == 0)(state()), 90)
    got = state()
    assert ok and got[2] == 0, "readings, corrections, dead letters, scored, open windows = %s, want %d\n%s" % (
        got, n, page.logs())


def _check_watch(outputs: dict[str, str], analyst_db: str, correction_db: str, n: int,
                 expected: set[int]) -> None:
    """`dpsense status`, `results windows`, `results devices` and /metrics (step 6's output)
    say what the stores hold."""
    from dpsense.cloud.ops import results
    out = next(v for k, v in outputs.items() if k.startswith("6."))
    with open_analyst_store(analyst_db) as s:
        readings, done = s.count(), len(s.windows(states=("done",)))
        devices = {d.device_id: d for d in results.devices(s)}
    with open_correction_store(correction_db) as c:
        corrections = c.count()
    assert readings == corrections == n
    assert re.search(r"^analyst +%d readings, 0 dead letters" % readings, out, re.M), out
    assert re.search(r"^windows +%d done, 0 closed .*, 0 held .*, 0 carried" % done, out, re.M), out
    assert re.search(r"^correction +%d records, 0 dead letters" % corrections, out, re.M), out
    assert "correction records sealed end to end for 3 devices" in out, out
    assert re.search(r"^dpsense_readings_stored_total %d(\.0)?$" % readings, out, re.M), out
    # Per device: the epsilon the board reported (its boot status) and what it released.
    assert "unknown" not in out, out
    assert set(devices) == expected, devices
    for d, row in devices.items():
        assert row.eps_record is not None and row.cap is not None and row.eps_total is not None, row
        assert re.search(r'^dpsense_device_epsilon_spent\{device="d%d"[^}]*\} %s(\.0)?$'
                         % (d, row.eps_total), out, re.M), out
        assert re.search(r"^%d +default +%d " % (d, row.readings), out, re.M), out
