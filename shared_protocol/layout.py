"""Wire format v2 in numbers: the sizes and bounds every encoder and decoder shares.

    from shared_protocol.layout import CORRECTION_SIZE, reading_size
    buf = bytearray(reading_size(2))      # 34 bytes: a reading record with two values

wire.py encodes and decodes records with these; the board's ring buffer sizes its
slots with them; the config checker bounds columns and ring sizes with them; the
micro:bit node, too small to compile wire.py, packs records by hand with them. This
module imports nothing, so a board pays only for these few names. The field order
is docs/protocol.md's (and wire.py's docstring).
"""

VERSION = 2                  # the wire format's version (the project's is __version__)
KIND_READING = 1
KIND_CORRECTION = 2
TOKEN_SIZE = 8
MAX_COLS = 16
INT32_MIN = -2147483648      # reserved: never a valid value or d_diff
INT32_MAX = 2147483647
DEVICE_ID_MAX = 0xFFFFFFFF   # a u32 field; device id 0 is reserved
CONFIG_ID_MAX = 0xFFFF       # a u16 field

# version, kind, ncols, flags, device_id, boot_id, seq, token (TOKEN_SIZE), config_id;
# then ncols little-endian int32 values.
READING_HEAD = "<BBBBIII8sH"
READING_HEAD_SIZE = 26
READING_KEY_AT = 8           # boot_id u32 then seq u32 start here in a reading record
# version, kind, reserved u16, device_id, boot_id, seq (those of its reading), token
# (TOKEN_SIZE), d_diff int32. The first CORRECTION_HEAD_SIZE bytes are the clear header.
CORRECTION = "<BBHIII8si"
CORRECTION_SIZE = 28
CORRECTION_HEAD_SIZE = 16

# The cloud's acknowledgement of committed records (topics.ACK): version, kind, of (which
# record of a reading: KIND_READING or KIND_CORRECTION), nranges, device_id, boot_id; then
# nranges pairs (first seq, last seq), inclusive, u32 each.
KIND_ACK = 8
ACK_HEAD = "<BBBBII"
ACK_HEAD_SIZE = 12
ACK_RANGE = "<II"
ACK_RANGE_SIZE = 8
ACK_MAX_RANGES = 32


def reading_size(ncols):
    """Bytes of a reading record with ``ncols`` values."""
    return READING_HEAD_SIZE + 4 * ncols


# The sealed correction record (kind 3, shared_protocol/seal.py): a clear head of version,
# kind, reserved u16, device_id, boot_id, seq and the nonce u32; then the ciphertext of
# token and d_diff; then a 16-byte tag.
KIND_SEALED = 3
SEALED_HEAD = "<BBHIIII"
SEALED_HEAD_SIZE = 20
SEALED_BODY = "<8si"           # the plaintext: token (TOKEN_SIZE), d_diff int32
SEALED_BODY_SIZE = 12
SEALED_TAG_SIZE = 16
SEALED_SIZE = 48
