from shared_protocol.noise import DiscreteLaplace, bernoulli_exp, scale_for
from shared_protocol.rng import XorShift32
from tests import vectors
from tests.portable.util import raises, FakeRandom


def test_seeded_samples_match_vectors():
    for (num, den), want in vectors.LAPLACE_SEED1.items():
        lap = DiscreteLaplace(num, den, XorShift32(1))
        got = tuple(lap.sample() for _ in range(len(want)))
        assert got == want, (num, den, got)


def test_scale_is_reduced():
    lap = DiscreteLaplace(146, 20, XorShift32(1))
    assert (lap.num, lap.den) == (73, 10)
    a = DiscreteLaplace(146, 20, XorShift32(5))
    b = DiscreteLaplace(73, 10, XorShift32(5))
    assert [a.sample() for _ in range(30)] == [b.sample() for _ in range(30)]


def test_rejects_invalid_scales():
    r = XorShift32(1)
    for num, den in ((0, 1), (-1, 1), (1, 0), (1, -2), (1.5, 1), (1, 2.0), (True, 1), ("3", 1)):
        raises(ValueError, DiscreteLaplace, num, den, r)


def test_bernoulli_exp_of_zero_is_always_one():
    r = XorShift32(3)
    for _ in range(100):
        assert bernoulli_exp(r, 0, 7) == 1


def test_bernoulli_exp_rejects_invalid():
    r = XorShift32(3)
    raises(ValueError, bernoulli_exp, r, -1, 2)
    raises(ValueError, bernoulli_exp, r, 1, 0)


def test_bernoulli_exp_path_for_gamma_one_half():
    # gamma = 1/2: Bernoulli(1/2) succeeds (draw 0 < 1 of uniform{0,1}), then
    # Bernoulli(1/4) fails (draw 3 of uniform{0..3}): K = 2, even -> 0.
    rng = FakeRandom([0, 3])
    assert bernoulli_exp(rng, 1, 2) == 0
    # First Bernoulli(1/2) fails: K = 1, odd -> 1.
    assert bernoulli_exp(FakeRandom([1]), 1, 2) == 1


def test_samples_are_symmetric_ints():
    lap = DiscreteLaplace(5, 1, XorShift32(11))
    s = [lap.sample() for _ in range(2000)]
    for v in s:
        assert isinstance(v, int)
    pos = len([v for v in s if v > 0])
    neg = len([v for v in s if v < 0])
    # Binomial(n, 1/2) within 5 sigma; a sign bug would be far outside.
    n = pos + neg
    assert abs(pos - n / 2) < 5 * (n ** 0.5) / 2


def test_scale_for():
    assert scale_for(125, 1, 10) == (1250, 1)
    assert scale_for(3, 2, 1) == (3, 2)
    assert scale_for(4, 2, 1) == (2, 1)
    raises(ValueError, scale_for, 0, 1, 1)
    raises(ValueError, scale_for, 1, 0, 1)
