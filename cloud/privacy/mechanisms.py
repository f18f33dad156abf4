"""Differentially private mechanisms for the curator, sampled exactly on the host.

    lap = Laplace(epsilon=0.5, sensitivity=1)
    lap.randomise(41)                       # 41 + Laplace noise of scale 2, on a fine grid
    em = Exponential(epsilon=1, sensitivity=1)
    em.select([3.0, 1.0, 0.0])              # index 0 most likely

Every mechanism states its guarantee, the neighbouring relation it assumes, and its
cost as ``privacy_cost() -> (epsilon, delta)`` for the accountant. Randomness comes
from ``rng`` (anything with ``getrandbits``; ``None`` means ``secrets.SystemRandom()``).
Additive noise is an exact integer on a grid (see :mod:`dpsense.cloud.privacy.discrete`), and
the exponential mechanism accepts candidates with exact Bernoulli trials, so no
floating-point rounding depends on the data.

Two mechanisms have a ``paper_mode`` that reproduces a calibration printed in
Okada et al. (ECML-PKDD 2015) for comparison with their figures. Neither is
epsilon-DP at the stated epsilon (Okada et al. 2015, Theorem 7 and their smooth-sensitivity calibration; docs/paper4.md): constructing one warns with
:class:`PaperModeWarning` and its ``repr`` says so.
"""
from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal, overload

import numpy as np

from dpsense.protocol.noise import DiscreteLaplace, bernoulli_exp
from dpsense.protocol.rng import uniform_below

from .discrete import (
    default_granularity,
    discrete_gaussian_variance_bound,
    discrete_laplace_variance,
    from_grid,
    grid_sensitivity,
    rho_for,
    sample_discrete_gaussian,
    to_grid,
    zcdp_delta,
)
from .validation import (
    Rng,
    check_delta,
    check_epsilon,
    check_granularity,
    check_rng,
    check_sensitivity,
    check_value,
)

__all__ = [
    "Exponential",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "PaperModeWarning",
    "SmoothSensitivityGaussian",
    "nrs_alpha_beta",
]

_SAFETY = Fraction(1) - Fraction(1, 2**40)   # shrinks a float-computed constant below its true value


class PaperModeWarning(UserWarning):
    """A mechanism was built with a published calibration that is not DP as stated."""


class Mechanism(ABC):
    """A randomised release with a stated ``(epsilon, delta)`` cost."""

    rng: Rng

    @abstractmethod
    def privacy_cost(self) -> tuple[Fraction, Fraction]:
        """``(epsilon, delta)`` to charge to the accountant for one release."""


def _check_flag(name: str, v: object) -> bool:
    if not isinstance(v, bool):
        raise TypeError("%s must be a bool, got %s" % (name, type(v).__name__))
    return v


def _grid(sensitivity: Fraction, granularity: object) -> Fraction:
    return default_granularity(sensitivity) if granularity is None else check_granularity(granularity)


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else "%.6g" % float(x)


class Laplace(Mechanism):
    """Laplace mechanism, sampled as an exact discrete Laplace on a grid.

    Guarantee: ``epsilon``-DP (``delta = 0``) for any two data sets whose true
    answers differ by at most ``sensitivity``, under whatever neighbouring relation
    (replace-one or add/remove) the sensitivity was derived for.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, ``> 0``. Floats are read as the decimal they print as.
    sensitivity : float
        Largest ``|q(x) - q(x')|`` over neighbours, ``> 0``.
    granularity : float, optional
        Grid step of the output. Default: the largest power of two not above
        ``sensitivity * 2**-30``.
    values_on_grid : bool, optional
        Promise that every possible true answer is a multiple of ``granularity``
        (counts with ``granularity=1``). Answers are then not rounded and the grid
        sensitivity is ``ceil(sensitivity / granularity)``; an answer off the grid
        raises ``ValueError``.
    rng : Rng, optional
        Random source with ``getrandbits``; default ``secrets.SystemRandom()``.

    Notes
    -----
    The release is ``g * (round(v/g) + Y)`` with ``Y`` discrete Laplace of scale
    ``t/epsilon`` grid steps, ``t`` the grid sensitivity (``floor(sensitivity/g) + 1``
    for rounded answers). Its pmf ratio at any output is at most
    ``exp(epsilon * |i - i'| / t) <= exp(epsilon)``. With the default grid the noise
    scale exceeds ``sensitivity/epsilon`` by a relative ``2**-30`` or less.
    Sensitivity: the caller's; cost per release ``O(1)`` expected Bernoulli trials.

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, "Calibrating Noise to Sensitivity
    in Private Data Analysis", TCC 2006.
    I. Mironov, "On Significance of the Least Significant Bits for Differential
    Privacy", CCS 2012 (why floats are not used).
    C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
    Privacy", NeurIPS 2020 (the exact discrete Laplace sampler).
    """

    def __init__(self, *, epsilon: object, sensitivity: object, granularity: object = None,
                 values_on_grid: bool = False, rng: Rng | None = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_sensitivity(sensitivity)
        self.values_on_grid = _check_flag("values_on_grid", values_on_grid)
        self.granularity = _grid(self.sensitivity, granularity)
        self.rng = check_rng(rng)
        self.grid_sensitivity = grid_sensitivity(self.sensitivity, self.granularity, self.values_on_grid)
        self.grid_scale = Fraction(self.grid_sensitivity) / self.epsilon
        self._noise = DiscreteLaplace(self.grid_scale.numerator, self.grid_scale.denominator, self.rng)

    @property
    def scale(self) -> float:
        """Noise scale in the units of the answer: ``granularity * t / epsilon``."""
        return float(self.grid_scale * self.granularity)

    def variance(self) -> float:
        """Exact variance of the noise, in squared answer units."""
        return discrete_laplace_variance(self.grid_scale) * float(self.granularity) ** 2

    def randomise(self, value: object) -> float:
        """``value`` plus noise, on the grid."""
        i = to_grid(check_value(value), self.granularity, self.values_on_grid)
        return from_grid(i + self._noise.sample(), self.granularity)

    def privacy_cost(self) -> tuple[Fraction, Fraction]:
        return self.epsilon, Fraction(0)

    def __repr__(self) -> str:
        return "Laplace(epsilon=%s, sensitivity=%s, granularity=%s)" % (
            _fmt(self.epsilon), _fmt(self.sensitivity), _fmt(self.granularity))


class Gaussian(Mechanism):
    """Gaussian mechanism, sampled as an exact discrete Gaussian on a grid.

    Guarantee: ``(epsilon, delta)``-DP for any two data sets whose true answers
    differ by at most ``sensitivity``, under the neighbouring relation the
    sensitivity was derived for. It is also ``rho``-zCDP (attribute ``rho``).

    Parameters
    ----------
    epsilon : float
        Privacy parameter, ``> 0``.
    delta : float
        ``0 < delta < 1``.
    sensitivity : float
        Largest ``|q(x) - q(x')|`` over neighbours, ``> 0``.
    calibration : {"zcdp", "classical"}, optional
        ``"zcdp"`` (default): the smallest noise whose zCDP guarantee converts to
        ``(epsilon, delta)``. ``"classical"``: ``sigma = sensitivity *
        sqrt(2 ln(2/delta)) / epsilon`` as in Okada et al. 2015, Thm. 1,
        accepted only where the zCDP conversion certifies it (up to about
        ``epsilon = 5.5`` at ``delta = 0.01``), ``ValueError`` elsewhere.
    granularity, values_on_grid, rng
        As for :class:`Laplace`.

    Notes
    -----
    The release is ``g * (round(v/g) + Y)``, ``Y ~ N_Z(0, sigma2)`` in grid steps.
    With grid sensitivity ``t``, the discrete Gaussian is ``t**2 / (2 sigma2)``-zCDP
    (CKS 2020, Sect. 2.2), and ``rho``-zCDP implies ``(epsilon, zcdp_delta(rho,
    epsilon))``-DP (CKS 2020, Sect. 2.3); ``sigma2`` is the exact rational
    ``t**2 / (2 rho)``. Sensitivity: the caller's, in the L2 (= absolute) norm.

    References
    ----------
    C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
    Privacy", NeurIPS 2020.
    C. Dwork, A. Roth, "The Algorithmic Foundations of Differential Privacy",
    2014, Appendix A (the classical calibration).
    R. Okada, K. Fukuchi, K. Kakizaki, J. Sakuma, "Differentially Private Analysis
    of Outliers", ECML-PKDD 2015, Theorem 1.
    """

    def __init__(self, *, epsilon: object, delta: object, sensitivity: object,
                 calibration: Literal["zcdp", "classical"] = "zcdp", granularity: object = None,
                 values_on_grid: bool = False, rng: Rng | None = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta, allow_zero=False)
        self.sensitivity = check_sensitivity(sensitivity)
        if not isinstance(calibration, str):
            raise TypeError("calibration must be a str, got %s" % type(calibration).__name__)
        if calibration not in ("zcdp", "classical"):
            raise ValueError("calibration must be 'zcdp' or 'classical', got %r" % calibration)
        self.calibration = calibration
        self.values_on_grid = _check_flag("values_on_grid", values_on_grid)
        self.granularity = _grid(self.sensitivity, granularity)
        self.rng = check_rng(rng)
        self.grid_sensitivity = t = grid_sensitivity(self.sensitivity, self.granularity, self.values_on_grid)
        eps, dlt = float(self.epsilon), float(self.delta)
        if calibration == "zcdp":
            self.rho = rho_for(eps, dlt)
            self.grid_sigma2 = Fraction(t * t) / (2 * Fraction(self.rho))
        else:
            c2 = Fraction(2.0 * math.log(2.0 / dlt)) / _SAFETY
            self.grid_sigma2 = t * t * c2 / (self.epsilon * self.epsilon)
            self.rho = float(Fraction(t * t) / (2 * self.grid_sigma2))
            if zcdp_delta(self.rho, eps) > dlt * (1.0 - 1e-9):
                raise ValueError(
                    "the classical calibration is not certified (epsilon=%s, delta=%s): its zCDP bound "
                    "gives delta=%.3g; use calibration='zcdp'" % (epsilon, delta, zcdp_delta(self.rho, eps)))

    @property
    def sigma(self) -> float:
        """Noise parameter sigma in answer units."""
        return math.sqrt(float(self.grid_sigma2)) * float(self.granularity)

    def variance(self) -> float:
        """Upper bound ``sigma**2`` on the noise variance (tight for ``sigma >= 2`` grid steps)."""
        return discrete_gaussian_variance_bound(self.grid_sigma2) * float(self.granularity) ** 2

    def randomise(self, value: object) -> float:
        """``value`` plus noise, on the grid."""
        i = to_grid(check_value(value), self.granularity, self.values_on_grid)
        return from_grid(i + sample_discrete_gaussian(self.rng, self.grid_sigma2), self.granularity)

    def privacy_cost(self) -> tuple[Fraction, Fraction]:
        return self.epsilon, self.delta

    def __repr__(self) -> str:
        return "Gaussian(epsilon=%s, delta=%s, sensitivity=%s, calibration=%r, sigma=%.6g)" % (
            _fmt(self.epsilon), _fmt(self.delta), _fmt(self.sensitivity), self.calibration, self.sigma)


def nrs_alpha_beta(epsilon: float, delta: float, dimension: int = 1) -> tuple[float, float]:
    """Nissim-Raskhodnikova-Smith constants for Gaussian noise with smooth sensitivity.

    ``alpha = epsilon / (5 sqrt(2 ln(2/delta)))``,
    ``beta = epsilon / (4 (dimension + ln(2/delta)))`` (Okada et al. 2015, Thm. 2, from Nissim, Raskhodnikova and Smith 2007).
    """
    if not (epsilon > 0 and 0 < delta < 1) or dimension < 1:
        raise ValueError("need epsilon > 0, 0 < delta < 1, dimension >= 1")
    ln = math.log(2.0 / delta)
    return epsilon / (5.0 * math.sqrt(2.0 * ln)), epsilon / (4.0 * (dimension + ln))


class SmoothSensitivityGaussian(Mechanism):
    """Gaussian noise scaled to a smooth upper bound of the local sensitivity.

    Guarantee (default mode): ``(epsilon, delta + slack)``-DP for neighbours in the relation the smooth bound
    was computed for (replace-one for ``q_count``, Okada et al. 2015, definitions), provided the caller
    passes ``S(X)`` that is an upper bound on the local sensitivity at ``X`` and
    ``beta``-smooth, ``S(X) <= exp(beta) S(X')`` for neighbours, with ``beta`` the
    attribute of this object. ``slack`` (an attribute, charged by
    ``privacy_cost()``) is the discretisation term below, about
    ``(1 + exp(epsilon/2)) alpha 2**-40``: under ``1e-12`` for ``epsilon <= 1``.

    With ``paper_mode=True`` the calibration printed by Okada et al. is used,
    ``beta = epsilon`` and ``sigma = S sqrt(2 ln(2/delta)) / epsilon``. That is
    **not** ``(epsilon, delta)``-DP (docs/paper4.md, "Where we differ"): for the same ``S`` the noise is 5
    times smaller than NRS noise, and ``beta = epsilon`` (25 times the NRS value at
    ``delta = 0.01``) lets the smooth bound itself decay much faster.
    ``privacy_cost()`` then raises, so such releases cannot be charged to a budget.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, ``> 0``.
    delta : float
        ``0 < delta < 1``.
    floor : float, optional
        Public lower limit applied to the smooth bound (default 1, the least local
        sensitivity bound of a count). ``max(S, floor)`` is still a
        ``beta``-smooth upper bound.
    granularity : float, optional
        Output grid; default ``floor * 2**-40``.
    rng : Rng, optional
        Random source with ``getrandbits``; default ``secrets.SystemRandom()``.
    paper_mode : bool, optional
        Reproduce the paper's calibration; not DP (see above).

    Notes
    -----
    Default mode: ``alpha, beta = nrs_alpha_beta(epsilon, delta)`` (output
    dimension 1, ``alpha = epsilon/16.28`` and ``beta = epsilon/25.19`` at
    ``delta = 0.01``) and the release is ``g * (round(v/g) + Y)``,
    ``Y ~ N_Z(0, sigma2)``, ``sigma = (max(S, floor) + g) / (alpha g)`` grid steps.
    The ``+ g`` covers the rounding of the answer, so the shift between neighbours
    is at most ``alpha sigma`` grid steps, as the NRS sliding property needs.

    Discretisation: the pmf ratio of two discrete Gaussians is the continuous
    density ratio at the integers times ``theta'/theta``, ``theta = 1 + 2 sum_k
    exp(-2 pi**2 sigma**2 k**2)`` (Poisson summation), and the sets where the
    privacy loss exceeds a threshold are intervals or complements of one, whose
    discrete mass exceeds the continuous one by at most ``2/(sqrt(2 pi) sigma)``.
    Both NRS steps (sliding, dilation) therefore hold with an extra additive
    ``1/sigma_min`` (``sigma_min = floor/(alpha g) >= 2``), so
    ``slack = (1 + exp(epsilon/2)) / sigma_min``.

    Pitfall (docs/paper4.md, "Where we differ"): with these constants ``beta`` is tiny, the smooth bound of
    ``q_count`` stays large, and ``sigma = S/alpha`` is typically larger than the
    global-sensitivity Gaussian; the paper's smaller noise comes from paper mode.

    References
    ----------
    K. Nissim, S. Raskhodnikova, A. Smith, "Smooth Sensitivity and Sampling in
    Private Data Analysis", STOC 2007 (Gaussian admissibility constants).
    R. Okada, K. Fukuchi, K. Kakizaki, J. Sakuma, "Differentially Private Analysis
    of Outliers", ECML-PKDD 2015, Theorem 2 and Eq. 29.
    C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
    Privacy", NeurIPS 2020 (sampler, normalising constant).
    """

    def __init__(self, *, epsilon: object, delta: object, floor: object = 1, granularity: object = None,
                 rng: Rng | None = None, paper_mode: bool = False) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta, allow_zero=False)
        self.floor = check_sensitivity(floor, "floor")
        self.paper_mode = _check_flag("paper_mode", paper_mode)
        self.granularity = self.floor / 2**40 if granularity is None else check_granularity(granularity)
        self.rng = check_rng(rng)
        eps, dlt = float(self.epsilon), float(self.delta)
        alpha, beta = nrs_alpha_beta(eps, dlt)
        if paper_mode:
            self.alpha = float(self.epsilon) / math.sqrt(2.0 * math.log(2.0 / dlt))
            self.beta = eps
            self._inv_alpha = Fraction(math.sqrt(2.0 * math.log(2.0 / dlt))) / self.epsilon
            self.slack = math.inf
            warnings.warn("SmoothSensitivityGaussian(paper_mode=True) uses beta=epsilon and "
                          "sigma=S*sqrt(2 ln(2/delta))/epsilon: NOT (epsilon, delta)-DP",
                          PaperModeWarning, stacklevel=2)
        else:
            self.alpha = alpha
            self.beta = float(Fraction(beta) * _SAFETY)
            self._inv_alpha = 1 / (Fraction(alpha) * _SAFETY)
            sigma_min = float(self.floor / self.granularity * self._inv_alpha)
            if sigma_min < 2.0:
                raise ValueError("granularity too coarse: the noise must span at least 2 grid steps "
                                 "(floor / (alpha * granularity) = %.3g)" % sigma_min)
            self.slack = math.nextafter((1.0 + math.exp(eps / 2.0)) / sigma_min, math.inf)

    def _grid_sigma(self, smooth_sensitivity: object) -> Fraction:
        s = check_value(smooth_sensitivity, "smooth_sensitivity")
        if s < 0:
            raise ValueError("smooth_sensitivity must be >= 0, got %s" % smooth_sensitivity)
        s = max(s, self.floor)
        if not self.paper_mode:
            s += self.granularity
        return s * self._inv_alpha / self.granularity

    def sigma(self, smooth_sensitivity: object) -> float:
        """Noise parameter sigma, in answer units, for a smooth bound ``S``."""
        return float(self._grid_sigma(smooth_sensitivity) * self.granularity)

    def randomise(self, value: object, smooth_sensitivity: object) -> float:
        """``value`` plus noise of scale ``S/alpha``, on the grid.

        Parameters
        ----------
        value : float
            True answer ``q(X)``.
        smooth_sensitivity : float
            ``S(X)``, a ``beta``-smooth upper bound on the local sensitivity at ``X``.
        """
        v = check_value(value)
        sigma = self._grid_sigma(smooth_sensitivity)
        i = to_grid(v, self.granularity, False)
        return from_grid(i + sample_discrete_gaussian(self.rng, sigma * sigma), self.granularity)

    def privacy_cost(self) -> tuple[Fraction, Fraction]:
        if self.paper_mode:
            raise ValueError("paper_mode releases carry no (epsilon, delta) guarantee and cannot be charged")
        return self.epsilon, self.delta + Fraction(self.slack)

    def __repr__(self) -> str:
        mode = (", paper_mode=True: NOT (epsilon, delta)-DP" if self.paper_mode else "")
        return "SmoothSensitivityGaussian(epsilon=%s, delta=%s, alpha=%.6g, beta=%.6g%s)" % (
            _fmt(self.epsilon), _fmt(self.delta), self.alpha, self.beta, mode)


class Exponential(Mechanism):
    """Exponential mechanism: pick candidate ``i`` with probability ``~ exp(c u_i)``.

    Guarantee (default): ``epsilon``-DP with ``c = epsilon / (2 sensitivity)``, for
    any utilities whose values change by at most ``sensitivity`` between
    neighbours (the relation ``sensitivity`` was derived for). With
    ``monotone=True``, ``c = epsilon / sensitivity``, which is ``epsilon``-DP only
    when between any two neighbours all utilities move in the same direction.

    With ``paper_mode=True`` the calibration printed in Okada et al. (Thm. 3,
    Alg. 3) is used: ``c = epsilon``, whatever ``sensitivity`` is. That is
    **not** ``epsilon``-DP; it is ``2 epsilon sensitivity``-DP, and
    ``privacy_cost()`` charges that (Okada et al. 2015, Theorem 7 and Algorithm 3).

    Parameters
    ----------
    epsilon : float
        Privacy parameter, ``> 0``.
    sensitivity : float
        Largest change of any single utility between neighbours, ``> 0``.
    monotone : bool, optional
        Utilities are monotone (see above).
    paper_mode : bool, optional
        Reproduce the paper's calibration; not epsilon-DP.
    rng : Rng, optional
        Random source with ``getrandbits``; default ``secrets.SystemRandom()``.

    Notes
    -----
    Sampling is exact: propose ``i`` uniformly and accept with probability
    ``exp(-c (u_max - u_i))``, a Bernoulli trial on exact rationals
    (``dpsense.protocol.noise.bernoulli_exp``). The best candidate is accepted with
    probability 1, so the expected number of proposals is at most the number of
    candidates. Utilities are read as the exact rationals their floats hold.
    The running time depends on the utilities: do not release it.

    References
    ----------
    F. McSherry, K. Talwar, "Mechanism Design via Differential Privacy", FOCS 2007.
    C. Dwork, A. Roth, "The Algorithmic Foundations of Differential Privacy",
    2014, Theorem 3.10 and Remark 3.1 (monotone utilities).
    R. Okada et al., ECML-PKDD 2015, Theorem 3 (the paper's form).
    """

    def __init__(self, *, epsilon: object, sensitivity: object, monotone: bool = False,
                 paper_mode: bool = False, rng: Rng | None = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_sensitivity(sensitivity)
        self.monotone = _check_flag("monotone", monotone)
        self.paper_mode = _check_flag("paper_mode", paper_mode)
        if monotone and paper_mode:
            raise ValueError("paper_mode and monotone cannot be combined")
        self.rng = check_rng(rng)
        if paper_mode:
            self.coefficient = self.epsilon
            self.epsilon_actual = 2 * self.epsilon * self.sensitivity
            warnings.warn("Exponential(paper_mode=True) samples exp(epsilon*u): NOT %s-DP, it is %s-DP"
                          % (_fmt(self.epsilon), _fmt(self.epsilon_actual)), PaperModeWarning, stacklevel=2)
        elif monotone:
            self.coefficient = self.epsilon / self.sensitivity
            self.epsilon_actual = self.epsilon
        else:
            self.coefficient = self.epsilon / (2 * self.sensitivity)
            self.epsilon_actual = self.epsilon

    @staticmethod
    def _utilities(utilities: Sequence[object]) -> list[Fraction]:
        if isinstance(utilities, (str, bytes)):
            raise TypeError("utilities must be a sequence of numbers")
        arr = np.asarray(utilities, dtype=object)
        if arr.ndim != 1:
            raise ValueError("utilities must be a one-dimensional sequence")
        u = [check_value(x, "utility") for x in arr.tolist()]
        if not u:
            raise ValueError("at least one candidate is needed")
        return u

    def probabilities(self, utilities: Sequence[object]) -> np.ndarray:
        """Selection probabilities, ``softmax(c u)`` in float64 (for analysis and tests)."""
        u = self._utilities(utilities)
        top = max(u)
        z = np.array([-float(self.coefficient * (top - x)) for x in u])
        w: np.ndarray = np.exp(z)
        p: np.ndarray = w / float(w.sum())
        return p

    @overload
    def select(self, utilities: Sequence[object], size: None = None) -> int: ...

    @overload
    def select(self, utilities: Sequence[object], size: int) -> np.ndarray: ...

    def select(self, utilities: Sequence[object], size: int | None = None) -> int | np.ndarray:
        """Index of the selected candidate, or ``size`` independent selections.

        Each selection is one invocation of the mechanism: ``size`` selections cost
        ``size`` times ``privacy_cost()``.
        """
        u = self._utilities(utilities)
        top = max(u)
        gaps = [self.coefficient * (top - x) for x in u]
        if size is None:
            return self._draw(gaps)
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError("size must be an int")
        if size < 0:
            raise ValueError("size must be >= 0")
        return np.array([self._draw(gaps) for _ in range(size)], dtype=np.int64)

    def _draw(self, gaps: list[Fraction]) -> int:
        k = len(gaps)
        while True:
            i: int = uniform_below(self.rng, k)
            g = gaps[i]
            if bernoulli_exp(self.rng, g.numerator, g.denominator):
                return i

    def privacy_cost(self) -> tuple[Fraction, Fraction]:
        return self.epsilon_actual, Fraction(0)

    def __repr__(self) -> str:
        extra = ", monotone=True" if self.monotone else ""
        if self.paper_mode:
            extra = ", paper_mode=True: NOT %s-DP, actually %s-DP" % (_fmt(self.epsilon), _fmt(self.epsilon_actual))
        return "Exponential(epsilon=%s, sensitivity=%s%s)" % (_fmt(self.epsilon), _fmt(self.sensitivity), extra)
