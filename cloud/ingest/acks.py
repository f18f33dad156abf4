"""The end-to-end acknowledgement: after a commit, tell each device which of its records the
cloud now holds (docs/protocol.md 3.1).

    acker = Acknowledger.for_readings(publish)      # or .for_corrections(publish)
    acker.after_commit(store, records)              # publish(topic, payload) per message

Guarantee: a record is acknowledged only if, after the batch's commit, the store holds it
(read back from the database: a reading by its key ``(device, boot, seq)`` with the same
token, a correction by its token with the same d_diff). Each message names explicit
inclusive seq ranges of one boot, so a record the cloud does not hold, such as a block lost
inside a broker, is never covered by a range. Nothing is kept in process memory: a record
the board resends because an acknowledgement was lost (or because the ingest restarted, or
another worker stored it) is a duplicate in the next batch and is acknowledged again.

A record whose key is stored with other content (a conflicting duplicate, dead-lettered)
is not acknowledged: the cloud holds something else under that key.

Acknowledgements go out with QoS 0: a lost one costs a resend, which is acknowledged in turn.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable, Protocol, Sequence

from dpsense.cloud import topics
from dpsense.cloud.storage.repository import Correction, Reading
from dpsense.protocol import wire

Publish = Callable[[str, bytes], None]
Key = tuple[int, int, int]          # device_id, boot_id, seq


class ReadingKeys(Protocol):
    """What the acknowledgement reads of an analyst store (cloud/storage/stream.py)."""

    def stored_tokens(self, keys: Sequence[Key]) -> dict[Key, bytes]: ...


class TokenLookup(Protocol):
    """What the acknowledgement reads of a correction store (cloud/storage/repository.py)."""

    def lookup(self, tokens: list[bytes]) -> dict[bytes, int]: ...


def messages(of: int, keys: Iterable[Key]) -> list[tuple[str, bytes]]:
    """``(topic, payload)`` acknowledging exactly ``keys`` (``of``: KIND_READING or KIND_CORRECTION),
    one message per boot and up to ``wire.ACK_MAX_RANGES`` ranges each."""
    by_boot: dict[tuple[int, int], list[int]] = defaultdict(list)
    for device_id, boot_id, seq in keys:
        by_boot[(device_id, boot_id)].append(seq)
    out = []
    for (device_id, boot_id), seqs in sorted(by_boot.items()):
        topic = topics.ACK % (topics.DEVICE_USER % device_id)
        for payload in wire.encode_acks(of, device_id, boot_id, wire.seq_ranges(seqs)):
            out.append((topic, payload))
    return out


def committed_readings(store: ReadingKeys, readings: Sequence[Reading]) -> list[Key]:
    """The keys of ``readings`` that ``store`` (an AnalystStore) holds with the same token."""
    stored = store.stored_tokens([(r.device_id, r.boot_id, r.seq) for r in readings])
    return [(r.device_id, r.boot_id, r.seq) for r in readings
            if stored.get((r.device_id, r.boot_id, r.seq)) == r.token]


def committed_corrections(store: TokenLookup, corrections: Sequence[Correction]) -> list[Key]:
    """The header keys of ``corrections`` that ``store`` (a CorrectionStore) holds with the same d_diff."""
    stored = store.lookup([c.token for c in corrections])
    return [(c.device_id, c.boot_id, c.seq) for c in corrections
            if c.device_id and stored.get(c.token) == c.d_diff]


class Acknowledger:
    """Acknowledges the records of each committed batch; ``published`` and ``acked`` count
    messages sent and records acknowledged (acknowledgements of resends included)."""

    def __init__(self, of: int, committed: Callable[[Any, Sequence[Any]], list[Key]],
                 publish: Publish) -> None:
        self.of = of
        self.committed = committed
        self.publish = publish
        self.published = 0
        self.acked = 0

    @classmethod
    def for_readings(cls, publish: Publish) -> "Acknowledger":
        return cls(wire.KIND_READING, committed_readings, publish)

    @classmethod
    def for_corrections(cls, publish: Publish) -> "Acknowledger":
        return cls(wire.KIND_CORRECTION, committed_corrections, publish)

    def after_commit(self, store: Any, records: Sequence[Any]) -> int:
        """Publish the acknowledgement of ``records`` that ``store`` holds; return the messages
        sent. Call only after the batch's transaction committed."""
        if not records:
            return 0
        keys = self.committed(store, records)
        msgs = messages(self.of, keys)
        for topic, payload in msgs:
            self.publish(topic, payload)
        self.published += len(msgs)
        self.acked += len(keys)
        return len(msgs)
