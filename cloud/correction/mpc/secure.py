"""Correction mode ``secure``: the bands predicate at band width 1, computed by two-party garbled circuits.

    a = Evaluator(dist)                        # analyst A: |x'_i - c| in quanta
    cs = Garbler(d_known, known, n, rho)       # correction server CS: d_diff of the rows it knows
    replies = cs.base_reply(a.open())          # CS -> A: base-OT replies
    u = a.extend(replies)                      # A -> CS: the IKNP matrix
    garbled = cs.garble(u)                     # CS -> A: OT corrections, CS's labels, gates, decode bits
    r = a.finish(garbled)                      # A: R, the candidate rows
    res = run_secure(d_diff, dist, rho)        # both, in-process

The predicate. A holds ``t_i = floor(|x'_i - c|)`` (quanta, clamped to ``[0, 2^32 - 2]``),
CS holds the integer ``d_i = d_diff`` and the public normal radius rho. Row i is a
candidate when

    t_i - d_i - 1 > rho      <=>      t_i >= e_i,   e_i = d_i + floor(rho) + 2,

CS clamping e_i to ``[0, 2^32 - 1]`` (below 0 every t passes, above ``2^32 - 2`` none does,
as without the clamp). This is mode bands' rule (cloud/correction/bands.py) with the
band edge replaced by ``t_i``, i.e. a band width of 1 quantum: since
``|x - c| >= |x' - c| - d_diff - 1 >= t_i - d_i - 1``, no row within rho of c is ever a
candidate, and every row with a correction record farther than ``rho + 3`` from c is one.
A row without a correction record gets ``e_i = 2^32 - 1`` (never a candidate) and CS lists
it as unknown in the clear, as mode bands does, so that A keeps its own verdict for it.

What each party learns: A learns R (one output bit per row) and which rows CS has no
record for; CS learns nothing from A (not even R). Semi-honest model: both follow the
protocol; garble.py and ot.py give the constructions. docs/privacy.md states the
leakage, docs/protocol.md the messages and their sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsense.cloud.correction.mpc import ot
from dpsense.cloud.correction.mpc.garble import (
    BITS,
    FixedKeyHash,
    Prg,
    decode,
    evaluate_compare,
    garble_compare,
    make_delta,
    value_bits,
)

T_MAX = (1 << BITS) - 2
E_MAX = (1 << BITS) - 1
_LABEL = 16
#: The largest mode-secure round message a receiver reassembles (chunks.Reassembler's
#: max_bytes): 1 GiB, the garbled message of a window of about 520,000 readings
#: (``garbled_size``), in at most 32,785 chunks of 32 KiB.
MAX_MESSAGE = 1 << 30


def threshold_offset(normal_radius: float) -> int:
    """``floor(rho) + 2``: ``t - d - 1 > rho`` <=> ``t - d >= floor(rho) + 2`` for integers t, d."""
    rho = float(normal_radius)
    if not math.isfinite(rho) or rho <= 0:
        raise ValueError("normal_radius must be finite and > 0, got %r" % (normal_radius,))
    return int(math.floor(rho)) + 2


def evaluator_inputs(dist: object) -> np.ndarray:
    """A's t_i: ``floor(dist)`` clamped to ``[0, 2^32 - 2]`` (rounding down only removes candidates)."""
    d = np.asarray(dist, dtype=float)
    if d.ndim != 1 or not np.isfinite(d).all() or (d < 0).any():
        raise ValueError("dist must be a 1-D array of finite distances >= 0")
    return np.minimum(np.floor(d), T_MAX).astype(np.uint64)


def garbler_inputs(d_known: object, known: object, n: int, normal_radius: float) -> np.ndarray:
    """CS's e_i for all n rows: ``d_i + floor(rho) + 2`` clamped; ``2^32 - 1`` where no record is known."""
    k = threshold_offset(normal_radius)
    d = np.asarray(d_known, dtype=float)
    pos = np.asarray(known, dtype=np.intp)
    if d.shape != pos.shape or (pos.size and (pos.min() < 0 or pos.max() >= n)):
        raise ValueError("d_known and known must match and name rows in [0, %d)" % n)
    if not np.isfinite(d).all() or (d != np.floor(d)).any():
        raise ValueError("d_diff values must be finite integers")
    e = np.full(n, E_MAX, dtype=np.int64)
    e[pos] = np.clip(d.astype(np.int64) + k, 0, E_MAX)
    return e.astype(np.uint64)


def candidates(d_diff: object, dist: object, normal_radius: float) -> np.ndarray:
    """The plaintext predicate (the oracle the tests compare with): positions with ``t_i >= e_i``."""
    d = np.asarray(d_diff, dtype=float)
    t = evaluator_inputs(dist)
    e = garbler_inputs(d, np.arange(d.size), d.size, normal_radius)
    return np.flatnonzero(t >= e)


def garbled_size(n: int) -> int:
    """Bytes of CS's ``garbled`` message for n rows: y, CS's labels, carry-in, gates, decode bits."""
    m = BITS * n
    return _LABEL * (m + m + n + 2 * m) + (n + 7) // 8


class Evaluator:
    """Analyst A: evaluator of the garbled circuit and receiver of the extended OTs."""

    def __init__(self, dist: object, prg: Prg | None = None) -> None:
        self.t = evaluator_inputs(dist)
        self.n = int(self.t.size)
        self.r = value_bits(self.t).reshape(-1)        # OT j = bit k of row i at j = k n + i
        self._prg = prg or Prg()
        self._base: ot.BaseOtSender | None = None
        self._rows: np.ndarray | None = None

    def open(self) -> bytes:
        """Base-OT sender's public element (A -> CS)."""
        self._base = ot.BaseOtSender(self._prg)
        return ot.element_bytes(self._base.public)

    def extend(self, replies: bytes) -> bytes:
        """From CS's KAPPA base-OT replies: the IKNP matrix u (A -> CS)."""
        if self._base is None:
            raise ValueError("extend before open")
        if len(replies) != ot.KAPPA * ot.ELEMENT_BYTES:
            raise ValueError("base-OT replies must be %d elements" % ot.KAPPA)
        b = [ot.element_of(replies[i:i + ot.ELEMENT_BYTES])
             for i in range(0, len(replies), ot.ELEMENT_BYTES)]
        k0, k1 = self._base.keys(b)
        return self.extend_with_keys(k0, k1)

    def extend_with_keys(self, k0: list[bytes], k1: list[bytes]) -> bytes:
        """The extension from given base-OT keys (tests replace the base OTs by their ideal outputs)."""
        u, self._rows = ot.ext_receive(k0, k1, self.r)
        return u.tobytes()

    def finish(self, garbled: bytes) -> np.ndarray:
        """From CS's garbled message: the positions of R."""
        return np.flatnonzero(self.output_bits(garbled))

    def output_bits(self, garbled: bytes) -> np.ndarray:
        if self._rows is None:
            raise ValueError("finish before extend")
        n, m = self.n, BITS * self.n
        if len(garbled) != garbled_size(n):
            raise ValueError("garbled message: %d bytes, expected %d for %d rows"
                             % (len(garbled), garbled_size(n), n))
        parts = split_garbled(garbled, n)
        x = ot.ext_finish(self._rows, self.r, parts.y).reshape(BITS, n, 2)
        out = evaluate_compare(x, parts.z_active, parts.c_active, parts.tables, FixedKeyHash())
        return decode(out, parts.decode_bits)


@dataclass(frozen=True, eq=False)
class GarbledParts:
    y: np.ndarray
    z_active: np.ndarray
    c_active: np.ndarray
    tables: np.ndarray
    decode_bits: np.ndarray


def split_garbled(blob: bytes, n: int) -> GarbledParts:
    m = BITS * n
    a = np.frombuffer(blob, dtype=np.uint8)
    o = 0

    def labels(count: int) -> np.ndarray:
        nonlocal o
        v = a[o:o + _LABEL * count].view("<u8").reshape(count, 2)
        o += _LABEL * count
        return v

    y = labels(m)
    z = labels(m).reshape(BITS, n, 2)
    c = labels(n)
    tables = labels(2 * m).reshape(BITS, n, 2, 2)
    bits = np.unpackbits(a[o:], bitorder="little")[:n]
    return GarbledParts(y, z, c, tables, bits)


class Garbler:
    """Correction server CS: garbler, and sender of the extended OTs (base-OT receiver)."""

    def __init__(self, d_known: object, known: object, n: int, normal_radius: float,
                 prg: Prg | None = None) -> None:
        self.n = int(n)
        self.e = garbler_inputs(d_known, known, self.n, normal_radius)
        self._prg = prg or Prg()
        self.s = self._prg.bits(ot.KAPPA)
        self._base: ot.BaseOtReceiver | None = None
        self._a = 0
        self._keys: list[bytes] | None = None

    def base_reply(self, a_pub: bytes) -> bytes:
        """From A's public element: the KAPPA base-OT replies (CS -> A)."""
        self._a = ot.element_of(a_pub)
        self._base = ot.BaseOtReceiver(self.s, self._prg)
        b = self._base.reply(self._a)
        self._keys = self._base.keys(self._a, b)
        return b"".join(ot.element_bytes(x) for x in b)

    def use_keys(self, keys: list[bytes]) -> None:
        """Base-OT outputs given directly (tests: the ideal base OT)."""
        self._keys = list(keys)

    def garble(self, u: bytes) -> bytes:
        """From A's IKNP matrix: the garbled message (CS -> A)."""
        if self._keys is None:
            raise ValueError("garble before the base OTs")
        m = BITS * self.n
        mp = ot.padded(m)
        if len(u) != ot.KAPPA * mp // 8:
            raise ValueError("the IKNP matrix must be %d bytes for %d rows" % (ot.KAPPA * mp // 8, self.n))
        h = FixedKeyHash()
        delta = make_delta(self._prg)
        umat = np.frombuffer(u, dtype=np.uint8).reshape(ot.KAPPA, mp // 8)
        x0, y = ot.ext_send(self._keys, self.s, umat, delta, m, h)
        g = garble_compare(x0.reshape(BITS, self.n, 2), self.e, delta, self._prg, h)
        return b"".join((y.tobytes(), g.z_active.tobytes(), g.c_active.tobytes(), g.tables.tobytes(),
                         np.packbits(g.decode_bits, bitorder="little").tobytes()))


@dataclass(frozen=True, eq=False)
class SecureResult:
    """One in-process round: R and the messages that crossed (for sizes and transcript tests)."""

    r: np.ndarray
    to_cs: list[bytes]
    to_analyst: list[bytes]


def run_secure(d_diff: object, dist: object, normal_radius: float, seed_a: bytes | None = None,
               seed_cs: bytes | None = None) -> SecureResult:
    """Both parties in one process, every row known to CS (experiments, benchmarks, tests).

    Notes
    -----
    128 base OTs (about 2 x 128 modular exponentiations each side), then per row 32 OTs,
    32 AND gates (two AES-based hashes each for the evaluator, four for the garbler) and
    ``32 x 16 x 5 + 16`` bytes on the wire (u and y 16 bytes per OT, CS's labels 16 per bit,
    gates 32 per bit, the carry-in label).
    """
    d = np.asarray(d_diff, dtype=float)
    a = Evaluator(dist, Prg(seed_a) if seed_a is not None else None)
    if a.n != d.size:
        raise ValueError("d_diff has %d rows but dist %d" % (d.size, a.n))
    cs = Garbler(d, np.arange(d.size), d.size, normal_radius, Prg(seed_cs) if seed_cs is not None else None)
    opening = a.open()
    replies = cs.base_reply(opening)
    u = a.extend(replies)
    garbled = cs.garble(u)
    return SecureResult(r=a.finish(garbled), to_cs=[opening, u], to_analyst=[replies, garbled])
