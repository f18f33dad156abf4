"""`tools/flash.py all --board qemu-microbit` then `dpsense gateway`: readings reach the database.

Exactly the two commands of README.md ("Boards"), as subprocesses, against a real
Mosquitto and the real `dpsense ingest` processes (hil_tests/rigs/cloud.py's CloudSide):

    python tools/flash.py all --board qemu-microbit --device-id 7 --data-dir D \\
        --broker-port P --stimulus rows.txt --password-file d7.pw   # prints "gateway port: /dev/pts/N"
    dpsense gateway --port /dev/pts/N --device-id 7 --password-file d7.pw --data-dir D --broker-port P

`all` boots QEMU, deploys the node's files, provisions config.json (and the broker
account d7, whose password it writes to the --password-file the gateway then reads),
verifies every file on the board, then runs mbnode and feeds it the stimulus rows over
the UART.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.procs import stop
from dpsense.tools.qemu import missing_reason

ROOT = Path(__file__).resolve().parents[2]
_MISSING = missing_reason()
pytestmark = [
    pytest.mark.qemu,
    pytest.mark.skipif(_MISSING is not None, reason="QEMU micro:bit: %s" % _MISSING),
    pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                       reason="Debian package 'mosquitto' is not installed"),
]

N = 40


def test_flash_all_then_gateway_brings_readings_to_the_database(tmp_path: Path) -> None:
    from hil_tests.rigs.cloud import CloudSide

    t0 = time.monotonic()
    cloud = CloudSide(tmp_path / "cloud")
    stim = tmp_path / "rows.txt"
    conf = tmp_path / "node.json"
    conf.write_text(json.dumps({
        "config_id": 3, "epsilon": "0.5", "centre": [0, 1650], "window_records": 1000,
        "window_cap": "1000", "period_ms": 0,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -5000, "raw_max": 5000, "delta_q": 25},
                    {"num": 3300, "den": 65535, "offset": 0, "raw_min": 0, "raw_max": 65535,
                     "delta_q": 40}]}))
    stim.write_text("".join("%d,%d\n" % (i * 10 - 200, 30000 + i) for i in range(N)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    flash_log = tmp_path / "flash.log"
    pw_file = tmp_path / "d7.pw"          # provision writes the gateway's password here (0600)
    procs: list[subprocess.Popen] = []
    try:
        cloud.start()
        with open(flash_log, "wb") as out:
            flash = subprocess.Popen(
                [sys.executable, "tools/flash.py", "all", "--board", "qemu-microbit",
                 "--device-id", "7", "--plaintext-corrections", "--no-privacy", "--data-dir", str(cloud.dir),
                 "--password-file", str(pw_file),
                 "--broker-port", str(cloud.broker.port), "--config-json", str(conf),
                 "--stimulus", str(stim)],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(flash)
        deadline = time.monotonic() + 45
        pty = None
        while pty is None:
            text = flash_log.read_text(errors="replace")
            m = re.search(r"gateway port: (/dev/pts/\d+)", text)
            if m:
                pty = m.group(1)
            elif flash.poll() is not None or time.monotonic() > deadline:
                pytest.fail("flash.py all did not start the node:\n" + text[-3000:])
            else:
                time.sleep(0.1)
        for step in ("== firmware", "== deploy", "== provision", "== verify", "== run"):
            assert step in text
        assert "config.txt" in text and "sha256" not in text    # the micro:bit has no hashlib
        assert "checked by the board itself (mbcfg, written for the check and removed after it): ok" in text
        assert "MISMATCH" not in text
        gw_log = tmp_path / "gateway.log"
        with open(gw_log, "wb") as out:
            gw = subprocess.Popen(
                [sys.executable, "-m", "dpsense.cloud.cli", "gateway", "--port", pty, "--device-id", "7",
                 "--password-file", str(pw_file),
                 "--data-dir", str(cloud.dir), "--broker-port", str(cloud.broker.port)],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(gw)
        cloud.wait_readings(N, 30)
        cloud.wait(lambda: "idle: all %d records acknowledged" % N in gw_log.read_text(), 20,
                   "the gateway's idle line", gw_log)
        rows = cloud.readings()
        assert len(rows) == N
        assert {r.device_id for r in rows} == {7} and {r.config_id for r in rows} == {3}
        assert sorted(r.seq for r in rows) == list(range(N))
        assert "boot ok: board=microbit device=7" in gw_log.read_text()
        assert "stimulus done" in gw_log.read_text()
    finally:
        for p in reversed(procs):
            stop(p)
        cloud.close()
    # The account exists; its password is in the file asked for (0600) and nowhere under the
    # broker's folder; a serial board's config carries no broker password.
    assert "d7:$7$" in (cloud.dir / "broker" / "passwd").read_text()
    assert pw_file.stat().st_mode & 0o777 == 0o600
    pw = pw_file.read_bytes().strip()
    assert not [p for p in (cloud.dir / "broker").rglob("*") if p.is_file() and pw in p.read_bytes()]
    text = flash_log.read_text(errors="replace")
    assert "broker_password" not in text
    assert time.monotonic() - t0 < 90
