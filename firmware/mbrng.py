"""The nRF51's hardware random number generator, for the micro:bit (MicroPython 1.9.2).

    import mbrng                 # starts the RNG (bias correction on) on a micro:bit
    if mbrng.selftest():         # False off a micro:bit, or when the RNG fails its test
        mbrng.getrandbits(16)

The nRF51's random number generator (nRF51 Series Reference Manual, RNG, base
0x4000D000) gives one byte of thermal noise in VALUE (+0x508) per VALRDY event (+0x100)
once TASKS_START (+0x000) is written; CONFIG (+0x504) bit 0 turns on its bias
correction. The 1.9.2 firmware has no os.urandom and its random module is a PRNG whose
32-bit state a boot id and a token give away; it does expose ``machine.mem8``/``mem32``,
through which this module reads the peripheral (QEMU's microbit machine emulates it:
tests/integration/test_qemu_smoke.py tests its bytes there). Any ``getrandbits`` user
(noise.DiscreteLaplace, tokens.new_token) can take this module as its ``rng``.

Not yet used by the node: imported next to mbnode it costs ~480 bytes of heap, and the
node then runs out of memory on its first record with three columns and after a few
records with two (firmware/README.md). Until it fits, the micro:bit gives no privacy.

Health tests (NIST SP 800-90B 4.4): the repetition count test with cutoff 6 on every
byte (for an assumed min-entropy of 6 bits per byte its false alarm rate is 2**-30 per
byte), and ``selftest``, the start-up test: 1024 bytes through it. A byte that does not
come within 50000 polls (a second or more) fails too. A failure raises OSError 5 (EIO).
Addresses are written out: a name would cost the heap a dict entry each.
"""

# mem8, mem32 (None off a micro:bit), the last byte, how often it came again in a row.
# Set up by the module's own code, which the heap frees after the import: a function or a
# global name here would stay.
HW = [None, None, -1, 0]
if __import__("sys").platform == "microbit":
    # The address is the nRF51's; elsewhere (the unix port maps /dev/mem) it is not an RNG.
    HW[0] = __import__("machine").mem8
    HW[1] = __import__("machine").mem32
    HW[1][0x4000D504] = 1      # CONFIG: bias correction on
    HW[1][0x4000D000] = 1      # TASKS_START


def getrandbits(k):
    """``k`` (0..30) bits, a whole byte per 8 bits or fewer, top bits first; OSError 5
    when the repetition count test fails or no byte comes."""
    h = HW
    r = 0
    while k > 0:
        h[1][0x4000D100] = 0
        n = 0
        while not h[1][0x4000D100]:
            n += 1
            if n > 50000:
                raise OSError(5)
        b = h[0][0x4000D508]
        if b == h[2]:
            h[3] += 1
            if h[3] > 4:          # the 6th equal byte in a row
                raise OSError(5)
        else:
            h[2] = b
            h[3] = 0
        if k < 8:
            return (r << k) | (b >> (8 - k))
        r = (r << 8) | b
        k -= 8
    return r


def selftest():
    """Start-up test: False off a micro:bit, or when 1024 bytes fail the repetition count test."""
    if not HW[1]:
        return False
    try:
        for _ in range(1024):
            getrandbits(8)
    except OSError:
        return False
    return True
