"""The tables of docs/privacy.md that the privacy maps compute, printed or checked.

    python -m dpsense.tools.privacy_tables            # print both tables
    python -m dpsense.tools.privacy_tables --check    # exit 1 when docs/privacy.md shows other text
    python -m dpsense.tools.privacy_tables --write    # put them into docs/privacy.md

Each table sits in docs/privacy.md between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``:

* ``privacy-map``: cloud/privacy/privacy_map.py's map of ``DEMO_CONFIG`` (tools/provision.py, what
  ``tools/flash.py provision`` writes by default) on a Pico, the correction server at its default
  ``--analyst-epsilon`` 1;
* ``privacy-boards``: the same default config per supported board (``board_row``); a board whose
  noise comes from a PRNG is provisioned only with ``--no-privacy`` (tools/flash.py).

tests/cloud/privacy/test_privacy_map.py fails when the document and this output differ.
"""
from __future__ import annotations

import argparse
import re
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "privacy.md"
#: The boards `tools/flash.py provision` supports, by profile (qemu-microbit is the micro:bit's).
BOARDS = ("esp32", "pico", "pico_w", "unix", "microbit")
ANALYST_EPSILON = Fraction(1)


def default_config(board: str) -> dict:
    """DEMO_CONFIG as provisioning builds and the board validates it (a radio board with a
    network and a broker off loopback, the unix port a stimulus file, which their keys need; none
    of them shapes a guarantee)."""
    from dpsense.protocol.config import validate
    from dpsense.tools.provision import DEMO_CONFIG, board_profile, build_config
    profile = board_profile(board)
    base = dict(DEMO_CONFIG)
    if profile["name"] in ("esp32", "pico_w"):
        base.update(wifi_ssid="site", wifi_password="unused")
    if profile["name"] == "unix":
        base["stimulus"] = "readings.txt"
    return validate(build_config(board, base, 7, "unused", broker_host="192.0.2.1", tls_ca=True), profile)


def tables() -> dict[str, str]:
    from dpsense.cloud.privacy.privacy_map import board_row, privacy_map, render, render_boards
    from dpsense.tools.provision import board_profile
    rows = []
    for board in BOARDS:
        entropy = board_profile(board)["entropy"]
        private = entropy == "urandom"
        rows.append(board_row(board, entropy, default_config(board) if private else None, ANALYST_EPSILON,
                              "" if private else "tools/flash.py provision --no-privacy"))
    return {"privacy-map": render(privacy_map(default_config("pico"), ANALYST_EPSILON)),
            "privacy-boards": render_boards(rows)}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(r"(<!-- %s:begin -->\n)(.*?)(<!-- %s:end -->)" % (name, name), re.S)


def shown(text: str) -> dict[str, str | None]:
    """What ``text`` (docs/privacy.md) shows between each table's markers (None: no markers)."""
    out: dict[str, str | None] = {}
    for name in tables():
        m = _pattern(name).search(text)
        out[name] = None if m is None else m.group(2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dpsense.tools.privacy_tables", description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="exit 1 when docs/privacy.md shows other tables")
    g.add_argument("--write", action="store_true", help="write the tables into docs/privacy.md")
    args = p.parse_args(argv)
    want = tables()
    if not (args.check or args.write):
        for name, table in want.items():
            print("<!-- %s -->\n%s" % (name, table))
        return 0
    text = DOC.read_text(encoding="utf-8")
    have = shown(text)
    missing = [n for n, v in have.items() if v is None]
    if missing:
        print("privacy_tables: %s has no markers for %s" % (DOC, ", ".join(missing)), file=sys.stderr)
        return 2
    differ = [n for n in want if have[n] != want[n]]
    if args.check:
        for n in differ:
            print("privacy_tables: table %s in %s differs from the code's" % (n, DOC), file=sys.stderr)
        return 1 if differ else 0
    for name, table in want.items():
        m = _pattern(name).search(text)
        assert m is not None
        text = text[:m.start(2)] + table + text[m.end(2):]
    DOC.write_text(text, encoding="utf-8")
    print("privacy_tables: %s: %s" % (DOC, "updated " + ", ".join(differ) if differ else "unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
