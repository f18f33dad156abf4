"""The end-to-end acknowledgement under faults (docs/protocol.md 3.1): boards running
firmware/app.py under the MicroPython unix port stream through a real Mosquitto while it is
killed with -9 twice (restarted on the same port and store) and the analyst's ingest once;
afterwards every released reading and correction record is stored exactly once, on SQLite
and on PostgreSQL.

Before the acknowledgement, a board dropped a record on the broker's PUBACK, and Mosquitto
writes its store asynchronously, so kill -9 lost acknowledged records (issue 15). No sleep
here is an assertion: each step waits for a condition with a generous bound.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.tools.deploy import micropython_binary

pytestmark = [
    pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                       reason="Debian package 'mosquitto' is not installed"),
]

BOARDS = 3
N = 400                     # readings per board
PERIOD_MS = 20              # 50 readings per second per board: the stream lasts about 8 s


def _column(quantum: int) -> dict[str, object]:
    from hil_tests.helpers import column
    return column(quantum)


def _kill_broker_holding_messages(cloud: object) -> None:
    """kill -9 of Mosquitto while it holds messages it acknowledged to the boards: with both
    ingests stopped for a moment the broker queues them, and the last second of them is not
    in its store yet (``autosave_interval 1``). With PUBACK semantics this loses records."""
    for role in ("analyst", "correction"):
        cloud.pause_ingest(role, True)  # type: ignore[attr-defined]
    time.sleep(0.5)                     # not an assertion: lets the queue fill
    cloud.kill_broker()  # type: ignore[attr-defined]
    for role in ("analyst", "correction"):
        cloud.pause_ingest(role, False)  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_kill_9_of_the_broker_twice_and_the_ingest_once_loses_and_duplicates_nothing(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    try:
        micropython_binary()
    except Exception as e:  # noqa: BLE001 - the binary is an optional test dependency
        pytest.skip("no MicroPython unix port: %s" % e)
    from hil_tests.rigs.cloud import CloudSide
    from hil_tests.rigs.unix import UnixRig
    urls: dict[str, str] = {}
    if backend == "postgresql":
        from tests.pgserver import create_database
        server = request.getfixturevalue("postgres_url")
        urls = {"analyst_url": create_database(server, "e2e_analyst"),
                "correction_url": create_database(server, "e2e_correction")}
    cloud = CloudSide(tmp_path / "cloud", **urls)
    rigs = [UnixRig(tmp_path / ("board%d" % d), "unix", cloud) for d in range(1, BOARDS + 1)]
    cloud.start()
    try:
        for d, rig in enumerate(rigs, 1):
            rig.deploy()
            cfg = rig.config(d, columns=[_column(20), _column(30)], epsilon="0.5", centre=[0, 0],
                             window_records=10 ** 6, window_cap="1000000", period_ms=PERIOD_MS,
                             ring_records=4096, ring_bytes=1 << 20)
            rig.start(cfg, stimulus=[[i, -i] for i in range(N)])
        for rig in rigs:
            rig.expect("boot ok", 30)
        total = BOARDS * N
        cloud.wait_readings(total // 6, 60)
        _kill_broker_holding_messages(cloud)
        cloud.wait_readings(total // 3, 60)
        cloud.kill_ingest("analyst")
        cloud.wait_readings(total // 2, 60)
        _kill_broker_holding_messages(cloud)
        for rig in rigs:
            rig.expect(r"idle: all %d records acknowledged" % N, 120)

        with open_analyst_store(cloud.analyst_url) as s:
            rows = [r for _, r in s.readings_after(0, 10 ** 7)]
            gaps = s.gaps()
        keys = [(r.device_id, r.boot_id, r.seq) for r in rows]
        assert len(keys) == len(set(keys)) == total                    # 0 lost, 0 duplicated
        assert sorted((g.device_id, g.first_seq, g.last_seq, g.missing) for g in gaps) == \
            [(d, 0, N - 1, 0) for d in range(1, BOARDS + 1)]
        tokens = [r.token for r in rows]
        with open_correction_store(cloud.correction_url) as cs:
            assert cs.count() == total                                  # one per reading
            assert len(cs.lookup(tokens)) == total
    finally:
        for rig in rigs:
            rig.close()
        cloud.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_simulated_fleet_through_kill_9_of_the_broker_twice_and_the_ingest_once(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """The same faults under the fleet simulator (cloud/sim/fleetpub.py): its books keep each
    record until both ingests committed it, and it reconnects after each broker restart."""
    import numpy as np

    from dpsense.cloud.deploy.config import Settings
    from dpsense.cloud.correction.sealed import DeviceKeys, sealer_for
    from dpsense.cloud.sim.fleetpub import FleetPublisher
    from dpsense.cloud.sim.simulate import Encoded
    from dpsense.protocol import seal, wire
    from hil_tests.rigs.cloud import CloudSide
    urls: dict[str, str] = {}
    if backend == "postgresql":
        from tests.pgserver import create_database
        server = request.getfixturevalue("postgres_url")
        urls = {"analyst_url": create_database(server, "fleet_analyst"),
                "correction_url": create_database(server, "fleet_correction")}
    devices, per_slice, slices = 8, 400, 8
    n = per_slice * slices
    dev = np.array([i % devices + 1 for i in range(n)])
    seq = np.array([i // devices for i in range(n)])
    tok = [i.to_bytes(8, "little") for i in range(n)]
    readings = [wire.encode_reading(int(dev[i]), 1, int(seq[i]), tok[i], 1, [i, -i]) for i in range(n)]
    empty = np.zeros((n, 2), dtype=np.int64)
    cloud = CloudSide(tmp_path / "cloud", **urls)
    # Sealed as the simulator's boards seal them (kind 3, the ledger's counter as the nonce):
    # the correction server's ingest acknowledges each by its clear header.
    sealers = {d: sealer_for(DeviceKeys(*seal.split_keys(cloud.seal_keys(d)))) for d in range(1, devices + 1)}
    corrections = [sealers[int(dev[i])].seal(int(dev[i]), 1, int(seq[i]), int(seq[i]) + 1, tok[i], i)
                   for i in range(n)]
    # The accounts exist before the broker starts: no publish races an ACL reload.
    passwords = cloud.broker.add_devices(list(range(1, devices + 1)))
    cloud.start()
    pub = None
    try:
        pub = FleetPublisher(Settings(data_dir=tmp_path / "sim", broker_port=cloud.broker.port), passwords,
                             devices, processes=2, commit_timeout_s=3.0)
        pub.connect()
        faults = {2: _kill_broker_holding_messages, 4: lambda c: c.kill_ingest("analyst"),
                  6: _kill_broker_holding_messages}
        for k in range(slices):
            part = slice(k * per_slice, (k + 1) * per_slice)
            pub.stream(Encoded(dev[part], seq[part], readings[part], corrections[part], empty[part], empty[part]))
            if k in faults:
                faults[k](cloud)
        deadline = time.monotonic() + 120
        while pub.committed < n:
            assert time.monotonic() < deadline, "only %d of %d records committed" % (pub.committed, n)
            time.sleep(0.1)
        with open_analyst_store(cloud.analyst_url) as s:
            keys = [(r.device_id, r.boot_id, r.seq) for _, r in s.readings_after(0, 10 ** 7)]
        assert len(keys) == len(set(keys)) == n                        # 0 lost, 0 duplicated
        with open_correction_store(cloud.correction_url) as cs:
            assert cs.count() == n and len(cs.lookup(tok)) == n
    finally:
        if pub is not None:
            pub.close()
        cloud.close()
