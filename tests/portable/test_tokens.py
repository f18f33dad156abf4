from shared_protocol.tokens import new_token, TOKEN_SIZE
from shared_protocol.rng import XorShift32
from tests import vectors


def test_token_vector():
    assert new_token(XorShift32(1)) == vectors.TOKEN_SEED1


def test_tokens_are_bytes_and_distinct():
    r = XorShift32(5)
    seen = {}
    for _ in range(500):
        t = new_token(r)
        assert isinstance(t, bytes) and len(t) == TOKEN_SIZE
        seen[t] = 1
    assert len(seen) == 500
