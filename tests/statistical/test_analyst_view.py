"""The analyst's epsilon for a pair of readings (cloud/privacy/analyst_view.py), measured.

Issue 22's pair: columns with normal ranges of 10 and 100 quanta at epsilon 0.5 each
(rho = 50.25), readings (+50, 0) and (-50, 0). Both lie within rho of the centre, where the
statement before said the analyst's whole view was ``eps_row + epsilon_A`` = 2; they are 100
quanta apart in a column whose range is 10, and the release alone separates them at
epsilon 0.5 x 100 / 10 = 5, which ``AnalystView.pair`` states.

The board's own sampler (shared_protocol/noise.py) releases column 0 for each reading
N times; ``privacy_ratio_check`` (cloud/privacy/audit.py) flags an output class whose frequency
ratio significantly exceeds e^epsilon, with false-alarm probability at most ALPHA = 1e-6 at
the DP boundary. Column 1 and d~ are the same for both readings (same value, same distance
from c), so column 0 carries the whole difference. The stated 5 passes (false failure at most
1e-6); the old statement, 2, fails (power: at epsilon 5 the ratio is e^5 on every output
below -50, a class of about 700 releases under one input and 100,000 under the other).
"""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpsense.cloud.privacy.analyst_view import AnalystView
from dpsense.cloud.privacy.audit import privacy_ratio_check
from dpsense.protocol.noise import DiscreteLaplace, scale_for
from dpsense.protocol.rng import XorShift32

UNEVEN = AnalystView(delta_q=(10, 100), epsilon=Fraction(1, 2), epsilon_a=Fraction(1), centre_q=(0, 0))
A, B = (50, 0), (-50, 0)
N = 200_000
ALPHA = 1e-6


def _releases(x0: int, seed: int) -> list[int]:
    num, den = scale_for(UNEVEN.delta_q[0], 1, 2)           # delta_0 / epsilon_0 = 20 quanta
    lap = DiscreteLaplace(num, den, XorShift32(seed))
    return [x0 + lap.sample() for _ in range(N)]


def _bin(y: object) -> int:
    return max(-6, min(6, int(y) // 10))                   # pooled: post-processing of the release


def test_the_uneven_pair_is_within_rho_and_its_stated_epsilon_is_5_not_2() -> None:
    assert UNEVEN.rho() == pytest.approx(50.249, abs=1e-3) and max(abs(A[0]), abs(B[0])) <= UNEVEN.rho()
    assert UNEVEN.normal_box() == 2                         # what the old statement gave any pair within rho
    assert UNEVEN.release(A, B) == 5 and UNEVEN.round_view(A, B) == 0 and UNEVEN.pair(A, B) == 5


@pytest.mark.slow
def test_the_release_of_the_uneven_pair_stays_within_the_stated_bound_and_breaks_the_old_one() -> None:
    out_a, out_b = _releases(A[0], 11), _releases(B[0], 12)
    stated = privacy_ratio_check(out_a, out_b, float(UNEVEN.pair(A, B)), key=_bin, alpha=ALPHA)
    assert stated.ok, stated.violations[:3]
    old = privacy_ratio_check(out_a, out_b, float(UNEVEN.normal_box()), key=_bin, alpha=ALPHA)
    assert not old.ok


@pytest.mark.parametrize("delta_q", [(7,), (10, 100), tuple(range(3, 35, 2))])    # 1, 2 and 16 columns
def test_the_normal_box_bound_covers_its_worst_pair_and_neighbours_cost_more(delta_q: tuple[int, ...]) -> None:
    m = len(delta_q)
    view = AnalystView(delta_q=delta_q, epsilon=Fraction(1, 4), epsilon_a=Fraction(1), centre_q=(0,) * m)
    low = tuple(-(d // 2) for d in delta_q)
    high = tuple(d // 2 for d in delta_q)
    # Opposite corners of the box: each column a whole range apart (up to rounding), same distance.
    assert view.pair(low, high) <= view.normal_box() == Fraction(m, 4) + 1
    # The centre against a corner: the round view's worst case within the box.
    assert view.round_view((0,) * m, high) <= Fraction(1)
    # Neighbours outside the box: the same per-column steps, but the distance moves by the diagonal.
    far = tuple(10 * d for d in delta_q)
    step = tuple(10 * d + d for d in delta_q)
    assert view.release(far, step) == Fraction(m, 4)
    assert view.normal_box() < view.pair(far, step) <= view.neighbours()
