"""tools/provision.microbit_config_text + firmware/mbcfg.load == node_call, and the board
refuses what firmware/config.py (or build_config for the micro:bit) refuses, naming the same key."""
from __future__ import annotations

import ast
import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "firmware") not in sys.path:
    sys.path.insert(0, str(ROOT / "firmware"))

import mbcfg  # noqa: E402
from firmware.boards import microbit  # noqa: E402
from dpsense.protocol.config import ConfigError, validate  # noqa: E402
from hil_tests import test_boot  # noqa: E402
from hil_tests.helpers import column  # noqa: E402
from tests.portable import test_mbcfg as portable  # noqa: E402
from dpsense.tools.provision import (DEMO_CONFIG, ProvisionError, build_config,  # noqa: E402
                                     microbit_config_text, node_call)
from dpsense.tools.microbit import worst_epsilon  # noqa: E402

# The micro:bit's profile plus the gateway's broker keys (checked, as config.py does for
# boards with MQTT): what the board's own checks mirror.
PROFILE = dict(microbit.PROFILE, transport="mqtt", ring_path="ring.bin")


def _rig_config(**keys):
    """What hil_tests/rigs/qemu.py ``config()`` builds (test_boot's good config by default)."""
    cfg = {"device_id": 7, "broker_host": "127.0.0.1", "broker_port": 41883,
           "broker_user": "d7", "broker_password": "s3cret-pw"}
    cfg.update(columns=[column(20), column(30)], epsilon="0.5", centre=[0, 0],
               window_records=1000, window_cap="1000", period_ms=0)
    cfg.update(keys)
    return cfg


def _board(cfg, tmp_path):
    """``(result, lines)`` of mbcfg.load on the text the host writes for ``cfg``."""
    path = tmp_path / "config.txt"
    path.write_text(microbit_config_text(cfg))
    out: list[str] = []
    return mbcfg.load(str(path), out.append), out


def _call_args(cfg):
    call = node_call(cfg)
    assert call.startswith("mbnode.run(")
    return ast.literal_eval(call[len("mbnode.run"):])


def _host_key(cfg):
    """The key config.py (then build_config for the micro:bit) names, or None if accepted."""
    full = copy.deepcopy(cfg)
    # the board takes its broker keys as optional (the gateway may have them)
    full.setdefault("broker_host", "gateway")
    full.setdefault("broker_password", "pw")
    try:
        validate(full, PROFILE)
    except ConfigError as e:
        return str(e).split(": ", 1)[0]
    try:
        build_config("microbit", copy.deepcopy(cfg), cfg["device_id"], None)
    except ProvisionError as e:
        text = str(e)
        if text.startswith("config error for board microbit: "):
            text = text[len("config error for board microbit: "):]
        return text.split(": ", 1)[0]
    return None


def _apply(cfg, change):
    cfg = copy.deepcopy(cfg)
    for k, v in change.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


VALID = [
    _rig_config(),
    _rig_config(config_id=3, stimulus=[[1, 2], [3, 4]]),
    build_config("microbit", DEMO_CONFIG, 7, None),
    dict(build_config("microbit", DEMO_CONFIG, 4294967295, None), config_id=65535),
    _rig_config(columns=[column(1, num=-3, den=7, offset=-250, raw_min=-2 ** 31, raw_max=2 ** 31)],
                centre=[-12], epsilon="0.001", window_cap="0.001", window_records=2 ** 32 - 1),
    _rig_config(columns=[column(5), column(6, num=3300, den=65535), column(7, offset=9)],
                centre=[1, 2, 3], epsilon=".25", window_cap="00.750", window_records=1),
    {"device_id": 1, "columns": [column(1)], "epsilon": "2", "centre": [0], "window_records": 5,
     "window_cap": "2.50"},
]


@pytest.mark.parametrize("cfg", VALID, ids=range(len(VALID)))
def test_board_gets_exactly_the_node_call_arguments(cfg, tmp_path):
    assert _host_key(cfg) is None
    got, out = _board(cfg, tmp_path)
    assert out == []
    assert got == _call_args(cfg)
    # what provisioning adds to the board's own reading of its config is what the full
    # firmware works out from the JSON config
    assert worst_epsilon(got) == _worst(cfg)


def _worst(cfg):
    """The full firmware's whole-domain epsilon of a record, for the same config dict."""
    from dpsense.protocol.fixedpoint import Affine, parse_decimal
    from dpsense.protocol.mechanism import Column, RecordMechanism
    from dpsense.protocol.rng import XorShift32
    eps = parse_decimal(cfg["epsilon"])
    cols = [Column(Affine(c["num"], c["den"], c.get("offset", 0), c["raw_min"], c["raw_max"]),
                   c["delta_q"], eps) for c in cfg["columns"]]
    return RecordMechanism(cols, list(cfg["centre"]), XorShift32(1)).epsilon_row_worst()


def test_whole_domain_epsilon_by_hand():
    # 1/2 x 2e8/20 + 1/2 x 2e8/30, reduced
    assert worst_epsilon(portable.WANT) == (25000000, 3)
    # a domain narrower than delta_q costs the column's epsilon (10 < 25: 1/4); a negative
    # scale counts by its width (200 quanta over 50: 4 x 1/4)
    args = (7, 0, [(1, 1, 0, 0, 10, 25), (-2, 1, 0, 0, 100, 50)], (1, 4), [0, 0], 5, (2, 1))
    assert worst_epsilon(args) == (5, 4)


def test_text_keeps_the_secret_and_host_keys_off_the_board():
    cfg = _rig_config(stimulus=[[1, 2]])
    text = microbit_config_text(cfg)
    assert "s3cret-pw" not in text and "broker_password" not in text
    assert "period_ms" not in text and "stimulus" not in text
    assert 'epsilon="0.5"\n' in text and "columns[1].delta_q=30\n" in text
    assert "epsilon=0.5\n" in microbit_config_text(_rig_config(epsilon=0.5))
    assert "device_id=true\n" in microbit_config_text(_rig_config(device_id=True))


def test_portable_good_text_is_what_the_host_writes():
    assert microbit_config_text(_rig_config()) == portable._text(portable.GOOD)
    assert portable.WANT == _call_args(_rig_config())


# (change to the rig's good config, the key both sides must name); None drops the key
MORE = (
    ({"epsilon": "1e-3"}, "epsilon"),
    ({"epsilon": "0"}, "epsilon"),
    ({"epsilon": 1}, "epsilon"),
    ({"epsilon": None}, "epsilon"),
    ({"device_id": 0}, "device_id"),
    ({"device_id": 2 ** 32}, "device_id"),
    ({"device_id": "7"}, "device_id"),
    ({"device_id": True}, "device_id"),
    ({"device_id": 7.0}, "device_id"),
    ({"config_id": 70000}, "config_id"),
    ({"config_id": -1}, "config_id"),
    ({"columns": []}, "columns"),
    ({"columns": None}, "columns"),
    ({"columns": "x"}, "columns"),
    ({"columns": [column(1)] * 4, "centre": [0] * 4}, "columns"),
    ({"columns": [column(1)] * 17, "centre": [0] * 17}, "columns"),
    ({"columns": [column(20, num=0), column(30)]}, "columns[0].num"),
    ({"columns": [column(20, den=-1), column(30)]}, "columns[0].den"),
    ({"columns": [column(20, raw_max=-2 * 10 ** 8), column(30)]}, "columns[0].raw_max"),
    ({"columns": [column(20), {"num": 1, "den": 1, "raw_min": 0, "raw_max": 1, "delta_q": 1}]},
     "columns[1].offset"),
    ({"columns": [column(20), dict(column(30), scale=2)]}, "columns[1].scale"),
    ({"columns": [column(20), 5]}, "columns[1]"),
    ({"columns": [column(20), {}]}, "columns[1].num"),
    ({"columns": [column(20), dict(column(30), delta_q=1.5)]}, "columns[1].delta_q"),
    ({"centre": [0, 1.5]}, "centre"),
    ({"centre": [0, False]}, "centre"),
    ({"centre": "0,0"}, "centre"),
    ({"centre": None}, "centre"),
    ({"window_records": None}, "window_records"),
    ({"window_records": 0}, "window_records"),
    ({"window_seconds": 60}, "window_records"),
    ({"window_records": None, "window_seconds": 60}, "window_seconds"),
    ({"window_cap": None}, "window_cap"),
    ({"window_cap": 1000}, "window_cap"),
    ({"window_cap": "0.999"}, "window_cap"),
    ({"broker_host": ""}, "broker_host"),
    ({"broker_host": 5}, "broker_host"),
    ({"broker_port": 65536}, "broker_port"),
    ({"broker_port": "1883"}, "broker_port"),
    ({"broker_user": ""}, "broker_user"),
    ({"epsilion": "0.5"}, "epsilion"),
    ({"columns[0].num": 1}, "columns[0].num"),         # a top-level key that looks like a column's
    ({"bad key": 1}, "bad key"),
    ({"a=b": 1}, "a=b"),
)


QUOTED = ("columns[0].num", "bad key", "a=b")


@pytest.mark.parametrize("change,key", test_boot.BAD + MORE, ids=lambda v: repr(v)[:40])
def test_board_refuses_what_the_host_refuses_naming_the_same_key(change, key, tmp_path):
    cfg = _apply(_rig_config(), change)
    host = _host_key(cfg)
    assert host == key
    got, out = _board(cfg, tmp_path)
    assert got is None and len(out) == 1, (got, out)
    line = out[0]
    assert line.startswith("config error: ") and line.endswith("\n"), line
    named = line[len("config error: "):].split(": ", 1)[0]
    if key in QUOTED and key in change:
        # keys the text format cannot hold as they are: written quoted, refused as unknown
        assert line.endswith(": unknown key\n") and named.startswith('"'), line
        named = named.strip('"').replace("\\u003d", "=")
    assert named == key, line


def test_portable_bad_table_covers_hil_test_boot():
    keys = [key for _, key in portable.BAD]
    for change, key in test_boot.BAD:
        assert key in keys, key


def test_survives_the_micro_bit_shrinking_and_stays_small(tmp_path):
    """tools/deploy.py shrinks files for the micro:bit; the shrunk modules load alike.
    The board compiles a module in one block about its size: at 3.8 KB mbcfg failed to
    compile in the check's boot (MemoryError, 3,496 bytes), at 3.4 KB it did."""
    from dpsense.tools.deploy import BOARDS, plan
    text = plan(BOARDS["microbit"], [ROOT / "firmware" / "mbcfg.py"])[0].data.decode()
    assert len(text) < 3500, len(text)      # 28 of the file system's 120 128-byte chunks
    g: dict = {}
    exec(compile(text, "mbcfg.py", "exec"), g)
    for cfg in VALID[:2] + [_apply(_rig_config(), {"epsilon": 0.5})]:
        path = tmp_path / "config.txt"
        path.write_text(microbit_config_text(cfg))
        out1: list[str] = []
        out2: list[str] = []
        assert g["load"](str(path), out1.append) == mbcfg.load(str(path), out2.append)
        assert out1 == out2
