"""Provisioning snippets and oracles the rig tests share."""
from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

from dpsense.cloud.transport import topics
from dpsense.protocol import wire

from .rigs.relay import Publish


def column(delta_q: int, num: int = 1, den: int = 1, offset: int = 0,
           raw_min: int = -10 ** 8, raw_max: int = 10 ** 8) -> dict[str, int]:
    return {"num": num, "den": den, "offset": offset, "raw_min": raw_min, "raw_max": raw_max,
            "delta_q": delta_q}


def scaled(col: dict[str, int], raw: int) -> int:
    """docs/protocol.md 4.1, written out again here as the test's own oracle."""
    r = min(max(raw, col["raw_min"]), col["raw_max"])
    return (2 * col["num"] * r + col["den"]) // (2 * col["den"]) + col["offset"]


def by_record(pubs: list[Publish], device_user: str) -> dict[tuple[int, int, int], list[Publish]]:
    """Reading publishes grouped by (device, boot, seq), in the order they were sent."""
    out: dict[tuple[int, int, int], list[Publish]] = defaultdict(list)
    for p in pubs:
        if p.topic == topics.READINGS % device_user:
            dev, boot, seq = wire.decode_reading(p.payload)[:3]
            out[(dev, boot, seq)].append(p)
    return out


def by_token(pubs: list[Publish], data_dir: Path | None = None) -> dict[bytes, list[Publish]]:
    """Correction records by token; sealed ones opened with the keys in the key store of
    ``data_dir`` (the test is the correction server here)."""
    from dpsense.cloud.correction.sealed import KeyStore, open_record
    from dpsense.protocol import seal
    keys = KeyStore.for_data_dir(data_dir) if data_dir is not None else None
    out: dict[bytes, list[Publish]] = defaultdict(list)
    for p in pubs:
        if p.topic == topics.CORRECTIONS:
            if p.payload[1] == seal.KIND_SEALED and keys is not None:
                k = keys.keys_of(struct.unpack_from("<I", p.payload, 4)[0])
                assert k is not None, "no key for a sealed record"
                out[open_record(k, p.payload)[4]].append(p)
            else:
                out[wire.decode_correction(p.payload)[3]].append(p)
    return out


def check_resends(groups: dict, dup: bool = True) -> int:
    """Every copy of a message has the first copy's bytes; with ``dup``, every later copy
    is the MQTT client's retransmission: DUP set, the same packet id. A board behind a
    gateway (``dup`` False) resends its kept record to the gateway, which publishes it as a
    new message: same bytes, its own packet id.

    Returns how many messages were sent more than once.
    """
    resent = 0
    for key, copies in groups.items():
        first = copies[0]
        assert all(c.payload == first.payload for c in copies), \
            "%r was resent with different bytes" % (key,)
        assert all(c.qos == 1 for c in copies)
        if len(copies) > 1:
            resent += 1
            if dup:
                assert all(c.dup for c in copies[1:]), "%r resent without DUP" % (key,)
                assert len({c.pid for c in copies}) == 1, "%r resent under another packet id" % (key,)
    return resent
