"""Round messages above 64 KiB travel as fragments and come back whole."""
from __future__ import annotations

import os
import random

import pytest

import struct

from dpsense.cloud.correction.fragments import LIMIT, MAGIC, MAX_FRAGMENTS, Reassembler, split


def test_small_payload_is_sent_as_it_is():
    assert split(b'{"step":"result"}') == [b'{"step":"result"}']
    assert Reassembler().feed(b'{"a":1}') == b'{"a":1}'


@pytest.mark.parametrize("size", [LIMIT + 1, 3 * LIMIT, 1_000_003])
def test_fragments_fit_the_limit_and_reassemble_in_any_order(size):
    payload = os.urandom(size)
    parts = split(payload)
    assert len(parts) > 1 and all(len(p) <= LIMIT and p.startswith(MAGIC) for p in parts)
    random.Random(size).shuffle(parts)
    r = Reassembler()
    got = [r.feed(p) for p in parts]
    assert got[-1] == payload and all(g is None for g in got[:-1])


def test_interleaved_messages_and_repeated_fragments():
    a, b = os.urandom(2 * LIMIT), os.urandom(3 * LIMIT)
    pa, pb = split(a), split(b)
    r = Reassembler()
    out = [r.feed(p) for p in [pa[0], pb[0], pa[0], pb[1], pa[1], pa[2], pb[2], pb[3]]]
    assert [o for o in out if o is not None] == [a, b]


def test_a_limit_without_room_is_refused():
    with pytest.raises(ValueError):
        split(b"x" * 100, limit=10)


def test_a_fragment_claiming_too_many_parts_is_dropped():
    r = Reassembler()
    assert r.feed(struct.pack("<4sQII", MAGIC, 1, 0, MAX_FRAGMENTS + 1) + b"x") is None
    assert r.feed(struct.pack("<4sQII", MAGIC, 1, 0, 0) + b"x") is None
    assert r.feed(struct.pack("<4sQII", MAGIC, 1, 5, 3) + b"x") is None
    assert not r._parts
