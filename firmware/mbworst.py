"""The whole-domain epsilon of a micro:bit record, for firmware/mbcfg.py (which see)."""


def worst(cols, eps):
    """Epsilon of a record whose columns take any two values of their clamped domains
    (mechanism.RecordMechanism.epsilon_row_worst), as a reduced (num, den); ``cols`` as
    mbnode.run takes them, ``eps`` the (num, den) of each column."""
    n = 0
    q = 1
    for c in cols:
        a = abs((2 * c[0] * c[4] + c[1]) // (2 * c[1]) - (2 * c[0] * c[3] + c[1]) // (2 * c[1]))
        b = eps[1] * c[5]
        n = n * b + eps[0] * (a if a > c[5] else c[5]) * q
        q *= b
    a = n
    b = q
    while b:
        a, b = b, a % b
    return n // a, q // a
