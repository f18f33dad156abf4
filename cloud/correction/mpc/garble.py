"""Garbled comparison for correction mode ``secure``: half-gates with free-XOR, fixed-key AES.

    prg = Prg(seed)                                             # randomness, injected
    g = garble_compare(x0, z, delta, prg)                       # garbler (CS)
    w = evaluate_compare(x_active, g.z_active, g.c_active, g.tables)   # evaluator (A)
    bits = decode(w, g.decode_bits)                             # [x >= z] per row

One circuit per row compares the evaluator's L-bit unsigned x with the garbler's L-bit
unsigned z and outputs ``[x >= z]``. It is the carry chain of ``x + ~z + 1`` (x >= z
exactly when the addition carries out of the top bit), one AND gate per bit
(Kolesnikov, Sadeghi, Schneider 2009):

    c_0 = 1,  c_{k+1} = c_k ^ ((x_k ^ c_k) & (~z_k ^ c_k)),  out = c_L

so L AND gates and no other non-free gate per row; XOR and NOT cost nothing (free-XOR:
every wire's 1-label is its 0-label XOR one global secret Delta whose lowest bit is 1,
and the garbler feeds ``~z`` directly). Labels are 128-bit, held as ``(n, 2)`` uint64
arrays; the lowest bit of a label is its pointer bit (point-and-permute).

AND gates are garbled with half-gates (Zahur, Rosulek, Evans, Eurocrypt 2015): two
ciphertexts per gate. The gate hash is the tweakable circular-correlation-robust hash of
Guo, Katz, Wang, Yu (IEEE S&P 2020) from a fixed-key permutation pi = AES-128 under a
public key: ``H(x, i) = pi(pi(x) ^ i) ^ pi(x)``. Every gate of a round has its own tweak
(gate number, and a domain word so that gate and OT tweaks never meet). All rows of one
bit level are hashed with one ``encryptor.update`` call.

Everything here is pure computation on numpy arrays; the randomness is a ``Prg``: AES-128
in counter mode from a 16-byte seed, the seed from ``os.urandom`` unless a test gives one.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

#: Public fixed key of the garbling permutation (anyone may know it; the hash's security
#: rests on AES behaving as a random permutation under a key the parties did not choose).
FIXED_KEY = hashlib.sha256(b"dpsense secure correction: fixed-key AES for garbling").digest()[:16]
#: Tweak domains (high word of the tweak): garbled gates and correlated-OT hashing.
DOMAIN_GATE = 0
DOMAIN_OT = 1 << 63
#: Bits per compared value.
BITS = 32

_U64 = np.dtype("<u8")


class Prg:
    """AES-128-CTR keystream from a 16-byte seed (``os.urandom(16)`` when None)."""

    def __init__(self, seed: bytes | None = None) -> None:
        if seed is None:
            seed = os.urandom(16)
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != 16:
            raise ValueError("a Prg seed is 16 bytes")
        self._enc = Cipher(algorithms.AES(bytes(seed)), modes.CTR(bytes(16))).encryptor()

    def bytes(self, n: int) -> bytes:
        return self._enc.update(bytes(n))

    def labels(self, n: int) -> np.ndarray:
        """``n`` uniformly random 128-bit labels, shape ``(n, 2)``."""
        out = np.empty((n + 1, 2), dtype=_U64)
        if n:                                   # an empty view cannot be cast to bytes
            self._enc.update_into(np.zeros((n, 2), dtype=_U64).data.cast("B"), out.data.cast("B"))
        return out[:n]

    def bits(self, n: int) -> np.ndarray:
        """``n`` uniform bits as uint8 0/1."""
        return np.unpackbits(np.frombuffer(self.bytes((n + 7) // 8), dtype=np.uint8), bitorder="little")[:n].copy()

    def below(self, bound: int) -> int:
        """A uniform integer in ``[0, bound)`` (rejection sampling)."""
        nbytes = (bound.bit_length() + 7) // 8 + 8
        while True:
            v = int.from_bytes(self.bytes(nbytes), "big")
            limit = (1 << (8 * nbytes)) - (1 << (8 * nbytes)) % bound
            if v < limit:
                return v % bound


class FixedKeyHash:
    """``H(x, i) = pi(pi(x) ^ i) ^ pi(x)`` over arrays of 128-bit blocks (pi = AES-128, fixed key)."""

    def __init__(self, key: bytes = FIXED_KEY) -> None:
        self._enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()

    def pi(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=_U64)
        n = x.shape[0]
        # update_into writes in place; it asks for one block of room beyond the input.
        out = np.empty((n + 1, 2), dtype=_U64)
        if n:
            self._enc.update_into(x.data.cast("B"), out.data.cast("B"))
        return out[:n]

    def __call__(self, x: np.ndarray, tweaks: np.ndarray) -> np.ndarray:
        px = self.pi(x)
        return self.pi(px ^ tweaks) ^ px


def tweaks(first: int, n: int, domain: int = DOMAIN_GATE) -> np.ndarray:
    """Tweaks ``first .. first + n - 1`` in ``domain``, shape ``(n, 2)``."""
    t = np.empty((n, 2), dtype=_U64)
    t[:, 0] = np.arange(first, first + n, dtype=_U64)
    t[:, 1] = domain
    return t


def lsb(labels: np.ndarray) -> np.ndarray:
    """Pointer bits (lowest bit of each label) as uint64 0/1, shape ``(n, 1)``."""
    return (labels[:, :1] & np.uint64(1))


def _mask(bits: np.ndarray) -> np.ndarray:
    """0/1 per row -> all-zero or all-one 128-bit masks, shape ``(n, 1)`` broadcastable."""
    return (np.uint64(0) - bits.astype(_U64).reshape(-1, 1))


def make_delta(prg: Prg) -> np.ndarray:
    """The free-XOR offset Delta, shape ``(1, 2)``, lowest bit 1 (so 0- and 1-labels differ in pointer)."""
    d = prg.labels(1)
    d[0, 0] |= np.uint64(1)
    return d


@dataclass(frozen=True, eq=False)
class Garbled:
    """What the garbler sends (and keeps) for n rows of the comparison.

    ``tables``: shape ``(BITS, n, 2, 2)``: per level k and row, the half-gate ciphertexts
    T_G and T_E. ``z_active`` ``(BITS, n, 2)`` are the labels of the garbler's bits
    ``~z``, ``c_active`` ``(n, 2)`` the label of the constant carry-in 1; ``decode_bits``
    ``(n,)`` the pointer bits of each output's 0-label. ``out0`` stays with the garbler.
    """

    tables: np.ndarray
    z_active: np.ndarray
    c_active: np.ndarray
    decode_bits: np.ndarray
    out0: np.ndarray


def value_bits(v: np.ndarray, bits: int = BITS) -> np.ndarray:
    """Bits of unsigned values, least significant first: shape ``(bits, n)`` uint8."""
    u = np.asarray(v, dtype=np.uint64)
    return ((u[None, :] >> np.arange(bits, dtype=np.uint64)[:, None]) & np.uint64(1)).astype(np.uint8)


def garble_compare(x0: np.ndarray, z: np.ndarray, delta: np.ndarray, prg: Prg,
                   h: FixedKeyHash | None = None, gate0: int = 0) -> Garbled:
    """Garble ``[x >= z]`` for n rows.

    ``x0`` ``(BITS, n, 2)``: 0-labels of the evaluator's input bits (from the correlated
    OT); ``z`` ``(n,)``: the garbler's values in ``[0, 2^BITS)``; ``delta`` from
    :func:`make_delta`; ``gate0``: the tweak of the first gate (rounds must not share
    tweaks under one Delta).
    """
    h = h or FixedKeyHash()
    nbits, n = x0.shape[0], x0.shape[1]
    zb = 1 - value_bits(z, nbits)                    # the circuit's input is ~z
    z0 = prg.labels(nbits * n).reshape(nbits, n, 2)
    z_active = z0 ^ (_mask(zb.reshape(-1)).reshape(nbits, n, 1) & delta)
    c0 = prg.labels(n)
    c_active = c0 ^ delta                            # carry-in is the constant 1
    tables = np.empty((nbits, n, 2, 2), dtype=_U64)
    for k in range(nbits):
        a0 = x0[k] ^ c0                              # wire x_k ^ c_k
        b0 = z0[k] ^ c0                              # wire ~z_k ^ c_k
        g0, tg, te = _garble_and(a0, b0, delta, h, gate0 + 2 * k * n, n)
        tables[k, :, 0] = tg
        tables[k, :, 1] = te
        c0 = c0 ^ g0                                 # c_{k+1} = c_k ^ (a & b): the majority
    return Garbled(tables=tables, z_active=z_active, c_active=c_active,
                   decode_bits=lsb(c0).reshape(-1).astype(np.uint8), out0=c0)


def _garble_and(a0: np.ndarray, b0: np.ndarray, delta: np.ndarray, h: FixedKeyHash, tw: int,
                n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half-gates garbling of n AND gates: (0-label of the output, T_G, T_E)."""
    pa, pb = lsb(a0), lsb(b0)
    a1, b1 = a0 ^ delta, b0 ^ delta
    t_g, t_e = tweaks(tw, n), tweaks(tw + n, n)
    hs = h(np.concatenate([a0, a1, b0, b1]), np.concatenate([t_g, t_g, t_e, t_e]))
    ha0, ha1, hb0, hb1 = hs[:n], hs[n:2 * n], hs[2 * n:3 * n], hs[3 * n:]
    tg = ha0 ^ ha1 ^ (_mask(pb) & delta)             # generator half: a & p_b
    wg0 = ha0 ^ (_mask(pa) & tg)
    te = hb0 ^ hb1 ^ a0                              # evaluator half: a & (b ^ p_b)
    we0 = hb0 ^ (_mask(pb) & (te ^ a0))
    return wg0 ^ we0, tg, te


def evaluate_compare(x: np.ndarray, z: np.ndarray, c: np.ndarray, tables: np.ndarray,
                     h: FixedKeyHash | None = None, gate0: int = 0) -> np.ndarray:
    """Evaluate with the active labels: x ``(BITS, n, 2)``, z ``(BITS, n, 2)``, carry-in c ``(n, 2)``.

    Returns the output labels ``(n, 2)``.
    """
    h = h or FixedKeyHash()
    nbits, n = x.shape[0], x.shape[1]
    for k in range(nbits):
        a = x[k] ^ c
        b = z[k] ^ c
        sa, sb = lsb(a), lsb(b)
        t_g, t_e = tweaks(gate0 + 2 * k * n, n), tweaks(gate0 + 2 * k * n + n, n)
        hs = h(np.concatenate([a, b]), np.concatenate([t_g, t_e]))
        tg, te = tables[k, :, 0], tables[k, :, 1]
        wg = hs[:n] ^ (_mask(sa) & tg)
        we = hs[n:] ^ (_mask(sb) & (te ^ a))
        c = c ^ wg ^ we
    return c


def decode(out: np.ndarray, decode_bits: np.ndarray) -> np.ndarray:
    """Output bits from output labels and the garbler's decode bits (uint8 0/1)."""
    return (lsb(out).reshape(-1).astype(np.uint8) ^ np.asarray(decode_bits, dtype=np.uint8))
