"""The end-to-end acknowledgement: after a commit, tell each device which of its records the
cloud now holds (docs/protocol.md 3.1).

    acker = Acknowledger.for_readings(publish)      # or .for_corrections(publish)
    store.add_batch(records, dead)
    acker.after_commit(records, store.last_conflicted)  # publish(topic, payload) per message

Guarantee: a record is acknowledged only if the batch's own committed transaction stored it
or found it stored with the same content (a reading by its key ``(device, boot, seq)`` with
the same token, configuration and values; a correction by its token with the same d_diff).
The store's insert establishes that for every record of the batch, inside the transaction:
a record whose key holds other content is a conflict (``last_conflicted``, dead-lettered)
and is never acknowledged; every other record of the batch is held as sent once
``add_batch`` returns. Nothing is read back and nothing is kept in process memory, so
several ingest workers each acknowledge what their own commit stored or found identical,
and a record the board resends because an acknowledgement was lost (or because the ingest
restarted, or another worker stored it) is a duplicate in a later batch and is acknowledged
again. Each message names explicit inclusive seq ranges of one boot, so a record the cloud
does not hold, such as a block lost inside a broker, is never covered by a range.

Correction records are acknowledged by their header ``(device, boot, seq)``: the sealed ingest
(cloud/correction/sealed.py) fills it from the authenticated header of a sealed record, or
from a plaintext device's kind-2 record; forgeries and replays are dead letters, never records.

Acknowledgements go out with QoS 0: a lost one costs a resend, which is acknowledged in turn.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Collection, Iterable, Sequence

from dpsense.cloud.transport import topics
from dpsense.protocol import wire

Publish = Callable[[str, bytes], None]
Key = tuple[int, int, int]          # device_id, boot_id, seq


def messages(of: int, keys: Iterable[Key]) -> list[tuple[str, bytes]]:
    """``(topic, payload)`` acknowledging exactly ``keys`` (``of``: KIND_READING or KIND_CORRECTION),
    one message per boot and up to ``wire.ACK_MAX_RANGES`` ranges each."""
    by_boot: dict[tuple[int, int], list[int]] = defaultdict(list)
    for device_id, boot_id, seq in keys:
        by_boot[(device_id, boot_id)].append(seq)
    out = []
    for (device_id, boot_id), seqs in sorted(by_boot.items()):
        # One topic per kind: the broker lets each ingest publish only its own (cloud/deploy/broker.py).
        topic = (topics.ACK_READINGS if of == wire.KIND_READING else topics.ACK_CORRECTIONS) % (
            topics.DEVICE_USER % device_id)
        for payload in wire.encode_acks(of, device_id, boot_id, wire.seq_ranges(seqs)):
            out.append((topic, payload))
    return out


def held_keys(records: Sequence[Any], conflicted: Collection[int] = ()) -> list[Key]:
    """The ``(device_id, boot_id, seq)`` of ``records`` (readings, or corrections with their
    header) whose position is not in ``conflicted``; a record without a device (0) has none."""
    return [(r.device_id, r.boot_id, r.seq) for i, r in enumerate(records)
            if r.device_id and i not in conflicted]


class Acknowledger:
    """Acknowledges the records of committed batches; ``published`` and ``acked`` count
    messages sent and records acknowledged (acknowledgements of resends included).

    ``add`` notes what a committed batch holds, ``flush`` publishes everything noted since the
    last flush, one message per device and boot: a busy ingest flushes every few batches
    (``IngestService``), so a device seen in several of them gets one message, not one per
    batch. What is noted and not yet flushed is lost with the process, as a lost QoS 0
    acknowledgement is: the board resends those records, which are acknowledged then."""

    def __init__(self, of: int, publish: Publish) -> None:
        self.of = of
        self.publish = publish
        self.published = 0
        self.acked = 0
        self._pending: list[Key] = []

    @classmethod
    def for_readings(cls, publish: Publish) -> "Acknowledger":
        return cls(wire.KIND_READING, publish)

    @classmethod
    def for_corrections(cls, publish: Publish) -> "Acknowledger":
        return cls(wire.KIND_CORRECTION, publish)

    @property
    def pending(self) -> int:
        """Records noted and not yet acknowledged."""
        return len(self._pending)

    def add(self, records: Sequence[Any], conflicted: Collection[int] = ()) -> None:
        """Note the records of a committed batch but those at the positions ``conflicted`` (the
        store's ``last_conflicted``). Call only after the batch's transaction committed, with
        the list the store was given."""
        self._pending.extend(held_keys(records, conflicted))

    def flush(self) -> int:
        """Publish the acknowledgement of everything noted; return the messages sent."""
        if not self._pending:
            return 0
        keys, self._pending = self._pending, []
        msgs = messages(self.of, keys)
        for topic, payload in msgs:
            self.publish(topic, payload)
        self.published += len(msgs)
        self.acked += len(keys)
        return len(msgs)

    def after_commit(self, records: Sequence[Any], conflicted: Collection[int] = ()) -> int:
        """``add`` then ``flush``: acknowledge one committed batch at once."""
        self.add(records, conflicted)
        return self.flush()
