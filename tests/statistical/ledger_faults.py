"""One boot of the real firmware loop under the MicroPython unix port (or CPython), for
tests/statistical/test_ledger_faults.py, which kills it with SIGKILL at random moments,
damages its ledger file between boots and sets its clock back.

    micropython tests/statistical/ledger_faults.py BASE MODE CLOCKS
    # BASE-ledger, BASE-ring: the files; MODE: records or seconds; CLOCKS: a file of
    # integers, the ledger clock's second for each reading in turn (one reading each)

Runs ``firmware/app.py``'s ``App.run`` (Pico profile, serial transport replaced by a print;
one column at epsilon 1, so a record costs 1; window cap 3, lifetime cap 30; 8-reading or
60-second windows) on the ledger file as the last boot left it (never provisioned here).
Prints ``B <ledger state>`` once built, then ``R <window> <second>`` for each record as it
reaches the transport, after the ledger persisted its charge: the window the ledger
charged it to and the clock second it saw.
"""
import sys

sys.path.insert(0, ".")
sys.path.insert(0, "firmware")

from app import App                          # noqa: E402
from ledger import Ledger                    # noqa: E402
import boards                                # noqa: E402
from shared_protocol.config import validate  # noqa: E402
from tests.statistical.release_timing import new_seal_key  # noqa: E402

WINDOW_RECORDS = 8
WINDOW_SECONDS = 60
CAP = "3"
LIFETIME = "30"


class StepClock:
    """The ledger's clock: ``time()`` is the second set for the current reading."""

    def __init__(self, first):
        self.now = first

    def time(self):
        return self.now


def main(base, mode, clocks):
    profile = dict(boards.load("pico"))
    profile["clock"] = "system"                  # seconds windows need a profile with a clock
    raw = {
        "board": "pico", "device_id": 7,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -10, "raw_max": 10, "delta_q": 100}],
        "epsilon": "1", "centre": [0], "window_cap": CAP, "lifetime_cap": LIFETIME, "period_ms": 0,
        "stimulus": [[0]] * len(clocks), "ring_path": base + "-ring", "ledger_path": base + "-ledger",
        "seal_key_path": base + "-key",
    }
    if mode == "seconds":
        raw["window_seconds"] = WINDOW_SECONDS
    else:
        raw["window_records"] = WINDOW_RECORDS
    cfg = validate(raw, profile)
    new_seal_key(cfg["seal_key_path"])
    app = App(cfg, profile, lambda s: None, (lambda b: None, lambda: None))
    # No gateway answers here: status lines are not what this measures, and each unanswered one
    # would hold the boot's end for its repeats (firmware/seriallink.py).
    app.link.say = lambda line: None
    clock = StepClock(clocks[0] if clocks else 0)
    # The same ledger, read with the step clock (App's own reads the system clock).
    app.ledger = led = Ledger(app.mech.epsilon_row(), cfg["window_cap"], cfg["window_records"],
                              cfg["window_seconds"], cfg["ledger_path"], clock=clock,
                              lifetime=cfg["lifetime_cap"])
    print("B %s" % led.state())
    at = [0]
    charge = led.charge

    def charged():
        clock.now = clocks[at[0]]
        at[0] += 1
        return charge()

    def handoff(reading, correction):
        print("R %d %d" % (led.window, clock.now))

    led.charge = charged
    app.transport = handoff
    app.run()
    print("E")


if __name__ == "__main__":
    f = open(sys.argv[3])
    values = [int(v) for v in f.read().split()]
    f.close()
    main(sys.argv[1], sys.argv[2], values)
