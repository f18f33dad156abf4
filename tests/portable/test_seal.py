"""The board's sealer (shared_protocol/seal.py) against the golden vectors, on both interpreters.

Under MicroPython the AES block function is the port's cryptolib; under CPython (no
cryptolib) it is ``cryptography``'s, passed in, so the same seal code runs on both.
"""
from shared_protocol import seal
from tests import vectors


def _aes():
    try:
        import cryptolib  # noqa: F401
        return None
    except ImportError:
        pass
    try:
        import ucryptolib  # noqa: F401
        return None
    except ImportError:
        pass
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    class Ecb:
        def __init__(self, key):
            self._e = Cipher(algorithms.AES(key), modes.ECB()).encryptor()

        def encrypt(self, block):
            return self._e.update(bytes(block))
    return Ecb


def _sealer():
    return seal.Sealer(vectors.SEAL_ENC_KEY, vectors.SEAL_MAC_KEY, aes=_aes())


def test_aes_block_matches_fips197():
    key, pt, ct = vectors.AES128_FIPS197
    aes = _aes() or seal._aes_ecb
    assert aes(key).encrypt(pt) == ct


def test_hmac_matches_rfc4231():
    key, msg, mac = vectors.HMAC_RFC4231_2
    # Sealer takes a 32-byte MAC key; RFC 2104 pads any shorter key with zeros.
    s = seal.Sealer(vectors.SEAL_ENC_KEY, key + bytes(32 - len(key)), aes=_aes())
    assert s.mac(msg) == mac


def test_seal_matches_vector():
    assert _sealer().seal(*vectors.SEAL_FIELDS) == vectors.SEALED_V2


def test_seal_parts():
    out = _sealer().seal(*vectors.SEAL_FIELDS)
    assert len(out) == seal.SEALED_SIZE == 48
    assert out[:seal.HEAD_SIZE] == vectors.SEAL_HEADER
    assert out[seal.HEAD_SIZE:32] == vectors.SEAL_CIPHERTEXT
    assert seal.counter_block(7, 5) == vectors.SEAL_COUNTER_BLOCK
    # Neither the token nor d_diff's bytes appear in the record.
    assert out.find(vectors.TOKEN) < 0 and out.find(vectors.SEAL_PLAINTEXT[8:]) < 0


def test_nonce_must_grow():
    s = _sealer()
    s.seal(7, 1, 0, 5, vectors.TOKEN, 1)
    for bad in (5, 4, -1, seal.NONCE_MAX + 1):
        try:
            s.seal(7, 1, 1, bad, vectors.TOKEN, 1)
            assert False, bad
        except seal.SealError:
            pass
    assert s.seal(7, 1, 1, 6, vectors.TOKEN, 1)[16] == 6


def test_bad_keys_and_fields():
    for enc, mac in ((bytes(15), bytes(32)), (bytes(16), bytes(31)), (bytes(16), bytes(32))):
        try:
            seal.Sealer(enc, mac, aes=_aes())
            assert False
        except seal.SealError:
            pass
    s = _sealer()
    for token, d in ((b"short", 1), (vectors.TOKEN, -2147483648), (vectors.TOKEN, 2147483648)):
        try:
            s.seal(7, 1, 0, 1, token, d)
            assert False
        except seal.SealError:
            pass
    assert s.last == -1          # nothing refused moved the nonce on


def test_split_keys():
    enc, mac = seal.split_keys(vectors.SEAL_ENC_KEY + vectors.SEAL_MAC_KEY)
    assert enc == vectors.SEAL_ENC_KEY and mac == vectors.SEAL_MAC_KEY
    try:
        seal.split_keys(bytes(47))
        assert False
    except seal.SealError:
        pass
