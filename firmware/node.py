"""One reading, end to end on the board: read -> scale -> perturb -> d_diff -> token -> encode -> send.

    node = Node(sensor, mechanism, rng, device_id=7, boot_id=1, config_id=3, send=send)
    node.step()    # reads, then sends one reading record and its correction record

``sensor.read()`` returns a list of raw integer readings (one per column);
With a ``sealer`` (shared_protocol/seal.py) the correction record is sealed for the
correction server; ``release(raw, nonce)`` then needs the ledger's counter of this
release as the nonce. ``send(reading, correction)`` hands the two encoded records of one release to a
transport (the ring buffer of an MQTT board, or ``serial_sender``): the reading
goes to the analyst, the correction to the correction server. The raw and scaled
values never leave ``release``. The caller decides whether a reading may be
released at all (the privacy ledger, firmware/ledger.py) before calling ``release``.
"""

try:
    from shared_protocol import wire
    from shared_protocol.layout import INT32_MAX, SEALED_SIZE
    from shared_protocol.tokens import new_token
    from shared_protocol.framing import frame
except ImportError:
    import wire  # type: ignore[no-redef]  # flat file system: the same module
    from layout import INT32_MAX, SEALED_SIZE
    from tokens import new_token
    from framing import frame


def _clamp_i32(v):
    # Post-processing of a DP output, so clamping costs no privacy; -2**31 is reserved.
    if v > INT32_MAX:
        return INT32_MAX
    if v < -INT32_MAX:
        return -INT32_MAX
    return v


class Node:
    """The board's main pipeline, with every dependency passed in."""

    def __init__(self, sensor, mechanism, rng, device_id, boot_id, config_id, send, seq=0,
                 sealer=None):
        self.sensor = sensor
        self.mechanism = mechanism
        self.rng = rng
        self.device_id = device_id
        self.boot_id = boot_id
        self.config_id = config_id
        self.send = send
        self.seq = seq
        self._rbuf = bytearray(wire.reading_size(len(mechanism.columns)))
        self.sealer = sealer
        self._cbuf = bytearray(SEALED_SIZE if sealer is not None else wire.CORRECTION_SIZE)

    def step(self):
        """Read and release one record; return its sequence number (None: no reading)."""
        raw = self.sensor.read()
        if raw is None:
            return None
        return self.release(raw)

    def release(self, raw, nonce=None):
        """Perturb, encode and send one raw reading; return its sequence number. ``nonce``:
        the ledger's counter for this release, never used before (boards that seal)."""
        _, out, d_diff = self.mechanism.perturb(raw)
        for j in range(len(out)):
            out[j] = _clamp_i32(out[j])
        tok = new_token(self.rng)
        seq = self.seq
        n = wire.encode_reading_into(self._rbuf, self.device_id, self.boot_id, seq, tok,
                                     self.config_id, out)
        if self.sealer is not None:
            self.sealer.seal_into(self._cbuf, self.device_id, self.boot_id, seq, nonce, tok,
                                  _clamp_i32(d_diff))
        else:
            wire.encode_correction_into(self._cbuf, self.device_id, self.boot_id, seq, tok,
                                        _clamp_i32(d_diff))
        self.send(bytes(self._rbuf[:n]), bytes(self._cbuf))
        # Within a boot the number wraps from 2^32-1 to 0 (docs/protocol.md, section 9).
        self.seq = seq + 1 if seq < 0xFFFFFFFF else 0
        return seq


def serial_sender(write):
    """A ``send`` that writes each record as one framed line (docs/protocol.md 2)."""
    def send(reading, correction):
        write(frame(reading))
        write(frame(correction))
    return send
