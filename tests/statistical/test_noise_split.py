"""The noise split's threshold: P(d_diff > tau) <= alpha for every row, whatever its raw value.

``tau = kappa b + m + 1`` with ``exp(-kappa) sum_{j<m} kappa^j / j! = alpha``
(cloud/correction/rules.py). Rows at the centre are the worst case (``d_diff`` is the
rounded ``|Y|_2``); rows far out move by about the radial component of the noise. The
noise is discrete Laplace drawn per column with ``cloud.sim.experiments.noise`` (the law the
boards sample), ``d_diff`` is rounded as the boards round it.

Each case draws 200,000 rows from a fixed seed and fails if the observed rate exceeds
alpha by more than 4.5 binomial standard deviations: with a true rate of exactly alpha
that happens with probability below 3.4e-6 per case (normal approximation), and the
bound says the true rate is at most alpha. The test has power against a wrong kappa: at
alpha = 0.2 in two columns the one-column threshold (``alpha = exp(-kappa)``) lets about
39 % of the rows at the centre through.
"""
import math

import numpy as np
import pytest

from dpsense.cloud.correction.rules import noise_kappa, noise_threshold
from dpsense.cloud.sim.experiments.noise import discrete_laplace

N = 200_000


def _nr(s: np.ndarray) -> np.ndarray:
    """sqrt rounded to the nearest int, exactly as shared_protocol.distance.norm_round."""
    r = np.floor(np.sqrt(s.astype(float))).astype(np.int64)
    r -= (r * r > s)
    r += ((r + 1) * (r + 1) <= s)
    return r + (s - r * r > r)


def _rate_above(tau: float, b: np.ndarray, raw_radius: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    m = b.size
    direction = rng.normal(size=(N, m))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    x = np.rint(raw_radius * direction).astype(np.int64)
    xp = x + discrete_laplace(rng, b, (N, m))
    d = _nr((xp * xp).sum(axis=1)) - _nr((x * x).sum(axis=1))
    return float(np.mean(d > tau))


@pytest.mark.slow
@pytest.mark.parametrize("alpha, scales, radius", [
    (0.2, (50.0, 50.0), 0.0),
    (0.2, (50.0, 20.0), 0.0),
    (0.05, (1250.0, 1250.0), 0.0),
    (0.05, (1250.0, 1250.0), 40_000.0),
    (0.01, (30.0, 30.0, 30.0), 0.0),
    (0.3, (2.0,), 0.0),
])
def test_rate_above_tau_is_at_most_alpha(alpha, scales, radius):
    b = np.asarray(scales)
    tau = noise_threshold(float(b.max()), b.size, alpha)
    rate = _rate_above(tau, b, radius, seed=13)
    assert rate <= alpha + 4.5 * math.sqrt(alpha * (1 - alpha) / N)


@pytest.mark.slow
def test_a_one_column_kappa_would_fail():
    b = np.array([50.0, 50.0])
    wrong = -math.log(0.2) * 50.0 + 3.0
    assert noise_kappa(1, 0.2) == pytest.approx(-math.log(0.2))
    assert _rate_above(wrong, b, 0.0, seed=13) > 0.2 + 4.5 * math.sqrt(0.2 * 0.8 / N)
