"""Storage interface: what the analyst and the correction server keep, and the rules every backend obeys.

The analyst's store holds perturbed readings, keyed by ``(device_id, boot_id, seq)``; the
correction server's store holds ``(token, d_diff)`` pairs and nothing that names a device.
They are separate databases: the analyst and the correction server never share storage.

Rules shared by every backend:

* ``add_batch`` is one transaction: the readings (or corrections) and the dead letters of a
  batch are all committed, or none is. It returns only after the commit, so an ingest service
  may acknowledge the batch's messages as soon as it returns.
* A message stored again (a QoS 1 re-delivery, a device's retransmission) is ignored. A message
  with a stored key but different content is never dropped silently: it becomes a dead letter
  with reason ``CONFLICTING_DUPLICATE`` and its canonical wire bytes, in the same transaction.
  Content means the wire fields (token, config_id, values; d_diff for corrections); the topic
  and the arrival time are envelope, not content.
* Dead letters are stored once per ``(topic, reason, payload)``: a row keeps the payload's first
  ``DEAD_LETTER_PREFIX`` bytes, its size and SHA-256, and counts how often it came (``repeats``;
  a message the broker redelivers after a crash between commit and acknowledgement counts
  again). ``dead_letters()`` lists the most recently seen first.
* Row ids of readings grow in commit order (PostgreSQL may skip numbers): ``readings_after``
  and ``window`` walk the readings in the order they arrived, and a reader that remembers the
  last row id it saw misses none.
* Errors of the database become ``StorageError`` (``StorageUnavailable`` when the database is
  busy, locked or out of reach, so that a retry may succeed); invalid arguments raise
  ``ValueError``.

The analyst store also holds the detection windows, per-row verdicts, device groups, board
status messages, events and counters (``stream.StreamTables``: the same SQL on both backends).
"""
from __future__ import annotations

import hashlib
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import TracebackType
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Self

import numpy as np
import numpy.typing as npt

from dpsense.cloud.errors import StorageError, StorageUnavailable
from dpsense.protocol import wire

from .stream import StreamTables, TokenListing

CONFLICTING_DUPLICATE = "conflicting duplicate"


@dataclass(frozen=True)
class Reading:
    """One decoded reading record, with the topic it came on and when it was received.

    ``packed`` is ``values`` as stored (``stored_values``): ingest passes the bytes of the
    payload it decoded them from, which are already that layout, so they are not packed
    again; None packs ``values`` when stored. It is not part of the content (``==``)."""

    device_id: int
    boot_id: int
    seq: int
    token: bytes
    config_id: int
    values: tuple[int, ...]
    topic: str
    received_at: float
    packed: bytes | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.token) != wire.TOKEN_SIZE:
            raise ValueError("token must be %d bytes, got %d" % (wire.TOKEN_SIZE, len(self.token)))
        if not self.values:
            raise ValueError("a reading needs at least one value")
        if self.packed is not None and len(self.packed) != 4 * len(self.values):
            raise ValueError("packed values must be 4 bytes per value, got %d for %d"
                             % (len(self.packed), len(self.values)))


@dataclass(frozen=True)
class Correction:
    """One decoded correction record: the record token and its distance difference, and the
    device, boot and seq of its reading from the record's clear header. Stores keep only the
    token, d_diff and arrival time; the header serves the acknowledgement (cloud/ingest/acks.py)
    and is not part of the content (``==``)."""

    token: bytes
    d_diff: int
    received_at: float
    device_id: int = field(default=0, compare=False)
    boot_id: int = field(default=0, compare=False)
    seq: int = field(default=0, compare=False)
    # The message as received (its topic and bytes), for the dead letter of a conflict; a
    # correction read back from a store has neither.
    topic: str = field(default="", compare=False, repr=False)
    payload: bytes = field(default=b"", compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.token) != wire.TOKEN_SIZE:
            raise ValueError("token must be %d bytes, got %d" % (wire.TOKEN_SIZE, len(self.token)))


# Bytes of a dead letter's payload a store keeps: enough to see what a device sent (a reading
# header is 26 bytes, a correction record 16), never a whole megabyte a device chose to send.
DEAD_LETTER_PREFIX = 256


@dataclass(frozen=True)
class DeadLetter:
    """A message that was not stored as data: its raw payload, its topic and the reason.

    Made by the ingest, ``payload`` is the whole payload. Read back from a store it is the first
    ``DEAD_LETTER_PREFIX`` bytes; ``size`` and ``sha256`` then describe the whole payload and
    ``repeats`` says how often the same (topic, reason, payload) arrived.
    """

    topic: str
    payload: bytes
    reason: str
    received_at: float
    size: int = -1                  # -1: len(payload)
    sha256: bytes = b""             # b"": SHA-256 of payload
    repeats: int = 1

    def __post_init__(self) -> None:
        if self.size < 0:
            object.__setattr__(self, "size", len(self.payload))
        if not self.sha256:
            object.__setattr__(self, "sha256", hashlib.sha256(self.payload).digest())


@dataclass(frozen=True)
class Gap:
    """Sequence accounting for one boot of one device: ``missing = last - first + 1 - received``
    counted modulo 2^32, since a boot's sequence number wraps from 2^32-1 to 0 (docs/protocol.md,
    section 9): ``first_seq`` may then be larger than ``last_seq``."""

    device_id: int
    boot_id: int
    first_seq: int
    last_seq: int
    received: int
    missing: int


SEQ_MOD = 1 << 32

# Per (device, boot): the lowest and highest sequence number, the count, and the widest step
# between two consecutive stored numbers (0 for a single reading). Both backends run it as is.
GAPS_SQL = ("WITH s AS (SELECT device_id, boot_id, seq, seq - lag(seq) OVER (PARTITION BY device_id, boot_id"
            " ORDER BY seq) AS step FROM readings)"
            " SELECT device_id, boot_id, min(seq), max(seq), count(*), coalesce(max(step), 0) FROM s"
            " GROUP BY device_id, boot_id ORDER BY device_id, boot_id")
# The stored number just after a step of the given width in one boot (device, boot, width).
WRAP_END_SQL = ("SELECT min(seq) FROM (SELECT seq, seq - lag(seq) OVER (ORDER BY seq) AS step FROM readings"
                " WHERE device_id = %s AND boot_id = %s) AS s WHERE step = %s")


def boot_gap(device_id: int, boot_id: int, lo: int, hi: int, received: int, widest: int,
             wrap_end: Callable[[], int]) -> Gap:
    """The gap of one boot from ``GAPS_SQL``'s row. The numbers lie on a circle of 2^32; the
    boot's readings are taken to be the shortest arc that covers them, so the widest hole is the
    one that was never sent. When that hole is inside ``lo..hi`` rather than across the wrap,
    the sequence wrapped: ``wrap_end()`` gives the stored number just after the hole."""
    across = lo + SEQ_MOD - hi              # the hole from hi round to lo
    if widest <= across:
        return Gap(device_id, boot_id, lo, hi, received, hi - lo + 1 - received)
    first = wrap_end()
    return Gap(device_id, boot_id, first, first - widest, received, SEQ_MOD - received - (widest - 1))


class Window(NamedTuple):
    """Consecutive readings in arrival order, as arrays for detection."""

    row_ids: list[int]
    tokens: list[bytes]
    values: npt.NDArray[np.int64]    # shape (n, m): one row per reading, one column per value


class AnalystStore(StreamTables, ABC):
    """Perturbed readings, dead letters, detection progress (``meta``) and detection results."""

    # Readings of the last committed ``add_batch`` whose key was stored with other content:
    # dead letters, not duplicates; ``last_conflicted`` holds their positions in its list (every
    # other reading of the batch is stored as sent: new, or found identical).
    last_conflicts: int = 0
    last_conflicted: frozenset[int] = frozenset()

    @abstractmethod
    def add_batch(self, readings: list[Reading], dead: list[DeadLetter]) -> int:
        """Store a batch in one transaction; return how many readings were new."""

    @abstractmethod
    def count(self) -> int:
        """Number of stored readings."""

    @abstractmethod
    def readings_after(self, row_id: int, limit: int) -> list[tuple[int, Reading]]:
        """Up to ``limit`` readings with a row id greater than ``row_id``, in arrival order."""

    @abstractmethod
    def count_after(self, row_id: int, limit: int) -> int:
        """How many readings have a row id greater than ``row_id``, counting up to ``limit``
        (``len(readings_after(row_id, limit))`` without reading them)."""

    @abstractmethod
    def window(self, start_row_id: int, size: int) -> Window:
        """Up to ``size`` readings from row id ``start_row_id`` on (inclusive), in arrival order.

        Raises ``ValueError`` when the readings do not all have the same number of values.
        """

    @abstractmethod
    def gaps(self) -> list[Gap]:
        """Sequence accounting per ``(device_id, boot_id)``, ordered by device then boot."""

    @abstractmethod
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Up to ``limit`` dead letters, the most recent first."""

    @abstractmethod
    def dead_letter_count(self) -> int:
        """Number of stored dead letters (distinct topic, reason and payload)."""

    @abstractmethod
    def dead_letter_messages(self) -> int:
        """Number of messages dead-lettered: the dead letters with their repeats."""

    @abstractmethod
    def dead_letter_reasons(self) -> list[tuple[str, int]]:
        """Messages dead-lettered per kind of reason (``group_reasons``), the most first."""

    @abstractmethod
    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""

    @abstractmethod
    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``, replacing any previous value (committed on return)."""

    @abstractmethod
    def save_window_result(self, window_id: int, payload: dict[str, Any]) -> None:
        """Store the JSON-serialisable outcome of a detection window, replacing an earlier one."""

    @abstractmethod
    def window_results(self) -> list[tuple[int, dict[str, Any]]]:
        """All stored detection outcomes as ``(window_id, payload)``, by window id."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection; further calls fail. Closing twice is harmless."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class CorrectionStore(TokenListing, ABC):
    """Record tokens and distance differences, plus dead letters; no device identity at all."""

    # Corrections of the last committed ``add_batch`` whose token was stored with another
    # d_diff: dead letters, not duplicates; ``last_conflicted`` holds their positions in its list.
    last_conflicts: int = 0
    last_conflicted: frozenset[int] = frozenset()

    _token_table = "corrections"

    @abstractmethod
    def add_batch(self, corrections: list[Correction], dead: list[DeadLetter]) -> int:
        """Store a batch in one transaction; return how many corrections were new."""

    @abstractmethod
    def lookup(self, tokens: list[bytes]) -> dict[bytes, int]:
        """``token -> d_diff`` for the given tokens that are stored; unknown tokens are absent."""

    @abstractmethod
    def count(self) -> int:
        """Number of stored corrections."""

    @abstractmethod
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Up to ``limit`` dead letters, the most recent first."""

    @abstractmethod
    def dead_letter_count(self) -> int:
        """Number of stored dead letters (distinct topic, reason and payload)."""

    @abstractmethod
    def dead_letter_messages(self) -> int:
        """Number of messages dead-lettered: the dead letters with their repeats."""

    @abstractmethod
    def dead_letter_reasons(self) -> list[tuple[str, int]]:
        """Messages dead-lettered per kind of reason (``group_reasons``), the most first."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection; further calls fail. Closing twice is harmless."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def check_limit(name: str, value: int) -> int:
    """A row count argument (``limit``, ``size``): an int >= 0."""
    if not isinstance(value, int) or value < 0:
        raise ValueError("%s must be an int >= 0, got %r" % (name, value))
    return value


def pack_values(values: tuple[int, ...]) -> bytes:
    """Values as stored: little-endian int32, the wire layout."""
    try:
        return struct.pack("<%di" % len(values), *values)
    except struct.error as err:
        raise ValueError("reading values must be int32: %r" % (values,)) from err


def stored_values(reading: Reading) -> bytes:
    """The column ``vals`` of ``reading``: its wire bytes when ingest kept them, else packed."""
    return reading.packed if reading.packed is not None else pack_values(reading.values)


def values_matrix(blobs: list[bytes]) -> npt.NDArray[np.int64]:
    """Stack packed value blobs into an ``(n, m)`` int64 array; all must have ``m`` values."""
    if not blobs:
        return np.zeros((0, 0), dtype=np.int64)
    width = len(blobs[0])
    if any(len(b) != width for b in blobs):
        widths = sorted({len(b) // 4 for b in blobs})
        raise ValueError("window mixes readings with %s values" % " and ".join(map(str, widths)))
    flat = np.frombuffer(b"".join(blobs), dtype="<i4")
    return flat.reshape(len(blobs), width // 4).astype(np.int64)


def unpack_values(blob: bytes) -> tuple[int, ...]:
    return struct.unpack("<%di" % (len(blob) // 4), blob)


def group_reasons(rows: list[tuple[Any, ...]]) -> list[tuple[str, int]]:
    """``(reason, messages)`` rows summed by kind of reason: numbers become N and a parenthesised
    hint is dropped, so 'no key for device 1 (...)' and '... device 2 (...)' are one kind,
    'no key for device N'. The most frequent first."""
    import re
    out: dict[str, int] = {}
    for reason, n in rows:
        kind = re.sub(r"\d+", "N", str(reason).split(" (", 1)[0]).strip()
        out[kind] = out.get(kind, 0) + int(n)
    return sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))


def dead_letter_digest(letter: DeadLetter) -> bytes:
    """The key that makes a dead letter unique: SHA-256 over topic, reason and the whole
    payload (through its own SHA-256, so a stored prefix gives the same key)."""
    h = hashlib.sha256()
    for part in (letter.topic.encode(), letter.reason.encode()):
        h.update(struct.pack("<I", len(part)))
        h.update(part)
    h.update(letter.sha256)
    return h.digest()


def upgrade_dead_letters(cur: Any, alter: Sequence[str], placeholder: str) -> None:
    """Schema 2 -> 3 of the ``dead_letters`` table, in the caller's transaction: add the size,
    SHA-256, repeat count and last arrival (``alter``), then keep only each payload's prefix
    and key every row by the new digest."""
    for statement in alter:
        cur.execute(statement)
    cur.execute("SELECT id, topic, payload, reason FROM dead_letters")
    sql = ("UPDATE dead_letters SET payload = ?, digest = ?, size = ?, sha256 = ?, last_at = received_at"
           " WHERE id = ?").replace("?", placeholder)
    for rid, topic, payload, reason in cur.fetchall():
        _, prefix, _, _, digest, size, sha = dead_letter_row(DeadLetter(topic, bytes(payload), reason, 0.0))
        cur.execute(sql, (prefix, digest, size, sha, rid))


def dead_letter_row(letter: DeadLetter) -> tuple[str, bytes, str, float, bytes, int, bytes]:
    """``(topic, payload prefix, reason, received_at, digest, size, sha256)`` as stored."""
    return (letter.topic, bytes(letter.payload[:DEAD_LETTER_PREFIX]), letter.reason, letter.received_at,
            dead_letter_digest(letter), letter.size, letter.sha256)


def reading_conflict(reading: Reading) -> DeadLetter:
    """The dead letter for a reading whose key is stored with different content."""
    payload = wire.encode_reading(reading.device_id, reading.boot_id, reading.seq, reading.token,
                                  reading.config_id, list(reading.values))
    return DeadLetter(reading.topic, payload, CONFLICTING_DUPLICATE, reading.received_at)


def correction_conflict(correction: Correction) -> DeadLetter:
    """The dead letter for a correction whose token is stored with a different d_diff: the
    message as it arrived (a sealed record stays sealed), when the ingest kept it.

    Otherwise (a ``Correction`` made without its message) the topic is empty and the payload
    is packed with the plain layout: a correction read back from a store has no header (device 0).
    """
    c = correction
    if c.payload:
        return DeadLetter(c.topic, c.payload, CONFLICTING_DUPLICATE, correction.received_at)
    payload = struct.pack(wire.CORRECTION, wire.VERSION, wire.KIND_CORRECTION, 0, c.device_id, c.boot_id,
                          c.seq, bytes(c.token), c.d_diff)
    return DeadLetter("", payload, CONFLICTING_DUPLICATE, correction.received_at)
