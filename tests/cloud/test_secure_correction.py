"""Correction mode secure: known answers, the predicate on random and edge inputs, and transcripts.

The transcript tests compare, position by position, the frequency of bits a party sees
over N independent runs for two inputs of the other party that give the same R. By
Hoeffding, a difference of two independent means of N bits reaches 0.4 with probability
at most 2 exp(-N 0.4^2 / 2); with N = 300 and at most 2^15 positions that is below 3e-6
(the stated false-failure rate of each test). Each test also runs a deliberately leaky
variant of the protocol and checks that the same comparison catches it.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from dpsense.cloud.correction.mpc import ot
from dpsense.cloud.correction.bands import band_candidates
from dpsense.cloud.correction.mpc.garble import (
    BITS,
    FIXED_KEY,
    FixedKeyHash,
    Prg,
    decode,
    evaluate_compare,
    garble_compare,
    make_delta,
    tweaks,
    value_bits,
)
from dpsense.cloud.correction.mpc.secure import (
    E_MAX,
    T_MAX,
    Evaluator,
    Garbler,
    candidates,
    garbled_size,
    run_secure,
    threshold_offset,
)

RUNS = 300
BOUND = 0.4


def seed(i: int, tag: int = 0) -> bytes:
    return bytes([tag]) + i.to_bytes(15, "little")


# -- known answers -----------------------------------------------------------------------------

def test_aes_matches_fips197_vector():
    # FIPS-197 Appendix C.1: AES-128, key 000102..0f, plaintext 00112233..ff.
    h = FixedKeyHash(bytes(range(16)))
    block = np.frombuffer(bytes.fromhex("00112233445566778899aabbccddeeff"), dtype="<u8").reshape(1, 2)
    assert h.pi(block).tobytes().hex() == "69c4e0d86a7b0430d8cdb78070b4c55a"


def test_hash_is_pi_of_pi_xor_tweak_xor_pi():
    # H(x, i) = pi(pi(x) ^ i) ^ pi(x), computed here with a separate AES object as the oracle.
    enc = Cipher(algorithms.AES(FIXED_KEY), modes.ECB()).encryptor()
    x = bytes(range(16))
    i = (5).to_bytes(8, "little") + bytes(8)
    px = enc.update(x)
    want = bytes(a ^ b for a, b in zip(enc.update(bytes(a ^ b for a, b in zip(px, i))), px))
    got = FixedKeyHash()(np.frombuffer(x, dtype="<u8").reshape(1, 2), tweaks(5, 1))
    assert got.tobytes() == want


def test_fixed_key_is_derived_from_its_label():
    assert FIXED_KEY == hashlib.sha256(b"dpsense secure correction: fixed-key AES for garbling").digest()[:16]


def test_prg_is_aes_ctr_of_the_seed():
    want = Cipher(algorithms.AES(bytes(16)), modes.CTR(bytes(16))).encryptor().update(bytes(32))
    assert Prg(bytes(16)).bytes(32) == want
    # AES-128(0^128) under key 0^128 (a widely published value): the first keystream block.
    assert want[:16].hex() == "66e94bd4ef8a2c3b884cfa59ca342b2e"


def test_seeded_round_is_fixed():
    # Fixed seeds -> fixed messages. The digests pin this implementation's labels, tables and
    # OT messages; a change to any of them must be deliberate (and changes these values).
    dist = np.array([0.0, 10.9, 1000.0, 2.5])
    d = np.array([-5.0, 7.0, 3.0, 0.0])
    res = run_secure(d, dist, 2.5, seed(1, 1), seed(1, 2))
    assert res.r.tolist() == [0, 2]
    digest = hashlib.sha256(b"".join(res.to_cs + res.to_analyst)).hexdigest()
    assert digest == KAT_DIGEST


KAT_DIGEST = "6038ced781df1cf5a9eb2a68c301878fa064f834a1eb0d40d90677c2800f2ba6"


def test_rfc3526_group():
    assert ot.P.bit_length() == 2048
    assert ot.P >> 1984 == (1 << 64) - 1 and ot.P & ((1 << 64) - 1) == (1 << 64) - 1
    for base in (2, 3, 5, 7):                       # Fermat tests of p and q = (p - 1) / 2
        assert pow(base, ot.P - 1, ot.P) == 1
        assert pow(base, ot.Q - 1, ot.Q) == 1
    assert pow(ot.G, ot.Q, ot.P) == 1               # g = 2 generates the order-q subgroup


# -- building blocks ---------------------------------------------------------------------------

def test_base_ot_gives_the_chosen_key():
    prg = Prg(seed(2))
    s = prg.bits(ot.KAPPA)
    snd, rcv = ot.BaseOtSender(prg), ot.BaseOtReceiver(s, prg)
    b = rcv.reply(snd.public)
    k0, k1 = snd.keys(b)
    ks = rcv.keys(snd.public, b)
    assert all(ks[i] == (k1[i] if s[i] else k0[i]) for i in range(ot.KAPPA))
    assert all(ks[i] != (k0[i] if s[i] else k1[i]) for i in range(ot.KAPPA))


def test_group_elements_from_the_wire_are_checked():
    non_residue = next(x for x in range(3, 100) if pow(x, ot.Q, ot.P) != 1)
    for bad in (0, 1, ot.P - 1, non_residue):
        with pytest.raises(ValueError):
            ot.element_of(bad.to_bytes(ot.ELEMENT_BYTES, "big"))
    with pytest.raises(ValueError):
        ot.element_of(bytes(10))
    assert ot.element_of(ot.element_bytes(4)) == 4


def test_jacobi_agrees_with_euler_criterion():
    rng = np.random.default_rng(10)
    for _ in range(20):
        x = int.from_bytes(rng.bytes(256), "big") % ot.P
        assert ot.jacobi(x, ot.P) == (1 if pow(x, ot.Q, ot.P) == 1 else -1 if x else 0)
    for n in (3, 5, 7, 11, 13, 97):              # small primes against the definition
        squares = {k * k % n for k in range(1, n)}
        assert [ot.jacobi(a, n) for a in range(n)] == [0] + [1 if a in squares else -1 for a in range(1, n)]


def test_transpose_matches_bit_by_bit():
    cols = np.random.default_rng(0).integers(0, 256, (ot.KAPPA, 48), dtype=np.uint8)
    rows = ot.transpose(cols).view(np.uint8).reshape(-1, 16)
    bits_in = np.unpackbits(cols, axis=1, bitorder="little")          # [base OT i, OT j]
    bits_out = np.unpackbits(rows, axis=1, bitorder="little")         # [OT j, base OT i]
    assert np.array_equal(bits_in.T, bits_out)


@pytest.mark.parametrize("m", [1, 127, 128, 1000])
def test_correlated_ot_extension(m):
    prg = Prg(seed(m))
    k0 = [prg.bytes(16) for _ in range(ot.KAPPA)]
    k1 = [prg.bytes(16) for _ in range(ot.KAPPA)]
    s = prg.bits(ot.KAPPA)
    ks = [k1[i] if s[i] else k0[i] for i in range(ot.KAPPA)]
    r = prg.bits(m)
    delta = make_delta(prg)
    u, t = ot.ext_receive(k0, k1, r)
    x0, y = ot.ext_send(ks, s, u, delta, m)
    got = ot.ext_finish(t, r, y)
    want = x0 ^ ((np.uint64(0) - r.astype(np.uint64)).reshape(-1, 1) & delta)
    assert np.array_equal(got, want)
    assert not np.array_equal(x0, x0 ^ delta)


def test_garbled_comparison_on_its_own():
    prg = Prg(seed(3))
    x = np.array([0, 1, 5, 5, 2**32 - 1, 2**32 - 1, 0, 7, 123456789], dtype=np.uint64)
    z = np.array([0, 0, 5, 6, 2**32 - 1, 0, 2**32 - 1, 8, 123456788], dtype=np.uint64)
    delta = make_delta(prg)
    x0 = prg.labels(BITS * x.size).reshape(BITS, x.size, 2)
    g = garble_compare(x0, z, delta, prg)
    xa = x0 ^ ((np.uint64(0) - value_bits(x).astype(np.uint64))[..., None] & delta)
    out = decode(evaluate_compare(xa, g.z_active, g.c_active, g.tables), g.decode_bits)
    assert out.tolist() == (x >= z).astype(int).tolist()


# -- the predicate -----------------------------------------------------------------------------

def test_threshold_offset():
    assert threshold_offset(2.5) == 4          # t - d - 1 > 2.5 <=> t - d >= 4
    assert threshold_offset(3.0) == 5          # t - d - 1 > 3   <=> t - d >= 5
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            threshold_offset(bad)


def test_plaintext_predicate_is_bands_at_width_one():
    rng = np.random.default_rng(4)
    dist = rng.uniform(0, 3000, 5000)
    d = rng.integers(-2000, 2000, 5000).astype(float)
    assert np.array_equal(candidates(d, dist, 400.0), band_candidates(d, np.floor(dist), 400.0))


def test_secure_round_equals_plaintext_predicate_with_edges():
    rho = 100.5
    k = threshold_offset(rho)
    i32 = [-2**31, 2**31 - 1]
    dist = [0.0, 0.0, 150.0, 150.0, 150.0, 4e9, 5e9, 1e12, 0.0, 2**32 - 1.0, 3.9, 103.99]
    d = [0.0, i32[0], 150 - k, 150 - k + 1, 150 - k - 1, i32[0], i32[1], i32[1], i32[1], 0.0, -100.0, 0.0]
    rng = np.random.default_rng(5)
    dist += list(rng.uniform(0, 2000, 300))
    d += list(rng.integers(-1500, 1500, 300).astype(float))
    dist_a, d_a = np.array(dist), np.array(d)
    res = run_secure(d_a, dist_a, rho, seed(5, 1), seed(5, 2))
    want = candidates(d_a, dist_a, rho)
    assert np.array_equal(res.r, want)
    # The equality edge: t - d == floor(rho) + 2 is a candidate, one less is not.
    assert 2 in res.r and 4 in res.r and 3 not in res.r
    assert 1 in res.r and 0 not in res.r       # d = -2^31 at t = 0; d = 0 at t = 0
    assert 5 in res.r                          # d = -2^31: e clamps to 0
    assert 6 in res.r and 7 in res.r           # t clamps to 2^32 - 2, above d = 2^31 - 1 + k
    assert 8 not in res.r                      # d = 2^31 - 1 at t = 0
    assert len(res.to_analyst[1]) == garbled_size(dist_a.size)


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_windows(n):
    res = run_secure(np.zeros(n), np.full(n, 50.0), 10.0, seed(n, 14), seed(n, 15))
    assert res.r.tolist() == list(range(n))


def test_unknown_rows_are_never_candidates():
    dist = np.array([1000.0, 1000.0, 1000.0])
    cs = Garbler(np.array([0.0]), np.array([2]), 3, 10.0, Prg(seed(6)))
    assert cs.e.tolist() == [E_MAX, E_MAX, 0 + 10 + 2]          # d + floor(rho) + 2
    a = Evaluator(dist, Prg(seed(6, 1)))
    k0, k1, ks = _ideal_base(6, cs.s)
    cs.use_keys(ks)
    assert a.finish(cs.garble(a.extend_with_keys(k0, k1))).tolist() == [2]


def test_inputs_are_validated():
    with pytest.raises(ValueError):
        Evaluator([-1.0])
    with pytest.raises(ValueError):
        Evaluator([float("nan")])
    with pytest.raises(ValueError):
        Garbler([0.5], [0], 1, 10.0)
    with pytest.raises(ValueError):
        Garbler([1.0], [3], 1, 10.0)
    a = Evaluator([1.0, 2.0], Prg(seed(7)))
    cs = Garbler([1.0, 2.0], [0, 1], 2, 10.0, Prg(seed(7, 1)))
    a.open()
    with pytest.raises(ValueError):
        a.extend(bytes(5))
    with pytest.raises(ValueError):
        a.extend(bytes(ot.KAPPA * ot.ELEMENT_BYTES))     # zeros are no group elements
    k0, k1, ks = _ideal_base(7, cs.s)
    cs.use_keys(ks)
    u = a.extend_with_keys(k0, k1)
    with pytest.raises(ValueError):
        cs.garble(u[:-1])
    with pytest.raises(ValueError):
        a.finish(cs.garble(u)[:-1])
    assert Evaluator([1e300]).t.tolist() == [T_MAX]


# -- transcripts -------------------------------------------------------------------------------

def _ideal_base(i: int, s: np.ndarray) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The base OTs' ideal outputs for run i (their own messages are tested separately)."""
    prg = Prg(seed(i, 9))
    k0 = [prg.bytes(16) for _ in range(ot.KAPPA)]
    k1 = [prg.bytes(16) for _ in range(ot.KAPPA)]
    return k0, k1, [k1[j] if s[j] else k0[j] for j in range(ot.KAPPA)]


def _label_bits(blob: bytes, n: int) -> np.ndarray:
    """What the analyst sees of the garbled message, as bits: every label's pointer bit and every decode bit."""
    a = np.frombuffer(blob, dtype=np.uint8)
    labels = a[:len(blob) - (n + 7) // 8].reshape(-1, 16)
    return np.concatenate([labels[:, 0] & 1, np.unpackbits(a[labels.size:], bitorder="little")[:n]])


def _analyst_view(dist: np.ndarray, d: np.ndarray, rho: float, runs: int, prg_cls: type = Prg) -> np.ndarray:
    rows = []
    for i in range(runs):
        cs = Garbler(d, np.arange(d.size), d.size, rho, prg_cls(seed(i, 3)))
        k0, k1, ks = _ideal_base(i, cs.s)
        a = Evaluator(dist, Prg(seed(i, 4)))
        cs.use_keys(ks)
        rows.append(_label_bits(cs.garble(a.extend_with_keys(k0, k1)), d.size))
    return np.array(rows)


class _LeakyPrg(Prg):
    """Labels with pointer bit 0: without point-and-permute the pointer bits carry the values."""

    def labels(self, n: int) -> np.ndarray:
        v = super().labels(n)
        v[:, 0] &= ~np.uint64(1)
        return v


def _max_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.mean(axis=0) - b.mean(axis=0)).max())


def test_analyst_transcript_depends_only_on_r():
    """A's view for CS's real input and for the simulator's input built from R alone
    (e_i = 0 for rows in R, 2^32 - 1 otherwise) have the same bit frequencies (false-failure
    rate < 3e-6, module docstring), and both are uniform."""
    rho = 50.0
    dist = np.array([10.0, 500.0, 70.0, 3000.0])
    d = np.array([-200.0, 400.0, 5.0, 2.0])                 # R = {0, 2, 3}
    r = candidates(d, dist, rho)
    k = threshold_offset(rho)
    d_sim = np.where(np.isin(np.arange(4), r), -k, E_MAX - k).astype(float)
    assert np.array_equal(candidates(d_sim, dist, rho), r)
    real = _analyst_view(dist, d, rho, RUNS)
    sim = _analyst_view(dist, d_sim, rho, RUNS)
    assert _max_gap(real, sim) < BOUND
    assert np.abs(real.mean(axis=0) - 0.5).max() < BOUND / 2 + 0.05
    # The comparison catches a garbler that leaks its bits through the pointer bits.
    leaky_real = _analyst_view(dist, d, rho, 40, _LeakyPrg)
    leaky_sim = _analyst_view(dist, d_sim, rho, 40, _LeakyPrg)
    assert _max_gap(leaky_real, leaky_sim) > 0.9


def _cs_view(t_dist: np.ndarray, runs: int, monkeypatch: pytest.MonkeyPatch | None = None) -> np.ndarray:
    rows = []
    cs = Garbler(np.zeros(t_dist.size), np.arange(t_dist.size), t_dist.size, 10.0, Prg(seed(0, 5)))
    s = cs.s
    mp = ot.padded(BITS * t_dist.size) // 8
    for i in range(runs):
        k0, k1, ks = _ideal_base(i, s)
        u = np.frombuffer(Evaluator(t_dist, Prg(seed(i, 6))).extend_with_keys(k0, k1), dtype=np.uint8)
        u = u.reshape(ot.KAPPA, mp)
        # What CS can compute from its keys: u_i ^ G(k_{s_i}) for every base OT.
        derived = np.stack([u[j] ^ ot._stream(ks[j], mp) for j in range(ot.KAPPA)])
        rows.append(np.unpackbits(np.concatenate([u.ravel(), derived.ravel()]), bitorder="little"))
    return np.array(rows)


def test_correction_server_transcript_is_independent_of_the_analyst_input(monkeypatch):
    """CS's view (u, and what its base-OT keys derive from u) has the same bit frequencies for
    two different analyst inputs (false-failure rate < 3e-6, module docstring)."""
    t1 = np.array([0.0, 5.0, 2**31 + 0.0, 77.0])
    t2 = np.array([2**32 - 2.0, 6.0, 0.0, 1.0])
    a, b = _cs_view(t1, RUNS), _cs_view(t2, RUNS)
    assert _max_gap(a, b) < BOUND

    def leaky(k0, k1, r):                                   # u without the second PRG stream
        m = ot.padded(r.size)
        rp = np.zeros(m, dtype=np.uint8)
        rp[:r.size] = r
        t = np.stack([ot._stream(k0[i], m // 8) for i in range(ot.KAPPA)])
        return t ^ np.packbits(rp, bitorder="little"), ot.transpose(t)

    monkeypatch.setattr(ot, "ext_receive", leaky)
    assert _max_gap(_cs_view(t1, 40), _cs_view(t2, 40)) > 0.9


def test_base_ot_reply_does_not_depend_on_the_choice():
    """B = g^b and A g^b are both uniform in the group: the low bit of B has the same frequency
    for choice 0 and 1 (200 draws each; Hoeffding: false failure below 2 exp(-200 0.4^2 / 2) = 2e-7)."""
    prg = Prg(seed(8))
    a = ot.BaseOtSender(prg).public

    def low_bits(c: int) -> np.ndarray:
        rcv = ot.BaseOtReceiver(np.full(200, c, dtype=np.uint8), prg)
        return np.array([x & 1 for x in rcv.reply(a)])

    assert abs(low_bits(0).mean() - low_bits(1).mean()) < BOUND


def test_secure_guarantee_on_board_made_windows():
    """No reading within rho of c is a candidate; every reading farther than rho + 3 is one,
    with d_diff as the boards compute it and any noise (heavy noise here: scale 40 quanta)."""
    from dpsense.cloud.sim.experiments.noise import discrete_laplace
    from dpsense.protocol.distance import distance_difference
    rng = np.random.default_rng(11)
    c = np.array([300, -120])
    rho = 12.5
    for trial in range(1):                                 # each run pays for 128 base OTs
        n = 1500
        ang = rng.uniform(0, 2 * np.pi, n)
        rad = rng.uniform(0, 60, n)                        # straddles rho and rho + 3
        x = np.rint(c + rad[:, None] * np.c_[np.cos(ang), np.sin(ang)]).astype(np.int64)
        xp = x + discrete_laplace(rng, 40.0, x.shape)
        d = np.array([distance_difference(list(map(int, a)), list(map(int, b)), list(map(int, c)))
                      for a, b in zip(x, xp)], dtype=float)
        dist = np.linalg.norm(xp - c, axis=1)
        raw = np.linalg.norm(x - c, axis=1)
        r = run_secure(d, dist, rho, seed(trial, 12), seed(trial, 13)).r
        member = np.zeros(n, dtype=bool)
        member[r] = True
        assert not member[raw <= rho].any()
        assert member[raw > rho + 3].all()
        assert (raw <= rho).any() and (raw > rho + 3).any()


def test_half_gate_tables_match_the_published_equations():
    """One AND gate with fixed labels, against ZRE15's equations written on bytes:
    T_G = H(A0, j) ^ H(A1, j) ^ p_b Delta, T_E = H(B0, j') ^ H(B1, j') ^ A0,
    C0 = H(A0, j) ^ p_a T_G ^ H(B0, j') ^ p_b (T_E ^ A0), j' = j + n (here n = 1)."""
    from dpsense.cloud.correction.mpc.garble import _garble_and

    enc = Cipher(algorithms.AES(FIXED_KEY), modes.ECB()).encryptor()

    def xor(*bs: bytes) -> bytes:
        out = bytes(16)
        for b in bs:
            out = bytes(x ^ y for x, y in zip(out, b))
        return out

    def hash_(x: bytes, i: int) -> bytes:
        px = enc.update(x)
        return xor(enc.update(xor(px, i.to_bytes(8, "little") + bytes(8))), px)

    delta = bytes.fromhex("0f" + "11" * 15)                 # lowest bit 1
    for a0, b0 in [(bytes(range(16)), bytes(range(16, 32))), (bytes([1]) + bytes(15), bytes([3]) * 16)]:
        pa, pb = a0[0] & 1, b0[0] & 1
        tg = xor(hash_(a0, 7), hash_(xor(a0, delta), 7), delta if pb else bytes(16))
        te = xor(hash_(b0, 8), hash_(xor(b0, delta), 8), a0)
        c0 = xor(hash_(a0, 7), tg if pa else bytes(16), hash_(b0, 8), xor(te, a0) if pb else bytes(16))

        def arr(b: bytes) -> np.ndarray:
            return np.frombuffer(b, dtype="<u8").reshape(1, 2).copy()

        g0, t_g, t_e = _garble_and(arr(a0), arr(b0), arr(delta), FixedKeyHash(), 7, 1)
        assert (t_g.tobytes(), t_e.tobytes(), g0.tobytes()) == (tg, te, c0)
