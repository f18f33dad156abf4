"""Serial framing: one message per text line, with a CRC-16.

    line = frame(payload)        # b"~" + hex(payload) + hex(crc16) + b"\\n"
    payload = unframe(line)      # ProtocolError on anything malformed

A line is ``~``, the payload as lowercase hex, the CRC-16/CCITT-FALSE (poly 0x1021,
init 0xFFFF, no reflection, no final xor) of the payload as 4 hex digits, then
``\\n`` (a preceding ``\\r`` is ignored). Text framing survives a UART that is also
the console: anything not starting with ``~`` is console output, and a new line
always resynchronises. Pure Python: the micro:bit has neither binascii nor hashlib.
"""

try:
    from .wire import ProtocolError
except ImportError:
    from wire import ProtocolError

START = 0x7E                       # "~"
MAX_PAYLOAD = 128
MAX_LINE = 2 + 2 * MAX_PAYLOAD + 4 + 1
MAX_TEXT = 1024                     # a console or status line of a serial board (not a frame)
_HEX = b"0123456789abcdef"


def crc16(data, crc=0xFFFF):
    """CRC-16/CCITT-FALSE; ``crc16(b"123456789") == 0x29B1``."""
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            if crc & 0x8000:
                crc = ((crc << 1) ^ 0x1021) & 0xFFFF
            else:
                crc = (crc << 1) & 0xFFFF
    return crc


def frame(payload):
    """The framed line for ``payload`` (bytes), ending in ``\\n``."""
    n = len(payload)
    if n < 1 or n > MAX_PAYLOAD:
        raise ValueError("payload must be 1..%d bytes" % MAX_PAYLOAD)
    c = crc16(payload)
    out = bytearray(2 * n + 6)
    out[0] = START
    i = 1
    for b in payload:
        out[i] = _HEX[b >> 4]
        out[i + 1] = _HEX[b & 15]
        i += 2
    for shift in (12, 8, 4, 0):
        out[i] = _HEX[(c >> shift) & 15]
        i += 1
    out[i] = 10
    return bytes(out)


def _nibble(c):
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    raise ProtocolError("non-hex character 0x%02x in frame" % c)


def unframe(line):
    """The payload of one framed line (with or without its line ending)."""
    if not isinstance(line, (bytes, bytearray)):
        raise ProtocolError("frame must be bytes")
    n = len(line)
    if n > MAX_LINE + 1:
        raise ProtocolError("frame too long: %d bytes" % n)
    if n and line[n - 1] == 10:
        n -= 1
    if n and line[n - 1] == 13:
        n -= 1
    if n < 1 or line[0] != START:
        raise ProtocolError("frame does not start with '~'")
    digits = n - 1
    if digits < 6:
        raise ProtocolError("short frame: %d hex digits" % digits)
    if digits & 1:
        raise ProtocolError("odd number of hex digits")
    plen = (digits - 4) >> 1
    if plen > MAX_PAYLOAD:
        raise ProtocolError("payload too long: %d bytes" % plen)
    payload = bytearray(plen)
    i = 1
    for k in range(plen):
        payload[k] = (_nibble(line[i]) << 4) | _nibble(line[i + 1])
        i += 2
    got = 0
    for _ in range(4):
        got = (got << 4) | _nibble(line[i])
        i += 1
    want = crc16(payload)
    if got != want:
        raise ProtocolError("bad CRC: frame says 0x%04x, payload gives 0x%04x" % (got, want))
    return bytes(payload)


class LineSplitter:
    """Cut a byte stream into lines, bounded: an over-long line is dropped, and reported.

    ``feed(data)`` returns a list of complete lines (without ``\\n``); a line longer
    than ``limit`` comes back as ``None`` so the caller can count it as malformed.
    """

    def __init__(self, limit=MAX_LINE):
        self.limit = limit
        self._buf = bytearray()
        self._overflow = False

    def feed(self, data):
        out = []
        for b in data:
            if b == 10:
                out.append(None if self._overflow else bytes(self._buf))
                self._buf = bytearray()
                self._overflow = False
            elif not self._overflow:
                if len(self._buf) >= self.limit:
                    self._overflow = True
                    self._buf = bytearray()
                else:
                    self._buf.append(b)
        return out
