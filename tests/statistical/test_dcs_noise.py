"""epsilon_cs: the correction record's d_diff is epsilon_cs-DP towards the correction server.

Two readings within the normal radius of the centre, the one at the centre and one at (3, 3)
(|x - c| = 4.24 <= rho = sqrt(6^2 + 6^2) / 2 = 4.24), each released 60,000 times through the
board's own mechanism (shared_protocol/mechanism.py) with epsilon_cs = 1. The correction
server sees only d_diff; ``privacy_ratio_check`` flags any value whose frequency ratio
significantly exceeds e^epsilon_cs, with a false-alarm probability of at most 1e-6 for a
mechanism on the DP boundary. Power: the same check on the mechanism without epsilon_cs (the
default: d_diff >= 0 at the centre, negative off-centre, an infinite ratio) fails.
"""
from __future__ import annotations

import random

import pytest

from dpsense.cloud.privacy.audit import privacy_ratio_check
from dpsense.protocol.fixedpoint import Affine
from dpsense.protocol.mechanism import Column, RecordMechanism

N = 60_000
ALPHA = 1e-6


def _d_diff(raw: list[int], eps_cs: tuple[int, int] | None, seed: int) -> list[int]:
    ident = Affine(1, 1, 0, -5000, 5000)
    m = RecordMechanism([Column(ident, 6, (1, 1)), Column(ident, 6, (1, 1))], [0, 0], random.Random(seed),
                        eps_cs=eps_cs)
    return [m.perturb(raw)[2] for _ in range(N)]


@pytest.mark.slow
def test_d_diff_with_epsilon_cs_is_within_its_bound():
    report = privacy_ratio_check(_d_diff([0, 0], (1, 1), 11), _d_diff([3, 3], (1, 1), 12), 1.0, alpha=ALPHA)
    assert report.ok, str(report)


@pytest.mark.slow
def test_the_check_catches_d_diff_without_epsilon_cs():
    report = privacy_ratio_check(_d_diff([0, 0], None, 13), _d_diff([3, 3], None, 14), 1.0, alpha=ALPHA)
    assert not report.ok and report.impossible
