"""The board's privacy ledger: epsilon spent per record, per window and in its lifetime.

    led = Ledger(row=(1, 5), cap=(1, 1), window_records=100, path="ledger.bin",
                 lifetime=(100, 1))
    if led.charge() == OK:       # spend (persisted) before the record is released
        release()

Amounts are exact fractions: ``row`` is the epsilon of one record (the sum over its
columns, ``RecordMechanism.epsilon_row()``), ``cap`` the most a window may spend and
``lifetime`` the most the board may spend until it is provisioned again. All are kept
in integer units of ``1/lcm`` of their denominators, so no rounding ever lets a window
or the lifetime exceed its cap.

What a record costs. Every released record is charged ``row``, whatever its value: the
guarantee between two readings that both lie in a column's normal range (relaxed
sensitivity, docs/privacy.md). A reading outside the normal range is less protected, up
to the whole-domain epsilon of a record (``RecordMechanism.epsilon_row_worst()``); the
ledger does not charge that by the reading's value, because a withhold decision that
depended on the value would itself release it. The whole-domain cost of what was
released is ``released x worst``, which the board reports next to ``total``.

A window is ``window_records`` consecutive readings (released or withheld) or
``window_seconds`` of ``clock.time()``. Seconds windows are accepted by the config only
on a board whose profile has a trustworthy clock (shared_protocol/config.py); even then
the ledger keeps the last second it saw, and a clock behind it (stepped back, or
restarted at boot) stops releases until the clock is past it again.

Failing closed. The state is written before the record exists, to two slots in turn
(shared_protocol/ledgerfile.py: a SHA-256 per slot), so a reset cannot hand a window a
fresh budget. A missing file, or one with neither slot readable, stops every release
until the board is provisioned again (``tools/flash.py provision`` writes a fresh
ledger); with records windows one unreadable slot (a reset during its write, or damage)
is replaced by the other, charged one record more than it says, in the window that record
can have been in (each write adds one record, so the lost slot held at most that;
``_load``); with seconds windows that window is unknown, so one unreadable slot stops
releases as well. ``charge()`` returns OK and records the spend, WITHHELD, CAPPED
the first time a window reaches its cap, or STOPPED the first time the ledger refuses
for a reason of its own (``stopped``: damaged, clock behind, lifetime cap). A reset
after a spend whose record was never stored costs budget without releasing anything
(the safe side). Withheld readings are counted in RAM only, so after a reset a records
window can only last longer.
"""

try:
    from shared_protocol.ledgerfile import SLOT_SIZE, fresh, pack, unpack
except ImportError:
    from ledgerfile import SLOT_SIZE, fresh, pack, unpack

OK = 0
WITHHELD = 1
CAPPED = 2
STOPPED = 3

DAMAGED = "damaged or missing ledger: provision the board again"
CLOCK = "clock behind the ledger's last second"
LIFETIME = "lifetime cap reached: provision the board again"


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


def provision(path):
    """Write a fresh ledger at ``path`` (what provisioning does): a new lifetime budget."""
    f = open(path, "wb")
    f.write(fresh())
    f.close()


class Ledger:
    """Epsilon accounting for one board; see the module docstring."""

    def __init__(self, row, cap, window_records=0, window_seconds=0, path=None, clock=None,
                 lifetime=None):
        if (window_records > 0) == (window_seconds > 0):
            raise ValueError("exactly one of window_records and window_seconds must be > 0")
        fracs = [row, cap] + ([lifetime] if lifetime is not None else [])
        den = 1
        for n, d in fracs:
            if n <= 0 or d <= 0:
                raise ValueError("row, cap and lifetime must be positive fractions")
            den = den * d // _gcd(den, d)
        self.unit_den = den
        self.row = row[0] * (den // row[1])
        self.cap = cap[0] * (den // cap[1])
        self.lifetime = lifetime[0] * (den // lifetime[1]) if lifetime is not None else 0
        if self.row > self.cap or (lifetime is not None and self.row > self.lifetime):
            raise ValueError("a cap is below the epsilon of one record")
        self.window_records = window_records
        self.window_seconds = window_seconds
        self.path = path
        if window_seconds and clock is None:
            import time as clock
        self.clock = clock
        self.last_s = 0
        self.counter = 0
        self.window = 0
        self.spent = 0
        self.reads = 0
        self.total = 0
        self.released = 0
        self.withheld = 0
        self.capped = False
        self.stopped = None       # why the ledger refuses (DAMAGED, CLOCK, LIFETIME), or None
        self._debt = 0            # spent at the start of the next window (a lost slot's record)
        self.damaged = None
        if path is None:
            self.window = self._window_now(self.reads)
        elif not self._load():
            self.damaged = DAMAGED

    def _window_now(self, reads):
        if self.window_records:
            return reads // self.window_records
        return self._now() // self.window_seconds

    def _now(self):
        return int(self.clock.time())

    def _load(self):
        """Read the newest readable slot; False when there is none."""
        try:
            f = open(self.path, "rb")
            data = f.read(2 * SLOT_SIZE)
            f.close()
        except OSError:
            return False
        best = None
        lost = 0
        for i in (0, 1):
            slot = data[i * SLOT_SIZE:(i + 1) * SLOT_SIZE]
            v = unpack(slot)
            if v is None:
                # An all-zero slot is one never written (a fresh ledger's slot 1).
                if slot != bytes(len(slot)) or len(slot) != SLOT_SIZE:
                    lost = 1
            elif best is None or v[0] > best[0]:
                best = v
        if best is None:
            return False
        counter, den, window, spent, reads, total, last_s = best
        if den != self.unit_den:
            # New provisioning: convert, rounding spends up (never undercount).
            spent = (spent * self.unit_den + den - 1) // den
            total = (total * self.unit_den + den - 1) // den
        if lost:
            # The unreadable slot was one spend newer than this one (or older: then charging
            # one more is only cautious), and every reading between the two was withheld.
            # Withheld readings are not persisted, so that spend is put where it can have
            # been: the next reading's window if this one had room for it; else the first
            # reading of the window after, which the count reaches only after withholding the
            # rest of this one, so it is kept as a debt that window starts with. In a seconds
            # window it can have been at any second after this slot's, and a clock set back
            # since would put it in a window still to come: nothing bounds it, so that
            # ledger is damaged.
            if not self.window_records:
                return False
            # Its counter may have sealed a record (the nonce, shared_protocol/seal.py), so the
            # counter moves past it; +2 puts the next write in the unreadable slot, not this one.
            counter += 2
            total += self.row
            wr = self.window_records
            if spent + self.row > self.cap and reads // wr == window:
                self._debt = self.row
            else:
                reads += 1
                w = (reads - 1) // wr
                spent = (spent if w == window else 0) + self.row
                window = w
        self.counter = counter
        self.reads = reads
        self.total = total
        self.released = total // self.row
        self.last_s = last_s
        # A records window is known from the count; a seconds window is kept with its spend
        # as the last release left it, whatever the clock says now: a clock behind at boot
        # that catches up must find that window's spend (charge starts another afresh).
        if self.window_records and self._window_now(reads) != window:
            window = self._window_now(reads)
            spent = 0
        self.window = window
        self.spent = spent
        return True

    def _save(self):
        if self.path is None:
            return
        self.counter += 1
        f = open(self.path, "r+b")
        f.seek((self.counter & 1) * SLOT_SIZE)
        f.write(pack(self.counter, self.unit_den, self.window, self.spent, self.reads,
                     self.total, self.last_s))
        f.close()

    def _refuse(self, why):
        self.withheld += 1
        if self.stopped == why:
            return WITHHELD
        self.stopped = why
        return STOPPED

    def charge(self):
        """Account for one reading: OK (spent), WITHHELD, CAPPED (first withheld by a
        window's cap) or STOPPED (first withheld for the reason now in ``stopped``)."""
        if self.damaged:
            return self._refuse(DAMAGED)
        if self.window_seconds:
            now = self._now()
            if now < self.last_s:
                return self._refuse(CLOCK)
            self.last_s = now
            w = now // self.window_seconds
        else:
            w = self.reads // self.window_records
        self.reads += 1
        if w != self.window:
            self.window = w
            self.spent = self._debt
            self._debt = 0
            self.withheld = 0
            self.capped = False
        if self.stopped == CLOCK:
            self.stopped = None
        if self.lifetime and self.total + self.row > self.lifetime:
            return self._refuse(LIFETIME)
        if self.spent + self.row > self.cap:
            self.withheld += 1
            if self.capped:
                return WITHHELD
            self.capped = True
            return CAPPED
        self.spent += self.row
        self.total += self.row
        self.released += 1
        self._save()
        return OK

    def spent_text(self):
        return frac_text(self.spent, self.unit_den) if self.spent else "0"

    def cap_text(self):
        return frac_text(self.cap, self.unit_den)

    def total_text(self):
        return frac_text(self.total, self.unit_den) if self.total else "0"

    def lifetime_text(self):
        return frac_text(self.lifetime, self.unit_den) if self.lifetime else "none"

    def state(self):
        """``"ok"``, or why releases stopped (the status's ``ledger`` field)."""
        return self.damaged or self.stopped or "ok"

    def close(self):
        """Nothing stays open between spends; kept for callers that close a ledger."""
