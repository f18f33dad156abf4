"""The exact samplers against their exact laws, by goodness-of-fit tests.

The unit tests of ``shared_protocol`` check values; only many samples can show
that ``DiscreteLaplace`` has the scale the privacy proof uses, that
``bernoulli_exp`` hits ``exp(-gamma)`` and that the random sources are uniform.

Every random stream is seeded (``os.urandom`` aside), so CI is deterministic. The
significance level of each test is therefore the probability that a correct
implementation fails for a given seed: the chance that changing a seed, or an
equivalent rewrite that consumes randomness differently, turns the test red.
"""

import math
import os
import random

import numpy as np
import pytest
from scipy import stats

from dpsense.cloud.privacy.audit import chi_square_discrete_laplace
from dpsense.protocol.noise import DiscreteLaplace, bernoulli_exp
from dpsense.protocol.rng import UrandomRNG, XorShift32, uniform_below
from tests.vectors import LAPLACE_SEED1

LEVEL = 1e-4
N_LAPLACE = 100_000
SCALES = [(1, 2), (1, 1), (73, 10), (1000, 1), (100000, 1)]


def draw(num: int, den: int, n: int, rng) -> np.ndarray:
    sample = DiscreteLaplace(num, den, rng).sample
    return np.fromiter((sample() for _ in range(n)), dtype=np.int64, count=n)


def chi_square_uniform(observed: np.ndarray, weights: np.ndarray) -> float:
    """p-value of observed cell counts against cell probabilities ``weights/sum``."""
    expected = observed.sum() * weights / weights.sum()
    stat = float(np.sum((observed - expected) ** 2 / expected))
    return float(stats.chi2.sf(stat, observed.size - 1))


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed, frac", list(enumerate(SCALES, start=101)), ids=["0.5", "1", "7.3", "1000", "100000"]
)
def test_discrete_laplace_fits_exact_pmf(seed, frac):
    """Chi-square of 100k draws against the exact pmf; passes when p > 1e-4.

    Five scales at level 1e-4 each: a correct sampler fails one of them with
    probability at most 5e-4. Bins are those of ``chi_square_discrete_laplace``
    (at most 100, at least 5 expected each); at this sample size a scale 5% off
    is rejected, see ``test_chi_square_rejects_scale_5_percent_too_large``.
    """
    num, den = frac
    res = chi_square_discrete_laplace(draw(num, den, N_LAPLACE, random.Random(seed)), num, den)
    assert res.dof >= 8
    assert res.pvalue > LEVEL, res


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed, claimed, drawn",
    [(201, (73, 10), (7665, 1000)), (202, (1000, 1), (1050, 1))],
    ids=["7.3", "1000"],
)
def test_chi_square_rejects_scale_5_percent_too_large(seed, claimed, drawn):
    """Power: draws at 1.05 times the claimed scale must give p < 1e-4.

    With 100k samples the non-centrality of the statistic for a 5% scale error is
    about 240 (99 dof at scale 1000, critical value 160; 41 dof at 7.3, critical
    value 83), so a seed that misses it has probability below 1e-10: a failure
    here means the fit test lost its power, not bad luck.
    """
    res = chi_square_discrete_laplace(draw(*drawn, N_LAPLACE, random.Random(seed)), *claimed)
    assert res.pvalue < LEVEL, res


@pytest.mark.slow
@pytest.mark.parametrize("num, den", [(0, 1), (1, 3), (1, 1), (5, 2), (7, 1)], ids=str)
def test_bernoulli_exp_frequency(num, den):
    """Exact two-sided binomial test of 1M draws against ``exp(-num/den)``, p > 1e-4.

    Five values at level 1e-4: family-wise false failure at most 5e-4. The
    standard error is 5e-4 absolute at gamma=1 and 3% relative at gamma=7
    (about 900 successes expected), so biases beyond ~4 standard errors fail.
    """
    n = 1_000_000
    rng = random.Random(300 + num * 10 + den)
    ones = sum(bernoulli_exp(rng, num, den) for _ in range(n))
    p = math.exp(-num / den)
    if p == 1.0:
        assert ones == n
        return
    assert stats.binomtest(ones, n, p).pvalue > LEVEL, (ones, n * p)


def _uniform_below_cells(m: int, values: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cell counts and exact cell sizes to test ``values`` (uniform on 0..m-1) with."""
    if m <= 1000:
        return [(np.bincount(values, minlength=m), np.ones(m))]
    # Equal ranges of width w; the last one is shorter. Then residues mod 64, which
    # see the low chunk of the draw: m is not a multiple of 64, so sizes differ.
    ranges = 64
    w = -(-m // ranges)
    sizes = np.full(ranges, w, dtype=np.float64)
    sizes[-1] = m - (ranges - 1) * w
    residue_sizes = np.array([(m - 1 - j) // 64 + 1 for j in range(64)], dtype=np.float64)
    return [
        (np.bincount(values // w, minlength=ranges), sizes),
        (np.bincount(values % 64, minlength=64), residue_sizes),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("m", [3, 10, 1000, 2**31 + 11])
def test_uniform_below_is_uniform(m):
    """Chi-square uniformity of 200k draws of ``uniform_below(rng, m)``, p > 1e-4.

    Five tests (one each for m = 3, 10, 1000; high ranges and low residues for
    m = 2**31 + 11, which needs two chunks of random bits and rejects about half
    the candidates) at level 1e-4: family-wise false failure at most 5e-4.
    """
    rng = random.Random(400 + m % 1000)
    n = 200_000
    values = np.fromiter((uniform_below(rng, m) for _ in range(n)), dtype=np.int64, count=n)
    assert values.min() >= 0 and values.max() < m
    for observed, sizes in _uniform_below_cells(m, values):
        assert chi_square_uniform(observed, sizes) > LEVEL


def _bit_cells(k: int, values: np.ndarray) -> list[np.ndarray]:
    """Counts of every value (k <= 8), else of the top and of the low 8 bits."""
    if k <= 8:
        return [np.bincount(values, minlength=1 << k)]
    return [
        np.bincount(values >> (k - 8), minlength=256),
        np.bincount(values & 0xFF, minlength=256),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 5, 8, 16, 30, 32])
def test_xorshift32_getrandbits_uniform(k):
    """Chi-square uniformity of 100k ``XorShift32.getrandbits(k)``, p > 1e-4 per cell set.

    Nine cell sets in all (one for k <= 8, top and low byte above): family-wise
    false failure at most 9e-4.
    """
    rng = XorShift32(0x9E3779B9 ^ k)
    n = 100_000
    values = np.fromiter((rng.getrandbits(k) for _ in range(n)), dtype=np.int64, count=n)
    assert values.min() >= 0 and values.max() < 1 << k
    for observed in _bit_cells(k, values):
        assert chi_square_uniform(observed, np.ones(observed.size)) > LEVEL


@pytest.mark.slow
@pytest.mark.parametrize("k, block", [(1, 32), (7, 32), (8, 32), (13, 5), (32, 32)])
def test_urandom_rng_getrandbits_uniform(k, block):
    """Chi-square uniformity of 100k ``UrandomRNG.getrandbits(k)`` over ``os.urandom``.

    Not seeded: it reads the real entropy source, so it is the one test here whose
    outcome varies between runs. Hence the level 1e-6 per cell set; seven cell
    sets make a false failure at most 7e-6 per run. ``block=5`` with two bytes per
    value makes values straddle the refills of the byte buffer.
    """
    rng = UrandomRNG(os.urandom, block=block)
    n = 100_000
    values = np.fromiter((rng.getrandbits(k) for _ in range(n)), dtype=np.int64, count=n)
    assert values.min() >= 0 and values.max() < 1 << k
    for observed in _bit_cells(k, values):
        assert chi_square_uniform(observed, np.ones(observed.size)) > 1e-6


@pytest.mark.slow
def test_same_seed_same_samples():
    """``XorShift32`` seeds pin the sample stream, bit for bit, on every interpreter.

    The reference is the golden vector of ``tests/vectors.py`` (XorShift32 seeds are
    mixed by ``fmix32``), the same the portable suite checks under MicroPython.
    """
    expected = list(LAPLACE_SEED1[(73, 10)])
    for _ in range(2):
        lap = DiscreteLaplace(73, 10, XorShift32(1))
        assert [lap.sample() for _ in range(20)] == expected
