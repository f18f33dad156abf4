"""The analyst's epsilon for two raw readings, as docs/privacy.md states it.

    view = AnalystView(delta_q=(10, 100), epsilon=Fraction(1, 2), epsilon_a=Fraction(1), centre_q=(0, 0))
    view.pair((50, 0), (-50, 0))     # Fraction(5): both within rho = 50.25 of c, not neighbours
    view.normal_box()                # eps_row + epsilon_A = 2, for two readings of the normal box

What the analyst holds about a reading x after every round: the board's release
``x_j + Y_j`` (Y_j discrete Laplace of scale ``delta_j / epsilon_j``, shared_protocol/noise.py)
and, from the correction server, ``d~ = d_diff + Z_A`` (Z_A of scale ``ceil(rho) / epsilon_A``,
cloud/correction/honest.py), where for the known release d_diff depends on x only through
``round(|x - c|)``. For two readings x and x~ (pure epsilon-DP, delta 0, sequential composition):

* the release costs ``sum_j epsilon_j |x_j - x~_j| / delta_j`` (the discrete Laplace's exact
  privacy loss for a shift of ``|x_j - x~_j|`` quanta);
* d~ costs ``epsilon_A ceil(| |x - c| - |x~ - c| |) / ceil(rho)``, since rounding moves a
  difference of two distances by less than one quantum.

The neighbourhood this protects at ``eps_row + epsilon_A`` is the normal box, each column
within its normal range (``|x_j - c_j| <= delta_j / 2``): two such readings differ by at most
delta_j per column and both lie within rho (half the box's diagonal) of c. The ball of radius
rho is not: with uneven ranges it holds readings far apart in a narrow column, (+50, 0) and
(-50, 0) above cost 5 by the release alone (tests/statistical/test_analyst_view.py).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class AnalystView:
    """A fleet's parameters in quanta: ``delta_q`` (the normal range's width per column),
    ``epsilon`` (per column: one for all or one each), ``epsilon_a`` (the correction server's
    ``--analyst-epsilon``) and ``centre_q``."""

    delta_q: tuple[int, ...]
    epsilon: Fraction | tuple[Fraction, ...]
    epsilon_a: Fraction
    centre_q: tuple[int, ...]

    def __post_init__(self) -> None:
        m = len(self.delta_q)
        if not 1 <= m <= 16 or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in self.delta_q):
            raise ValueError("delta_q must be 1 to 16 ints > 0, got %r" % (self.delta_q,))
        if len(self.centre_q) != m:
            raise ValueError("centre_q must have %d values, got %r" % (m, self.centre_q))
        if any(Fraction(e) <= 0 for e in self.columns_epsilon()) or Fraction(self.epsilon_a) <= 0:
            raise ValueError("every epsilon must be > 0")

    def columns_epsilon(self) -> tuple[Fraction, ...]:
        eps = self.epsilon
        if isinstance(eps, tuple):
            if len(eps) != len(self.delta_q):
                raise ValueError("epsilon must have one value per column, got %r" % (eps,))
            return tuple(Fraction(e) for e in eps)
        return (Fraction(eps),) * len(self.delta_q)

    def rho(self) -> float:
        """The normal radius: half the diagonal of the normal box."""
        return math.sqrt(sum(d * d for d in self.delta_q)) / 2.0

    def delta_a(self) -> int:
        return max(1, math.ceil(self.rho()))

    def release(self, x: Sequence[int], x2: Sequence[int]) -> Fraction:
        """The release's epsilon between readings ``x`` and ``x2`` (quanta)."""
        return sum((e * abs(a - b) / d for e, a, b, d in zip(self.columns_epsilon(), x, x2, self.delta_q)),
                   Fraction(0))

    def round_view(self, x: Sequence[int], x2: Sequence[int]) -> Fraction:
        """d~'s epsilon between ``x`` and ``x2``, for the same released value."""
        r = math.dist(x, self.centre_q)
        r2 = math.dist(x2, self.centre_q)
        return Fraction(self.epsilon_a) * math.ceil(abs(r - r2)) / self.delta_a()

    def pair(self, x: Sequence[int], x2: Sequence[int]) -> Fraction:
        """Everything the analyst holds after any rounds, between ``x`` and ``x2``."""
        return self.release(x, x2) + self.round_view(x, x2)

    def normal_box(self) -> Fraction:
        """The bound for any two readings of the normal box: ``eps_row + epsilon_A``."""
        return sum(self.columns_epsilon(), Fraction(0)) + Fraction(self.epsilon_a)

    def neighbours(self) -> Fraction:
        """The bound for any two readings with ``|x_j - x~_j| <= delta_j`` for every column,
        anywhere in the domain: their distances from c differ by up to the box's diagonal."""
        diagonal = math.ceil(math.sqrt(sum(d * d for d in self.delta_q)))
        return sum(self.columns_epsilon(), Fraction(0)) + Fraction(self.epsilon_a) * diagonal / self.delta_a()
