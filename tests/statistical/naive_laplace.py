"""The naive float Laplace a float32 MicroPython board computes, modelled in numpy.

    y = -b * sign(u - 0.5) * log(1 - 2 * abs(u - 0.5));  release x + y

This is the textbook inverse-cdf sampler, and the mechanism Mironov ("On
Significance of the Least Significant Bits for Differential Privacy", CCS 2012)
broke: the set of float values ``x + y`` can take depends on ``x``, so some outputs
identify the input outright. ``DiscreteLaplace`` exists to avoid it; this model is
the negative control of the privacy tests.

Fidelity to the board (ESP32, RP2040: ``MICROPY_FLOAT_IMPL_FLOAT``):

* ``random.random()`` sets 23 random mantissa bits of a float in ``[1, 2)`` and
  subtracts 1, so ``u = k * 2**-23`` with ``k`` uniform in ``0 .. 2**23 - 1``;
* every arithmetic step is a float32 operation, rounded once, evaluated in the
  order MicroPython evaluates the expression (left to right);
* ``log`` is float32 ``logf`` (numpy's float32 ``log`` here; both are within an
  ulp or so, which does not change the lattice the attack reads);
* ``u = 0`` gives ``log(0)`` (a ``ValueError`` on the board) and is redrawn.
"""

import numpy as np

_F32 = np.float32
_U_BITS = 23


def naive_float32_laplace(x: float, b: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` releases ``x + Laplace(b)`` as a float32 board computes them naively.

    Parameters
    ----------
    x : float
        The true value (rounded to float32 first, as the board stores it).
    b : float
        Laplace scale (rounded to float32).
    n : int
        Number of releases.
    rng : numpy.random.Generator
        Source of the board's 23-bit ``random.random()`` draws.

    Returns
    -------
    numpy.ndarray
        float32 array of shape ``(n,)``.
    """
    k = rng.integers(0, 1 << _U_BITS, size=n)
    while True:
        redraw = k == 0
        m = int(np.count_nonzero(redraw))
        if not m:
            break
        k[redraw] = rng.integers(0, 1 << _U_BITS, size=m)
    u = k.astype(_F32) * _F32(2.0**-_U_BITS)  # exact: k < 2**24
    d = u - _F32(0.5)
    arg = _F32(1.0) - _F32(2.0) * np.abs(d)
    neg_b_sign = _F32(-b) * np.sign(d)
    y = neg_b_sign * np.log(arg)
    return _F32(x) + y
