"""What the micro:bit node starts from, worked out in the boot that checks its config
(tools/microbit.py): the node's own heap has no room for this code.
"""


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
    a = _gcd(n, q)
    return n // a, q // a


def ledger(d, m, eps, cap, win):
    """The node's ledger as its last release left it (mbio.ledger's files ``la``/``lb``),
    and its units: (counter, readings seen, epsilon spent in their window, unit, epsilon
    of a record, window cap), epsilons in 1/unit; (0, 0, 0, ...) for a fresh one. ``m``
    columns at ``eps`` (num, den) each, ``cap`` (num, den) per window of ``win``
    readings. A torn file (no final ``;``) is skipped: the other one is one release
    older. A ledger kept under another unit or window length (the board was provisioned
    again) is not continued."""
    un = eps[1] * cap[1] // _gcd(eps[1], cap[1])
    v = [0, 0, 0, un, win]
    for n in ("la", "lb"):
        try:
            f = open(d + n)
            t = f.read()
            f.close()
            b = [int(x) for x in t[:-1].split()]
        except (OSError, ValueError):
            continue
        if t[-1:] == ";" and len(b) == 5 and b[0] > v[0] and b[3:] == v[3:]:
            v = b
    return v[0], v[1], v[2], un, m * eps[0] * (un // eps[1]), cap[0] * (un // cap[1])


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a
