"""The window cap that releases every reading of a records-window, from a board config.

    cap = default_window_cap(cfg)              # window_records x the ledger's charge per record
    cfg = drop_charged(cfg, ("epsilon_cs",))   # a whole-window cap follows the smaller charge

A board's ledger charges each record ``columns x epsilon``, plus ``epsilon_cs`` and
``epsilon_a`` where its config has them (shared_protocol/mechanism.py ``epsilon_charge``, which
``record_charge`` calls), so a
cap of ``window_records x columns x epsilon`` releases only part of a window once either key is
set (a quarter of it with DEMO_CONFIG's 2 x 0.5 + 2 + 1).
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence


class WindowCapError(ValueError):
    """A config whose default cap cannot be derived; the text names the key."""


def record_charge(cfg: dict[str, Any]) -> Decimal:
    """What the board's ledger charges per record for ``cfg``: the board's own
    ``RecordMechanism.epsilon_charge`` (shared_protocol/mechanism.py) for these columns,
    ``epsilon_cs`` and ``epsilon_a``. WindowCapError when a value is not a decimal string or a
    column is malformed."""
    from dpsense.protocol.fixedpoint import Affine, parse_decimal
    from dpsense.protocol.mechanism import Column, RecordMechanism
    try:
        eps = parse_decimal(cfg["epsilon"])
        cols = [Column(Affine(c["num"], c["den"], c["offset"], c["raw_min"], c["raw_max"]), c["delta_q"], eps)
                for c in cfg["columns"]]
        ecs = parse_decimal(cfg["epsilon_cs"]) if cfg.get("epsilon_cs") is not None else None
        ea = parse_decimal(cfg["epsilon_a"]) if cfg.get("epsilon_a") is not None else None
        num, den = RecordMechanism(cols, [0] * len(cols), None, ecs).epsilon_charge(ea)
    except (ValueError, KeyError, TypeError):
        raise WindowCapError('epsilon, epsilon_cs, epsilon_a: must be decimal strings such as "0.5", '
                             'with columns a list of column maps') from None
    # Decimal inputs give a terminating fraction, exact at Decimal's 28 digits.
    return Decimal(num) / Decimal(den)


def default_window_cap(cfg: dict[str, Any]) -> str:
    """The cap that releases every reading of a records-window: ``window_records`` x the board's
    charge per record (``record_charge``), as a decimal string."""
    n = cfg.get("window_records")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise WindowCapError("window_cap: give --window-cap (a decimal string) for a window "
                             "that is not counted in records")
    return "{:f}".format((record_charge(cfg) * n).normalize())


def drop_charged(cfg: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``cfg`` without ``keys`` (charge keys a board has not: the micro:bit's epsilon_cs and
    epsilon_a); a cap that released every reading of the window still does, at the smaller charge."""
    out = {k: v for k, v in cfg.items() if k not in keys}
    try:
        whole = cfg.get("window_cap") == default_window_cap(cfg)
    except WindowCapError:
        whole = False
    if whole and out != cfg:
        out["window_cap"] = default_window_cap(out)
    return out
