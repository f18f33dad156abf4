"""Broker outage and power cut mid-stream: nothing is lost, resends are the identical bytes.

Before each fault the relay drops the broker's PUBACKs for a moment, so some records
are guaranteed to have reached the broker unacknowledged: the device must send them
again, byte for byte (same noise, same token) with DUP set, and the cloud must store
them once.
"""
from __future__ import annotations

import time

from dpsense.protocol import wire

from .helpers import by_record, by_token, check_resends, column
from .rigs.relay import publishes


def _config(rig, n_ring=4096):
    return rig.config(7, columns=[column(20), column(30)], epsilon="0.5", centre=[0, 0],
                      window_records=10 ** 6, window_cap="1000000", period_ms=5,
                      ring_records=n_ring, ring_bytes=1 << 20)


def test_broker_outage_loses_nothing_and_resends_identical_bytes(rig):
    n = 500
    rig.start(_config(rig), stimulus=[[i, -i] for i in range(n)])
    rig.expect("boot ok")
    rig.cloud.wait_readings(80, 20)
    relay = rig.cloud.relay
    relay.mute()
    time.sleep(0.3)                              # ~60 records reach the broker, unacknowledged
    rig.cloud.stop_broker()
    rig.expect("mqtt: connection lost", 10)
    time.sleep(1.0)                              # the device keeps sampling into its ring
    down_for = rig.expect(r"mqtt: connect failed", 10)
    assert down_for
    relay.unmute()
    rig.cloud.start_broker()
    m = rig.expect(r"mqtt: connected \(session present 1, (\d+) records to send\)", 15)
    assert int(m.group(1)) > 0
    rig.cloud.wait_readings(n, 60)
    idle = rig.expect(r"idle: all %d records acknowledged \((\d+) messages published, (\d+) records resent, "
                      r"(\d+) connects\)" % n, 30)
    rows = rig.cloud.readings()
    assert len(rows) == n
    assert [(g.first_seq, g.last_seq, g.received, g.missing) for g in rig.cloud.gaps()] == [(0, n - 1, n, 0)]
    pubs = publishes(relay)
    records = by_record(pubs, "d7")
    assert len(records) == n
    corrections = by_token(pubs, rig.cloud.dir)
    assert check_resends(records) > 0 and check_resends(corrections) > 0
    # the device counts a record as resent when either of its two messages went out again
    tokens = {wire.decode_reading(c[0].payload)[3] for c in records.values() if len(c) > 1}
    tokens |= {t for t, c in corrections.items() if len(c) > 1}
    resent = len(tokens)
    assert resent == int(idle.group(2))
    # the resent copies went out on a later connection than the first copy
    assert all(c[-1].connection > c[0].connection for c in records.values() if len(c) > 1)
    # and the database holds the bytes that were sent
    first = {k: v[0].payload for k, v in records.items()}
    for r in rows:
        assert wire.decode_reading(first[(r.device_id, r.boot_id, r.seq)])[5] == r.values
    print("outage: %d records, %d resent after the broker came back, %s connects"
          % (n, resent, idle.group(3)))


def test_reset_mid_stream_loses_nothing_and_resends_identical_bytes(rig):
    n = 300
    rig.start(_config(rig), stimulus=[[i, -i] for i in range(n)])
    first_boot = int(rig.expect(r"boot ok: board=\w+ device=7 boot=(\d+)").group(1))
    rig.cloud.wait_readings(50, 20)
    relay = rig.cloud.relay
    relay.mute()
    time.sleep(0.3)
    rig.reset()                                  # kill -9, boot again on the same files
    m = rig.expect(r"boot ok: board=\w+ device=7 boot=(\d+) entropy=\S+ eps_record=\S+ pending=(\d+)", 10)
    second_boot = int(m.group(1))
    assert second_boot != first_boot
    assert int(m.group(2)) > 0                   # unacknowledged records survived the kill
    rig.expect(r"idle: all %d records acknowledged" % n, 60)
    pubs = publishes(relay)
    records = by_record(pubs, "d7")
    boot1 = sorted(seq for (dev, boot, seq) in records if boot == first_boot)
    assert boot1 == list(range(len(boot1))) and len(boot1) > 50
    expected = len(boot1) + n
    rig.cloud.wait_readings(expected, 30)
    rows = rig.cloud.readings()
    assert len(rows) == expected
    gaps = sorted((g.boot_id == first_boot, g.first_seq, g.last_seq, g.missing) for g in rig.cloud.gaps())
    assert gaps == sorted([(True, 0, len(boot1) - 1, 0), (False, 0, n - 1, 0)])
    dup = getattr(rig, "resends_with_dup", True)
    resent = check_resends(records, dup)
    assert resent > 0
    check_resends(by_token(pubs, rig.cloud.dir), dup)
    # records of the first boot sent before and after the kill: identical bytes
    across = [k for k, c in records.items() if k[1] == first_boot and len({p.connection for p in c}) > 1]
    assert across
    print("reset: first boot released %d records, %d of them resent by the second boot"
          % (len(boot1), len(across)))
