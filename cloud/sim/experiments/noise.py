"""Vectorised discrete Laplace noise for simulations (boards use shared_protocol.noise).

    y = discrete_laplace(np.random.default_rng(1), scale=1250.0, size=(100_000, 2))

The discrete Laplace distribution with scale ``b`` (in quanta) has pmf
``P(y) = tanh(1/(2b)) * exp(-|y|/b)`` on the integers, the distribution that
``dpsense.protocol.noise.DiscreteLaplace`` samples exactly with integer arithmetic. Here
it is drawn as the difference of two i.i.d. geometric variables with success
probability ``p = 1 - exp(-1/b)``: ``P(G1 - G2 = y) = (1-q)/(1+q) * q^|y|`` with
``q = exp(-1/b)``, which is the same pmf. The law is exact; the draw inherits numpy's
floating-point geometric sampler (inversion of a double uniform), so it is exact in
distribution only up to that rounding. That is fine for simulation, and it is why this
module is for experiments only: a board must not release values drawn this way
(floating-point samplers leak through their low bits, Mironov 2012).
"""
from __future__ import annotations

import math

import numpy as np


def _check_scale(scale: float) -> float:
    b = float(scale)
    if not math.isfinite(b) or b <= 0:
        raise ValueError("scale must be finite and > 0, got %r" % (scale,))
    return b


def discrete_laplace(rng: np.random.Generator, scale: float | np.ndarray,
                     size: int | tuple[int, ...]) -> np.ndarray:
    """Discrete Laplace draws with scale ``b`` quanta (a float, or one per column).

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness.
    scale : float or array of float
        ``b = sensitivity / epsilon`` in quanta, ``> 0``; an array broadcasts over the
        last axis of ``size`` (one scale per column).
    size : int or tuple of int
        Output shape.

    Returns
    -------
    ndarray of int64
    """
    b = np.asarray(scale, dtype=float)
    for v in b.ravel():
        _check_scale(float(v))
    p = -np.expm1(-1.0 / b)
    return rng.geometric(np.broadcast_to(p, size)) - rng.geometric(np.broadcast_to(p, size))


def discrete_laplace_pmf(y: int | np.ndarray, scale: float) -> np.ndarray:
    """``P(Y = y) = tanh(1/(2b)) * exp(-|y|/b)`` for integer ``y``."""
    b = _check_scale(scale)
    return np.tanh(0.5 / b) * np.exp(-np.abs(np.asarray(y, dtype=float)) / b)
