"""Release timing of the real firmware loop under the MicroPython unix port (or CPython).

    micropython tests/statistical/release_timing.py 2000 5      # readings, period_ms
    micropython tests/statistical/release_timing.py 8000 2 /tmp/x 5   # + 5 us when |Y| >= 200

Runs ``firmware/app.py``'s ``App.run`` (Pico profile, one column at scale 100 quanta, a
stimulus of zeros, so each released value is its noise Y) and prints, per release, one
line ``<latency_us> <Y> <since_first_us>``: microseconds from the moment the ledger let the
reading through (the record's noise is drawn after it) to the moment the record reached the
transport, and from the first record's hand-over to this one's. That moment is what a broker, a gateway or
anyone on the wire sees. tests/statistical/test_release_timing.py reads the lines. A fourth
argument reports the hand-over of each record with |Y| >= 200 that many microseconds later: a
deliberately leaky release path, the timing test's power check.
"""
import sys
import time

sys.path.insert(0, ".")
sys.path.insert(0, "firmware")

from app import App                        # noqa: E402
from ledger import provision               # noqa: E402
import boards                              # noqa: E402
from shared_protocol.config import validate  # noqa: E402
from shared_protocol import wire           # noqa: E402
from shared_protocol.seal import ENC_KEY_SIZE, MAC_KEY_SIZE  # noqa: E402


def new_seal_key(path):
    """A fresh key file next to the fresh ledger, as provisioning writes them: the records are
    sealed, as on a provisioned board."""
    import os
    f = open(path, "wb")
    f.write(os.urandom(ENC_KEY_SIZE + MAC_KEY_SIZE))
    f.close()


def main(n, period, tmp, leak_us=0):
    profile = boards.load("pico")
    cfg = validate({
        "board": "pico", "device_id": 7,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -10, "raw_max": 10, "delta_q": 100}],
        "epsilon": "1", "centre": [0], "window_records": 10 ** 6, "window_cap": "1000000",
        "lifetime_cap": "1000000", "period_ms": period, "stimulus": [[0]] * n,
        "ring_path": tmp + "-ring", "ledger_path": tmp + "-ledger", "seal_key_path": tmp + "-key",
    }, profile)
    provision(cfg["ledger_path"])
    new_seal_key(cfg["seal_key_path"])
    app = App(cfg, profile, lambda s: None, (lambda b: None, lambda: None))
    # No gateway answers here: status lines are not what this measures, and each unanswered one
    # would hold the boot's end for its repeats (firmware/seriallink.py).
    app.link.say = lambda line: None
    read_at = [0, -1]     # when the ledger let the last reading through, and its sequence number
    first = [None]        # when the first record was handed over
    charge = app.ledger.charge

    def charged():
        code = charge()
        read_at[0] = time.ticks_us()
        read_at[1] += 1
        return code

    def handoff(reading, correction):
        t = time.ticks_us()
        _, rec = wire.decode(reading)
        if leak_us and abs(rec[5][0]) >= 200:
            t = time.ticks_add(t, leak_us)       # as if this record had left leak_us later
        # The schedule hands record k over before reading k + 1, so the last reading is its own.
        assert rec[2] == read_at[1]
        if first[0] is None:
            first[0] = t
        print("%d %d %d" % (time.ticks_diff(t, read_at[0]), rec[5][0], time.ticks_diff(t, first[0])))

    app.ledger.charge = charged
    app.transport = handoff
    app.run()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "/tmp/dpsense-timing",
         int(sys.argv[4]) if len(sys.argv) > 4 else 0)
