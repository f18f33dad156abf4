"""Correction records leave the board sealed, and the correction server opens every one,
across a kill -9 and a boot on the same ledger and keys (its nonce never repeats)."""
from __future__ import annotations

import struct

import pytest

from dpsense.cloud.transport import topics
from dpsense.protocol import seal
from dpsense.tools.provision import board_profile

from .helpers import column
from .rigs.relay import publishes


def test_sealed_records_open_at_the_correction_server_across_a_reset(rig):
    if not board_profile(getattr(rig, "board", "microbit")).get("aes", True):
        pytest.skip("no AES on this board: its correction records are plain, accepted by name")
    n = 40
    cfg = rig.config(7, columns=[column(20)], epsilon="0.5", centre=[0], window_records=10 ** 6,
                     window_cap="100000", period_ms=0)
    rig.start(cfg, stimulus=[[i] for i in range(n)])
    rig.expect("boot ok")
    rig.cloud.wait_readings(n, 30)
    rig.reset()                   # the same config, ledger and keys; the stimulus again
    rig.expect("boot ok", 15)
    rig.cloud.wait_readings(2 * n, 30)
    rows = rig.cloud.readings()
    assert len(rows) == 2 * n and len({r.boot_id for r in rows}) == 2
    rig.cloud.wait(lambda: rig.cloud.correction_count() >= 2 * n, 20, "corrections")
    assert len(rig.cloud.corrections([r.token for r in rows])) == 2 * n
    assert rig.cloud.correction_dead_letters() == []
    # What crossed the broker: sealed records, one set of bytes per nonce, a nonce per record.
    by_nonce: dict[int, set[bytes]] = {}
    for p in publishes(rig.cloud.relay):
        if p.topic == topics.CORRECTIONS:
            assert len(p.payload) == seal.SEALED_SIZE and p.payload[1] == seal.KIND_SEALED
            by_nonce.setdefault(struct.unpack_from("<I", p.payload, 16)[0], set()).add(p.payload)
    assert len(by_nonce) == 2 * n and all(len(v) == 1 for v in by_nonce.values())
    tokens = {r.token for r in rows}
    assert not [p for v in by_nonce.values() for p in v if any(t in p for t in tokens)]
