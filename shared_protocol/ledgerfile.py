"""The privacy ledger's file: firmware/ledger.py keeps it, provisioning writes a fresh one.

    data = fresh()                 # what `tools/flash.py provision` writes as ledger.bin
    slot = unpack(data[:SLOT_SIZE])    # (counter, unit_den, window, spent, reads, total, last_s)

The file holds two slots of SLOT_SIZE bytes, written in turn (slot ``counter & 1``), so
a reset during a write leaves the other one, one spend older. A slot is the record
``RECORD`` (magic MAGIC, counter, unit denominator, window, epsilon spent in it, readings
seen, lifetime epsilon, the clock's last second seen; amounts in units of 1/unit) and
the SHA-256 of those bytes: one damaged byte anywhere makes the slot unreadable
(``unpack`` returns None). A fresh ledger is slot 0 with everything zero and slot 1
empty; a board with neither slot readable releases nothing until it is provisioned
again (firmware/ledger.py).
"""
import struct
from hashlib import sha256

MAGIC = b"DPL2"
RECORD = "<4sIIIIIII"     # magic, counter, unit_den, window, spent, reads, total, last_s
RECORD_SIZE = struct.calcsize(RECORD)
SLOT_SIZE = RECORD_SIZE + 32
U32 = 0xFFFFFFFF


def pack(counter, unit_den, window, spent, reads, total, last_s):
    """One slot's bytes: the record and its SHA-256."""
    rec = struct.pack(RECORD, MAGIC, counter & U32, unit_den, window & U32, spent,
                      reads & U32, total, last_s & U32)
    return rec + sha256(rec).digest()


def unpack(slot):
    """``(counter, unit_den, window, spent, reads, total, last_s)``, or None when the slot
    is short, not a ledger record, or does not match its digest."""
    if len(slot) != SLOT_SIZE:
        return None
    rec = bytes(slot[:RECORD_SIZE])
    if sha256(rec).digest() != bytes(slot[RECORD_SIZE:]):
        return None
    v = struct.unpack(RECORD, rec)
    if v[0] != MAGIC or v[2] == 0:
        return None
    return v[1:]


def fresh():
    """A whole fresh ledger file: slot 0 zero (unit 1), slot 1 empty."""
    return pack(0, 1, 0, 0, 0, 0, 0) + bytes(SLOT_SIZE)


def microbit_fresh():
    """A fresh micro:bit ledger file (firmware/mbstate.py): what provisioning writes to both
    ``la`` and ``lb``, the framed line of ``0 0 0 0 0``."""
    try:
        from .framing import frame
    except ImportError:
        from framing import frame  # flat file system
    return frame(b"0 0 0 0 0")
