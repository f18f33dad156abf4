"""Integer fixed point: raw sensor units -> integer quanta, and exact decimals.

    col = Affine(num=3300, den=65535, offset=0, raw_min=0, raw_max=65535)
    col.apply(32768)          # ADC u16 -> millivolts, rounded half up: 1650
    parse_decimal("0.1")      # (1, 10): epsilon as an exact fraction

The map is ``q = floor((2 * num * clamp(raw) + den) / (2 * den)) + offset``: integer
arithmetic only, so CPython, the 64-bit unix port and float32 boards agree bit for
bit. ``raw`` is clamped to ``[raw_min, raw_max]``; that bounded domain is what makes
the worst-case (outlier) epsilon finite, see ``Affine.span_q``.
"""


class Affine:
    """Per-column affine map from integer raw units to integer quanta."""

    def __init__(self, num, den, offset, raw_min, raw_max):
        for name, v in (("num", num), ("den", den), ("offset", offset),
                        ("raw_min", raw_min), ("raw_max", raw_max)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError("%s must be an int, got %r" % (name, v))
        if num == 0:
            raise ValueError("num must be non-zero")
        if den <= 0:
            raise ValueError("den must be > 0")
        if raw_min > raw_max:
            raise ValueError("raw_min must be <= raw_max")
        self.num = num
        self.den = den
        self.offset = offset
        self.raw_min = raw_min
        self.raw_max = raw_max

    def apply(self, raw):
        if not isinstance(raw, int):
            raise ValueError("raw reading must be an int, got %r" % (raw,))
        if raw < self.raw_min:
            raw = self.raw_min
        elif raw > self.raw_max:
            raw = self.raw_max
        d = 2 * self.den
        return (2 * self.num * raw + self.den) // d + self.offset

    def span_q(self):
        """Width of the whole output domain in quanta (the global sensitivity)."""
        a = self.apply(self.raw_min)
        b = self.apply(self.raw_max)
        return b - a if b >= a else a - b


def parse_decimal(text):
    """Exact ``(num, den)`` of a positive decimal string such as ``"0.25"`` or ``"2"``."""
    if not isinstance(text, str) or not text:
        raise ValueError("expected a decimal string")
    whole, dot, frac = text.partition(".")
    if (not whole and not frac) or not _digits(whole) or not _digits(frac):
        raise ValueError("not a plain decimal: %r" % text)
    if dot and not frac:
        raise ValueError("not a plain decimal: %r" % text)
    den = 10 ** len(frac)
    num = int(whole or "0") * den + int(frac or "0")
    if num <= 0:
        raise ValueError("must be > 0: %r" % text)
    a, b = num, den
    while b:
        a, b = b, a % b
    return num // a, den // a


def _digits(s):
    for c in s:
        if c < "0" or c > "9":
            return False
    return True
