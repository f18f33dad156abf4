"""cloud/ingest/acks.py: only what the store holds after a commit is acknowledged, in explicit
ranges per boot, on the device's own topic; read back from the database, not from memory."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from dpsense.cloud.ingest.acks import Acknowledger, messages
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.cloud.storage.repository import AnalystStore, Correction, CorrectionStore
from dpsense.protocol import wire
from tests.cloud.test_storage import new_url, reading, token_of  # noqa: F401  (fixture)


@pytest.fixture
def analyst(new_url: Callable[[], str]) -> Iterator[AnalystStore]:  # noqa: F811
    with open_analyst_store(new_url()) as store:
        yield store


@pytest.fixture
def cs(new_url: Callable[[], str]) -> Iterator[CorrectionStore]:  # noqa: F811
    with open_correction_store(new_url()) as store:
        yield store


def _acked(sent: list[tuple[str, bytes]]) -> dict[tuple[str, int, int, int], set[int]]:
    """(topic, of, device, boot) -> acknowledged seqs, decoded from the messages."""
    out: dict[tuple[str, int, int, int], set[int]] = {}
    for topic, payload in sent:
        of, device, boot, ranges = wire.decode_ack(payload)
        seqs = out.setdefault((topic, of, device, boot), set())
        for first, last in ranges:
            seqs.update(range(first, last + 1))
    return out


def test_a_block_missing_in_the_middle_is_never_acknowledged(analyst: AnalystStore) -> None:
    sent: list[tuple[str, bytes]] = []
    acker = Acknowledger.for_readings(lambda t, p: sent.append((t, p)))
    batch = [reading(7, 1, s) for s in (0, 1, 2, 6, 7)] + [reading(8, 3, 5)]
    analyst.add_batch(batch, [])
    assert acker.after_commit(analyst, batch) == 2
    assert _acked(sent) == {("dpsense/ack/d7", 1, 7, 1): {0, 1, 2, 6, 7},
                            ("dpsense/ack/d8", 1, 8, 3): {5}}
    assert wire.decode_ack(sent[0][1])[3] == [(0, 2), (6, 7)]        # 3..5 never covered
    assert acker.acked == 6


def test_only_records_the_store_holds_are_acknowledged(analyst: AnalystStore) -> None:
    sent: list[tuple[str, bytes]] = []
    acker = Acknowledger.for_readings(lambda t, p: sent.append((t, p)))
    stored = [reading(7, 1, s) for s in range(3)]
    analyst.add_batch(stored, [])
    never = reading(7, 1, 3)                               # not committed
    other = reading(7, 1, 1, token=token_of("other"))      # the key holds another record
    acker.after_commit(analyst, stored + [never, other])
    assert _acked(sent) == {("dpsense/ack/d7", 1, 7, 1): {0, 1, 2}}


def test_a_fresh_acknowledger_acknowledges_a_resend_after_a_restart(new_url: Callable[[], str]) -> None:  # noqa: F811
    url = new_url()
    batch = [reading(7, 1, s) for s in range(4)]
    with open_analyst_store(url) as store:
        store.add_batch(batch, [])
    sent: list[tuple[str, bytes]] = []
    with open_analyst_store(url) as store:                 # the ingest restarted
        store.add_batch(batch[1:3], [])                    # resends: duplicates
        Acknowledger.for_readings(lambda t, p: sent.append((t, p))).after_commit(store, batch[1:3])
    assert _acked(sent) == {("dpsense/ack/d7", 1, 7, 1): {1, 2}}


def test_corrections_are_acknowledged_by_their_header_when_held_with_the_same_d_diff(cs: CorrectionStore) -> None:
    sent: list[tuple[str, bytes]] = []
    acker = Acknowledger.for_corrections(lambda t, p: sent.append((t, p)))
    batch = [Correction(token_of(s), s, 1.0, 7, 2, s) for s in range(5)]
    cs.add_batch(batch[:4], [])
    conflicting = Correction(token_of(0), 99, 1.0, 7, 2, 0)
    acker.after_commit(cs, batch + [conflicting])
    assert _acked(sent) == {("dpsense/ack/d7", 2, 7, 2): {0, 1, 2, 3}}


def test_many_ranges_split_into_messages_of_bounded_size() -> None:
    keys = [(7, 1, 2 * s) for s in range(wire.ACK_MAX_RANGES * 2 + 1)]
    msgs = messages(wire.KIND_READING, keys)
    assert len(msgs) == 3 and all(len(p) <= 12 + 8 * wire.ACK_MAX_RANGES for _, p in msgs)
    assert _acked(msgs) == {("dpsense/ack/d7", 1, 7, 1): {k[2] for k in keys}}
