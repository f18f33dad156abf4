"""The sealed correction record (kind 3): token and d_diff encrypted and authenticated for
the correction server alone, with the board's own per-device keys (docs/protocol.md).

    s = Sealer(enc_key, mac_key)              # 16-byte AES key, 32-byte HMAC key
    buf = bytearray(SEALED_SIZE)
    s.seal_into(buf, device_id, boot_id, seq, nonce, token, d_diff)

Layout, 48 bytes, little-endian integers:

    0  version u8 = 1 | kind u8 = 3 | reserved u16 = 0
    4  device_id u32 | boot_id u32 | seq u32           (the kind-2 record's clear header)
    16 nonce u32                                       (the ledger's persisted counter)
    20 ciphertext, 12 bytes: AES-128-CTR of token (8 bytes) || d_diff (i32)
    32 tag, 16 bytes: HMAC-SHA-256(mac_key, bytes 0..31), first 16 bytes

Encrypt-then-MAC: the tag covers the clear header, the nonce and the ciphertext, so a
changed byte anywhere is rejected before anything is decrypted. CTR's counter block is
NIST SP 800-38A's: a 12-byte nonce part (4 zero bytes, device_id, nonce; big-endian)
and a 32-bit block counter from 0; 12 bytes of plaintext need its first block only, so
the board runs the AES block function (ECB on one block: the mode every cryptolib
build has; CTR is a compile-time option most ports leave off). HMAC is RFC 2104 over
hashlib.sha256. A tag of 128 bits keeps a forger's chance per try at 2**-128 (RFC 2104
section 5 allows truncation to half the hash and no less than 80 bits).

The nonce must never repeat under one key: a repeated CTR counter block gives away the
XOR of two plaintexts. It is the privacy ledger's counter (firmware/ledger.py), written
to flash before a record exists and never moved back; provisioning writes new keys and
a fresh ledger together. ``seal_into`` refuses a nonce that is not above the last one it
sealed and one beyond u32 (provision the board again).
"""

import struct
from hashlib import sha256

try:
    from .layout import (INT32_MAX, INT32_MIN, KIND_SEALED, SEALED_BODY as BODY,
                         SEALED_BODY_SIZE as BODY_SIZE, SEALED_HEAD as HEAD,
                         SEALED_HEAD_SIZE as HEAD_SIZE, SEALED_SIZE, SEALED_TAG_SIZE as TAG_SIZE,
                         TOKEN_SIZE, VERSION)
except ImportError:
    from layout import (INT32_MAX, INT32_MIN, KIND_SEALED, SEALED_BODY as BODY,
                        SEALED_BODY_SIZE as BODY_SIZE, SEALED_HEAD as HEAD,
                        SEALED_HEAD_SIZE as HEAD_SIZE, SEALED_SIZE, SEALED_TAG_SIZE as TAG_SIZE,
                        TOKEN_SIZE, VERSION)
ENC_KEY_SIZE = 16
MAC_KEY_SIZE = 32
KEYS_SIZE = ENC_KEY_SIZE + MAC_KEY_SIZE              # the board's key file: enc || mac
NONCE_MAX = 0xFFFFFFFF
_BLOCK = 64                  # SHA-256's block size, for HMAC's pads


class SealError(ValueError):
    """A key, nonce or field the sealer refuses; the text says why."""


class _CryptographyEcb:
    # CPython (the firmware's tests, the simulator) has no cryptolib: the same AES block
    # function from the `cryptography` package.
    def __init__(self, key):
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        self._enc = Cipher(algorithms.AES(bytes(key)), modes.ECB()).encryptor()

    def encrypt(self, block):
        return self._enc.update(bytes(block))


def _aes_ecb(key):
    # cryptolib on MicroPython 1.21 and later, ucryptolib before; mode 1 is ECB.
    try:
        from cryptolib import aes
    except ImportError:
        try:
            from ucryptolib import aes
        except ImportError:
            import sys
            if sys.implementation.name != "cpython":
                raise
            return _CryptographyEcb(key)
    return aes(key, 1)


def counter_block(device_id, nonce):
    """CTR's first counter block for this device and nonce (16 bytes)."""
    return struct.pack(">IIII", 0, device_id, nonce, 0)


def split_keys(data):
    """``(enc_key, mac_key)`` from a key file's KEYS_SIZE bytes."""
    if len(data) != KEYS_SIZE:
        raise SealError("a key file holds %d bytes, got %d" % (KEYS_SIZE, len(data)))
    return bytes(data[:ENC_KEY_SIZE]), bytes(data[ENC_KEY_SIZE:])


class Sealer:
    """Seals correction records for one device. ``aes(key)`` returns an object whose
    ``encrypt(block)`` is the AES block function; by default the port's cryptolib."""

    def __init__(self, enc_key, mac_key, aes=None):
        if len(enc_key) != ENC_KEY_SIZE:
            raise SealError("the encryption key must be %d bytes" % ENC_KEY_SIZE)
        if len(mac_key) != MAC_KEY_SIZE:
            raise SealError("the MAC key must be %d bytes" % MAC_KEY_SIZE)
        if enc_key == mac_key[:ENC_KEY_SIZE]:
            raise SealError("the encryption and MAC keys must be independent")
        self._aes = (aes or _aes_ecb)(bytes(enc_key))
        # RFC 2104: the key padded to a block, XORed with 0x36 (inner) and 0x5c (outer).
        self._ipad = bytearray(_BLOCK)
        self._opad = bytearray(_BLOCK)
        for i in range(_BLOCK):
            k = mac_key[i] if i < MAC_KEY_SIZE else 0
            self._ipad[i] = k ^ 0x36
            self._opad[i] = k ^ 0x5C
        self._ctr = bytearray(16)
        self.last = -1           # the last nonce sealed in this boot

    def mac(self, data):
        """HMAC-SHA-256 of ``data`` (RFC 2104), all 32 bytes."""
        h = sha256(self._ipad)
        h.update(data)
        inner = h.digest()
        h = sha256(self._opad)
        h.update(inner)
        return h.digest()

    def seal_into(self, buf, device_id, boot_id, seq, nonce, token, d_diff):
        """Write the sealed record at the start of ``buf``; return its length."""
        if not isinstance(nonce, int) or nonce <= self.last or nonce < 0 or nonce > NONCE_MAX:
            raise SealError("nonce %r is not above the last one sealed (%d) or beyond u32; "
                            "provision the board again" % (nonce, self.last))
        if len(token) != TOKEN_SIZE:
            raise SealError("token must be %d bytes" % TOKEN_SIZE)
        if not isinstance(d_diff, int) or d_diff <= INT32_MIN or d_diff > INT32_MAX:
            raise SealError("d_diff out of int32 range (excluding -2**31): %r" % d_diff)
        if len(buf) < SEALED_SIZE:
            raise SealError("buffer too small")
        struct.pack_into(HEAD, buf, 0, VERSION, KIND_SEALED, 0, device_id, boot_id, seq, nonce)
        struct.pack_into(BODY, buf, HEAD_SIZE, bytes(token), d_diff)
        struct.pack_into(">IIII", self._ctr, 0, 0, device_id, nonce, 0)
        ks = self._aes.encrypt(self._ctr)
        for i in range(BODY_SIZE):
            buf[HEAD_SIZE + i] ^= ks[i]
        tag = self.mac(memoryview(buf)[:HEAD_SIZE + BODY_SIZE])
        buf[HEAD_SIZE + BODY_SIZE:SEALED_SIZE] = tag[:TAG_SIZE]
        self.last = nonce
        return SEALED_SIZE

    def seal(self, device_id, boot_id, seq, nonce, token, d_diff):
        buf = bytearray(SEALED_SIZE)
        self.seal_into(buf, device_id, boot_id, seq, nonce, token, d_diff)
        return bytes(buf)
