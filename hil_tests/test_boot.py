"""Boot: a good config reports its entropy source and publishes; a bad one stops, naming the key."""
from __future__ import annotations

import copy

from dpsense.protocol import __version__

from .helpers import column
from .rigs import BOARDS


def _config(rig):
    return rig.config(7, columns=[column(20), column(30)], epsilon="0.5", centre=[0, 0],
                      window_records=1000, window_cap="1000", period_ms=0)


def test_boot_ok_reports_entropy_and_publishes(rig):
    rig.start(_config(rig), stimulus=[[i, -i] for i in range(5)])
    m = rig.expect(r"boot ok: board=(\w+) device=7 boot=(\d+) entropy=(\S+) eps_record=(\S+)"
                   r".* version=(\S+)")
    assert m.group(1) == rig.board
    assert m.group(5) == __version__               # the release the board runs
    entropy = BOARDS[rig.board].entropy            # os.urandom, or the micro:bit's declared PRNG
    assert m.group(3) == entropy
    assert m.group(4) == "1"                       # two columns at 1/2 each
    rig.cloud.wait_readings(5, 20)
    rig.cloud.wait(lambda: rig.cloud.status_events("boot"), 10, "a boot status message")
    st = rig.cloud.status_events("boot")[0]
    assert st["_topic"] == "dpsense/status/d7"
    assert (st["device"], st["boot"], st["entropy"]) == (7, int(m.group(2)), entropy)
    if rig.board != "microbit":        # the micro:bit's status is the gateway's, from its #boot
        assert st["version"] == __version__
    # worst case (two outliers): each column's domain spans 2e8 quanta, eps 1/2 x span / delta_q
    assert st["eps_record"] == "1"
    assert st["eps_record_worst"] == "%d/%d" % _frac(2 * 10 ** 8, 40, 2 * 10 ** 8, 60)
    assert st["cap"] == "1000" and st["dropped"] == 0


# (change to the good config, the key the message must name)
BAD = (
    ({"epsilon": "-1"}, "epsilon"),
    ({"epsilon": 0.5}, "epsilon"),
    ({"device_id": None}, "device_id"),
    ({"centre": [0]}, "centre"),
    ({"columns": [column(0), column(30)]}, "columns[0].delta_q"),
    ({"window_cap": "0.5"}, "window_cap"),
    ({"broker_port": 0}, "broker_port"),
    ({"epsilom": "0.5"}, "epsilom"),
)


def test_config_errors_stop_the_board_and_name_the_key(rig):
    good = _config(rig)
    for change, key in BAD:
        cfg = copy.deepcopy(good)
        for k, v in change.items():
            if v is None:
                del cfg[k]
            else:
                cfg[k] = v
        rig.start(cfg, stimulus=[[1, 2]])
        m = rig.expect(r"(config error|boot ok): ([^\n]*)", 10)
        assert m.group(1) == "config error", "%s accepted: %s (log: %s)" % (change, m.group(0), rig.log_path)
        assert m.group(2).startswith(key + ": "), (key, m.group(2))
        assert rig.wait_exit(10) == 2
    assert rig.cloud.reading_count() == 0


def _frac(n1, d1, n2, d2):
    from fractions import Fraction
    f = Fraction(n1, d1) + Fraction(n2, d2)
    return f.numerator, f.denominator
