"""The exponential mechanism: selection frequencies against the exact softmax, in every mode.

Seeded. Each frequency fit passes when p > 1e-4 (three fits: a correct sampler fails
with probability at most 3e-4). The power tests assert first that 20k selections
would catch the error they look for with probability above 1 - 1e-6.
"""
import itertools
import math
import random

import numpy as np
import pytest
from scipy import stats

from dpsense.cloud.privacy.mechanisms import Exponential, PaperModeWarning
from tests.cloud.privacy.fit import LEVEL, miss_probability

N = 20_000
UTILITIES = [0.0, 0.5, 1.0, 2.0, 3.0, 0.25, 4.0, 1.5]


def softmax(c: float) -> np.ndarray:
    u = np.array(UTILITIES)
    w = np.exp(c * (u - u.max()))
    return w / w.sum()


def frequencies(mech: Exponential, n: int = N) -> np.ndarray:
    return np.bincount(mech.select(UTILITIES, size=n), minlength=len(UTILITIES))


def pvalue(counts: np.ndarray, prob: np.ndarray) -> float:
    return float(stats.chisquare(counts, counts.sum() * prob).pvalue)


def build(mode: str, epsilon: float, seed: int) -> Exponential:
    rng = random.Random(seed)
    if mode == "paper":
        with pytest.warns(PaperModeWarning, match="NOT 1-DP"):
            return Exponential(epsilon=epsilon, sensitivity=1, paper_mode=True, rng=rng)
    return Exponential(epsilon=epsilon, sensitivity=1, monotone=mode == "monotone", rng=rng)


@pytest.mark.parametrize("mode, coefficient", [("default", 0.5), ("monotone", 1.0), ("paper", 1.0)])
def test_selection_frequencies_match_softmax(mode, coefficient):
    """epsilon = 1, sensitivity 1: exp(u/2) by default, exp(u) for monotone and paper mode."""
    mech = build(mode, 1.0, seed={"default": 51, "monotone": 52, "paper": 53}[mode])
    assert float(mech.coefficient) == coefficient
    assert mech.probabilities(UTILITIES) == pytest.approx(softmax(coefficient), rel=1e-12)
    assert pvalue(frequencies(mech), softmax(coefficient)) > LEVEL


@pytest.mark.parametrize("factor", [1.1, 1 / 1.1], ids=["10% larger", "10% smaller"])
def test_fit_rejects_a_10_percent_wrong_coefficient(factor):
    claimed = softmax(1.0)
    assert miss_probability(N, claimed, softmax(factor)) < 1e-6
    wrong = Exponential(epsilon=2 * factor, sensitivity=1, rng=random.Random(54))
    assert pvalue(frequencies(wrong), claimed) < LEVEL


def test_paper_mode_is_not_the_default_calibration():
    """Paper-mode draws fail the fit to the epsilon-DP softmax: they select the best too often."""
    mech = build("paper", 1.0, 55)
    assert pvalue(frequencies(mech), softmax(0.5)) < LEVEL


def worst_log_ratio(mech: Exponential, u: list[float], sensitivity: float) -> float:
    """Largest |log P_u(i) - log P_u'(i)| over all neighbours u' = u + sensitivity * s, s in {-1, 0, 1}^k."""
    p = mech.probabilities(u)
    worst = 0.0
    for signs in itertools.product((-1, 0, 1), repeat=len(u)):
        q = mech.probabilities([x + sensitivity * s for x, s in zip(u, signs, strict=True)])
        worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(q)))))
    return worst


def test_privacy_loss_of_each_mode():
    """Exact probabilities: default within epsilon, paper mode above epsilon and within 2 epsilon."""
    u = [0.0, 1.0, 2.5, 0.5]
    default = Exponential(epsilon=1, sensitivity=1)
    assert worst_log_ratio(default, u, 1.0) <= 1.0 + 1e-12
    with pytest.warns(PaperModeWarning):
        paper = Exponential(epsilon=1, sensitivity=1, paper_mode=True)
    loss = worst_log_ratio(paper, u, 1.0)
    assert 1.0 < loss <= 2.0 + 1e-12
    assert paper.privacy_cost() == (2, 0)


def test_monotone_mode_is_epsilon_dp_for_monotone_changes():
    u = [0.0, 1.0, 2.5, 0.5]
    mech = Exponential(epsilon=1, sensitivity=1, monotone=True)
    for s in (1, -1):
        q = mech.probabilities([x + s for x in u])
        assert np.max(np.abs(np.log(mech.probabilities(u)) - np.log(q))) <= 1.0 + 1e-12


def test_paper_mode_is_labelled():
    with pytest.warns(PaperModeWarning):
        mech = Exponential(epsilon=0.5, sensitivity=1, paper_mode=True)
    assert "NOT 0.5-DP" in repr(mech) and "actually 1-DP" in repr(mech)
    assert "NOT" in (Exponential.__doc__ or "").replace("**not**", "NOT").upper()


def test_exact_sampler_handles_extreme_gaps():
    """A candidate 1000 nats behind is never chosen; ties split evenly."""
    mech = Exponential(epsilon=2, sensitivity=1, rng=random.Random(56))
    assert {mech.select([0.0, 1000.0]) for _ in range(200)} == {1}
    counts = np.bincount([mech.select([7, 7]) for _ in range(4000)], minlength=2)
    assert stats.binomtest(int(counts[0]), 4000, 0.5).pvalue > LEVEL
    assert math.isclose(mech.probabilities([0.0, 1000.0])[1], 1.0)
