"""Golden vectors shared by the portable tests, the QEMU smoke test and docs/protocol.md.

Each byte string is derived by hand in the comment above it, so it checks the encoder
rather than restating it.
"""

TOKEN = b"\x01\x23\x45\x67\x89\xab\xcd\xef"

# Reading: device 7, boot 1, seq 42, TOKEN, config 3, values (1200, -5)
#   02 version | 01 kind=reading | 02 ncols | 00 flags
#   07 00 00 00 device_id=7 | 01 00 00 00 boot_id=1 | 2a 00 00 00 seq=42
#   01 23 45 67 89 ab cd ef token | 03 00 config_id=3
#   b0 04 00 00 value 1200 = 0x000004b0 | fb ff ff ff value -5 = 0xfffffffb
READING_V2 = bytes([
    0x02, 0x01, 0x02, 0x00,
    0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2A, 0x00, 0x00, 0x00,
    0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF, 0x03, 0x00,
    0xB0, 0x04, 0x00, 0x00, 0xFB, 0xFF, 0xFF, 0xFF,
])
READING_V2_FIELDS = (7, 1, 42, TOKEN, 3, (1200, -5))

# Correction of that reading: device 7, boot 1, seq 42, TOKEN, d_diff -1234 = 0xfffffb2e
#   02 version | 02 kind=correction | 00 00 reserved
#   07 00 00 00 device_id=7 | 01 00 00 00 boot_id=1 | 2a 00 00 00 seq=42
#   token | 2e fb ff ff d_diff
CORRECTION_V2 = bytes([
    0x02, 0x02, 0x00, 0x00,
    0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2A, 0x00, 0x00, 0x00,
    0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF,
    0x2E, 0xFB, 0xFF, 0xFF,
])
CORRECTION_V2_FIELDS = (7, 1, 42, TOKEN, -1234)

# Acknowledgement of committed readings (topic dpsense/ack/d7/r): device 7, boot 1, seqs 40..42
# and 45 (43 and 44 are not committed, so not acknowledged)
#   02 version | 08 kind=ack | 01 of=readings | 02 nranges
#   07 00 00 00 device_id=7 | 01 00 00 00 boot_id=1
#   28 00 00 00 first=40 | 2a 00 00 00 last=42 | 2d 00 00 00 first=45 | 2d 00 00 00 last=45
ACK_V2 = bytes([
    0x02, 0x08, 0x01, 0x02,
    0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x28, 0x00, 0x00, 0x00, 0x2A, 0x00, 0x00, 0x00,
    0x2D, 0x00, 0x00, 0x00, 0x2D, 0x00, 0x00, 0x00,
])
ACK_V2_FIELDS = (1, 7, 1, [(40, 42), (45, 45)])
# The same for the correction records of seqs 40..42 alone: of=02, one range (20 bytes).
ACK_CORRECTIONS_V2 = bytes([
    0x02, 0x08, 0x02, 0x01,
    0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x28, 0x00, 0x00, 0x00, 0x2A, 0x00, 0x00, 0x00,
])
ACK_CORRECTIONS_V2_FIELDS = (2, 7, 1, [(40, 42)])

# CRC-16/CCITT-FALSE check value of the ASCII digits "123456789" (the catalogue's "check").
CRC16_CHECK = 0x29B1
# Frames: "~" + lowercase hex payload + 4 hex digits of crc16(payload) + "\n".
# crc16(CORRECTION_V2) = 0x5fbe, crc16(READING_V2) = 0xd9b7 (also binascii.crc_hqx(p, 0xffff)).
CORRECTION_V2_FRAME = (b"~0202000007000000010000002a000000"
                       b"0123456789abcdef2efbffff5fbe\n")
READING_V2_FRAME = (b"~0201020007000000010000002a000000"
                    b"0123456789abcdef0300b0040000fbffffffd9b7\n")

# XorShift32(1): the seed is mixed by murmur3 fmix32 first:
#   1 -> ^>>16: 0x1 -> *0x85ebca6b: 0x85ebca6b -> ^>>13: 0x85efe535 -> *0xc2b2ae35: 0x514e79f9
#     -> ^>>16: 0x514e28b7 (state 0). Then each step x ^= x << 13; x ^= x >> 17; x ^= x << 5:
#   0x514e28b7 -> 0x9458c8b7 -> 0x9458829b -> 0x1f48d1fb = 524866043 (first output).
FMIX32_OF_1 = 0x514E28B7
XORSHIFT32_SEED1 = (524866043, 2877414208, 2380002740, 2664205378, 3890067424)

# new_token(XorShift32(1)): four getrandbits(16) = top 16 bits of the states above:
# 0x1f48d1fb -> 0x1f48, 0xab81db40 -> 0xab81, 0x8ddbf5b4 -> 0x8ddb, 0x9ecc8c42 -> 0x9ecc.
TOKEN_SEED1 = bytes([0x1F, 0x48, 0xAB, 0x81, 0x8D, 0xDB, 0x9E, 0xCC])

# DiscreteLaplace(num, den, XorShift32(1)): the first 20 samples at scale num/den.
# Any implementation of CKS Algorithms 1-2 that draws its bits in the order of
# shared_protocol/noise.py reproduces them on any interpreter.
LAPLACE_SEED1 = {
    (73, 10): (-1, -5, -2, 0, 8, -23, -3, 2, 9, 20, -12, 6, -2, 8, 7, -13, 1, -6, 5, 0),
    (1, 2): (0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, -1, 0, 0, 0, 0, 0, 0),
    (1, 1): (-1, 0, 0, -1, 1, -1, 0, 0, 3, 0, -1, 1, 2, 1, 1, 2, 0, -1, -3, 0),
    (1000, 1): (-125, -1609, 295, 7, -3103, 930, 1881, -1415, 1372, -1145, 355, -730,
                -3642, 944, -578, 672, 994, 231, -140, -1478),
    (100000, 1): (-16017, -59940, -22306, 104708, 978, -313263, -40262, 5145, 153120, 59150,
                  172518, 135837, -135277, -2787, -130548, -32583, -137517, -278112, 39254, -60339),
}

# Sealed correction record (kind 3, shared_protocol/seal.py; docs/protocol.md):
# keys enc = 00 01 .. 0f (AES-128), mac = 20 21 .. 3f (HMAC-SHA-256);
# device 7, boot 1, seq 42, nonce 5, TOKEN, d_diff -1234.
SEAL_ENC_KEY = bytes(range(0x00, 0x10))
SEAL_MAC_KEY = bytes(range(0x20, 0x40))
SEAL_FIELDS = (7, 1, 42, 5, TOKEN, -1234)       # device, boot, seq, nonce, token, d_diff
#   02 version | 03 kind=sealed | 00 00 reserved | 07 00 00 00 device | 01 00 00 00 boot
#   2a 00 00 00 seq=42 | 05 00 00 00 nonce=5
SEAL_HEADER = bytes.fromhex("0203000007000000010000002a00000005000000")
#   token || d_diff -1234 = 0xfffffb2e little-endian
SEAL_PLAINTEXT = bytes.fromhex("0123456789abcdef2efbffff")
#   4 zero bytes | device 7 | nonce 5 | block counter 0, all big-endian
SEAL_COUNTER_BLOCK = bytes.fromhex("00000000000000070000000500000000")
#   plaintext XOR the first 12 bytes of AES-128(enc, counter block)
SEAL_CIPHERTEXT = bytes.fromhex("f1ae2b3cc47f90dda7bf4d91")
#   HMAC-SHA-256(mac, header || ciphertext); the record carries its first 16 bytes
SEAL_HMAC = bytes.fromhex("78be6f77d639b7f887e819e43f90e93a07536a8fbfb2296d96a3487e5f4d4536")
SEALED_V2 = SEAL_HEADER + SEAL_CIPHERTEXT + SEAL_HMAC[:16]
# FIPS-197 appendix C.1: AES-128 with key 00..0f on 00112233445566778899aabbccddeeff.
AES128_FIPS197 = (bytes(range(16)), bytes.fromhex("00112233445566778899aabbccddeeff"),
                  bytes.fromhex("69c4e0d86a7b0430d8cdb78070b4c55a"))
# RFC 4231 test case 2: HMAC-SHA-256 with key "Jefe".
HMAC_RFC4231_2 = (b"Jefe", b"what do ya want for nothing?",
                  bytes.fromhex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"))
