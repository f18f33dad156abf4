"""Parameter validation of the mechanisms: TypeError for a wrong type, ValueError for a wrong range."""
import random
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from dpsense.cloud.privacy.mechanisms import Exponential, Gaussian, Laplace, SmoothSensitivityGaussian
from dpsense.cloud.privacy.validation import as_fraction, check_bounds, check_value

LAPLACE = {"epsilon": 1, "sensitivity": 1}
GAUSS = {"epsilon": 1, "delta": 1e-5, "sensitivity": 1}
SMOOTH = {"epsilon": 1, "delta": 1e-5}
EXPO = {"epsilon": 1, "sensitivity": 1}


def _with(base, **changes):
    return {**base, **changes}


class _NotAnRng:
    """Has no ``random``; its repr is the same in every process, so the test ids are too (the
    pytest -n workers must collect the same ids)."""

    def __repr__(self) -> str:
        return "NotAnRng()"


BAD = [
    (Laplace, _with(LAPLACE, epsilon=0), ValueError),
    (Laplace, _with(LAPLACE, epsilon=-1), ValueError),
    (Laplace, _with(LAPLACE, epsilon=float("nan")), ValueError),
    (Laplace, _with(LAPLACE, epsilon=float("inf")), ValueError),
    (Laplace, _with(LAPLACE, epsilon="1"), TypeError),
    (Laplace, _with(LAPLACE, epsilon=True), TypeError),
    (Laplace, _with(LAPLACE, epsilon=None), TypeError),
    (Laplace, _with(LAPLACE, sensitivity=0), ValueError),
    (Laplace, _with(LAPLACE, sensitivity=-0.5), ValueError),
    (Laplace, _with(LAPLACE, sensitivity=[1]), TypeError),
    (Laplace, _with(LAPLACE, granularity=0), ValueError),
    (Laplace, _with(LAPLACE, granularity="fine"), TypeError),
    (Laplace, _with(LAPLACE, values_on_grid=1), TypeError),
    (Laplace, _with(LAPLACE, rng=_NotAnRng()), TypeError),
    (Gaussian, _with(GAUSS, delta=0), ValueError),
    (Gaussian, _with(GAUSS, delta=1), ValueError),
    (Gaussian, _with(GAUSS, delta=-1e-9), ValueError),
    (Gaussian, _with(GAUSS, delta="0.1"), TypeError),
    (Gaussian, _with(GAUSS, epsilon=0), ValueError),
    (Gaussian, _with(GAUSS, sensitivity=0), ValueError),
    (Gaussian, _with(GAUSS, calibration="analytic"), ValueError),
    (Gaussian, _with(GAUSS, calibration=1), TypeError),
    (SmoothSensitivityGaussian, _with(SMOOTH, delta=0), ValueError),
    (SmoothSensitivityGaussian, _with(SMOOTH, epsilon=-1), ValueError),
    (SmoothSensitivityGaussian, _with(SMOOTH, floor=0), ValueError),
    (SmoothSensitivityGaussian, _with(SMOOTH, paper_mode="yes"), TypeError),
    (SmoothSensitivityGaussian, _with(SMOOTH, granularity=-1), ValueError),
    (Exponential, _with(EXPO, epsilon=0), ValueError),
    (Exponential, _with(EXPO, sensitivity=0), ValueError),
    (Exponential, _with(EXPO, monotone="no"), TypeError),
    (Exponential, _with(EXPO, monotone=True, paper_mode=True), ValueError),
    (Exponential, _with(EXPO, rng=42), TypeError),
]


@pytest.mark.parametrize("cls, kwargs, exc", BAD, ids=[f"{c.__name__}-{k}" for c, k, _ in BAD])
def test_bad_parameters_are_rejected(cls, kwargs, exc):
    with pytest.raises(exc):
        cls(**kwargs)


@pytest.mark.parametrize("cls", [Laplace, Gaussian, Exponential, SmoothSensitivityGaussian])
def test_parameters_are_keyword_only(cls):
    with pytest.raises(TypeError):
        cls(1, 1)


@pytest.mark.parametrize("value, exc", [("3", TypeError), (None, TypeError), (float("nan"), ValueError),
                                        (float("inf"), ValueError), ([1.0], TypeError)])
def test_bad_values_are_rejected(value, exc):
    with pytest.raises(exc):
        Laplace(epsilon=1, sensitivity=1).randomise(value)
    with pytest.raises(exc):
        Gaussian(epsilon=1, delta=1e-5, sensitivity=1).randomise(value)
    with pytest.raises(exc):
        SmoothSensitivityGaussian(epsilon=1, delta=1e-5).randomise(value, 1.0)


@pytest.mark.parametrize("utilities, exc", [([], ValueError), ("abc", TypeError), ([1.0, "x"], TypeError),
                                            ([1.0, float("nan")], ValueError), ([[1.0, 2.0]], ValueError),
                                            (3.0, ValueError)])
def test_bad_utilities_are_rejected(utilities, exc):
    with pytest.raises(exc):
        Exponential(epsilon=1, sensitivity=1).select(utilities)


def test_bad_smooth_sensitivity_is_rejected():
    mech = SmoothSensitivityGaussian(epsilon=1, delta=1e-5)
    with pytest.raises(ValueError):
        mech.randomise(1.0, -0.1)
    with pytest.raises(TypeError):
        mech.randomise(1.0, "big")


def test_numbers_are_read_exactly():
    """Float parameters are read as the decimal they print as, data values as their binary value."""
    assert as_fraction("x", 0.1) == Fraction(1, 10)
    assert check_value(0.1) == Fraction(0.1) != Fraction(1, 10)
    assert as_fraction("x", np.float64(0.1)) == Fraction(1, 10)
    assert as_fraction("x", np.int32(7)) == 7
    assert as_fraction("x", Decimal("0.25")) == Fraction(1, 4)
    assert as_fraction("x", Fraction(1, 3)) == Fraction(1, 3)
    with pytest.raises(ValueError):
        as_fraction("x", Decimal("NaN"))


@pytest.mark.parametrize("bounds, exc", [(None, ValueError), ((1, 0), ValueError), ([0, 1], TypeError),
                                         ((0,), TypeError), ((0, "1"), TypeError)])
def test_bad_bounds_are_rejected(bounds, exc):
    with pytest.raises(exc):
        check_bounds(bounds)


def test_default_rng_is_the_system_csprng():
    import secrets
    assert isinstance(Laplace(epsilon=1, sensitivity=1).rng, secrets.SystemRandom)
    rng = random.Random(1)
    assert Laplace(epsilon=1, sensitivity=1, rng=rng).rng is rng


def test_reprs_state_the_parameters():
    assert repr(Laplace(epsilon=0.5, sensitivity=2, granularity=1)) == \
        "Laplace(epsilon=0.5, sensitivity=2, granularity=1)"
    assert "calibration='zcdp'" in repr(Gaussian(epsilon=1, delta=1e-5, sensitivity=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert "NOT" in repr(SmoothSensitivityGaussian(epsilon=1, delta=0.01, paper_mode=True))
    assert "NOT" not in repr(SmoothSensitivityGaussian(epsilon=1, delta=0.01))
