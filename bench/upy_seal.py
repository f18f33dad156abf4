"""Cost of sealing a correction record on the board: heap and time, against the plain record.

    micropython bench/upy_seal.py [ROOT]

Runs under the MicroPython unix port (the boards' own interpreter; `cryptolib` AES, hashlib
SHA-256) and prints one table. Rows:

* ``state``: heap bytes the sealer keeps for the board's life (the AES object, HMAC's two
  64-byte pads, the counter block, the node's 48-byte record buffer), measured as
  ``gc.mem_alloc()`` after building it minus before, with ``gc.collect()`` around;
* ``per record``: heap bytes allocated by one ``seal_into`` (garbage, collected later),
  the mean over 200 calls with collection off, against the same figure for the plain
  record (``wire.encode_correction_into``, the baseline, measured in the same run);
* ``time``: microseconds per record for both, the best of three alternated runs of
  2,000 records each.

The unix port is a 64-bit build: object sizes on a 32-bit board (ESP32, RP2040) are
smaller, so these figures bound the boards' from above.
"""
import gc
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")

from time import ticks_diff, ticks_us  # noqa: E402

from shared_protocol import seal, wire  # noqa: E402

TOKEN = b"\x01\x23\x45\x67\x89\xab\xcd\xef"
N_HEAP = 200
N_TIME = 2000


def heap_per_call(fn):
    gc.collect()
    gc.disable()
    before = gc.mem_alloc()
    for i in range(N_HEAP):
        fn(i + 1)
    used = gc.mem_alloc() - before
    gc.enable()
    gc.collect()
    return used // N_HEAP


def us_per_call(fn):
    t0 = ticks_us()
    for i in range(N_TIME):
        fn(i + 1)
    return ticks_diff(ticks_us(), t0) / N_TIME


def main():
    gc.collect()
    before = gc.mem_alloc()
    s = seal.Sealer(bytes(range(16)), bytes(range(32, 64)))
    buf = bytearray(seal.SEALED_SIZE)
    gc.collect()
    state = gc.mem_alloc() - before
    plain = bytearray(wire.CORRECTION_SIZE)

    # Nonces grow across the calls of one sealer, as the ledger's counter does.
    nonce = [0]

    def sealed(i):
        nonce[0] += 1
        s.seal_into(buf, 7, 1, i, nonce[0], TOKEN, -1234)

    def clear(i):
        wire.encode_correction_into(plain, 7, 1, i, TOKEN, -1234)

    heap_s, heap_p = heap_per_call(sealed), heap_per_call(clear)
    # Alternated and the best of three each: the machine is shared, noise only adds time.
    t_s = t_p = 1e9
    for _ in range(3):
        t_s = min(t_s, us_per_call(sealed))
        t_p = min(t_p, us_per_call(clear))
    print("sealing a correction record, %s" % sys.implementation.name)
    print("%-34s %12s %12s" % ("", "sealed (k3)", "plain (k2)"))
    print("%-34s %12d %12d" % ("state kept (bytes)", state, len(plain)))
    print("%-34s %12d %12d" % ("heap allocated per record (bytes)", heap_s, heap_p))
    print("%-34s %12.1f %12.1f" % ("time per record (us)", t_s, t_p))
    print("%-34s %12d %12d" % ("record size (bytes)", seal.SEALED_SIZE, wire.CORRECTION_SIZE))


main()
