"""What the boards say about themselves, against the store: a lost boot tail (``last_seq``) and a
board stopped on a config error, in ``dpsense status`` and /metrics (cloud/ops/results.py)."""
from __future__ import annotations

import json
import time

from prometheus_client import generate_latest

from dpsense.cloud import cli
from dpsense.cloud.analyst.devices import classify_status
from dpsense.cloud.ops import results
from dpsense.cloud.ops.dashboard.data import StoreSource
from dpsense.cloud.ops.dashboard.metrics import metrics_registry
from dpsense.cloud.storage import Reading, open_analyst_store
from dpsense.cloud.transport.gateway.relay import Gateway


def _readings(device: int, boot: int, seqs: range) -> list[Reading]:
    return [Reading(device, boot, s, bytes([device, s % 256, s // 256, 0, 0, 0, 0, boot % 256]), 1, (s, -s),
                    "dpsense/readings/d%d" % device, 1000.0 + s) for s in seqs]


def _status(store, device: int, doc: dict, at: float) -> None:
    st = classify_status("dpsense/status/d%d" % device, json.dumps(doc).encode(), at)
    store.add_statuses([st], [])


def _stopped_by_gateway(device: int) -> bytes:
    """The status message a gateway publishes for a board that stopped on a config error."""
    pubs: list[tuple[str, bytes]] = []
    gw = Gateway(device, lambda t, p: pubs.append((t, p)), lambda s: None)
    gw.feed(b"config error: epsilon: must be > 0\r\n" * 2)       # said, then said again until heard
    assert gw.take_replies() == b"!=%04x\n" % _crc(b"config error: epsilon: must be > 0") * 2
    assert len(pubs) == 1 and pubs[0][0] == "dpsense/status/d%d" % device
    return pubs[0][1]


def _crc(line: bytes) -> int:
    from dpsense.protocol.framing import crc16
    return crc16(line)


def test_a_lost_tail_and_a_stopped_board_show_in_status_and_metrics(tmp_path, capsys) -> None:
    a = tmp_path / "a"
    a.mkdir()
    url = "sqlite:///%s" % (a / "analyst.db")
    now = time.time()
    with open_analyst_store(url) as store:
        store.add_batch(_readings(5, 9, range(0, 10)) + _readings(6, 4, range(0, 20)), [])
        # Device 5's board released seqs 0..14 (its "done" status); 10..14 never arrived.
        _status(store, 5, {"event": "boot", "device": 5, "boot": 9, "eps_record": "1"}, now)
        _status(store, 5, {"event": "done", "device": 5, "boot": 9, "released": 15, "last_seq": 14}, now + 1)
        # Device 6: a status older than its newest stored reading, and one without last_seq: nothing lost.
        _status(store, 6, {"event": "progress", "device": 6, "boot": 4, "last_seq": 12}, now)
        _status(store, 7, {"event": "boot", "device": 7, "boot": 3, "released": 0, "entropy": "prng_no_dp"}, now)
        # Device 8 stopped on a config error before any boot; its gateway said so.
        store.add_statuses([classify_status("dpsense/status/d8", _stopped_by_gateway(8), now)], [])
        tails = {(t.device_id, t.boot_id): t for t in results.tails(store)}
        assert set(tails) == {(5, 9), (6, 4)}
        assert (tails[5, 9].last_seq, tails[5, 9].stored_last, tails[5, 9].missing) == (14, 9, 5)
        assert tails[6, 4].missing == 0
        rows = {r.device_id: r for r in results.devices(store)}
        assert rows[5].tail_missing == 5 and rows[6].tail_missing == 0 and rows[7].tail_missing is None
        assert rows[8].stopped == "config error: epsilon: must be > 0" and rows[8].status_event == "stopped"
        assert rows[5].stopped is None
    assert cli.main(["status", "--data-dir", str(a), "--correction-data-dir", str(tmp_path / "cs")]) == 0
    out = capsys.readouterr().out
    assert "boards      device 8 stopped: config error: epsilon: must be > 0" in out, out
    assert ("privacy     NO differential privacy (entropy prng_no_dp: no hardware noise source): "
            "devices 7\n") in out, out
    assert ("tails       5 readings released (the boards' status says) after the last stored of their boot never "
            "arrived: device 5 boot 9: last seq 14, stored up to 9: 5") in out, out
    text = generate_latest(metrics_registry(StoreSource(lambda: open_analyst_store(url), min_interval=0,
                                                        cost_share=None))).decode()
    assert 'dpsense_device_tail_missing{device="d5",group="default"} 5.0' in text
    assert 'dpsense_device_tail_missing{device="d6",group="default"} 0.0' in text
    assert 'dpsense_device_stopped{device="d8",group="default"} 1.0' in text
    assert 'dpsense_device_stopped{device="d5",group="default"} 0.0' in text


def test_a_boot_with_nothing_stored_loses_its_whole_announced_run() -> None:
    with open_analyst_store("sqlite://") as store:
        _status(store, 3, {"event": "progress", "device": 3, "boot": 77, "last_seq": 41}, 1.0)
        (t,) = results.tails(store)
        assert (t.stored_last, t.missing) == (None, 42)


def test_the_simulated_fleet_says_each_devices_last_seq_at_the_end() -> None:
    """`dpsense simulate` publishes this status per device once it sent its last record: records
    it counted as done and the cloud never stored show as a tail (the issue's lost 2,188)."""
    import numpy as np

    from dpsense.cloud.sim.calibration import calibrate
    from dpsense.cloud.sim.simulate import FleetEncoder
    rng = np.random.default_rng(2)
    enc = FleetEncoder(calibrate(rng.normal(0, 3, (2000, 2)), "1", 0.01), 3, seed=5, boot_id=9)
    assert "last_seq" not in json.loads(enc.status(1, "done"))       # nothing released yet
    enc.encode(rng.normal(0, 3, (10, 2)))                             # devices 1, 2, 3 get 4, 3, 3
    done = [json.loads(enc.status(d, "done")) for d in (1, 2, 3)]
    assert [(s["event"], s["boot"], s["last_seq"], s["released"]) for s in done] == [
        ("done", 9, 3, 4), ("done", 9, 2, 3), ("done", 9, 2, 3)]
    assert "last_seq" not in json.loads(enc.status(1))                # the boot status, as before
    with open_analyst_store("sqlite://") as store:
        enc2 = FleetEncoder(calibrate(rng.normal(0, 3, (2000, 2)), "1", 0.01), 1, seed=5, boot_id=9)
        batch = enc2.encode(rng.normal(0, 3, (10, 2)))
        from dpsense.cloud.ingest.classify import classify_reading
        store.add_batch([classify_reading("dpsense/readings/d1", p, 1.0) for p in batch.readings[:7]], [])
        store.add_statuses([classify_status("dpsense/status/d1", enc2.status(1, "done"), 2.0)], [])
        (t,) = results.tails(store)
        assert (t.last_seq, t.stored_last, t.missing) == (9, 6, 3)
