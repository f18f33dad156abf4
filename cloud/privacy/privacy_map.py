"""The privacy map of a board's config: per party, which records, what epsilon.

    from dpsense.protocol.config import validate
    rows = privacy_map(validate(raw, profile), analyst_epsilon=Fraction(1))
    print(render(rows))            # the table docs/privacy.md shows for the default config

    print(render_boards([board_row("pico", "urandom", cfg), board_row("microbit", "prng_no_dp", None)]))

``cfg`` is shared_protocol/config.py's validated config (fractions as ``(num, den)``), so the
figures are the board's own: its columns' ranges and domain, epsilons and caps.
``analyst_epsilon`` is the correction server's ``--analyst-epsilon``. Every row is pure
epsilon-DP (delta 0); ``epsilon`` None is a view with no finite guarantee. The analyst rows
come from cloud/privacy/analyst_view.py (the release and the round view of a pair), the
per-window and lifetime rows from the caps: a board releases at most
``floor(cap / charge)`` records into them, each held by the analyst at the normal-box epsilon
(eps_row + epsilon_A after a round). The correction server's row is ``epsilon_cs``-DP (the board's
noise on d_diff, shared_protocol/mechanism.py); a config without it gives no finite guarantee there.
``board_row`` sums a board's default config up per party; a board whose noise comes from a PRNG
(``entropy`` other than ``urandom``: the micro:bit) has no finite guarantee towards anyone, and the
row names the flag without which provisioning refuses it. tools/privacy_tables.py prints the tables
docs/privacy.md shows from these functions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpsense.cloud.privacy.analyst_view import AnalystView
from dpsense.protocol.fixedpoint import Affine


@dataclass(frozen=True)
class Row:
    party: str
    records: str
    epsilon: Fraction | None
    delta: Fraction = Fraction(0)


def _frac(pair: tuple[int, int] | None) -> Fraction:
    return Fraction(0) if pair is None else Fraction(pair[0], pair[1])


def privacy_map(cfg: dict[str, Any], analyst_epsilon: Fraction = Fraction(1)) -> list[Row]:
    cols = cfg["columns"]
    delta_q = tuple(c[5] for c in cols)
    eps = _frac(cfg["epsilon"])
    centre = tuple(cfg["centre"])
    view = AnalystView(delta_q=delta_q, epsilon=eps, epsilon_a=Fraction(analyst_epsilon), centre_q=centre)
    affines = [Affine(c[0], c[1], c[2], c[3], c[4]) for c in cols]
    ends = [(a.apply(a.raw_min), a.apply(a.raw_max)) for a in affines]
    row_eps = eps * len(cols)
    worst = sum((eps * max(a.span_q(), d) / d for a, d in zip(affines, delta_q)), Fraction(0))
    # The domain's farthest point from c, and the round view between it and c.
    r_dom = math.sqrt(sum(max(abs(lo - c), abs(hi - c)) ** 2 for (lo, hi), c in zip(ends, centre)))
    round_worst = Fraction(analyst_epsilon) * math.ceil(r_dom) / view.delta_a()
    charge = row_eps + _frac(cfg.get("epsilon_cs")) + _frac(cfg.get("epsilon_a"))
    per_record = view.normal_box()

    def capped(cap: Fraction, records: int = 0) -> Fraction:
        n = math.floor(cap / charge)
        return (min(n, records) if records else n) * per_record

    cs = cfg.get("epsilon_cs")
    return [
        Row("board ledger", "charge per record (eps_row + epsilon_cs + epsilon_a)", charge),
        Row("gateway, broker, analyst before a round", "a record, two readings of the normal box", row_eps),
        Row("gateway, broker, analyst before a round", "a record, any two readings of the domain", worst),
        Row("analyst after rounds", "a record, two readings of the normal box", per_record),
        Row("analyst after rounds", "a record, two readings a normal range apart per column", view.neighbours()),
        Row("analyst after rounds", "a record, any two readings of the domain", worst + round_worst),
        Row("analyst after rounds", "a window's records, normal box", capped(_frac(cfg["window_cap"]), cfg["window_records"])),
        Row("analyst after rounds", "a board's records until provisioned again, normal box",
            capped(_frac(cfg["lifetime_cap"]))),
        Row("correction server", "a record's d_diff, two readings within rho of c", None if cs is None else _frac(cs)),
    ]


@dataclass(frozen=True)
class BoardRow:
    board: str
    entropy: str
    release: Fraction | None            # a record, two readings of the normal box, before a round
    after_rounds: Fraction | None       # the same after every round
    correction_server: Fraction | None  # a record's d_diff, two readings within rho of c
    needs: str = ""                     # the flag without which provisioning refuses the board


def board_row(board: str, entropy: str, cfg: dict[str, Any] | None, analyst_epsilon: Fraction = Fraction(1),
              needs: str = "") -> BoardRow:
    """A board's default config per party (``cfg`` None or ignored when its noise is not private)."""
    if entropy != "urandom" or cfg is None:
        return BoardRow(board, entropy, None, None, None, needs)
    rows = {(r.party, r.records): r.epsilon for r in privacy_map(cfg, analyst_epsilon)}
    return BoardRow(board, entropy,
                    rows[("gateway, broker, analyst before a round", "a record, two readings of the normal box")],
                    rows[("analyst after rounds", "a record, two readings of the normal box")],
                    rows[("correction server", "a record's d_diff, two readings within rho of c")], needs)


def render_boards(rows: list[BoardRow]) -> str:
    """The boards' default configs as a Markdown table."""
    lines = ["| board | noise from | a record towards gateway, broker, analyst | the analyst after rounds | "
             "the correction server (d_diff) | provisioned only with |", "|---|---|---:|---:|---:|---|"]
    lines += ["| %s | `%s` | %s | %s | %s | %s |" % (r.board, r.entropy, _text(r.release), _text(r.after_rounds),
                                                    _text(r.correction_server), "`%s`" % r.needs if r.needs else "-")
              for r in rows]
    return "\n".join(lines) + "\n"


def _text(f: Fraction | None) -> str:
    if f is None:
        return "not protected"
    return str(f) if f.denominator == 1 else "%s (%.4g)" % (f, float(f))


def render(rows: list[Row]) -> str:
    """The map as a Markdown table."""
    lines = ["| party | records | epsilon | delta |", "|---|---|---:|---:|"]
    lines += ["| %s | %s | %s | %s |" % (r.party, r.records, _text(r.epsilon), r.delta) for r in rows]
    return "\n".join(lines) + "\n"
