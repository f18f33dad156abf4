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

d_diff towards the correction server (``eps_cs``, optional)
------------------------------------------------------------
With ``eps_cs = (num, den)``, ``perturb`` returns ``d_diff + DiscreteLaplace(cs_delta /
eps_cs)``. For two readings x, x~ within rho = ``sqrt(sum delta_q_j^2) / 2`` of the centre
and the same column noise Y, the two d_diff differ by at most
``(floor(2 rho) + 1) + ceil(rho)`` (the rounded distances of x + Y and x~ + Y from c differ by
at most ``|x - x~| + 1 <= 2 rho + 1``, those of x and x~ by at most ``round(rho)``), and
``cs_delta = isqrt(4 rho^2) + 1 + (isqrt(4 rho^2) + 2) // 2`` bounds that in integers. Mixing
over Y keeps the ratio, so the correction record is eps_cs-DP towards the correction server
for any two readings within rho of the centre (a reading outside it: ``eps_cs x`` the same
bound with the domain's diameter, by design as for the columns). ``epsilon_charge()`` is what
the ledger charges per record: ``epsilon_row() + eps_cs``.
"""

try:
    from .noise import DiscreteLaplace, scale_for
    from .distance import distance_difference, isqrt
except ImportError:
    from noise import DiscreteLaplace, scale_for
    from distance import distance_difference, isqrt


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

    def __init__(self, columns, centre_q, rng, eps_cs=None):
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
        self.eps_cs = eps_cs
        self._cs = None
        if eps_cs is not None:
            if (not isinstance(eps_cs, tuple) or len(eps_cs) != 2 or not isinstance(eps_cs[0], int)
                    or not isinstance(eps_cs[1], int) or eps_cs[0] <= 0 or eps_cs[1] <= 0):
                raise ValueError("eps_cs must be a (num, den) pair of positive ints")
            r2 = isqrt(_sumsq([c.delta_q for c in columns]))
            self.cs_delta = r2 + 1 + (r2 + 2) // 2
            num, den = scale_for(self.cs_delta, eps_cs[0], eps_cs[1])
            self._cs = DiscreteLaplace(num, den, rng)

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
        d = distance_difference(q, out, self.centre_q)
        if self._cs is not None:
            d += self._cs.sample()
        return q, out, d

    def epsilon_row(self):
        return _sum([c.eps for c in self.columns])

    def epsilon_charge(self, eps_a=None):
        """What the ledger charges per record: the columns' epsilon plus eps_cs, if set, plus
        ``eps_a`` (the analyst's epsilon of a correction round, config ``epsilon_a``), if given."""
        return _sum([e for e in (self.epsilon_row(), self.eps_cs, eps_a) if e is not None])

    def epsilon_row_worst(self):
        return _sum([c.eps_worst() for c in self.columns])


def _sumsq(v):
    s = 0
    for x in v:
        s += x * x
    return s


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
