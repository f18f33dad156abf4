"""How far the noise on a d~ can move it: the margin the correction's thresholds move by.

    margin(scale=24.0, board_scale=0.0, alpha=0.005)     # ceil(24 ln 200) = 128: Z_A alone
    margin(scale=24.0, board_scale=36.0, alpha=0.005)    # 187: Z_A + Z_cs, the exact tail of the sum

Two independent discrete Laplace noises act on the distance difference the rules read
(docs/privacy.md): the correction server's ``Z_A`` (scale ``ceil(rho) / epsilon_A``,
honest.RecordNoise) and, with a board's ``epsilon_cs``, the board's ``Z_cs`` (scale
``cs_delta / epsilon_cs``, shared_protocol/mechanism.py). The margin t is the smallest integer
with ``P(Z_A + Z_cs >= t) <= alpha`` (and, by symmetry, ``P(Z_A + Z_cs <= -t) <= alpha``), so
a threshold moved by t misjudges a row because of the noise with probability at most alpha.

With ``Z_A`` alone the margin stays the bound ``ceil(b ln(1/alpha))`` the rules have used
since honest rounds (``P(Z >= t) = p^t / (1 + p) <= exp(-t / b)``). With both, the tail of the
sum is computed from the two exact laws: ``P(Z_1 + Z_2 >= t) = sum_j P(Z_2 = j) P(Z_1 >= t - j)``,
with ``j`` cut where ``P(|Z_2| > 40 b_2)`` is below 1e-17; a union bound (``t_1 + t_2`` at
alpha / 2 each) would move the thresholds about twice as far (360 against 187 quanta at the
default config's scales 24 and 36; tests/statistical/test_margin.py).
"""
from __future__ import annotations

import math

import numpy as np


def _check(name: str, value: float, positive: bool) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError("%s must be finite and %s 0, got %r" % (name, ">" if positive else ">=", value))
    return v


def survival(scale: float, k: np.ndarray) -> np.ndarray:
    """``P(Z >= k)`` for Z discrete Laplace of ``scale`` (``P(Z = j)`` proportional to
    ``exp(-|j| / scale)``), elementwise over the integers ``k``."""
    p = math.exp(-1.0 / _check("scale", scale, True))
    k = np.asarray(k, dtype=float)
    up = np.power(p, np.maximum(k, 1.0)) / (1.0 + p)             # k >= 1
    down = 1.0 - np.power(p, np.maximum(1.0 - k, 1.0)) / (1.0 + p)  # k <= 0: 1 - P(Z >= 1 - k)
    return np.where(k >= 1, up, down)


def sum_tail(scale: float, board_scale: float, t: int) -> float:
    """``P(Z_1 + Z_2 >= t)``, Z_1 of ``scale`` and Z_2 of ``board_scale`` (0: no Z_2)."""
    if board_scale == 0:
        return float(survival(scale, np.array([t]))[0])
    small, big = sorted((float(scale), float(board_scale)))
    p = math.exp(-1.0 / small)
    cut = int(math.ceil(40.0 * small)) + 1
    j = np.arange(-cut, cut + 1, dtype=float)
    pmf = (1.0 - p) / (1.0 + p) * np.power(p, np.abs(j))
    return float(np.dot(pmf, survival(big, t - j)))


def margin(scale: float, board_scale: float, alpha: float) -> float:
    """The smallest integer t with ``P(Z_A + Z_cs >= t) <= alpha`` (module docstring)."""
    b = _check("scale", scale, True)
    bc = _check("board_scale", board_scale, False)
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1), got %r" % (alpha,))
    if bc == 0:
        return float(math.ceil(b * math.log(1.0 / alpha)))
    lo, hi = 0, int(math.ceil((b + bc) * math.log(2.0 / alpha))) + 1
    # The union bound hi is a valid margin; bisect down to the smallest one.
    while lo < hi:
        mid = (lo + hi) // 2
        if sum_tail(b, bc, mid) <= alpha:
            hi = mid
        else:
            lo = mid + 1
    return float(hi)
