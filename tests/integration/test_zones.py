"""Two trust zones, two data dirs (docs/operating.md, "Two trust zones"), against a real Mosquitto:
the analyst's folder holds the broker and the readings, the correction server's folder its key
store, database and profile. A simulated fleet provisioned for that layout gets every correction
record stored and none dead-lettered; keys put in the analyst's folder stop the analyst at start
with one line naming the file."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from tests.integration import procs
from tests.integration.procs import stop

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")
N = 900
DEVICES = 3


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(procs.ROOT)), timeout=300)


def _log(tmp: Path, name: str) -> str:
    p = tmp / ("%s.log" % name)
    return p.read_text() if p.exists() else ""


def test_two_zones_store_every_correction_record_and_none_is_dead_lettered(tmp_path: Path) -> None:
    a, cs = tmp_path / "analyst", tmp_path / "cs"
    broker = Broker(a, port=free_port())
    pw = {acc: broker.add_account(acc) for acc in ("analyst", "correction")}
    port = ["--broker-port", str(broker.port)]
    zones = ["--data-dir", str(a), "--correction-data-dir", str(cs), *port]
    running: list[subprocess.Popen[bytes]] = []
    with broker.running():
        try:
            # Each service is given only its own folder, as its unit file does.
            running.append(procs.service(tmp_path, "correction", ["correction-server", "--data-dir", str(cs), *port],
                                         pw["correction"]))
            running.append(procs.service(tmp_path, "analyst", ["analyst", *zones, "--window", "300",
                                                              "--flush-idle", "3", "--dbscan-min-samples", "10"],
                                         pw["analyst"]))
            assert _wait(lambda: "subscribed to dpsense/corrections" in _log(tmp_path, "correction"), 60), \
                _log(tmp_path, "correction")
            assert _wait(lambda: "subscribed to dpsense/readings/+" in _log(tmp_path, "analyst"), 60), \
                _log(tmp_path, "analyst")
            sim = _cli("simulate", *zones, "--devices", str(DEVICES), "--n", str(N), "--seed", "3")
            assert sim.returncode == 0, sim.stderr
            assert not (a / "correction-keys").exists(), "the analyst's folder got correction keys"
            assert (cs / "correction-keys" / "keys.json").exists()
            with open_correction_store("sqlite:///%s" % (cs / "correction.db")) as c:
                assert _wait(lambda: c.count() + c.dead_letter_messages() >= N, 120), c.count()
                stored, dead = c.count(), c.dead_letter_messages()
                reasons = [d.reason for d in c.dead_letters(3)]
            assert (stored, dead) == (N, 0), reasons
            with open_analyst_store("sqlite:///%s" % (a / "analyst.db")) as s:
                assert _wait(lambda: s.count() >= N, 60)
                assert s.count() == N
            status = _cli("status", *zones)
            assert status.returncode == 0, status.stderr
            assert "correction  %d records, 0 dead letters" % N in status.stdout, status.stdout
        finally:
            for p in running:
                stop(p)


def test_keys_in_the_analysts_folder_stop_the_analyst_at_start_naming_the_file(tmp_path: Path) -> None:
    a, cs = tmp_path / "analyst", tmp_path / "cs"
    Broker(a, port=free_port()).add_account("analyst")
    # What provisioning into the wrong folder left behind (the 900-of-900 dead letters).
    from dpsense.cloud.correction.sealed import provision_keys
    provision_keys(a, [1])
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "analyst", "--data-dir", str(a),
                        "--correction-data-dir", str(cs)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(procs.ROOT), DPSENSE_BROKER_PASSWORD="x"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(a / "correction-keys" / "keys.json") in lines[0], r.stderr
