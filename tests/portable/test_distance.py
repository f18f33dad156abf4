from shared_protocol.distance import isqrt, norm_round, distance_q, distance_difference
from tests.portable.util import raises


def test_isqrt_exhaustive_small():
    for n in range(3000):
        r = isqrt(n)
        assert r * r <= n < (r + 1) * (r + 1), n


def test_isqrt_large():
    for n in (2 ** 30, 2 ** 31 - 1, 10 ** 20, 10 ** 20 - 1, 2 ** 64 + 12345):
        r = isqrt(n)
        assert r * r <= n < (r + 1) * (r + 1), n
    raises(ValueError, isqrt, -1)


def test_norm_round_nearest():
    # sqrt(2) = 1.41 -> 1, sqrt(3) = 1.73 -> 2, sqrt(6) = 2.449 -> 2, sqrt(7) = 2.646 -> 3
    assert [norm_round(n) for n in (0, 1, 2, 3, 4, 6, 7, 12, 13)] == [0, 1, 1, 2, 2, 2, 3, 3, 4]


def test_distance_difference_by_hand():
    # |(13, 4)| = sqrt(185) = 13.60 -> 14 ; |(10, 0)| = 10
    assert distance_difference([10, 0], [13, 4], [0, 0]) == 4
    # centre shifts both: x = (1, 1) is at distance 0, x' = (4, 5) at 5
    assert distance_difference([1, 1], [4, 5], [1, 1]) == 5
    # inward move of an outlier gives a negative d_diff
    assert distance_difference([300, 400], [30, 40], [0, 0]) == 50 - 500


def test_distance_q_rejects_dimension_mismatch():
    raises(ValueError, distance_q, [1, 2], [1])
