"""Distance difference d_diff (Böhler et al. 2017, Definition 4) in integer quanta.

    d = distance_difference([10, 0], [13, 4], [0, 0])   # |(13,4)| - |(10,0)| = 14 - 10

``d_diff = |x' - c| - |x - c|`` (Euclidean), where ``x`` is the scaled reading, ``x'``
the released one and ``c`` the provisioned centre, all in quanta. Each norm is the
integer square root rounded to the nearest quantum, so the result is exact integer
arithmetic on every interpreter. A streaming board has no batch centres, so both
norms use the same provisioned centre (the paper's c and c' coincide in expectation
because the noise has mean zero).

This value depends on the noise: it goes only to the correction server, never to
the analyst (the analyst must not learn how much noise a reading carries).
"""

try:
    from .rng import bit_length
except ImportError:
    from rng import bit_length


def isqrt(n):
    """floor(sqrt(n)) for an int ``n >= 0`` (Newton's method, no floats)."""
    if n < 0:
        raise ValueError("isqrt of a negative number")
    if n == 0:
        return 0
    x = 1 << ((bit_length(n) + 1) >> 1)
    while True:
        y = (x + n // x) >> 1
        if y >= x:
            return x
        x = y


def norm_round(n):
    """sqrt(n) rounded to the nearest int (exact: ties cannot occur for integers)."""
    r = isqrt(n)
    if n - r * r > r:
        r += 1
    return r


def distance_q(x, c):
    """Euclidean distance between two equal-length int vectors, rounded."""
    if len(x) != len(c):
        raise ValueError("dimension mismatch")
    s = 0
    for i in range(len(x)):
        d = x[i] - c[i]
        s += d * d
    return norm_round(s)


def distance_difference(x, x_noisy, centre):
    """``|x_noisy - centre| - |x - centre|`` in quanta."""
    return distance_q(x_noisy, centre) - distance_q(x, centre)
