"""The micro:bit node's config file, read and checked on the board with config.py's rules.

    import mbcfg
    a = mbcfg.load("config.txt")    # (dev, cfg_id, cols, eps, centre, win, cap) for mbnode.run,
                                    # or None: it printed "config error: <key>: ..."

``load(name, out)`` returns the arguments of ``mbnode.run`` but the last two (``worst``,
which the host adds at provisioning, and ``led``, which ``mbstate`` works out in a boot of
its own) or writes exactly one line, ``config error: <key>: <problem>\\n``, with ``out``
(default: print) and returns None.

Format (tools/provision.py ``microbit_config_text`` writes it): one ``key=value`` a line;
blank lines and lines starting with ``#`` are skipped, spaces around key and value are
ignored. A value is an int (``-5000``), a "string" (what is between the first and last
``"``: no escapes) or a flat list of those (``[0,1650]``); any other value (``0.5``,
``true``, ``null``) has no type the checks accept. Column ``j`` comes key by key as
``columns[j].<key>``; ``columns[j]={}`` is an empty column. Example::

    device_id=7
    columns[0].num=1
    columns[0].den=1
    columns[0].offset=0
    columns[0].raw_min=-5000
    columns[0].raw_max=5000
    columns[0].delta_q=25
    epsilon="0.5"
    centre=[0]
    window_records=600
    window_cap="600"
    broker_host="192.168.1.20"

Checks and messages are firmware/config.py's for the micro:bit profile: device_id,
config_id (default 0), columns (1..3: the board has 3 ADC inputs; num, den, offset,
raw_min, raw_max, delta_q, all required ints), epsilon and window_cap (decimal strings,
exact reduced fractions as shared_protocol.fixedpoint.parse_decimal), centre (one int a
column), window_records (window_seconds is refused: the node has no clock). The
gateway's broker_host, broker_port and broker_user are checked when given and not
returned. Any other key is unknown (broker_password and the host's period_ms too); a key
given twice is an error; a line without ``=`` is named itself (``hello: not key=value``);
a missing file is ``<name>: cannot open the config file`` (app.py's message).

Heap (measured on the emulated micro:bit): the board keeps every imported module (no
sys.modules) and the qstrs of every compiled one, which leaves the heap too fragmented to
compile mbutil/noise/mbnode afterwards, with ``import`` or ``exec`` alike. So the board
checks its config in a boot of its own when it is provisioned (tools/microbit.py
``check_microbit_config``): this module is written, imported, ``load()`` writes
``repr(args)`` to ``mbargs.txt``, and the module is removed again (its 28 flash chunks
are the node's). Keep this file small all the same (tests/unit/test_mbcfg_host.py bounds
its size after tools/deploy.py's shrinking): the board compiles a module in one
contiguous block about its size, which is why the whole-domain epsilon is the host's.
The column keys and the bounds are config.py's, brought in as code at deploy
(tools/mbgen.py); the keys the board takes are its own (``_K``: the micro:bit's keys and
its gateway's, in that order), each one of config.py's.
"""
from shared_protocol.config import _BIG as _B, _COLUMN_KEYS as _C, _U32 as _U
_K = ("device_id", "config_id", "columns", "epsilon", "centre", "window_records",
      "window_seconds", "window_cap", "broker_host", "broker_port", "broker_user")


def load(name="config.txt", out=None):
    try:
        d, m = _r(name)
        a = _i(d, "device_id", 1, _U)
        b = _i(d, "config_id", 0, 65535, 0)
        cols = _c(d, m)
        eps = _d(d, "epsilon")
        c = d.get("centre")
        if type(c) is not list or len(c) != m or [v for v in c if type(v) is not int]:
            raise _E("centre", "must be a list of %d ints (one per column)" % m)
        k = "window_seconds"
        if ("window_records" in d) == (k in d):
            raise _E("window_records", "set exactly one of window_records and " + k)
        w = _i(d, "window_records", 1, _U, 1)
        _i(d, k, 1, _U, 1)
        cap = _d(d, "window_cap")
        if cap[0] * eps[1] < m * eps[0] * cap[1]:
            raise _E("window_cap", "must be at least the epsilon of one record (%d x %s)"
                     % (m, d["epsilon"]))
        for v in _K[8:]:
            if v not in d:
                pass
            elif v[7] == "p":
                _i(d, v, 1, 65535)
            elif type(d[v]) is not str or not d[v]:
                raise _E(v, "must be a non-empty string")
        if k in d:
            raise _E(k, "no clock on the micro:bit: give window_records")
        return a, b, cols, eps, c, w, cap
    except _E as e:
        k = "config error: %s: %s\n" % e.args
        if out:
            out(k)
        else:
            print(k, end="")


def _r(name):
    """The file's lines as {key: value}, and the number of columns."""
    d = {}
    m = 0
    try:
        f = open(name)
    except OSError:
        raise _E(name, "cannot open the config file")
    try:
        while True:             # a line at a time: the whole file and its split do not fit
            k = f.readline()
            if not k:
                break
            k = k.strip()
            i = k.find("=")
            if not k or k[0] == "#":
                continue
            if i < 1:
                raise _E(k, "not key=value")
            v = k[i + 1:].strip()
            k = k[:i].strip()
            if v[:1] == "[" and v[-1:] == "]":
                v = [_v(x.strip()) for x in v[1:-1].split(",")]
            else:
                v = _v(v)
            if k[:8] == "columns[":
                p = k[8:].split("]")
                i = p[-1]
                if len(p) != 2 or not p[0].isdigit() or i and (i[0] != "." or i[1:] not in _C):
                    raise _E(k, "unknown key")
                m = max(m, int(p[0]) + 1)
            elif k not in _K:
                raise _E(k, "unknown key")
            if k in d:
                raise _E(k, "given twice")
            d[k] = v
    finally:
        f.close()
    return d, m


def _c(d, m):
    """The columns as mbnode.run takes them."""
    if "columns" in d or m > 3:
        raise _E("columns", "must be a list of 1..3 column objects (3 ADC inputs)")
    if not m:
        raise _E("columns", "required")
    o = []
    for j in range(m):
        w = "columns[%d]" % j
        if d.get(w, ("{}",)) != ("{}",):
            raise _E(w, "must be an object with " + ", ".join(_C))
        c = []
        for k in _C:
            # den and delta_q, the keys starting with d, are >= 1
            c.append(_i(d, w + "." + k, 1 if k[0] == "d" else -_B, _B))
        if not c[0]:
            raise _E(w + ".num", "must be non-zero")
        if c[4] < c[3]:
            raise _E(w + ".raw_max", "must be >= raw_min")
        o.append(tuple(c))
    return o


def _d(d, k):
    """config.py's _dec: fixedpoint.parse_decimal's exact, reduced (num, den)."""
    v = d.get(k)
    if v is None:
        raise _E(k, "required")
    if type(v) is str:
        p = v.split(".")
        s = "".join(p)
        if len(p) < 3 and s.isdigit() and p[-1] and int(s):
            n = a = int(s)
            e = b = 10 ** (len(s) - len(p[0]))
            while b:
                a, b = b, a % b
            return n // a, e // a
    raise _E(k, 'must be a decimal > 0 (a string such as "0.5")')


def _i(d, k, lo, hi, v=None):
    v = d.get(k, v)
    if v is None:
        raise _E(k, "required")
    if type(v) is not int:
        raise _E(k, "must be an int")
    if v < lo or v > hi:
        raise _E(k, "must be in %d..%d" % (lo, hi))
    return v


def _v(s):
    """A scalar: "string", int, else (text,)."""
    if len(s) > 1 and s[0] == '"' == s[-1]:
        return s[1:-1]
    try:
        return int(s)
    except ValueError:
        return (s,)


class _E(Exception):
    pass
