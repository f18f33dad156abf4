"""The correction's margin covers the board's noise on d_diff and the server's (cloud/correction/margin.py).

A normal reading is misjudged when the noise on its d_diff reaches past the margin t:
``P(Z_cs + Z_A <= -t) <= alpha`` must hold. Exactness: the margin is the smallest integer whose
exact tail is at most alpha, and the tail agrees with a convolution of the two pmfs computed
independently. Sampling: N draws of ``Z_cs + Z_A`` at the default config's scales (DEMO_CONFIG:
delta_q (25, 40), epsilon_cs 2, epsilon_A 1) and at 16 columns; the count below -t is tested
one-sided against Binomial(N, alpha), rejecting at P <= 1e-6, so the false-failure rate is at
most 1e-6 per case. Power: the margin of the server's noise alone (the rules before issue 22)
is crossed about 5 times as often (2.4% of draws at the default scales), and the same test
rejects it (expected 9,600 crossings against a rejection point near 2,200).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from dpsense.cloud.correction.margin import margin, sum_tail
from dpsense.cloud.sim.experiments.noise import discrete_laplace, discrete_laplace_pmf
from dpsense.protocol.fixedpoint import Affine
from dpsense.protocol.mechanism import Column, RecordMechanism

ALPHA = 0.005
N = 400_000
FALSE_FAILURE = 1e-6


def _scales(delta_q: tuple[int, ...], eps_cs: tuple[int, int], eps_a: float = 1.0) -> tuple[float, float]:
    """(Z_A's scale, Z_cs's scale) as the server and the board compute them."""
    cols = [Column(Affine(1, 1, 0, -1, 1), d, (1, 1)) for d in delta_q]
    cs_delta = RecordMechanism(cols, [0] * len(cols), None, eps_cs).cs_delta
    rho = math.sqrt(sum(d * d for d in delta_q)) / 2
    return max(1, math.ceil(rho)) / eps_a, cs_delta * eps_cs[1] / eps_cs[0]


CASES = [((25, 40), (2, 1)), ((25,) * 16, (2, 1)), ((752, 760), (1, 1))]


def _crossings(b: float, bc: float, t: float, seed: int) -> int:
    rng = np.random.default_rng(seed)
    z = discrete_laplace(rng, b, N) + discrete_laplace(rng, bc, N)
    return int(np.count_nonzero(z <= -t))


def _rejects(count: int) -> bool:
    """One-sided: P(Binomial(N, ALPHA) >= count) <= FALSE_FAILURE."""
    return float(binom.sf(count - 1, N, ALPHA)) <= FALSE_FAILURE


@pytest.mark.parametrize("delta_q, eps_cs", CASES)
def test_the_margin_is_the_smallest_integer_whose_exact_tail_is_within_alpha(delta_q, eps_cs):
    b, bc = _scales(delta_q, eps_cs)
    t = margin(b, bc, ALPHA)
    assert sum_tail(b, bc, int(t)) <= ALPHA < sum_tail(b, bc, int(t) - 1)
    # The tail against an independent convolution of the two pmfs.
    if bc < 200:
        k = np.arange(-int(60 * bc), int(60 * bc) + 1)
        pmf = np.convolve(discrete_laplace_pmf(k, b), discrete_laplace_pmf(k, bc))
        support = np.arange(2 * k[0], 2 * k[-1] + 1)
        assert sum_tail(b, bc, int(t)) == pytest.approx(float(pmf[support >= t].sum()), rel=1e-9)
    # Wider than the server's noise alone needs, tighter than the union bound.
    assert margin(b, 0.0, ALPHA) < t < margin(b, 0.0, ALPHA / 2) + margin(bc, 0.0, ALPHA / 2)


@pytest.mark.parametrize("delta_q, eps_cs", CASES[:2])
def test_a_normal_reading_crosses_the_margin_with_probability_at_most_alpha(delta_q, eps_cs):
    b, bc = _scales(delta_q, eps_cs)
    count = _crossings(b, bc, margin(b, bc, ALPHA), seed=2201)
    assert not _rejects(count), "%d of %d draws below -t (alpha %g)" % (count, N, ALPHA)


@pytest.mark.parametrize("delta_q, eps_cs", CASES[:2])
def test_power_the_margin_of_the_server_s_noise_alone_is_caught(delta_q, eps_cs):
    b, bc = _scales(delta_q, eps_cs)
    wrong = margin(b, 0.0, ALPHA)
    assert sum_tail(b, bc, int(wrong)) > 4 * ALPHA                # the true rate the check must see
    assert _rejects(_crossings(b, bc, wrong, seed=2202))
