"""Mode bands under the default configuration, next to today's bands (paper 1's windows).

    r = default_bands(d_diff, dist, hist, rng)       # R of the default config on one window
    rows = margin_check(rows)                         # (separation, epsilon, met, detail) per cell

The default configuration (docs/privacy.md) adds two noises to a record's d_diff before any rule
reads it: the board's ``Z_cs`` (``epsilon_cs`` = cloud.deploy.profile.DEFAULT_EPSILON_CS, scale
``cs_delta / epsilon_cs``, shared_protocol/mechanism.py) and the correction server's ``Z_A``
(``--analyst-epsilon`` 1, scale ``ceil(rho) / epsilon_A``, cloud/correction/honest.py). The server
moves the band rule's radius by the margin of both (cloud/correction/margin.py), as
``CorrectionRounds`` does with a profile's ``epsilon_cs``. Today's bands (paper1's ``bands``) read
what the server reads without ``epsilon_cs``: d_diff + Z_A as deployed, the exact d_diff with
``--server exact``; paper1's row of the default configuration is ``bands_cs``. The stated margins (issue 22): at paper 1's target separations (220 and 400) the
default loses at most 1 point of recall and 1 point of subset against today's bands, on every window.
At narrower borders the margin of the two noises reaches into the outliers (docs/privacy.md).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsense.cloud.correction.bands import run_bands
from dpsense.cloud.correction.margin import margin
from dpsense.cloud.deploy.profile import DEFAULT_EPSILON_CS
from dpsense.cloud.sim.experiments.noise import discrete_laplace
from dpsense.protocol.distance import isqrt

#: The correction server's default --analyst-epsilon.
DEFAULT_EPSILON_A = 1.0
#: Recall lost and subset gained at most, in points, against today's bands.
MARGIN_POINTS = 1.0


def cs_delta(rs_q: np.ndarray) -> int:
    """The board's bound on d_diff's change (shared_protocol/mechanism.py) for sensitivities ``rs_q``."""
    r2 = isqrt(int(sum(int(round(float(r))) ** 2 for r in rs_q)))
    return r2 + 1 + (r2 + 2) // 2


def default_bands(d_diff: np.ndarray, dist: np.ndarray, hist: Any, rng: np.random.Generator,
                  eps_cs: float = float(DEFAULT_EPSILON_CS), eps_a: float = DEFAULT_EPSILON_A,
                  alpha: float = 0.005) -> np.ndarray:
    """R of mode bands from ``d_diff + Z_cs + Z_A``, the radius moved by both noises' margin."""
    n = len(d_diff)
    bc = cs_delta(hist.rs_q) / eps_cs
    b = max(1, math.ceil(hist.normal_radius_q)) / eps_a
    d = np.asarray(d_diff, dtype=float) + discrete_laplace(rng, bc, n) + discrete_laplace(rng, b, n)
    return run_bands(d, dist, hist.band_width_q, hist.normal_radius_q + margin(b, bc, alpha)).r


def margin_check(rows: Sequence[Any],
                 separations: Sequence[float] | None = None) -> list[tuple[float, float, bool, str]]:
    """Per (separation, epsilon) (only ``separations``, if given): ``bands_cs``'s recall and subset
    within MARGIN_POINTS of today's bands on every window (seed, run)."""
    cells: dict[tuple[float, float], list[str]] = {}
    base = {(r.separation, r.epsilon, r.seed, r.run): r for r in rows if r.method == "bands"}
    for r in rows:
        if r.method != "bands_cs" or (separations is not None and r.separation not in separations):
            continue
        bad = cells.setdefault((r.separation, r.epsilon), [])
        b = base[(r.separation, r.epsilon, r.seed, r.run)]
        recall, subset = 100 * (r.recall - b.recall), 100 * (r.subset - b.subset)
        if recall < -MARGIN_POINTS or subset > MARGIN_POINTS:
            bad.append("seed %d: recall %+.2f, subset %+.2f points" % (r.seed, recall, subset))
    return [(sep, eps, not bad, "; ".join(bad) if bad else "every seed") for (sep, eps), bad in cells.items()]
