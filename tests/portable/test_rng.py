from shared_protocol.rng import XorShift32, UrandomRNG, uniform_below, bit_length, fmix32
from tests import vectors
from tests.portable.util import raises, FakeRandom


def test_fmix32_vector():
    assert fmix32(1) == vectors.FMIX32_OF_1
    assert fmix32(0) == 0


def test_xorshift32_vector():
    r = XorShift32(1)
    assert tuple(r.next32() for _ in range(5)) == vectors.XORSHIFT32_SEED1


def test_xorshift32_getrandbits_is_top_bits():
    a, b = XorShift32(9), XorShift32(9)
    for k in (1, 7, 16, 30, 32):
        assert a.getrandbits(k) == b.next32() >> (32 - k)
    assert a.getrandbits(0) == 0


def test_xorshift32_rejects_bad_seeds_and_widths():
    for seed in (0, -1, 2 ** 32, 1.5, "1"):
        raises(ValueError, XorShift32, seed)
    r = XorShift32(3)
    raises(ValueError, r.getrandbits, 33)
    raises(ValueError, r.getrandbits, -1)


def test_bit_length_table():
    for n, k in ((0, 0), (1, 1), (2, 2), (255, 8), (256, 9), (65535, 16), (65536, 17),
                 (2 ** 30 - 1, 30), (2 ** 64, 65)):
        assert bit_length(n) == k, n


def test_uniform_below_small_m_rejects_out_of_range_draws():
    # m = 5 needs 3 bits; 7, 6 and 5 are rejected, 4 is accepted.
    rng = FakeRandom([7, 6, 5, 4])
    assert uniform_below(rng, 5) == 4
    assert rng.calls == [3, 3, 3, 3]


def test_uniform_below_one_draws_nothing():
    rng = FakeRandom([])
    assert uniform_below(rng, 1) == 0
    raises(ValueError, uniform_below, rng, 0)


def test_uniform_below_wide_m_concatenates_30_bit_chunks():
    # m = 2**40 + 1 needs 41 bits: one 30-bit draw then one 11-bit draw.
    m = 2 ** 40 + 1
    rng = FakeRandom([1, 5])
    assert uniform_below(rng, m) == (1 << 11) | 5
    assert rng.calls == [30, 11]


def test_uniform_below_stays_in_range():
    r = XorShift32(77)
    for m in (2, 3, 10, 1000, 2 ** 30, 2 ** 31 + 11):
        for _ in range(50):
            v = uniform_below(r, m)
            assert 0 <= v < m


def test_urandom_adapter_takes_bits_from_bytes_in_order():
    stream = bytes([0xAB, 0xCD, 0xEF, 0x01] * 2)
    pos = [0]

    def fake_urandom(n):
        out = stream[pos[0]:pos[0] + n]
        pos[0] += n
        return out

    r = UrandomRNG(fake_urandom, block=4)
    assert r.getrandbits(4) == 0xA       # top 4 bits of 0xab
    assert r.getrandbits(16) == 0xCDEF
    assert r.getrandbits(8) == 0x01
    assert r.getrandbits(32) == 0xABCDEF01


def test_urandom_adapter_rejects_short_reads_and_bad_args():
    r = UrandomRNG(lambda n: b"\x00", block=4)
    raises(OSError, r.getrandbits, 8)
    raises(ValueError, UrandomRNG, lambda n: b"", 2)
    raises(ValueError, UrandomRNG(lambda n: bytes(n)).getrandbits, 33)
