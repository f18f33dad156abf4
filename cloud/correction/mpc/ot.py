"""Oblivious transfer for correction mode ``secure``: 128 base OTs, then IKNP correlated OT extension.

    # base OTs (Chou, Orlandi, Latincon 2015, "simplest OT"), 128 at once
    snd = BaseOtSender(prg)                 # the extension receiver A plays the base sender
    rcv = BaseOtReceiver(choices, prg)      # the extension sender CS plays the base receiver
    b = rcv.reply(snd.public)               # CS -> A: 128 group elements
    k0, k1 = snd.keys(b)                    # A: both keys of every base OT
    ks = rcv.keys(snd.public)               # CS: the chosen key of every base OT

    # IKNP extension (Ishai, Kilian, Nissim, Petrank 2003) with correlated messages
    # (Asharov, Lindell, Schneider, Zohner 2013): the sender's pairs are (x0_j, x0_j ^ Delta).
    u, labels = ext_receive(k0, k1, r)      # A: u to CS, labels = x0_j ^ r_j Delta once y arrives
    x0, y = ext_send(ks, s, u, delta)       # CS: y to A
    labels = ext_finish(k0-derived t, r, y) # A

Base OTs: a group G of prime order q with generator g: the multiplicative group of
quadratic residues modulo the 2048-bit safe prime of RFC 3526 (group 14), g = 2 (a
residue since p = 7 mod 8), exponents of ``EXPONENT_BITS`` bits. The sender publishes
``A = g^a``; for choice c the receiver sends ``B = g^b`` (c = 0) or ``A g^b`` (c = 1)
and derives ``SHA-256(A, B, A^b)``; the sender derives ``k0 = SHA-256(A, B, B^a)`` and
``k1 = SHA-256(A, B, (B / A)^a)``. B is uniform in G whatever c, so the sender learns
nothing about c; without b the receiver cannot compute the other key (CDH in G).
The exponentiations are Python's ``pow``: the ``cryptography`` package offers finite-field
Diffie-Hellman only as deprecated, and X25519 without the point addition that ``A g^b`` needs.
``pow`` is not constant-time; the exponents are fresh per round and never reused.

Extension: the 128 base keys seed AES-CTR streams (:class:`~dpsense.cloud.correction.mpc.garble.Prg`).
Row j of the 128 x m bit matrix held by CS is ``q_j = t_j ^ r_j s``, with s CS's 128 base
choices; CS sets ``x0_j = H(q_j, j)`` and sends ``y_j = H(q_j, j) ^ H(q_j ^ s, j) ^ Delta``;
A computes ``H(t_j, j) ^ r_j y_j = x0_j ^ r_j Delta``. H is the fixed-key hash of
garble.py in the OT tweak domain. Semi-honest security (the setting of this mode).
"""
from __future__ import annotations

import hashlib

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from dpsense.cloud.correction.mpc.garble import DOMAIN_OT, FixedKeyHash, Prg, tweaks

#: RFC 3526, 2048-bit MODP group (id 14): p = 2^2048 - 2^1984 - 1 + 2^64 (floor(2^1918 pi) + 124476).
P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD1"
    "29024E088A67CC74020BBEA63B139B22514A08798E3404DD"
    "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245"
    "E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3D"
    "C2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"
    "83655D23DCA3AD961C62F356208552BB9ED529077096966D"
    "670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9"
    "DE2BCBF6955817183995497CEA956AE515D2261898FA0510"
    "15728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)
Q = (P - 1) // 2
G = 2
#: Exponent size: RFC 3526 Sect. 8 estimates group 14 at 110-160 bits of strength and
#: asks for exponents of twice that; 320 bits is the upper end.
EXPONENT_BITS = 320
ELEMENT_BYTES = 256
KAPPA = 128                   # base OTs = the computational security parameter


def element_bytes(x: int) -> bytes:
    return x.to_bytes(ELEMENT_BYTES, "big")


def jacobi(a: int, n: int) -> int:
    """The Jacobi symbol (a / n) for odd n > 0 (binary algorithm, Cohen, Algorithm 1.4.10);
    for prime n it is the Legendre symbol, 1 exactly for the nonzero quadratic residues."""
    a %= n
    result = 1
    while a:
        while not a & 1:
            a >>= 1
            if n & 7 in (3, 5):
                result = -result
        a, n = n, a
        if a & 3 == 3 and n & 3 == 3:
            result = -result
        a %= n
    return result if n == 1 else 0


def element_of(b: bytes) -> int:
    """A group element from the wire; ValueError unless it is a quadratic residue in [2, p - 2]
    (for the safe prime p these form the order-q subgroup)."""
    if len(b) != ELEMENT_BYTES:
        raise ValueError("a group element is %d bytes" % ELEMENT_BYTES)
    x = int.from_bytes(b, "big")
    if not 1 < x < P - 1 or jacobi(x, P) != 1:
        raise ValueError("not an element of the order-q subgroup")
    return x


def _exponent(prg: Prg) -> int:
    return 1 + prg.below((1 << EXPONENT_BITS) - 1)


def _kdf(a: int, b: int, shared: int) -> bytes:
    return hashlib.sha256(element_bytes(a) + element_bytes(b) + element_bytes(shared)).digest()[:16]


class BaseOtSender:
    """Base OT sender: one public ``A = g^a`` for all KAPPA transfers."""

    def __init__(self, prg: Prg) -> None:
        self._a = _exponent(prg)
        self.public = pow(G, self._a, P)
        self._aa_inv = pow(pow(self.public, self._a, P), -1, P)

    def keys(self, replies: list[int]) -> tuple[list[bytes], list[bytes]]:
        """(k0, k1) of every transfer from the receiver's B values."""
        k0, k1 = [], []
        for b in replies:
            ba = pow(b, self._a, P)
            k0.append(_kdf(self.public, b, ba))
            k1.append(_kdf(self.public, b, ba * self._aa_inv % P))
        return k0, k1


class BaseOtReceiver:
    """Base OT receiver with KAPPA choice bits."""

    def __init__(self, choices: np.ndarray, prg: Prg) -> None:
        self.choices = [int(c) for c in choices]
        if any(c not in (0, 1) for c in self.choices):
            raise ValueError("base OT choices are bits")
        self._b = [_exponent(prg) for _ in self.choices]

    def reply(self, a: int) -> list[int]:
        return [pow(G, b, P) * (a if c else 1) % P for b, c in zip(self._b, self.choices)]

    def keys(self, a: int, replies: list[int]) -> list[bytes]:
        return [_kdf(a, bb, pow(a, b, P)) for b, bb in zip(self._b, replies)]


def _stream(key: bytes, nbytes: int) -> np.ndarray:
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    return np.frombuffer(enc.update(bytes(nbytes)), dtype=np.uint8)


def padded(m: int) -> int:
    """OT count rounded up to whole 128-row blocks (the transpose works on 128 x 128 bits)."""
    return -(-m // KAPPA) * KAPPA


def transpose(cols: np.ndarray) -> np.ndarray:
    """KAPPA x m bit matrix (rows of m/8 bytes) -> m x KAPPA (rows of 16 bytes, as ``(m, 2)`` uint64).

    Each 8 x 8 bit block (8 base OTs x 8 OTs) is one uint64 with bit ``8 r + c`` = row r,
    column c, transposed by three delta swaps (Warren, Hacker's Delight, 7-3); the blocks
    are then put in place by one byte-level transpose.
    """
    m8 = cols.shape[1]
    u = np.uint64
    x = np.ascontiguousarray(cols.reshape(16, 8, m8).transpose(0, 2, 1)).view("<u8").reshape(16, m8)
    t = (x ^ (x >> u(7))) & u(0x00AA00AA00AA00AA)
    x = x ^ t ^ (t << u(7))
    t = (x ^ (x >> u(14))) & u(0x0000CCCC0000CCCC)
    x = x ^ t ^ (t << u(14))
    t = (x ^ (x >> u(28))) & u(0x00000000F0F0F0F0)
    x = x ^ t ^ (t << u(28))
    out = np.ascontiguousarray(x.view(np.uint8).reshape(16, m8, 8).transpose(1, 2, 0)).reshape(m8 * 8, 16)
    return out.view("<u8").reshape(-1, 2)


def ext_receive(k0: list[bytes], k1: list[bytes], r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A: the matrix u (KAPPA x m/8 bytes) for CS, and the rows t_j ``(m, 2)`` kept for :func:`ext_finish`."""
    m = padded(r.size)
    rp = np.zeros(m, dtype=np.uint8)
    rp[:r.size] = r
    rbytes = np.packbits(rp, bitorder="little")
    t = np.empty((KAPPA, m // 8), dtype=np.uint8)
    u = np.empty((KAPPA, m // 8), dtype=np.uint8)
    for i in range(KAPPA):
        t[i] = _stream(k0[i], m // 8)
        u[i] = t[i] ^ _stream(k1[i], m // 8) ^ rbytes
    return u, transpose(t)


def ext_send(ks: list[bytes], s: np.ndarray, u: np.ndarray, delta: np.ndarray, m: int,
             h: FixedKeyHash | None = None) -> tuple[np.ndarray, np.ndarray]:
    """CS: from its base keys ``ks`` (choices s) and A's u: the 0-labels x0 ``(m, 2)`` and y ``(m, 2)``."""
    h = h or FixedKeyHash()
    mp = padded(m)
    if u.shape != (KAPPA, mp // 8):
        raise ValueError("u must be %d x %d bytes, got %s" % (KAPPA, mp // 8, u.shape))
    q = np.empty((KAPPA, mp // 8), dtype=np.uint8)
    for i in range(KAPPA):
        q[i] = _stream(ks[i], mp // 8) ^ (u[i] if s[i] else 0)
    rows = transpose(q)[:m]
    s128 = np.frombuffer(np.packbits(np.asarray(s, dtype=np.uint8), bitorder="little").tobytes(),
                         dtype="<u8").reshape(1, 2)
    tw = tweaks(0, m, DOMAIN_OT)
    x0 = h(rows, tw)
    y = x0 ^ h(rows ^ s128, tw) ^ delta
    return x0, y


def ext_finish(t: np.ndarray, r: np.ndarray, y: np.ndarray, h: FixedKeyHash | None = None) -> np.ndarray:
    """A: its labels ``x0_j ^ r_j Delta`` from its rows t_j and CS's y."""
    h = h or FixedKeyHash()
    m = r.size
    if y.shape != (m, 2):
        raise ValueError("y must hold %d labels, got %s" % (m, y.shape))
    mask = np.uint64(0) - np.asarray(r, dtype=np.uint64).reshape(-1, 1)
    return h(t[:m], tweaks(0, m, DOMAIN_OT)) ^ (mask & y)
