"""cloud/ingest/acks.py: only what the batch's own commit stored or found identical is
acknowledged, in explicit ranges per boot, on the device's own topic; the store's insert says
which records conflicted (``last_conflicted``), nothing is read back."""
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
    assert acker.after_commit(batch, analyst.last_conflicted) == 2
    assert _acked(sent) == {("dpsense/ack/d7/r", 1, 7, 1): {0, 1, 2, 6, 7},
                            ("dpsense/ack/d8/r", 1, 8, 3): {5}}
    assert wire.decode_ack(sent[0][1])[3] == [(0, 2), (6, 7)]        # 3..5 never covered
    assert acker.acked == 6


def test_a_conflicting_record_is_never_acknowledged(analyst: AnalystStore) -> None:
    sent: list[tuple[str, bytes]] = []
    acker = Acknowledger.for_readings(lambda t, p: sent.append((t, p)))
    stored = [reading(7, 1, s) for s in range(3)]
    analyst.add_batch(stored, [])
    other = reading(7, 1, 1, token=token_of("other"))      # the key holds another record
    twice = reading(7, 1, 5, token=token_of("twice"))      # two contents for one key in a batch
    batch = [reading(7, 1, 2), other, reading(7, 1, 5), twice, reading(7, 1, 3)]
    analyst.add_batch(batch, [])
    assert analyst.last_conflicted == {1, 3}
    acker.after_commit(batch, analyst.last_conflicted)
    assert _acked(sent) == {("dpsense/ack/d7/r", 1, 7, 1): {2, 3, 5}}


def test_what_is_acknowledged_is_what_the_store_then_holds(analyst: AnalystStore) -> None:
    # The insert's word against a read-back from the database, on random batches with resends
    # and conflicts: every acknowledged key is stored with that record's token, and every
    # record of the batch stored with its own token is acknowledged.
    import random
    rnd = random.Random(5)
    for _ in range(20):
        batch = [reading(7, rnd.randrange(2), rnd.randrange(30), token=token_of(str(rnd.randrange(3))))
                 for _ in range(rnd.randrange(1, 40))]
        analyst.add_batch(batch, [])
        acked = {i for i in range(len(batch)) if i not in analyst.last_conflicted}
        held = {(r.device_id, r.boot_id, r.seq): r.token for _, r in analyst.readings_after(0, 10 ** 6)}
        assert acked == {i for i, r in enumerate(batch) if held[(r.device_id, r.boot_id, r.seq)] == r.token}


def test_a_fresh_acknowledger_acknowledges_a_resend_after_a_restart(new_url: Callable[[], str]) -> None:  # noqa: F811
    url = new_url()
    batch = [reading(7, 1, s) for s in range(4)]
    with open_analyst_store(url) as store:
        store.add_batch(batch, [])
    sent: list[tuple[str, bytes]] = []
    with open_analyst_store(url) as store:                 # the ingest restarted
        store.add_batch(batch[1:3], [])                    # resends: duplicates
        Acknowledger.for_readings(lambda t, p: sent.append((t, p))).after_commit(batch[1:3], store.last_conflicted)
    assert _acked(sent) == {("dpsense/ack/d7/r", 1, 7, 1): {1, 2}}


def test_corrections_are_acknowledged_by_their_header_when_held_with_the_same_d_diff(cs: CorrectionStore) -> None:
    sent: list[tuple[str, bytes]] = []
    acker = Acknowledger.for_corrections(lambda t, p: sent.append((t, p)))
    batch = [Correction(token_of(s), s, 1.0, 7, 2, s) for s in range(5)]
    cs.add_batch(batch[:4], [])
    conflicting = Correction(token_of(0), 99, 1.0, 7, 2, 6)
    again = batch[1:] + [conflicting]
    cs.add_batch(again, [])
    assert cs.last_conflicted == {4}
    acker.after_commit(again, cs.last_conflicted)
    assert _acked(sent) == {("dpsense/ack/d7/c", 2, 7, 2): {1, 2, 3, 4}}


def test_many_ranges_split_into_messages_of_bounded_size() -> None:
    keys = [(7, 1, 2 * s) for s in range(wire.ACK_MAX_RANGES * 2 + 1)]
    msgs = messages(wire.KIND_READING, keys)
    assert len(msgs) == 3 and all(len(p) <= 12 + 8 * wire.ACK_MAX_RANGES for _, p in msgs)
    assert _acked(msgs) == {("dpsense/ack/d7/r", 1, 7, 1): {k[2] for k in keys}}


def test_batches_noted_together_give_one_message_per_device_and_boot() -> None:
    sent: list[tuple[str, bytes]] = []
    acker = Acknowledger.for_readings(lambda t, p: sent.append((t, p)))
    acker.add([reading(7, 1, 0), reading(8, 1, 0)])
    acker.add([reading(7, 1, 1), reading(7, 1, 2)], conflicted={1})
    assert sent == [] and acker.pending == 3
    assert acker.flush() == 2 and acker.flush() == 0
    assert _acked(sent) == {("dpsense/ack/d7/r", 1, 7, 1): {0, 1}, ("dpsense/ack/d8/r", 1, 8, 1): {0}}
    assert acker.acked == 3


def test_a_busy_ingest_acknowledges_several_batches_together_and_an_idle_one_at_once(
        analyst: AnalystStore) -> None:
    from dpsense.cloud.ingest import service
    from dpsense.cloud.ingest.service import Connection, IngestService, _Msg
    svc = IngestService.for_analyst(Connection("127.0.0.1", 1, "analyst-ingest", "pw", "t"), analyst,
                                    log=lambda s: None)
    sent: list[tuple[str, bytes]] = []
    assert svc.acker is not None
    svc.acker.publish = lambda t, p: sent.append((t, p))

    def msg(seq: int) -> _Msg:
        return _Msg("dpsense/readings/d7", wire.encode_reading(7, 1, seq, token_of(seq), 3, [1, 2]), 0, 0, 1, 0.0)
    svc._q.put(msg(99))                                    # more waits: the ingest is busy
    assert svc.process([msg(0)]) and svc.process([msg(1)])
    assert sent == [] and svc.acker.pending == 2
    svc._acks_at -= service.ACK_EVERY_S                    # a busy ingest still flushes in time
    assert svc.process([msg(2)])
    assert _acked(sent) == {("dpsense/ack/d7/r", 1, 7, 1): {0, 1, 2}} and len(sent) == 1
    sent.clear()
    svc._q.take(10, 0, 0)                                  # the inbox is empty: at once
    assert svc.process([msg(3)])
    assert _acked(sent) == {("dpsense/ack/d7/r", 1, 7, 1): {3}} and svc.stats.acked == 4
