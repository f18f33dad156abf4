"""The empirical DP check: passes the exact sampler, catches the known failures.

``privacy_ratio_check`` flags an output class whose frequency ratio between two
neighbouring inputs significantly exceeds ``exp(epsilon)``; its ``alpha`` is the
family-wise false-alarm probability for a mechanism exactly on the DP boundary.
Each test states what a false failure would cost; all streams are seeded.
"""

import random

import numpy as np
import pytest

from dpsense.cloud.privacy.audit import float32_class, privacy_ratio_check
from dpsense.protocol.noise import DiscreteLaplace, scale_for
from tests.statistical.naive_laplace import naive_float32_laplace

DELTA_Q = 5
EPS = (1, 2)
ALPHA = 1e-6


def releases(x: int, num: int, den: int, n: int, seed: int) -> list[int]:
    sample = DiscreteLaplace(num, den, random.Random(seed)).sample
    return [x + sample() for _ in range(n)]


@pytest.fixture(scope="module")
def exact_releases() -> tuple[list[int], list[int]]:
    num, den = scale_for(DELTA_Q, *EPS)
    assert (num, den) == (10, 1)
    n = 200_000
    return releases(0, num, den, n, 501), releases(DELTA_Q, num, den, n, 502)


@pytest.mark.slow
@pytest.mark.parametrize("key", [None, float32_class], ids=["exact", "float32_class"])
def test_discrete_laplace_passes(exact_releases, key):
    """Delta=5 quanta, epsilon=1/2, scale 10: 200k releases of x=0 and of x=5 pass.

    The discrete Laplace meets the bound with equality at every output <= 0 and
    >= 5, the worst case for a false alarm; at alpha=1e-6 per key the two checks
    fail a correct sampler with probability at most 2e-6. On integers below 2**21
    the low mantissa bits are 0, so ``float32_class`` pools outputs by sign and
    octave: a coarse grouping, still bound by the same ratio.
    """
    out_a, out_b = exact_releases
    report = privacy_ratio_check(out_a, out_b, EPS[0] / EPS[1], key=key, alpha=ALPHA)
    assert report.ok, str(report)
    assert not report.impossible
    assert report.classes >= (100 if key is None else 10)


@pytest.mark.slow
def test_naive_float32_laplace_leaks():
    """Mironov's attack on the naive float32 inverse-cdf Laplace, epsilon=1.

    Inputs 0.0 and 1.0 (sensitivity 1), b = 1: for x = 1 every output in
    ``(-0.25, 0.25)`` is a multiple of 2**-24 (Sterbenz: ``1 + y`` is exact), so its
    two lowest mantissa bits are 0, whereas ``0 + y`` has all four endings. Those
    classes hold thousands of releases under x = 0 and none under x = 1; one of
    them alone is flagged once it holds ~60, so the check cannot miss it.
    """
    n = 200_000
    out_a = naive_float32_laplace(0.0, 1.0, n, np.random.default_rng(601))
    out_b = naive_float32_laplace(1.0, 1.0, n, np.random.default_rng(602))
    report = privacy_ratio_check(out_a, out_b, 1.0, key=float32_class, alpha=ALPHA)
    assert not report.ok
    assert report.impossible, str(report)
    small = [v for v in report.impossible if v.key[1] <= -3 and v.key[2] != 0]
    assert small and all(v.count_b == 0 and v.direction == "A>B" for v in small)
    assert "FAIL" in str(report) and "impossible" in str(report)


@pytest.mark.slow
def test_half_scale_is_caught():
    """Scale Delta/(2 epsilon) = 5 is 1-DP, not 1/2-DP: the exact-value check fails.

    At outputs <= 0 the true ratio is e**1 against the claimed e**0.5. With 50k
    releases per input, the class y = 0 alone sits about 18 standard deviations
    beyond the boundary, so a miss has negligible probability. Flags must point the
    right way: outputs <= 2 are likelier under x = 0, outputs >= 3 under x = 5.
    """
    num, den = scale_for(DELTA_Q, 2 * EPS[0], EPS[1])
    assert (num, den) == (5, 1)
    n = 50_000
    report = privacy_ratio_check(
        releases(0, num, den, n, 701),
        releases(DELTA_Q, num, den, n, 702),
        EPS[0] / EPS[1],
        alpha=ALPHA,
    )
    assert not report.ok
    assert any(v.key == 0 for v in report.violations), str(report)
    assert all((v.direction == "A>B") == (v.key <= 2) for v in report.violations)
