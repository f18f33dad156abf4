"""The never-worse guarantees, checked on random windows with any noise at all.

Mode paper (rules.py, ``split="noise"``, ``layers="provable"``): every row the
correction adds to O' has a raw distance from the centre above rho, and every row it
removes from O' has ``d_diff > tau``. Mode bands (bands.py): no row within rho is a
candidate, every row beyond ``rho + w + 2`` is; with no row in between (the paper's
empty border layer), R is exactly the rows beyond rho, so it is never worse than O' in
recall or precision. The noise here is arbitrary integers, not Laplace draws: these
statements hold for every draw. ``d_diff`` is computed by the boards' own code.
"""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsense.cloud.correction.bands import run_bands
from dpsense.cloud.correction.rules import CorrectionParams, run_protocol
from dpsense.protocol.distance import distance_difference


@st.composite
def windows(draw):
    n = draw(st.integers(2, 80))
    m = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    unit = draw(st.sampled_from([1, 7, 100, 1000]))
    c = rng.integers(-50 * unit, 50 * unit, m)
    # A core near c and rows anywhere up to 40 units out; noise from tiny to huge,
    # heavy-tailed or uniform.
    radius = np.where(rng.random(n) < 0.7, rng.random(n) * 3 * unit, rng.random(n) * 40 * unit)
    direction = rng.normal(size=(n, m))
    direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-12)
    x = np.rint(c + radius[:, None] * direction).astype(np.int64)
    spread = draw(st.sampled_from([0, 1, unit, 20 * unit]))
    if draw(st.booleans()):
        y = rng.integers(-spread, spread + 1, (n, m))
    else:
        y = np.rint(rng.laplace(0.0, spread + 1e-9, (n, m))).astype(np.int64)
    xp = x + y
    d_diff = np.array([distance_difference(list(map(int, a)), list(map(int, b)), list(map(int, c)))
                       for a, b in zip(x, xp)], dtype=float)
    dist = np.linalg.norm(xp - c, axis=1)
    raw = np.linalg.norm(x - c, axis=1)
    presumed = np.flatnonzero(rng.random(n) < draw(st.floats(0.0, 1.0)))
    rho = draw(st.floats(0.5, 5.0)) * unit
    return d_diff, dist, raw, presumed, rho, unit, m


@settings(max_examples=300, deadline=None)
@given(windows(), st.floats(0.01, 10.0), st.floats(1e-6, 0.9), st.floats(0.0, 30.0))
def test_mode_paper_adds_only_abnormal_rows_and_removes_only_rows_above_tau(w, b_units, alpha, w_o_units):
    d_diff, dist, raw, presumed, rho, unit, m = w
    p = CorrectionParams(w_o=w_o_units * unit, split="noise", layers="provable", noise_scale=b_units * unit,
                         columns=m, alpha=alpha, normal_radius=rho)
    res = run_protocol(d_diff, dist, presumed, p)
    added = np.setdiff1d(res.r, presumed)
    removed = np.setdiff1d(presumed, res.r)
    assert (raw[added] > rho).all()
    assert (d_diff[removed] > p.tau()).all()
    assert np.array_equal(removed, res.fp)


@settings(max_examples=300, deadline=None)
@given(windows(), st.floats(0.05, 20.0))
def test_mode_bands_candidates_are_exactly_bounded_by_rho_and_rho_plus_w(w, width_units):
    d_diff, dist, raw, presumed, rho, unit, _ = w
    width = width_units * unit
    r = run_bands(d_diff, dist, width, rho).r
    mask = np.zeros(raw.size, dtype=bool)
    mask[r] = True
    assert not (mask & (raw <= rho)).any()
    assert mask[raw > rho + width + 2].all()
    # With an empty border layer, R is the set of abnormal rows: never worse than O'.
    if not ((raw > rho) & (raw <= rho + width + 2)).any():
        truth = raw > rho
        assert np.array_equal(mask, truth)
        o = np.zeros(raw.size, dtype=bool)
        o[presumed] = True
        hits_o, hits_r = int((o & truth).sum()), int((mask & truth).sum())
        assert hits_r >= hits_o
        assert hits_r * max(1, int(o.sum())) >= hits_o * max(1, int(mask.sum())) or not o.any()


def test_tau_grows_with_the_noise_and_the_columns():
    taus = [CorrectionParams(w_o=0.0, split="noise", noise_scale=b, columns=m).tau() for b, m in
            [(10.0, 1), (10.0, 2), (20.0, 2)]]
    assert taus[0] < taus[1] < taus[2]
    assert math.isclose(taus[2] - 3.0, 2 * (taus[1] - 3.0))
