"""Round messages in chunks: what is split comes back whole, and the receiver's bounds hold."""
from __future__ import annotations

import os
import random

import pytest

from dpsense.cloud.correction import chunks


def test_a_window_sized_message_round_trips_in_any_order_with_duplicates():
    payload = os.urandom(1_100_000)              # a 100,000-reading round
    parts = chunks.split(payload)
    assert len(parts) == -(-len(payload) // (chunks.CHUNK_SIZE - chunks.HEADER_SIZE))
    assert max(map(len, parts)) <= chunks.CHUNK_SIZE < chunks.MAX_PACKET
    random.Random(1).shuffle(parts)
    joiner = chunks.Reassembler()
    out = [joiner.feed(p) for p in parts + parts[:3]]
    assert [o for o in out if o is not None] == [payload]
    assert joiner.pending == 0 and joiner.dropped == 0


def test_small_and_empty_messages_are_one_chunk():
    for payload in (b"", b"{}"):
        (part,) = chunks.split(payload)
        assert chunks.Reassembler().feed(part) == payload


def test_interleaved_messages_are_kept_apart():
    a, b = os.urandom(70_000), os.urandom(50_000)
    pa, pb = chunks.split(a, message_id=1), chunks.split(b, message_id=2)
    joiner = chunks.Reassembler()
    got = [joiner.feed(p) for pair in zip(pa, pb) for p in pair] + [joiner.feed(p) for p in pa[len(pb):]]
    assert sorted(g for g in got if g is not None) == sorted([a, b])


@pytest.mark.parametrize("bad, why", [
    (b"{\"step\": \"bands\"}", "not a chunk"),
    (chunks.MAGIC + b"\x00" * 12, "out of range"),                      # count 0
])
def test_what_is_not_a_chunk_is_refused(bad, why):
    joiner = chunks.Reassembler()
    with pytest.raises(chunks.ChunkError, match=why):
        joiner.feed(bad)
    assert joiner.refused == 1


def test_oversized_chunks_and_messages_are_refused():
    joiner = chunks.Reassembler(max_bytes=100_000)
    with pytest.raises(chunks.ChunkError, match="exceeds"):
        joiner.feed(chunks.split(os.urandom(70_000), limit=chunks.CHUNK_SIZE * 2)[0])
    with pytest.raises(chunks.ChunkError, match="message limit"):
        joiner.feed(chunks.split(os.urandom(200_000))[0])
    short = chunks.split(os.urandom(70_000))[0][:1000]                     # not the last, yet short
    with pytest.raises(chunks.ChunkError, match="all but the last"):
        joiner.feed(short)
    with pytest.raises(ValueError):
        chunks.split(b"x", limit=chunks.HEADER_SIZE)


def test_a_conflicting_repeat_refuses_the_message():
    parts = chunks.split(os.urandom(70_000), message_id=7)
    joiner = chunks.Reassembler()
    joiner.feed(parts[0])
    forged = parts[0][:-1] + bytes([parts[0][-1] ^ 1])
    with pytest.raises(chunks.ChunkError, match="two different chunks"):
        joiner.feed(forged)
    assert joiner.pending == 0


def test_incomplete_messages_are_dropped_after_the_timeout_and_beyond_max_pending():
    now = [0.0]
    joiner = chunks.Reassembler(timeout=10.0, max_pending=2, clock=lambda: now[0])
    first = chunks.split(os.urandom(70_000), message_id=1)
    joiner.feed(first[0])
    now[0] = 11.0
    joiner.feed(chunks.split(os.urandom(70_000), message_id=2)[0])   # expires message 1
    assert joiner.dropped == 1 and joiner.pending == 1
    assert all(joiner.feed(p) is None for p in first[1:])            # message 1 never completes
    joiner.feed(chunks.split(os.urandom(70_000), message_id=3)[0])   # three pending: the oldest goes
    assert joiner.pending == 2 and joiner.dropped == 2


def test_the_example_of_docs_protocol_6_4():
    parts = chunks.split(b"x" * 40_000, message_id=1)
    assert [p[:16].hex() for p in parts] == ["64706b31010000000000000000000200", "64706b31010000000000000001000200"]
    assert [len(p) - 16 for p in parts] == [32_752, 7_248]
    assert chunks.MAX_PACKET == 65_536 and chunks.CHUNK_SIZE == 32_768


def test_a_secure_round_sized_message_needs_the_secure_bound():
    # Mode secure's garbled comparison of a 10,000-row window is about 20 MB, past the default
    # bound; its receivers use secure.MAX_MESSAGE (cloud/correction/server.py, cloud/analyst/service.py).
    from dpsense.cloud.correction.mpc.secure import MAX_MESSAGE, garbled_size
    payload = os.urandom(garbled_size(10_000))
    parts = chunks.split(payload)
    assert len(payload) > chunks.MAX_MESSAGE and all(len(p) <= chunks.CHUNK_SIZE for p in parts)
    with pytest.raises(chunks.ChunkError, match="message limit"):
        chunks.Reassembler().feed(parts[0])
    joiner = chunks.Reassembler(max_bytes=MAX_MESSAGE)
    got = [joiner.feed(p) for p in reversed(parts)]
    assert got[-1] == payload and all(g is None for g in got[:-1])
