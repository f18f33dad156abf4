"""The ring buffer file's layout: firmware/ring.py writes it, config.py checks sizes against it.

    slot_size(reading_size(2))     # 58 bytes: slot head, a two-value reading, the correction
    slot_count(34, 64, 16384)      # 64: bounded by the record count, not by the bytes

A ring file is a HEAD_SIZE-byte header (magic MAGIC, slot size u16, slot count u16,
dropped u32, reserved u32), then fixed-size slots: a SLOT_HEAD_SIZE-byte slot head
(state u8, reading length u8, reserved u16, ordinal u32), the reading padded to
``room`` bytes, then the correction record. firmware/ring.py says what the fields mean.
"""

try:
    from .layout import CORRECTION_SIZE
except ImportError:
    from layout import CORRECTION_SIZE

MAGIC = b"DPR1"
HEAD = "<4sHHII"
HEAD_SIZE = 16
SLOT_HEAD = "<BBHI"
SLOT_HEAD_SIZE = 8


def slot_size(room, corr=CORRECTION_SIZE):
    """Bytes of one slot for readings of at most ``room`` bytes and correction records of
    ``corr`` bytes (a sealed one, layout.SEALED_SIZE, on a board that seals)."""
    return SLOT_HEAD_SIZE + room + corr


def slot_count(room, records, max_bytes, corr=CORRECTION_SIZE):
    """Slots that fit both bounds: at most ``records``, file at most ``max_bytes``."""
    n = (max_bytes - HEAD_SIZE) // slot_size(room, corr)
    return records if records < n else n
