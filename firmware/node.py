"""One reading, end to end on the board: read -> scale -> perturb -> d_diff -> token -> encode -> send.

    node = Node(sensor, mechanism, rng, device_id=7, boot_id=1, config_id=3, send=send)
    node.step()    # publishes one reading record and one correction record

``sensor.read()`` returns a list of raw integer readings (one per column);
``send(kind, payload)`` hands the encoded bytes to a transport, kind being
``wire.KIND_READING`` (for the analyst) or ``wire.KIND_CORRECTION`` (for the
correction server). The raw and scaled values never leave ``step``.
"""

try:
    from shared_protocol import wire
    from shared_protocol.tokens import new_token
    from shared_protocol.framing import frame
except ImportError:
    import wire
    from tokens import new_token
    from framing import frame

_I32_MAX = 2147483647


def _clamp_i32(v):
    # Post-processing of a DP output, so clamping costs no privacy; -2**31 is reserved.
    if v > _I32_MAX:
        return _I32_MAX
    if v < -_I32_MAX:
        return -_I32_MAX
    return v


class Node:
    """The board's main pipeline, with every dependency passed in."""

    def __init__(self, sensor, mechanism, rng, device_id, boot_id, config_id, send, seq=0):
        self.sensor = sensor
        self.mechanism = mechanism
        self.rng = rng
        self.device_id = device_id
        self.boot_id = boot_id
        self.config_id = config_id
        self.send = send
        self.seq = seq
        self._rbuf = bytearray(wire.reading_size(len(mechanism.columns)))
        self._cbuf = bytearray(wire.CORRECTION_SIZE)

    def step(self):
        """Release one record; return its sequence number."""
        raw = self.sensor.read()
        _, out, d_diff = self.mechanism.perturb(raw)
        for j in range(len(out)):
            out[j] = _clamp_i32(out[j])
        tok = new_token(self.rng)
        seq = self.seq
        n = wire.encode_reading_into(self._rbuf, self.device_id, self.boot_id, seq, tok,
                                     self.config_id, out)
        self.send(wire.KIND_READING, bytes(self._rbuf[:n]))
        wire.encode_correction_into(self._cbuf, tok, _clamp_i32(d_diff))
        self.send(wire.KIND_CORRECTION, bytes(self._cbuf))
        self.seq = seq + 1
        return seq


def serial_sender(write):
    """A ``send`` that writes each message as one framed line (docs/protocol.md)."""
    def send(kind, payload):
        write(frame(payload))
    return send
