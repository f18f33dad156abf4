"""The board's mechanism: scale a raw record, add discrete Laplace noise per column.

    cols = [Column(Affine(1, 1, 0, -5000, 5000), delta_q=125, eps=(1, 10))]
    m = RecordMechanism(cols, centre_q=[0], rng=XorShift32(1))
    q, noisy, d_diff = m.perturb([42])

Guarantee (Böhler et al. 2017, relaxed sensitivity)
---------------------------------------------
Column j is released as ``q_j + DiscreteLaplace(delta_q_j / eps_j)`` where ``q_j`` is
the scaled reading in quanta and ``delta_q_j`` the relaxed sensitivity: the width of
the column's normal range in quanta (e.g. 95th minus 5th percentile of reference
data, computed by the curator, never from the data being released).

* Per column: eps_j-DP between any two readings whose scaled values differ by at
  most ``delta_q_j`` (two normal readings), and ``eps_j * span_q_j / delta_q_j``-DP
  between any two readings of the clamped domain (``span_q_j = Affine.span_q()``).
  Outliers are therefore protected at this weaker level, by design.
* Per row (one record, all columns): the sums of the above (sequential composition),
  returned exactly by ``epsilon_row()`` and ``epsilon_row_worst()``.

``d_diff`` depends on the noise and is for the correction server only. Each call to
``perturb`` draws fresh noise: a retransmission must resend the stored bytes.
"""

try:
    from .noise import DiscreteLaplace, scale_for
    from .distance import distance_difference
except ImportError:
    from noise import DiscreteLaplace, scale_for
    from distance import distance_difference


class Column:
    """One column: its affine map, relaxed sensitivity in quanta, epsilon ``(num, den)``."""

    def __init__(self, affine, delta_q, eps):
        if not isinstance(delta_q, int) or delta_q <= 0:
            raise ValueError("delta_q must be a positive int (quanta)")
        if (not isinstance(eps, tuple) or len(eps) != 2 or not isinstance(eps[0], int)
                or not isinstance(eps[1], int) or eps[0] <= 0 or eps[1] <= 0):
            raise ValueError("eps must be a (num, den) pair of positive ints")
        self.affine = affine
        self.delta_q = delta_q
        self.eps = eps
        self.scale = scale_for(delta_q, eps[0], eps[1])

    def eps_worst(self):
        """Epsilon for any two values of the clamped domain, as ``(num, den)``."""
        span = self.affine.span_q()
        if span <= self.delta_q:
            return self.eps
        return _reduce(self.eps[0] * span, self.eps[1] * self.delta_q)


class RecordMechanism:
    """Perturb m-column records; holds one sampler per column and the centre."""

    def __init__(self, columns, centre_q, rng):
        if not columns:
            raise ValueError("at least one column")
        if len(centre_q) != len(columns):
            raise ValueError("centre has %d entries for %d columns" % (len(centre_q), len(columns)))
        for c in centre_q:
            if not isinstance(c, int):
                raise ValueError("centre must be ints (quanta)")
        self.columns = columns
        self.centre_q = list(centre_q)
        self._noise = [DiscreteLaplace(c.scale[0], c.scale[1], rng) for c in columns]

    def perturb(self, raw):
        """``(scaled, released, d_diff)`` for one raw record (a list of ints)."""
        if len(raw) != len(self.columns):
            raise ValueError("record has %d values for %d columns" % (len(raw), len(self.columns)))
        q = []
        out = []
        for j in range(len(raw)):
            v = self.columns[j].affine.apply(raw[j])
            q.append(v)
            out.append(v + self._noise[j].sample())
        return q, out, distance_difference(q, out, self.centre_q)

    def epsilon_row(self):
        return _sum([c.eps for c in self.columns])

    def epsilon_row_worst(self):
        return _sum([c.eps_worst() for c in self.columns])


def _sum(fracs):
    n, d = 0, 1
    for a, b in fracs:
        n, d = n * b + a * d, d * b
    return _reduce(n, d)


def _reduce(n, d):
    a, b = n, d
    while b:
        a, b = b, a % b
    return n // a, d // a
