"""The privacy map (cloud/privacy/privacy_map.py) and the table docs/privacy.md shows from it."""
from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

from dpsense.cloud.privacy.privacy_map import privacy_map, render
from dpsense.protocol.config import validate
from dpsense.protocol.fixedpoint import Affine
from dpsense.protocol.mechanism import Column, RecordMechanism
from dpsense.protocol.rng import XorShift32
from dpsense.tools import privacy_tables
from dpsense.tools.provision import DEMO_CONFIG, board_profile, build_config
from dpsense.tools.windowcap import drop_charged

ROOT = Path(__file__).resolve().parents[3]


def _cfg(**changes: object) -> dict:
    # A charge key left out keeps the window cap releasing every reading (drop_charged).
    raw = drop_charged(DEMO_CONFIG, [k for k, v in changes.items() if v is None])
    raw.update({k: v for k, v in changes.items() if v is not None})
    return validate(build_config("pico", raw, 7, None), board_profile("pico"))


def _rows(cfg: dict, **kw: object) -> dict[str, Fraction | None]:
    return {"%s: %s" % (r.party, r.records): r.epsilon for r in privacy_map(cfg, **kw)}


def test_the_table_in_docs_privacy_is_the_map_of_the_default_config() -> None:
    doc = (ROOT / "docs" / "privacy.md").read_text()
    shown = re.search(r"<!-- privacy-map:begin -->\n(.*?)<!-- privacy-map:end -->", doc, re.S)
    assert shown is not None
    assert shown.group(1) == render(privacy_map(_cfg()))


def test_docs_privacy_shows_the_generated_tables_and_the_check_catches_a_change(tmp_path, monkeypatch,
                                                                                 capsys) -> None:
    doc = (ROOT / "docs" / "privacy.md").read_text()
    want = privacy_tables.tables()
    assert privacy_tables.shown(doc) == want
    assert privacy_tables.main(["--check"]) == 0
    # Power: one changed figure in a copy of the document fails the check, --write repairs it.
    copy = tmp_path / "privacy.md"
    copy.write_text(doc.replace("| pico | `urandom` | 1 | 2 | 2 |", "| pico | `urandom` | 1 | 2 | 3 |"))
    monkeypatch.setattr(privacy_tables, "DOC", copy)
    assert privacy_tables.main(["--check"]) == 1 and "privacy-boards" in capsys.readouterr().err
    assert privacy_tables.main(["--write"]) == 0 and copy.read_text() == doc


def test_no_supported_board_is_unprotected_by_default_unless_provisioning_names_the_flag() -> None:
    for line in privacy_tables.tables()["privacy-boards"].splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert ("not protected" in line) == (cells[-1] != "-"), line
        if "not protected" in line:
            assert cells[-1] == "`tools/flash.py provision --no-privacy`"
    assert "not protected" not in privacy_tables.tables()["privacy-map"]


def test_the_map_agrees_with_the_board_s_mechanism_and_ledger_charge() -> None:
    cfg = _cfg()
    cols = [Column(Affine(*c[:5]), c[5], cfg["epsilon"]) for c in cfg["columns"]]
    mech = RecordMechanism(cols, cfg["centre"], XorShift32(1), cfg["epsilon_cs"])
    rows = _rows(cfg)
    assert rows["board ledger: charge per record (eps_row + epsilon_cs + epsilon_a)"] == \
        Fraction(*mech.epsilon_charge(cfg["epsilon_a"]))
    assert rows["gateway, broker, analyst before a round: a record, two readings of the normal box"] == \
        Fraction(*mech.epsilon_row())
    assert rows["gateway, broker, analyst before a round: a record, any two readings of the domain"] == \
        Fraction(*mech.epsilon_row_worst())


def test_the_caps_bound_the_analyst_after_rounds_only_when_the_board_charges_epsilon_a() -> None:
    window = "analyst after rounds: a window's records, normal box"
    life = "analyst after rounds: a board's records until provisioned again, normal box"
    charged = _rows(_cfg())
    assert charged[window] <= Fraction(DEMO_CONFIG["window_cap"]) and charged[life] <= 1000 * charged[window]
    cfg = _cfg(epsilon_a=None)
    assert cfg["window_cap"] == (1800, 1)                                   # 600 x (1 + 2)
    uncharged = _rows(cfg)
    assert uncharged[window] == 600 * 2 < 1800            # 600 releases at 1 + 2, held at 1 + 1
    # A correction server above the boards' epsilon_a breaks the cap again (where epsilon_cs's
    # charge does not happen to cover it).
    cfg = _cfg(epsilon_cs=None)
    assert cfg["window_cap"] == (1200, 1)                                   # 600 x (1 + 1)
    assert _rows(cfg, analyst_epsilon=Fraction(2))[window] == 600 * 3 > 1200


def test_the_default_epsilon_cs_is_the_profile_s_and_the_boards_from_a_profile_get_it() -> None:
    from dpsense.cloud.deploy.profile import DEFAULT_EPSILON_CS, DeviceProfile
    from dpsense.tools.boardprofile import config_from_profile
    assert DEMO_CONFIG["epsilon_cs"] == DEFAULT_EPSILON_CS
    prof = DeviceProfile(quantum=0.01, domain=100.0, delta_q=(25, 40), epsilon="0.5", centre_q=(0, 0))
    base = config_from_profile(json.loads(prof.to_json()), "profile.json")
    assert base["epsilon_cs"] == DEFAULT_EPSILON_CS and base["window_cap"] == "1800"   # 600 x (2 x 0.5 + 2)
    # The correction server's rules take the boards' noise from the same profile: cs_delta / epsilon_cs.
    mech = RecordMechanism([Column(Affine(1, 1, 0, -1, 1), d, (1, 2)) for d in (25, 40)], [0, 0], None, (2, 1))
    assert prof.board_noise_scale_q() == mech.cs_delta / 2
    assert DeviceProfile(quantum=0.01, domain=100.0, delta_q=(25, 40), epsilon="0.5", centre_q=(0, 0),
                         epsilon_cs=None).board_noise_scale_q() == 0


def test_the_correction_server_row_follows_epsilon_cs() -> None:
    row = "correction server: a record's d_diff, two readings within rho of c"
    assert _rows(_cfg())[row] == Fraction(DEMO_CONFIG["epsilon_cs"]) == 2
    assert _rows(_cfg(epsilon_cs="1"))[row] == 1
    assert _rows(_cfg(epsilon_cs=None))[row] is None
    assert "not protected" in render(privacy_map(_cfg(epsilon_cs=None)))
