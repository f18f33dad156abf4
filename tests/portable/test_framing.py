from shared_protocol import framing
from shared_protocol.framing import crc16, frame, unframe, LineSplitter
from shared_protocol.wire import ProtocolError
from tests import vectors
from tests.portable.util import raises


def test_crc16_check_value():
    assert crc16(b"123456789") == vectors.CRC16_CHECK
    assert crc16(b"") == 0xFFFF


def test_frames_match_vectors():
    assert frame(vectors.CORRECTION_V2) == vectors.CORRECTION_V2_FRAME
    assert frame(vectors.READING_V2) == vectors.READING_V2_FRAME


def test_unframe_round_trip_and_line_endings():
    f = vectors.READING_V2_FRAME
    assert unframe(f) == vectors.READING_V2
    assert unframe(f[:-1]) == vectors.READING_V2
    assert unframe(f[:-1] + b"\r\n") == vectors.READING_V2
    assert unframe(f.upper().replace(b"\n", b"")) == vectors.READING_V2


def test_malformed_frames():
    good = vectors.CORRECTION_V2_FRAME
    cases = (
        (b"", "start"),
        (b"\n", "start"),
        (b"010200", "start"),
        (b"~", "short"),
        (b"~00ffff", "bad CRC"),
        (b"~00fffff", "odd"),
        (b"~0000", "short"),
        (good[:-2] + b"\n", "odd"),
        (good[:5] + b"g" + good[6:], "non-hex"),
        (good[:5] + b" " + good[6:], "non-hex"),
        (good[:1] + b"+" + good[2:], "non-hex"),
        (good[:-2] + b"1\n", "bad CRC"),
        (b"~" + b"00" * (framing.MAX_PAYLOAD + 1) + b"0000\n", "too long"),
    )
    for line, reason in cases:
        e = raises(ProtocolError, unframe, line)
        assert reason in str(e), (reason, str(e))
    raises(ProtocolError, unframe, "~00")
    raises(ValueError, frame, b"")
    raises(ValueError, frame, b"\x00" * (framing.MAX_PAYLOAD + 1))


def test_every_single_bit_flip_is_detected():
    line = vectors.READING_V2_FRAME[:-1]
    for i in range(1, len(line)):
        for bit in range(8):
            bad = bytearray(line)
            bad[i] ^= 1 << bit
            if bytes(bad).lower() == line:
                continue    # a case flip of a hex letter is the same frame
            raises(ProtocolError, unframe, bytes(bad))


def test_line_splitter_across_feeds_and_overflow():
    s = LineSplitter(limit=8)
    assert s.feed(b"ab") == []
    assert s.feed(b"c\nde\n") == [b"abc", b"de"]
    assert s.feed(b"0123456789") == []
    assert s.feed(b"\nok\n") == [None, b"ok"]
