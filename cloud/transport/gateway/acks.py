"""Acknowledgements to a serial board (docs/protocol.md 2.1): which records the cloud
has committed, and the answers to the board's polls.

    acks = Acknowledgements()
    acks.track_record(mid_r, token, wire.KIND_READING)       # ids of the two publishes
    acks.track_record(mid_c, token, wire.KIND_CORRECTION)
    acks.track_key(boot, seq, token)                         # the record's key in the acks
    acks.broker_acked(mid_r); acks.broker_acked(mid_c)       # the PUBACKs: counted only
    acks.committed(wire.KIND_READING, boot, [(seq, seq)])    # the cloud's acknowledgements
    acks.committed(wire.KIND_CORRECTION, boot, [(seq, seq)]) #   (docs/protocol.md 3.1)
    acks.poll(poll_count(b"!"))                              # the board asks
    acks.take_replies()                                      # b"!<token hex>\\n!\\n"

A record is acknowledged to the board once the cloud has committed both of its records
(the analyst's and the correction server's ingest each say so on the device's
acknowledgement topic; a broker's PUBACK is not enough, as the broker may still lose the
message), and only when the board polls: ``!N`` gets at most N acknowledgement lines, a bare ``!`` ACKS_PER_POLL, because
the micro:bit's UART holds only 63 unread bytes. A record the board resent while its
acknowledgement waited is acknowledged once: duplicates would crowd the few lines a
poll carries.
"""
from __future__ import annotations

import threading
from collections import deque

ACKS_PER_POLL = 2         # 2 x 18 bytes + "!\n" + a stimulus row stay within the micro:bit's 63
MAX_ACKS_PER_POLL = 99    # a poll "!N" asks for up to N (a board with room for them)
# Record keys remembered for the cloud's acknowledgements: more than any board's ring holds, so
# an acknowledgement of a resend (the board lost the first answer) is matched again.
MAX_KEYS = 4096

Record = tuple[bytes, int]    # (token, kind) of one message of a record


def poll_count(line: bytes) -> int | None:
    """How many acknowledgements the poll ``line`` asks for, or None if it is not a poll."""
    if line[:1] != b"!" or len(line) > 3 or (len(line) > 1 and not line[1:].isdigit()):
        return None
    n = int(line[1:]) if len(line) > 1 else ACKS_PER_POLL
    return min(n, MAX_ACKS_PER_POLL)


class Acknowledgements:
    """The broker's acknowledgements, by message id, turned into poll answers.

    ``broker_acked`` may come from another thread than the rest, and even before the
    publish that it acknowledges has returned its message id (then ``track_*`` settles it).
    ``acked`` counts the broker's acknowledgements, ``replies`` the records acknowledged
    to the board."""

    def __init__(self) -> None:
        self.acked = 0
        self.replies = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, Record | None] = {}    # message id -> record, None: status
        self._early: set[int] = set()               # acknowledged before it was tracked
        self._halves: dict[bytes, set[int]] = {}    # token -> kinds acknowledged so far
        self._ready: deque[bytes] = deque()         # tokens for the board's next polls
        self._queued: set[bytes] = set()            # the tokens in _ready
        self._replies: deque[bytes] = deque()       # lines to write to the board now
        self._keys: dict[tuple[int, int], bytes] = {}   # (boot, seq) -> first token, the newest MAX_KEYS keys
        self._open: set[bytes] = set()              # records relayed, not yet acknowledged to the board

    def track_record(self, mid: object, token: bytes, kind: int) -> None:
        """Message ``mid`` carried the ``kind`` message of the record ``token``."""
        with self._lock:
            self._open.add(token)
        self._track(mid, (token, kind))

    def track_status(self, mid: object) -> None:
        """Message ``mid`` carried a status message."""
        self._track(mid, None)

    def track_key(self, boot_id: int, seq: int, token: bytes) -> bool:
        """A record's key, by which the cloud's acknowledgements name it. The first token relayed
        under a key keeps it: the cloud stores the first record of a (boot, seq) and its
        acknowledgement names that one; a later record with another token under the same key is
        a conflict the cloud dead-letters and is never acknowledged to the board. False for
        such a conflict."""
        with self._lock:
            have = self._keys.get((boot_id, seq))
            if have is not None:
                return have == token
            self._keys[(boot_id, seq)] = token
            if len(self._keys) > MAX_KEYS:
                del self._keys[next(iter(self._keys))]
            return True

    def committed(self, of: int, boot_id: int, ranges: list[tuple[int, int]]) -> None:
        """The cloud committed the ``of`` records (a wire kind) of ``boot_id`` in ``ranges``."""
        with self._lock:
            for (boot, seq), token in self._keys.items():
                if boot == boot_id and any(first <= seq <= last for first, last in ranges):
                    self._half((token, of))

    def broker_acked(self, mid: int | None = None) -> None:
        """The broker acknowledged message ``mid`` (None: a publish whose id is not tracked):
        counted, nothing more (the record waits for the cloud's commit)."""
        with self._lock:
            self.acked += 1
            if mid is None:
                return
            if mid not in self._waiting:
                self._early.add(mid)
                return
            self._waiting.pop(mid)

    def all_acked(self, published: int) -> bool:
        """Every publish acknowledged by the broker and every record relayed acknowledged to
        the board (committed by the cloud, answered to a poll), resends included."""
        with self._lock:
            return self.acked >= published and not self._open

    def poll(self, n: int) -> None:
        """The board polled for up to ``n`` acknowledgements: queue them and the end line."""
        with self._lock:
            for _ in range(min(n, len(self._ready))):
                token = self._ready.popleft()
                self._queued.discard(token)
                self._open.discard(token)
                self._replies.append(b"!" + token.hex().encode("ascii") + b"\n")
                self.replies += 1
            self._replies.append(b"!\n")

    def take_replies(self) -> bytes:
        """The lines to write to the board now (answers to its polls), oldest first."""
        with self._lock:
            out = b"".join(self._replies)
            self._replies.clear()
        return out

    def _track(self, mid: object, record: Record | None) -> None:
        if not isinstance(mid, int):
            return
        with self._lock:
            if mid in self._early:
                self._early.discard(mid)
            else:
                self._waiting[mid] = record

    def _half(self, record: Record) -> None:
        """Count one committed half; a whole record is queued for the board's next poll."""
        token, kind = record
        kinds = self._halves.setdefault(token, set())
        kinds.add(kind)
        if len(kinds) < 2:
            return
        del self._halves[token]
        if token not in self._queued:
            self._queued.add(token)
            self._ready.append(token)
