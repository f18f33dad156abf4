"""bench/faults.py at a reduced size: `dpsense simulate` streams 2,000 readings through separate
ingest, analyst and correction-server processes on Mosquitto and PostgreSQL while Mosquitto is
killed with -9 (restarted on the same port and store) and PostgreSQL restarts; every reading
and correction record is stored exactly once, and `dpsense simulate` exits 0 only once the
cloud committed each. The full run (30,000 readings, five faults, ten runs) is the bench."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                 reason="Debian package 'mosquitto' is not installed"),
              pytest.mark.postgres]


def test_a_broker_kill_and_a_database_restart_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    from bench.faults import run_once
    from tests.pgserver import PostgresNotFound, find_bindir, temporary_server
    try:
        find_bindir()
    except PostgresNotFound as e:
        pytest.skip(str(e))
    # A server of its own: the restart must not cut the other tests' connections.
    with temporary_server(fsync=False) as server:
        r = run_once(1, tmp_path, server, readings=2000, rate=250, faults=["broker", "postgres"], seed=5,
                     window=400, settle=60, windows=False)
    assert r.done == ["broker", "postgres"], r
    assert r.simulate_rc == 0, r
    assert (r.stored, r.corrections, r.missing, r.duplicates, r.dead) == (2000, 2000, 0, 0, 0), r
