"""Parameter checks shared by the mechanisms, the accountant and the queries.

Every check returns the cleaned value, raises ``TypeError`` for a value of the wrong
type and ``ValueError`` for one out of range (diffprivlib's convention).

Privacy parameters are kept as exact rationals. A float parameter is read as the
decimal it prints as, so ``epsilon=0.1`` means exactly ``1/10``: the noise is
calibrated to that rational and the accountant adds those rationals, so ten spends
of 0.1 exhaust a budget of 1 exactly, with no rounding either way. Values computed
from the data are read as their exact binary value (:func:`check_value`).
"""
from __future__ import annotations

import math
import numbers
import secrets
from decimal import Decimal
from fractions import Fraction
from typing import Protocol, runtime_checkable

__all__ = [
    "Rng",
    "as_fraction",
    "check_bounds",
    "check_delta",
    "check_epsilon",
    "check_granularity",
    "check_rng",
    "check_sensitivity",
    "check_value",
    "is_integer",
    "is_real",
]


def is_integer(x: object) -> bool:
    """An integer other than a bool: int, numpy integers, any ``numbers.Integral``.

    A predicate rather than an ``isinstance`` test at the call site: typeshed does not
    register int as ``numbers.Integral``, so for a parameter annotated ``int`` the type
    checker would take the code after such a test for unreachable and skip it.
    """
    return not isinstance(x, bool) and isinstance(x, numbers.Integral)


def is_real(x: object) -> bool:
    """A real number other than a bool: int, float, Fraction, numpy scalars (see is_integer)."""
    return not isinstance(x, bool) and isinstance(x, numbers.Real)


@runtime_checkable
class Rng(Protocol):
    """The one method every random source provides: ``getrandbits(k)`` for ``k <= 30``.

    Met by ``secrets.SystemRandom()`` (the default), ``random.Random(seed)`` and
    ``dpsense.protocol.rng.XorShift32(seed)``.
    """

    def getrandbits(self, k: int, /) -> int: ...


def as_fraction(name: str, x: object, *, binary: bool = False) -> Fraction:
    """Exact rational value of a real number; floats are read as the decimal they print as.

    Parameters
    ----------
    name : str
        Parameter name, for error messages.
    x : int, float, Fraction, Decimal or numpy scalar
        The value. ``bool`` is refused.
    binary : bool, optional
        Read a float as its exact binary value instead. Used for values computed
        from the data (answers, utilities, smooth bounds): their sensitivity holds
        for the floats the query produced, and reading them as decimals would move
        each by up to half an ulp.

    Returns
    -------
    fractions.Fraction

    Raises
    ------
    TypeError
        If ``x`` is not a real number (strings and booleans included).
    ValueError
        If ``x`` is nan or infinite.
    """
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, Decimal)):
        raise TypeError("%s must be a real number, got %s" % (name, type(x).__name__))
    if isinstance(x, (Fraction, numbers.Integral)):
        return Fraction(int(x)) if isinstance(x, numbers.Integral) else x
    if isinstance(x, Decimal):
        if not x.is_finite():
            raise ValueError("%s must be finite, got %s" % (name, x))
        return Fraction(x)
    f = float(x)
    if not math.isfinite(f):
        raise ValueError("%s must be finite, got %r" % (name, f))
    return Fraction(f) if binary else Fraction(repr(f))


def check_epsilon(epsilon: object, *, allow_zero: bool = False) -> Fraction:
    """``epsilon > 0`` (or ``>= 0`` with ``allow_zero``), as an exact rational."""
    e = as_fraction("epsilon", epsilon)
    if e < 0 or (e == 0 and not allow_zero):
        raise ValueError("epsilon must be %s, got %s" % (">= 0" if allow_zero else "> 0", epsilon))
    return e


def check_delta(delta: object, *, allow_zero: bool = True, allow_one: bool = False) -> Fraction:
    """``0 <= delta < 1`` (bounds adjustable), as an exact rational."""
    d = as_fraction("delta", delta)
    if d < 0 or (d == 0 and not allow_zero) or d > 1 or (d == 1 and not allow_one):
        lo = "0 <=" if allow_zero else "0 <"
        hi = "<= 1" if allow_one else "< 1"
        raise ValueError("delta must satisfy %s delta %s, got %s" % (lo, hi, delta))
    return d


def check_sensitivity(sensitivity: object, name: str = "sensitivity") -> Fraction:
    """``sensitivity > 0``, as an exact rational."""
    s = as_fraction(name, sensitivity)
    if s <= 0:
        raise ValueError("%s must be > 0, got %s" % (name, sensitivity))
    return s


def check_granularity(granularity: object) -> Fraction:
    """Grid step ``> 0``, as an exact rational."""
    g = as_fraction("granularity", granularity)
    if g <= 0:
        raise ValueError("granularity must be > 0, got %s" % granularity)
    return g


def check_value(value: object, name: str = "value") -> Fraction:
    """A finite real computed from the data, as the exact rational it is (floats: binary value)."""
    return as_fraction(name, value, binary=True)


def check_bounds(bounds: object) -> tuple[Fraction, Fraction]:
    """``(lower, upper)`` with ``lower <= upper``; missing bounds are an error, not a warning."""
    if bounds is None:
        raise ValueError("bounds are required: a data-dependent range is not covered by the privacy proof")
    if not isinstance(bounds, tuple) or len(bounds) != 2:
        raise TypeError("bounds must be a (lower, upper) tuple, got %r" % (bounds,))
    lo = as_fraction("lower bound", bounds[0])
    hi = as_fraction("upper bound", bounds[1])
    if lo > hi:
        raise ValueError("lower bound %s exceeds upper bound %s" % (bounds[0], bounds[1]))
    return lo, hi


def check_rng(rng: object) -> Rng:
    """The given random source, or ``secrets.SystemRandom()`` for ``None``."""
    if rng is None:
        return secrets.SystemRandom()
    if not isinstance(rng, Rng) or not callable(getattr(rng, "getrandbits", None)):
        raise TypeError("rng must have a getrandbits(k) method, got %s" % type(rng).__name__)
    return rng
