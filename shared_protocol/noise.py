"""Exact discrete Laplace noise from integer arithmetic only.

    from .rng import XorShift32
    lap = DiscreteLaplace(73, 10, XorShift32(1))   # scale 7.3 quanta
    lap.sample()

Guarantee
---------
``DiscreteLaplace(num, den)`` has pmf ``P(y) = tanh(1/(2b)) * exp(-|y|/b)`` on the
integers, ``b = num/den``. Added to an integer ``x``, it is ``epsilon``-DP for any
two inputs with ``|x - x'| <= Delta`` when ``b = Delta/epsilon``: the ratio of the
pmfs at any output is at most ``exp(|x - x'|/b)``. Nothing is rounded, so there is
no floating-point leak (Mironov, CCS 2012): the released integer is exactly
distributed as stated, whatever the float width of the board.

Construction: Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential
Privacy", NeurIPS 2020, Algorithms 1 and 2. The only randomness used is
``rng.getrandbits(k)`` with ``k <= 30``, so any source meeting that protocol works
(``rng.UrandomRNG`` on boards, ``rng.XorShift32`` in tests).
"""


def _check_positive_int(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ValueError("%s must be a positive int, got %r" % (name, v))


def bernoulli_exp(rng, num, den):
    """Return 1 with probability exactly ``exp(-num/den)``, else 0 (``num >= 0``)."""
    if not isinstance(num, int) or num < 0:
        raise ValueError("num must be an int >= 0")
    _check_positive_int("den", den)
    return _bexp(rng, num, den)


def _bexp(rng, num, den):
    # exp(-g) = exp(-1)**floor(g) * exp(-(g - floor(g))), each factor by CKS Algorithm 1
    # (for 0 <= n/d <= 1: draw Bernoulli(n/(d*k)) for k = 1, 2, ... until one fails; the
    # index of the failure is odd with probability exp(-n/d)). Flat on purpose: the
    # micro:bit allows about six nested Python calls, so the uniform draw
    # (shared_protocol.rng.uniform_below: the same draws in the same order) is written
    # out here and this function calls nothing but ``rng.getrandbits``.
    while True:
        if num > den:
            n = 1
            d = 1
        else:
            n = num
            d = den
        k = 1
        while True:
            m = d * k
            if m == 1:
                r = 0
            else:
                x = m - 1
                b = 0
                while x >= 0x10000:
                    x >>= 16
                    b += 16
                while x:
                    x >>= 1
                    b += 1
                while True:
                    if b <= 30:
                        r = rng.getrandbits(b)
                    else:
                        r = 0
                        left = b
                        while left > 0:
                            c = 30 if left > 30 else left
                            r = (r << c) | rng.getrandbits(c)
                            left -= c
                    if r < m:
                        break
            if r >= n:
                break
            k += 1
        if num <= den:
            return k & 1
        if not k & 1:
            return 0
        num -= den


class DiscreteLaplace:
    """Two-sided geometric noise with rational scale ``num/den`` (in quanta).

    Parameters are validated at construction; ``sample()`` draws one int.
    """

    def __init__(self, num, den, rng):
        _check_positive_int("num", num)
        _check_positive_int("den", den)
        g = _gcd(num, den)
        self.num = num // g
        self.den = den // g
        self._rng = rng

    def sample(self):
        t = self.num
        s = self.den
        rng = self._rng
        while True:
            # u = uniform_below(rng, t), written out (see _bexp); t >= 1
            u = 0
            if t > 1:
                x = t - 1
                b = 0
                while x >= 0x10000:
                    x >>= 16
                    b += 16
                while x:
                    x >>= 1
                    b += 1
                while True:
                    if b <= 30:
                        u = rng.getrandbits(b)
                    else:
                        u = 0
                        left = b
                        while left > 0:
                            c = 30 if left > 30 else left
                            u = (u << c) | rng.getrandbits(c)
                            left -= c
                    if u < t:
                        break
            if not _bexp(rng, u, t):
                continue
            v = 0
            while _bexp(rng, 1, 1):
                v += 1
            y = (u + t * v) // s
            neg = rng.getrandbits(1)
            if neg and y == 0:
                continue
            return -y if neg else y


def scale_for(delta_q, eps_num, eps_den):
    """Scale ``Delta/epsilon`` as a reduced fraction ``(num, den)``; epsilon = eps_num/eps_den."""
    _check_positive_int("delta_q", delta_q)
    _check_positive_int("eps_num", eps_num)
    _check_positive_int("eps_den", eps_den)
    num = delta_q * eps_den
    g = _gcd(num, eps_num)
    return num // g, eps_num // g


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a
