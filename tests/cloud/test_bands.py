"""Mode bands (cloud/correction/bands.py) on toy windows whose answers can be read off by hand."""
import numpy as np
import pytest

from dpsense.cloud.correction.bands import (
    Bands,
    band_candidates,
    lower_edges,
    make_bands,
    run_bands,
    width_from_history,
)


def test_rows_go_to_the_band_of_their_distance():
    b = make_bands(np.array([0.0, 5, 12, 25, 26, 100]), 10.0)
    assert b.edges.tolist() == [0.0, 10.0, 20.0, 100.0]      # empty bands are not sent
    assert [m.tolist() for m in b.members] == [[0, 1], [2], [3, 4], [5]]
    assert lower_edges(6, b).tolist() == [0.0, 0.0, 10.0, 20.0, 20.0, 100.0]


# rho = 5, width 10. A candidate needs lower edge - d_diff - 1 > 5.
#   row  dist  edge  d_diff  raw distance (dist - d_diff)   bound      candidate
#   0      3     0     -2      5    (normal)                 0+2-1 = 1  no
#   1      3     0     -7     10                              0+7-1 = 6  yes
#   2     25    20     14     11                             20-14-1 = 5 no (not > 5)
#   3     25    20     13     12                             20-13-1 = 6 yes
#   4    400   400    -15    415                            400+15-1    yes
#   5    400   400    390     10                            400-390-1=9 yes (raw 10 > 5)
D = np.array([-2.0, -7, 14, 13, -15, 390])
DIST = np.array([3.0, 3, 25, 25, 400, 400])


def test_candidates_are_rows_provably_beyond_the_normal_radius():
    res = run_bands(D, DIST, 10.0, 5.0)
    assert res.r.tolist() == [1, 3, 4, 5]


def test_rows_in_no_band_are_never_candidates():
    lower = np.array([0.0, np.nan])
    assert band_candidates(np.array([-100.0, -100.0]), lower, 5.0).tolist() == [0]


def test_width_from_history_is_half_the_border():
    assert width_from_history([226.0, 300.0], 8.0) == 109.0
    assert width_from_history([], 8.0) == 0.0


@pytest.mark.parametrize("bands", [
    Bands(edges=np.array([0.0, 10.0]), members=[np.array([0])], width=10.0),              # count mismatch
    Bands(edges=np.array([10.0, 0.0]), members=[np.array([0]), np.array([1])], width=10.0),  # descending
    Bands(edges=np.array([0.0, 10.0]), members=[np.array([0]), np.array([0])], width=10.0),  # row twice
    Bands(edges=np.array([0.0]), members=[np.array([7])], width=10.0),                     # outside [0, n)
    Bands(edges=np.array([0.0]), members=[np.array([0])], width=0.0),
])
def test_bad_bands_are_refused(bands):
    with pytest.raises(ValueError):
        lower_edges(3, bands)


@pytest.mark.parametrize("width", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_width(width):
    with pytest.raises(ValueError):
        make_bands([1.0, 2.0], width)


def test_the_rounding_of_d_diff_is_in_the_bound():
    # c = (0, 0), raw x = (1, 0): distance 1, a normal row for rho = 1.2. Released x' = (4, 2):
    # |x'| = 4.472 rounds to 4, so d_diff = 4 - 1 = 3 overstates the push by 0.47. With
    # width 0.01 the lower edge is 4.47 and 4.47 - 3 = 1.47 > rho, but the bound that
    # allows for the rounding, 4.47 - 3 - 1 = 0.47, is not.
    from dpsense.protocol.distance import distance_difference
    d = distance_difference([1, 0], [4, 2], [0, 0])
    assert d == 3
    assert run_bands(np.array([float(d)]), np.array([np.hypot(4, 2)]), 0.01, 1.2).r.size == 0
