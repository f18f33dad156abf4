"""The privacy map (cloud/privacy/privacy_map.py) and the table docs/privacy.md shows from it."""
from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

from dpsense.cloud.privacy.privacy_map import privacy_map, render
from dpsense.protocol.config import validate
from dpsense.protocol.fixedpoint import Affine
from dpsense.protocol.mechanism import Column, RecordMechanism
from dpsense.protocol.rng import XorShift32
from dpsense.tools.provision import DEMO_CONFIG, board_profile, build_config

ROOT = Path(__file__).resolve().parents[3]


def _cfg(**changes: object) -> dict:
    raw = dict(DEMO_CONFIG, **changes)
    return validate(build_config("pico", {k: v for k, v in raw.items() if v is not None}, 7, None),
                    board_profile("pico"))


def _rows(cfg: dict, **kw: object) -> dict[str, Fraction | None]:
    return {"%s: %s" % (r.party, r.records): r.epsilon for r in privacy_map(cfg, **kw)}


def test_the_table_in_docs_privacy_is_the_map_of_the_default_config() -> None:
    doc = (ROOT / "docs" / "privacy.md").read_text()
    shown = re.search(r"<!-- privacy-map:begin -->\n(.*?)<!-- privacy-map:end -->", doc, re.S)
    assert shown is not None
    assert shown.group(1) == render(privacy_map(_cfg()))


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
    uncharged = _rows(_cfg(epsilon_a=None))
    assert uncharged[window] == 2 * Fraction(DEMO_CONFIG["window_cap"])           # 600 releases at 1 + 1
    # A correction server above the boards' epsilon_a breaks the cap again.
    assert _rows(_cfg(), analyst_epsilon=Fraction(2))[window] > Fraction(DEMO_CONFIG["window_cap"])


def test_the_correction_server_row_follows_epsilon_cs() -> None:
    row = "correction server: a record's d_diff, two readings within rho of c"
    assert _rows(_cfg())[row] is None
    assert _rows(_cfg(epsilon_cs="1"))[row] == 1
    assert "not protected" in render(privacy_map(_cfg()))
