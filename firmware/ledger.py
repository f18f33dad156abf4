"""The board's privacy ledger: epsilon spent per record and per window, with a cap.

    led = Ledger(row=(1, 5), cap=(1, 1), window_records=100, path="ledger.bin")
    if led.charge() == OK:       # spend (persisted) before the record is released
        release()

Amounts are exact fractions: ``row`` is the epsilon of one record (the sum over its
columns, ``RecordMechanism.epsilon_row()``), ``cap`` the most a window may spend.
Both are kept in integer units of ``1/lcm(den_row, den_cap)``, so no rounding
ever lets a window exceed its cap.

A window is ``window_records`` consecutive readings (released or withheld) or
``window_seconds`` of ``clock.time()``; seconds windows need a clock that survives a
reset (RTC or NTP). ``charge()`` returns OK and records the spend, WITHHELD when the
record would pass the cap, or CAPPED the first time that happens in a window.

The state is written to ``path`` on every spend, before the record exists, so a
reset cannot hand a window a fresh budget; a reset after a spend whose record was
never stored costs budget without releasing anything (the safe side). Withheld
readings are counted in RAM only, so after a reset a records window can only last
longer.
"""

import struct

OK = 0
WITHHELD = 1
CAPPED = 2

_MAGIC = b"DPL1"
_FMT = "<4sIIIII"           # magic, unit_den, window, spent, reads, total (units)
_U32 = 0xFFFFFFFF


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


def frac_text(num, den):
    """``"3/10"``, or ``"2"`` for a whole number."""
    g = _gcd(num, den)
    num //= g
    den //= g
    return "%d" % num if den == 1 else "%d/%d" % (num, den)


class Ledger:
    """Epsilon accounting for one board; see the module docstring."""

    def __init__(self, row, cap, window_records=0, window_seconds=0, path=None, clock=None):
        if (window_records > 0) == (window_seconds > 0):
            raise ValueError("exactly one of window_records and window_seconds must be > 0")
        rn, rd = row
        cn, cd = cap
        if rn <= 0 or rd <= 0 or cn <= 0 or cd <= 0:
            raise ValueError("row and cap must be positive fractions")
        den = rd * cd // _gcd(rd, cd)
        self.unit_den = den
        self.row = rn * (den // rd)
        self.cap = cn * (den // cd)
        if self.row > self.cap:
            raise ValueError("cap is below the epsilon of one record")
        self.window_records = window_records
        self.window_seconds = window_seconds
        self.path = path
        if window_seconds and clock is None:
            import time as clock
        self.clock = clock
        self.window = self._window_now(0)
        self.spent = 0
        self.reads = 0
        self.total = 0
        self.withheld = 0
        self.capped = False
        self._f = None
        if path is not None:
            self._load()

    def _window_now(self, reads):
        if self.window_records:
            return reads // self.window_records
        return int(self.clock.time()) // self.window_seconds

    def _load(self):
        try:
            f = open(self.path, "r+b")
        except OSError:
            f = open(self.path, "w+b")
        data = f.read(struct.calcsize(_FMT))
        self._f = f
        if len(data) != struct.calcsize(_FMT):
            return
        magic, den, window, spent, reads, total = struct.unpack(_FMT, data)
        if magic != _MAGIC or den == 0:
            return
        if den != self.unit_den:
            # New provisioning: convert, rounding spends up (never undercount).
            spent = (spent * self.unit_den + den - 1) // den
            total = (total * self.unit_den + den - 1) // den
        self.reads = reads
        self.total = total
        self.window = self._window_now(reads)
        if self.window == window:
            self.spent = spent

    def _save(self):
        if self._f is None:
            return
        self._f.seek(0)
        self._f.write(struct.pack(_FMT, _MAGIC, self.unit_den, self.window & _U32,
                                  self.spent, self.reads & _U32, min(self.total, _U32)))
        self._f.flush()

    def charge(self):
        """Account for one reading: OK (spent), WITHHELD, or CAPPED (first withheld)."""
        w = self._window_now(self.reads)
        self.reads += 1
        if w != self.window:
            self.window = w
            self.spent = 0
            self.withheld = 0
            self.capped = False
        if self.spent + self.row > self.cap:
            self.withheld += 1
            if self.capped:
                return WITHHELD
            self.capped = True
            return CAPPED
        self.spent += self.row
        self.total += self.row
        self._save()
        return OK

    def spent_text(self):
        return frac_text(self.spent, self.unit_den) if self.spent else "0"

    def cap_text(self):
        return frac_text(self.cap, self.unit_den)

    def total_text(self):
        return frac_text(self.total, self.unit_den) if self.total else "0"

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None
