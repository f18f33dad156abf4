"""shared_protocol/layout.py and ringlayout.py: the numbers agree with the struct formats
and with the golden records, each checked by hand here."""
import struct

from shared_protocol import layout, ringlayout
from tests import vectors


def test_the_heads_are_as_long_as_their_sizes_say():
    assert struct.calcsize(layout.READING_HEAD) == layout.READING_HEAD_SIZE == 26
    assert struct.calcsize(layout.CORRECTION) == layout.CORRECTION_SIZE == 28
    assert struct.calcsize(layout.CORRECTION[:-3]) == layout.CORRECTION_HEAD_SIZE == 16
    assert struct.calcsize(layout.ACK_HEAD) == layout.ACK_HEAD_SIZE
    assert struct.calcsize(layout.ACK_RANGE) == layout.ACK_RANGE_SIZE
    assert struct.calcsize(ringlayout.HEAD) == ringlayout.HEAD_SIZE == 16
    assert struct.calcsize(ringlayout.SLOT_HEAD) == ringlayout.SLOT_HEAD_SIZE == 8


def test_the_token_field_is_token_size_bytes():
    field = "%ds" % layout.TOKEN_SIZE
    assert field in layout.READING_HEAD and field in layout.CORRECTION
    assert layout.TOKEN_SIZE == 8


def test_reading_size_matches_the_golden_reading():
    # READING_V2 carries 2 values: 26 head bytes + 2 x 4.
    assert layout.reading_size(2) == len(vectors.READING_V2) == 34
    assert layout.CORRECTION_SIZE == len(vectors.CORRECTION_V2)


def test_the_bounds_are_the_field_widths():
    assert layout.INT32_MAX == (1 << 31) - 1 and layout.INT32_MIN == -(1 << 31)
    assert layout.DEVICE_ID_MAX == (1 << 32) - 1 and layout.CONFIG_ID_MAX == (1 << 16) - 1


def test_ring_slots_hold_a_slot_head_a_reading_and_a_correction():
    room = layout.reading_size(2)
    assert ringlayout.slot_size(room) == 8 + 34 + 28
    # 16-byte file head, then whole slots only.
    assert ringlayout.slot_count(room, 100, 16 + 3 * 70 + 69) == 3
    assert ringlayout.slot_count(room, 2, 1 << 20) == 2
