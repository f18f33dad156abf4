"""firmware/ring.py: records survive re-opening, the bound holds, drops are counted."""
from tests.portable import fwutil
from tests.portable.util import raises
from ring import Ring, slot_count, slot_size

ROOM = 34                    # a 2-column reading: 26 + 4 x 2 bytes


def _rec(i):
    """A distinct (reading, correction) pair; the bytes need not be valid records here."""
    r = bytes([2, 1, 2, 0]) + bytes([i & 0xFF]) * 30
    c = bytes([2, 2, 0, 0]) + bytes([(i * 7) & 0xFF]) * 24
    return r, c


def _ring(name, records=8, max_bytes=1 << 20, room=ROOM):
    return Ring(fwutil.scratch(name) if name else None, room, records, max_bytes)


def test_geometry_follows_both_bounds():
    assert slot_size(ROOM) == 8 + 34 + 28
    assert slot_count(ROOM, 64, 16 + 10 * 70) == 10       # bytes bound
    assert slot_count(ROOM, 4, 1 << 20) == 4               # records bound
    raises(ValueError, Ring, fwutil.scratch("tiny"), ROOM, 64, 16 + 70)


def test_put_get_returns_the_identical_bytes():
    p = fwutil.scratch("ident")
    ring = Ring(p, ROOM, 8, 1 << 20)
    for i in range(3):
        assert ring.put(*_rec(i)) == i
    for i in range(3):
        r, c = _rec(i)
        assert ring.get(i) == (r, c, 3)
    assert ring.get(3) is None
    ring.close()
    fwutil.remove(p)


def test_acknowledged_records_leave_and_the_rest_survive_reopening():
    p = fwutil.scratch("reopen")
    ring = Ring(p, ROOM, 8, 1 << 20)
    for i in range(4):
        ring.put(*_rec(i))
    ring.ack(0, 0)
    ring.ack(0, 1)                 # record 0 done
    ring.ack(1, 0)                 # record 1: correction still unacknowledged
    ring.ack(2, 1)
    ring.ack(2, 0)                 # record 2 done, but 1 is older: tail stays at 1
    assert (ring.tail, ring.head, ring.pending) == (1, 4, 2)
    ring.close()                   # close syncs
    ring = Ring(p, ROOM, 8, 1 << 20)
    assert (ring.tail, ring.head, ring.pending, ring.dropped) == (1, 4, 2, 0)
    assert ring.get(1) == _rec(1) + (2,)
    assert ring.get(2) is None
    assert ring.get(3) == _rec(3) + (3,)
    assert ring.put(*_rec(4)) == 4                          # ordinals continue
    ring.close()
    fwutil.remove(p)


def test_unsynced_acknowledgements_mean_a_resend_never_a_loss():
    p = fwutil.scratch("unsynced")
    ring = Ring(p, ROOM, 8, 1 << 20)
    ring.put(*_rec(0))
    ring.ack(0, 0)
    ring.ack(0, 1)
    assert ring.pending == 0 and ring.dirty()
    # a reset here (no sync, no close): the file still says pending
    ring2 = Ring(p, ROOM, 8, 1 << 20)
    assert ring2.pending == 1 and ring2.get(0) == _rec(0) + (3,)
    ring2.close()
    ring._f.close()
    fwutil.remove(p)


def test_full_ring_drops_the_oldest_and_counts_it_persistently():
    p = fwutil.scratch("bound")
    ring = Ring(p, ROOM, 4, 1 << 20)
    for i in range(6):
        ring.put(*_rec(i))
    assert (ring.tail, ring.head, ring.pending, ring.dropped) == (2, 6, 4, 2)
    assert ring.get(1) is None and ring.get(2) == _rec(2) + (3,)
    ring.ack(1, 0)                 # a late PUBACK for a dropped record changes nothing
    assert ring.pending == 4
    ring.close()
    ring = Ring(p, ROOM, 4, 1 << 20)
    assert (ring.tail, ring.head, ring.pending, ring.dropped) == (2, 6, 4, 2)
    for i in range(2, 6):
        assert ring.get(i) == _rec(i) + (3,)
    ring.close()
    fwutil.remove(p)


def test_acknowledged_slots_are_reused_without_dropping():
    p = fwutil.scratch("reuse")
    ring = Ring(p, ROOM, 4, 1 << 20)
    for i in range(20):
        ring.put(*_rec(i))
        ring.ack(i, 0)
        ring.ack(i, 1)
    assert (ring.pending, ring.dropped, ring.tail, ring.head) == (0, 0, 20, 20)
    ring.close()
    ring = Ring(p, ROOM, 4, 1 << 20)
    assert (ring.pending, ring.head) == (0, 20)
    ring.close()
    fwutil.remove(p)


def test_file_size_is_fixed_by_the_bound():
    import os
    p = fwutil.scratch("size")
    ring = Ring(p, ROOM, 64, 16 + 5 * 70 + 69)
    for i in range(12):
        ring.put(*_rec(i))
    ring.close()
    assert os.stat(p)[6] == 16 + 5 * 70
    fwutil.remove(p)


def test_a_new_layout_starts_empty_and_counts_the_unsent_records():
    p = fwutil.scratch("layout")
    ring = Ring(p, ROOM, 8, 1 << 20)
    for i in range(3):
        ring.put(*_rec(i))
    ring.ack(0, 0)
    ring.ack(0, 1)
    ring.close()
    ring = Ring(p, ROOM + 4, 8, 1 << 20)                    # a third column was provisioned
    assert (ring.lost_on_open, ring.dropped, ring.pending, ring.head) == (2, 2, 0, 0)
    ring.close()
    fwutil.remove(p)


def test_records_that_do_not_fit_are_refused():
    p = fwutil.scratch("fit")
    ring = Ring(p, ROOM, 8, 1 << 20)
    raises(ValueError, ring.put, bytes(ROOM + 1), bytes(28))
    raises(ValueError, ring.put, bytes(ROOM), bytes(15))
    ring.close()
    fwutil.remove(p)
