"""firmware/ledger.py: exact epsilon arithmetic, window caps, persistence across resets."""
from tests.portable import fwutil
from tests.portable.util import raises
from ledger import CAPPED, CLOCK, DAMAGED, LIFETIME, OK, STOPPED, WITHHELD, Ledger, frac_text, provision
from shared_protocol.ledgerfile import SLOT_SIZE
from shared_protocol.fixedpoint import Affine, parse_decimal
from shared_protocol.mechanism import Column, RecordMechanism
from shared_protocol.rng import XorShift32


def _codes(led, n):
    return [led.charge() for _ in range(n)]


def test_row_epsilon_is_the_exact_sum_over_columns():
    # three columns at "0.1": 3/10 per record, not 0.30000000000000004
    ident = Affine(1, 1, 0, -100, 100)
    cols = [Column(ident, 5, parse_decimal("0.1")) for _ in range(3)]
    row = RecordMechanism(cols, [0, 0, 0], XorShift32(1)).epsilon_row()
    assert row == (3, 10)
    led = Ledger(row, parse_decimal("0.9"), window_records=100)
    assert _codes(led, 4) == [OK, OK, OK, CAPPED]      # 3 x 3/10 = 9/10 exactly: the cap
    assert led.spent_text() == "9/10" and led.cap_text() == "9/10"


def test_cap_in_a_different_denominator():
    # row 1/3, cap 1/2: units of 1/6, row 2, cap 3; a second record would be 4/6 > 3/6
    led = Ledger((1, 3), (1, 2), window_records=10)
    assert (led.unit_den, led.row, led.cap) == (6, 2, 3)
    assert _codes(led, 3) == [OK, CAPPED, WITHHELD]
    assert led.spent_text() == "1/3" and led.withheld == 2


def test_window_of_records_reopens_after_its_length():
    led = Ledger((1, 4), (1, 1), window_records=10)
    first = _codes(led, 10)
    assert first == [OK] * 4 + [CAPPED] + [WITHHELD] * 5
    assert led.window == 0
    assert _codes(led, 5) == [OK] * 4 + [CAPPED]
    assert led.window == 1 and led.withheld == 1
    assert led.total_text() == "2"


def test_window_of_seconds_follows_the_clock():
    clock = fwutil.FakeClock(0)
    led = Ledger((1, 2), (1, 1), window_seconds=60, clock=clock)
    assert _codes(led, 3) == [OK, OK, CAPPED]
    clock.ms = 59999
    assert led.charge() == WITHHELD
    clock.ms = 60000
    assert _codes(led, 3) == [OK, OK, CAPPED]
    assert led.window == 1


def test_spend_survives_a_reset_within_the_window():
    p = fwutil.scratch("ledger")
    provision(p)
    led = Ledger((1, 4), (1, 1), window_records=10, path=p)
    assert _codes(led, 3) == [OK] * 3
    led.close()                              # (a kill -9 leaves the same file: saved per spend)
    led = Ledger((1, 4), (1, 1), window_records=10, path=p)
    assert (led.window, led.spent, led.reads) == (0, 3, 3)
    assert _codes(led, 2) == [OK, CAPPED]    # only one record of budget was left
    led.close()
    fwutil.remove(p)


def test_a_new_window_after_the_reset_starts_fresh():
    p = fwutil.scratch("ledger2")
    provision(p)
    led = Ledger((1, 4), (1, 1), window_records=4, path=p)
    assert _codes(led, 4) == [OK] * 4        # reads 0..3 = all of window 0
    led.close()
    led = Ledger((1, 4), (1, 1), window_records=4, path=p)
    assert led.window == 1 and led.spent == 0
    led.close()
    fwutil.remove(p)


def test_reprovisioned_units_round_the_spend_up():
    p = fwutil.scratch("ledger3")
    provision(p)
    led = Ledger((1, 3), (1, 1), window_records=100, path=p)     # units of 1/3
    assert led.charge() == OK
    led.close()
    led = Ledger((1, 4), (1, 1), window_records=100, path=p)     # units of 1/4: 1/3 -> 2/4
    assert led.spent == 2 and led.spent_text() == "1/2"
    led.close()
    fwutil.remove(p)


def test_bad_parameters():
    raises(ValueError, Ledger, (1, 2), (1, 3), 10)               # cap below one record
    raises(ValueError, Ledger, (1, 2), (1, 1))                   # no window
    raises(ValueError, Ledger, (1, 2), (1, 1), 10, 10)           # two windows
    raises(ValueError, Ledger, (0, 2), (1, 1), 10)


def test_frac_text():
    assert frac_text(6, 4) == "3/2"
    assert frac_text(4, 2) == "2"
    assert frac_text(0, 5) == "0"


# -- failing closed ------------------------------------------------------------------------

def _spend(p, n, **kw):
    led = Ledger((1, 4), (1, 1), window_records=kw.pop("window_records", 1000), path=p, **kw)
    codes = _codes(led, n)
    led.close()
    return codes


def _flip(p, offset):
    f = open(p, "r+b")
    f.seek(offset)
    b = f.read(1)
    f.seek(offset)
    f.write(bytes([b[0] ^ 0x01]))
    f.close()


def test_a_missing_ledger_releases_nothing_until_provisioned():
    p = fwutil.scratch("ledger-missing")
    led = Ledger((1, 4), (1, 1), window_records=10, path=p)
    assert led.damaged == DAMAGED and led.state() == DAMAGED
    assert _codes(led, 3) == [STOPPED, WITHHELD, WITHHELD]
    provision(p)
    assert _spend(p, 1) == [OK]
    fwutil.remove(p)


def test_one_damaged_byte_in_every_place_of_both_slots_stops_releases():
    # Each byte of the file, flipped in turn with both slots written, must not give a
    # budget back: either the other slot is used (one record charged more) or nothing is
    # released. The attack: 10 releases against a cap of 1 (4 records) after one byte.
    p = fwutil.scratch("ledger-flip")
    for off in range(0, 2 * SLOT_SIZE, 7):
        provision(p)
        assert _spend(p, 3) == [OK, OK, OK]              # 3 of the window's 4 records spent
        _flip(p, off)
        led = Ledger((1, 4), (1, 1), window_records=1000, path=p)
        assert _codes(led, 10).count(OK) <= 1, off        # at most the one record left
    fwutil.remove(p)


def test_both_slots_damaged_stops_releases():
    p = fwutil.scratch("ledger-both")
    provision(p)
    assert _spend(p, 2) == [OK, OK]
    _flip(p, 5)
    _flip(p, SLOT_SIZE + 5)
    assert _spend(p, 3) == [STOPPED, WITHHELD, WITHHELD]
    fwutil.remove(p)


def test_a_torn_newest_slot_is_replaced_by_the_older_one_plus_a_record():
    p = fwutil.scratch("ledger-torn")
    provision(p)
    assert _spend(p, 2) == [OK, OK]                      # counter 2: slot 0 newest
    f = open(p, "r+b")
    f.write(bytes(SLOT_SIZE // 2))                       # a reset half-way through its write
    f.close()
    led = Ledger((1, 4), (1, 1), window_records=1000, path=p)
    assert (led.spent, led.total, led.reads) == (2, 2, 2)   # slot 1 said 1; plus one record
    assert led.state() == "ok"
    assert _codes(led, 3) == [OK, OK, CAPPED]
    fwutil.remove(p)


def test_a_lost_newest_slot_after_a_capped_window_charges_the_next_window():
    # Windows of 8 readings, 4 records each. Readings 0-3 released, 4-7 withheld (capped),
    # reading 8 released in window 1 (counter 5, slot 1); that slot is then damaged. The
    # older slot says window 0 was full, so the lost record was window 1's first: after the
    # rest of window 0 (withheld), window 1 may release three more, not four.
    p = fwutil.scratch("ledger-lostnext")
    provision(p)
    kw = {"window_records": 8}
    assert _spend(p, 9, **kw) == [OK] * 4 + [CAPPED] + [WITHHELD] * 3 + [OK]
    _flip(p, SLOT_SIZE + 9)
    led = Ledger((1, 4), (1, 1), path=p, **kw)
    assert (led.window, led.spent, led.reads) == (0, 4, 4) and led.state() == "ok"
    assert _codes(led, 9) == [CAPPED] + [WITHHELD] * 3 + [OK, OK, OK, CAPPED, WITHHELD]
    fwutil.remove(p)


def test_a_lost_newest_slot_with_seconds_windows_stops_releases():
    # The lost record can have been at any second after the older slot's: with a clock set
    # back since, in a window still to come. Nothing bounds it, so nothing is released.
    p = fwutil.scratch("ledger-lostsec")
    provision(p)
    clock = fwutil.FakeClock(0)
    kw = {"window_seconds": 60, "clock": clock}
    led = Ledger((1, 2), (1, 1), path=p, **kw)
    assert _codes(led, 3) == [OK, OK, CAPPED]            # window 0 full (counter 2, slot 0)
    clock.ms = 61000
    assert led.charge() == OK                            # window 1 (counter 3, slot 1)
    led.close()
    _flip(p, SLOT_SIZE + 9)
    clock.ms = 30000                                     # set back into window 0
    led = Ledger((1, 2), (1, 1), path=p, **kw)
    assert led.state() == DAMAGED and _codes(led, 2) == [STOPPED, WITHHELD]
    clock.ms = 200000
    assert led.charge() == WITHHELD
    fwutil.remove(p)


def test_a_clock_behind_at_boot_that_catches_up_finds_its_window_spent():
    # Found by tests/statistical/test_ledger_faults.py: the window's spend was dropped when
    # the clock at boot was in another window, and given back when the clock came back to it.
    p = fwutil.scratch("ledger-catchup")
    provision(p)
    clock = fwutil.FakeClock(125 * 1000)
    kw = {"window_seconds": 60, "clock": clock}
    led = Ledger((1, 2), (1, 1), path=p, **kw)
    assert _codes(led, 3) == [OK, OK, CAPPED]            # window 2 full, last second 125
    led.close()
    clock.ms = 30 * 1000                                 # a reset, the clock behind (window 0)
    led = Ledger((1, 2), (1, 1), path=p, **kw)
    assert led.charge() == STOPPED
    clock.ms = 130 * 1000                                # caught up, still window 2
    assert _codes(led, 2) == [CAPPED, WITHHELD]
    clock.ms = 180 * 1000
    assert _codes(led, 3) == [OK, OK, CAPPED]
    fwutil.remove(p)


def test_the_lifetime_cap_is_persisted_and_stops_releases():
    p = fwutil.scratch("ledger-life")
    provision(p)
    kw = {"window_records": 4, "lifetime": (1, 1)}       # 4 records in all, 4 per window
    assert _spend(p, 3, **kw) == [OK, OK, OK]
    led = Ledger((1, 4), (1, 1), path=p, **kw)
    assert led.total_text() == "3/4" and led.lifetime_text() == "1"
    assert _codes(led, 6) == [OK, STOPPED, WITHHELD, WITHHELD, WITHHELD, WITHHELD]
    assert led.state() == LIFETIME and led.total_text() == "1"
    led.close()
    assert _spend(p, 2, **kw) == [STOPPED, WITHHELD]     # a reset does not reopen it
    provision(p)
    assert _spend(p, 1, **kw) == [OK]
    fwutil.remove(p)


def test_a_clock_that_steps_back_or_restarts_releases_nothing_until_it_is_past_the_ledger():
    p = fwutil.scratch("ledger-clock")
    provision(p)
    clock = fwutil.FakeClock(1000000 * 1000)             # time() = 1000000 s
    kw = {"window_seconds": 60, "clock": clock}
    led = Ledger((1, 2), (1, 1), path=p, **kw)
    assert _codes(led, 3) == [OK, OK, CAPPED]
    clock.ms -= 60 * 1000                                # stepped back a whole window
    assert _codes(led, 2) == [STOPPED, WITHHELD]
    assert led.state() == CLOCK
    led.close()
    clock.ms = 0                                         # a reset: the clock starts again at 0
    led = Ledger((1, 2), (1, 1), path=p, **kw)
    assert _codes(led, 2) == [STOPPED, WITHHELD]
    clock.ms = 1000000 * 1000 + 60 * 1000                # past the ledger, the next window
    assert _codes(led, 3) == [OK, OK, CAPPED]
    assert led.state() == "ok"
    led.close()
    fwutil.remove(p)
