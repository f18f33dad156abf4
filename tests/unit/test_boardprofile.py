"""tools/boardprofile.py and `flash.py provision --from-profile`: both profiles dpsense writes
(`save_profile`'s <data dir>/profile.json and `curator calibrate --out`) become a board config
that the board's own rules accept (before: ``config error for board unix: quantum: unknown key``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dpsense.cloud.deploy.profile import DeviceProfile, save_profile
from dpsense.protocol.fixedpoint import Affine
from dpsense.tools import flash
from dpsense.tools import provision as pv
from dpsense.tools.boardprofile import load_board_base

PROFILE = DeviceProfile(quantum=0.01, domain=600.0, delta_q=(7524, 7600), epsilon="0.5",
                        centre_q=(-15, 7), config_id=4, w_o_q=22723.5, band_width_q=10.0)


def _profile(tmp_path: Path) -> str:
    return str(save_profile(tmp_path / "data", PROFILE))


def test_a_saved_profile_becomes_a_board_config_the_board_accepts(tmp_path: Path) -> None:
    base = load_board_base(_profile(tmp_path))
    cfg = pv.build_config("unix", dict(base, stimulus="rows.txt"), 7, "pw")
    assert (cfg["config_id"], cfg["epsilon"], cfg["centre"]) == (4, "0.5", [-15, 7])
    # Raw counts are quanta: 600 units at 0.01 per quantum is +-60000 raw.
    assert cfg["columns"] == [{"num": 1, "den": 1, "offset": 0, "raw_min": -60000, "raw_max": 60000,
                               "delta_q": d} for d in (7524, 7600)]
    # A window of 600 readings, every one released: 600 x (2 columns x 0.5 + epsilon_cs 2).
    assert (cfg["window_records"], cfg["window_cap"], cfg["period_ms"]) == (600, "1800", 1000)
    assert cfg["epsilon_cs"] == "2"
    assert not set(cfg) & {"quantum", "domain", "w_o_q", "dbscan_eps", "band_width_q", "centre_q"}
    # The micro:bit takes the same profile (only what mbnode.run takes).
    assert pv.node_call(pv.build_config("microbit", base, 7, None)).startswith(
        "mbnode.run(7,4,[(1, 1, 0, -60000, 60000, 7524)")


def test_raw_scale_gives_the_exact_affine_map(tmp_path: Path) -> None:
    """A board counting 0.05 units per raw count: 5 quanta per count, raw range +-12000."""
    base = load_board_base(_profile(tmp_path), raw_scale=["0.01", "0.05"], window_records=10, period_ms=50)
    c0, c1 = base["columns"]
    assert (c0["num"], c0["den"], c1["num"], c1["den"]) == (1, 1, 5, 1)
    assert (c1["raw_min"], c1["raw_max"]) == (-12000, 12000)
    assert Affine(c1["num"], c1["den"], 0, c1["raw_min"], c1["raw_max"]).apply(300) == 1500   # 15 units
    assert (base["window_records"], base["window_cap"], base["period_ms"]) == (10, "30", 50)
    base = load_board_base(_profile(tmp_path), raw_scale=["0.003", "2"])
    assert (base["columns"][0]["num"], base["columns"][0]["den"]) == (3, 10)
    assert base["columns"][1]["raw_max"] == 300


def test_a_board_config_keeps_its_maps_and_takes_the_profiles_sensitivity(tmp_path: Path) -> None:
    board = tmp_path / "pico.json"
    board.write_text(json.dumps({"columns": pv.DEMO_CONFIG["columns"], "window_records": 100,
                                 "window_cap": "20", "ring_records": 32}))
    base = load_board_base(_profile(tmp_path), str(board))
    assert [c["num"] for c in base["columns"]] == [1, 3300] and [c["delta_q"] for c in base["columns"]] == [7524, 7600]
    assert (base["window_records"], base["window_cap"], base["ring_records"]) == (100, "20", 32)
    pv.build_config("pico", base, 9, None)


@pytest.mark.parametrize("columns, raw_scale, msg", [
    (1, None, "profile.json is for 2 column(s), .*pico.json has 1: calibrate on the board's columns"),
    (3, None, "is for 2 column(s), .*has 3"),
    (None, ["0.01"], "--raw-scale gives 1 column(s), .*profile.json is for 2"),
    (2, ["0.01", "0.01"], "--raw-scale and the columns of .*pico.json both say"),
    (None, ["0", "1"], "--raw-scale: must be a decimal > 0"),
])
def test_a_profile_for_other_columns_is_refused_in_one_line(tmp_path: Path, columns, raw_scale, msg) -> None:
    board = tmp_path / "pico.json"
    col = pv.DEMO_CONFIG["columns"][0]
    board.write_text(json.dumps({} if columns is None else {"columns": [col] * columns}))
    with pytest.raises(pv.ProvisionError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        load_board_base(_profile(tmp_path), str(board), raw_scale=raw_scale)


def test_a_config_file_is_still_a_config_and_a_broken_profile_names_its_key(tmp_path: Path) -> None:
    p = tmp_path / "conf.json"
    p.write_text(json.dumps({"config": {"epsilon": "1"}}))
    assert load_board_base(str(p)) == {"epsilon": "1"}
    with pytest.raises(pv.ProvisionError, match="go with a device profile"):
        load_board_base(str(p), window_records=5)
    p.write_text(json.dumps(dict(json.loads(PROFILE.to_json()), epsilon=0.5)))
    with pytest.raises(pv.ProvisionError, match="epsilon: must be a decimal string"):
        load_board_base(str(p))
    doc = json.loads(PROFILE.to_json())
    del doc["centre_q"]
    p.write_text(json.dumps(doc))
    with pytest.raises(pv.ProvisionError, match="needs centre_q"):
        load_board_base(str(p))


@pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                    reason="Debian package 'mosquitto' is not installed")
def test_provision_from_a_calibrated_profile_on_the_unix_port(tmp_path: Path, capsys) -> None:
    prof = _profile(tmp_path)
    board_json = tmp_path / "unix.json"
    board_json.write_text(json.dumps({"stimulus": "rows.txt"}))
    argv = ["provision", "--board", "unix", "--port", str(tmp_path / "b"), "--device-id", "3",
            "--data-dir", str(tmp_path / "a"), "--correction-data-dir", str(tmp_path / "cs"),
            "--from-profile", prof, "--config-json", str(board_json), "--window-records", "50"]
    assert flash.main(argv) == 0, capsys.readouterr().err
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    assert cfg["columns"][1]["delta_q"] == 7600 and cfg["window_cap"] == "150"
    assert (tmp_path / "cs" / "correction-keys" / "keys.json").exists()
    assert not (tmp_path / "a" / "correction-keys").exists()
    board_json.write_text(json.dumps({"stimulus": "rows.txt", "columns": [pv.DEMO_CONFIG["columns"][0]]}))
    capsys.readouterr()
    assert flash.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is for 2 column(s)" in err[0]
    assert flash.main(argv[:-2] + ["--raw-scale", "0.01"]) == 1


def test_the_readmes_board_files_provision_from_a_profile(tmp_path: Path) -> None:
    """README.md's esp32.json and pico.json, with a two-column profile, pass each board's rules."""
    import re
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = {name: re.search(r"`%s`[^`]*?:\n\n```json\n(.*?)```" % re.escape(name), readme, re.S)
              for name in ("esp32.json", "pico.json")}
    assert all(blocks.values()), "README.md shows no esp32.json or pico.json"
    for name, m in blocks.items():
        assert m is not None
        (tmp_path / name).write_text(m.group(1))
        base = load_board_base(_profile(tmp_path), str(tmp_path / name))
        board = name.split(".")[0]
        cfg = pv.build_config(board, base, 7, "pw" if board == "esp32" else None, "broker.lan", 8883,
                              tls_ca=board == "esp32")
        assert cfg["epsilon"] == "0.5" and [c["delta_q"] for c in cfg["columns"]] == [7524, 7600]


def _released(cfg: dict) -> int:
    """How many records of one window the board's ledger releases under ``cfg``: its cap over its
    charge per record (shared_protocol/mechanism.py ``epsilon_charge``), at most the window."""
    from fractions import Fraction

    from dpsense.protocol.fixedpoint import parse_decimal
    from dpsense.protocol.mechanism import Column, RecordMechanism
    cols = [Column(Affine(1, 1, 0, -1, 1), c["delta_q"], parse_decimal(cfg["epsilon"])) for c in cfg["columns"]]
    ecs, ea = cfg.get("epsilon_cs"), cfg.get("epsilon_a")
    mech = RecordMechanism(cols, [0] * len(cols), None, None if ecs is None else parse_decimal(ecs))
    charge = Fraction(*mech.epsilon_charge(None if ea is None else parse_decimal(ea)))
    return min(int(Fraction(*parse_decimal(cfg["window_cap"])) // charge), cfg["window_records"])


def test_the_default_cap_releases_every_reading_of_the_window(tmp_path: Path) -> None:
    # The example config: 600 records x (2 x 0.5 + epsilon_cs 2 + epsilon_a 1) on a board with both
    # keys; the micro:bit has neither and gets 600 x 2 x 0.5. Power: the cap before (600) let
    # a quarter of the readings through.
    from dpsense.tools.windowcap import default_window_cap
    assert pv.DEMO_CONFIG["window_cap"] == default_window_cap(pv.DEMO_CONFIG) == "2400"
    assert _released(pv.build_config("pico", dict(pv.DEMO_CONFIG), 7, None)) == 600
    assert _released(dict(pv.DEMO_CONFIG, window_cap="600")) == 150
    mb = pv.build_config("microbit", dict(pv.DEMO_CONFIG), 7, None)
    assert mb["window_cap"] == "600" and _released(mb) == 600
    # From a profile, with the board's epsilon_a (--config-json): 100 x (2 x 0.5 + 2 + 1).
    board = tmp_path / "pico.json"
    board.write_text(json.dumps({"epsilon_a": "1", "window_records": 100}))
    base = load_board_base(_profile(tmp_path), str(board))
    assert base["window_cap"] == "400" and _released(pv.build_config("pico", base, 9, None)) == 100
    # The micro:bit from the same profile (--no-privacy drops epsilon_cs): 600 x 2 x 0.5.
    import argparse
    base = flash._no_privacy(argparse.Namespace(board="microbit", no_privacy=True), load_board_base(_profile(tmp_path)))
    assert base["window_cap"] == "600" and "epsilon_cs" not in base
    # A cap the operator gave stays as given.
    base = flash._no_privacy(argparse.Namespace(board="microbit", no_privacy=True),
                             load_board_base(_profile(tmp_path), window_cap="90"))
    assert base["window_cap"] == "90"
