"""The micro:bit node's ledger as its last release left it, read back in a boot of its own
before every start of the node (tools/microbit.py): the node's own heap has no room for
this code.
"""
from ledger import _gcd      # code on the micro:bit (tools/mbgen.py): ledger.py's own


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

