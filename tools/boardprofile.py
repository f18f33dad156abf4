"""A calibration's device profile as a board's config: what ``flash.py --from-profile`` writes.

    base = load_board_base("profile.json", board_json=None, raw_scale=["0.01", "0.05"])
    cfg = build_config("unix", base, device_id=7, password=pw)       # tools/provision.py

Both profiles dpsense writes are accepted: ``<data dir>/profile.json`` (cloud/deploy/profile.py
``save_profile``) and what ``dpsense curator calibrate --out`` writes; both are the fields of
``cloud.profile.DeviceProfile``. A profile is in the profile's units: a reading ``x`` (data
units, e.g. degrees) is ``round(x / quantum)`` quanta, clipped to ``[-domain, domain]``. The
board reads integers in its own raw units; the column's affine map (docs/protocol.md 4.1)
takes a raw count ``r`` to ``round(r * num / den) + offset`` quanta. Three ways to say how:

* nothing: the board's raw reading already is the value in quanta (``raw_scale`` = quantum:
  num = den = 1, offset 0, raw range ``+-round(domain / quantum)``), which is the profile's own
  mechanism (``DeviceProfile.mechanism``) and what the stand-in boards' stimulus files hold;
* ``raw_scale`` (one decimal per column, data units per raw count; raw 0 is 0 units):
  num/den = raw_scale / quantum exactly, raw range ``+-ceil(domain / raw_scale)``;
* a board config (``--config-json``) with ``columns``: their maps are kept (the operator says
  they give the profile's quanta) and only ``delta_q`` comes from the profile.

A profile for another number of columns than the board config's, or than ``raw_scale`` gives,
is refused with one line (ProvisionError). The profile sets ``config_id``, ``epsilon``,
``centre`` and the columns' ``delta_q``; the window is the board config's, else the options,
else ``DEFAULT_WINDOW_RECORDS`` records with a cap that releases all of them (each record
costs what the board's ledger charges: ``columns x epsilon + epsilon_cs``, plus ``epsilon_a``
when the board config has it; tools/windowcap.py), one reading per
``DEFAULT_PERIOD_MS``. The cloud-only fields
(``w_o_q``, ``dbscan_*``, ``band_width_q``, ``quantum``, ``domain``) stay on the host.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

from dpsense.tools.provision import ProvisionError
from dpsense.tools.windowcap import WindowCapError, default_window_cap

DEFAULT_WINDOW_RECORDS = 600
DEFAULT_PERIOD_MS = 1000
# The DeviceProfile fields that say a document is a profile, not a config.
PROFILE_KEYS = ("quantum", "domain", "delta_q", "epsilon", "centre_q")
CLOUD_KEYS = ("w_o_q", "dbscan_eps", "dbscan_min_samples", "band_width_q")


def is_device_profile(doc: dict[str, Any]) -> bool:
    return "quantum" in doc and "delta_q" in doc


def _read(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ProvisionError("%s: %s" % (path, e)) from None
    if not isinstance(doc, dict):
        raise ProvisionError("%s: must be a JSON object" % path)
    return doc


def _decimal(text: object, what: str) -> Fraction:
    """An exact positive decimal from a string or a JSON number (``0.01`` is 1/100)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ProvisionError("%s: must be a decimal > 0, got %r" % (what, text))
    try:
        v = Fraction(str(text) if isinstance(text, str) else repr(text))
    except (ValueError, ZeroDivisionError):
        raise ProvisionError("%s: must be a decimal > 0, got %r" % (what, text)) from None
    if v <= 0:
        raise ProvisionError("%s: must be a decimal > 0, got %r" % (what, text))
    return v


def _profile_fields(doc: dict[str, Any], path: str) -> tuple[Fraction, Fraction, list[int], str, list[int], int]:
    missing = [k for k in PROFILE_KEYS if k not in doc]
    if missing:
        raise ProvisionError("%s: a device profile needs %s" % (path, ", ".join(missing)))
    quantum = _decimal(doc["quantum"], "%s: quantum" % path)
    domain = _decimal(doc["domain"], "%s: domain" % path)
    dq, centre = doc["delta_q"], doc["centre_q"]
    if (not isinstance(dq, list) or not dq
            or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in dq)):
        raise ProvisionError("%s: delta_q: must be a list of ints >= 1, one per column" % path)
    if (not isinstance(centre, list)
            or any(not isinstance(v, int) or isinstance(v, bool) for v in centre)):
        raise ProvisionError("%s: centre_q: must be a list of ints, one per column" % path)
    if len(centre) != len(dq):
        raise ProvisionError("%s: centre_q has %d columns, delta_q %d" % (path, len(centre), len(dq)))
    eps = doc["epsilon"]
    if not isinstance(eps, str):
        raise ProvisionError('%s: epsilon: must be a decimal string such as "0.5"' % path)
    config_id = doc.get("config_id", 1)
    return quantum, domain, list(dq), eps, list(centre), config_id


def config_from_profile(doc: dict[str, Any], path: str, board: dict[str, Any] | None = None,
                        board_path: str = "the board config",
                        raw_scale: Sequence[str] | None = None, window_records: int | None = None,
                        window_cap: str | None = None, period_ms: int | None = None) -> dict[str, Any]:
    """The board config (before ``build_config`` adds identity and account) for profile ``doc``."""
    quantum, domain, dq, eps, centre, config_id = _profile_fields(doc, path)
    ncols = len(dq)
    base = dict(board or {})
    given = base.get("columns")
    if given is not None:
        if raw_scale:
            raise ProvisionError("--raw-scale and the columns of %s both say how raw units become "
                                 "quanta: give one" % board_path)
        if not isinstance(given, list) or len(given) != ncols:
            raise ProvisionError("%s is for %d column(s), %s has %s: calibrate on the board's "
                                 "columns" % (path, ncols, board_path,
                                              len(given) if isinstance(given, list) else "no list of"))
        cols = [dict(c, delta_q=d) if isinstance(c, dict) else c for c, d in zip(given, dq)]
    else:
        scales = [quantum] * ncols
        if raw_scale:
            if len(raw_scale) != ncols:
                raise ProvisionError("--raw-scale gives %d column(s), %s is for %d"
                                     % (len(raw_scale), path, ncols))
            scales = [_decimal(s, "--raw-scale") for s in raw_scale]
        cols = []
        for s, d in zip(scales, dq):
            ratio = s / quantum                    # quanta per raw count, exactly
            span = math.ceil(domain / s)
            cols.append({"num": ratio.numerator, "den": ratio.denominator, "offset": 0,
                         "raw_min": -span, "raw_max": span, "delta_q": d})
    base.update(config_id=config_id, columns=cols, epsilon=eps, centre=centre)
    # The boards' noise on d_diff, which the correction server's rules take from the same profile.
    ecs = doc.get("epsilon_cs")
    if ecs is not None:
        if not isinstance(ecs, str):
            raise ProvisionError('%s: epsilon_cs: must be a decimal string such as "2"' % path)
        base["epsilon_cs"] = ecs
    else:
        base.pop("epsilon_cs", None)
    if window_records is not None:
        base.pop("window_seconds", None)
        base["window_records"] = window_records
    if "window_records" not in base and "window_seconds" not in base:
        base["window_records"] = DEFAULT_WINDOW_RECORDS
    if window_cap is not None:
        base["window_cap"] = window_cap
    if "window_cap" not in base:
        # Every record of a records-window released: records x the board's charge per record
        # (columns x epsilon + epsilon_cs, + epsilon_a when the board config has it).
        try:
            base["window_cap"] = default_window_cap(base)
        except WindowCapError as e:
            raise ProvisionError(str(e)) from None
    if period_ms is not None:
        base["period_ms"] = period_ms
    base.setdefault("period_ms", DEFAULT_PERIOD_MS)
    return base


def load_board_base(from_profile: str, board_json: str | None = None,
                    raw_scale: Sequence[str] | None = None, window_records: int | None = None,
                    window_cap: str | None = None, period_ms: int | None = None) -> dict[str, Any]:
    """The starting config from ``--from-profile`` (a device profile, a config, or a profile
    wrapping one as ``{"config": {...}}``) and the board's own keys (``--config-json``)."""
    doc = _read(from_profile)
    board = _read(board_json) if board_json else None
    if not is_device_profile(doc):
        if board is not None:
            raise ProvisionError("%s is a config, not a device profile: give it as --config-json "
                                 "alone" % from_profile)
        if any(v is not None for v in (raw_scale, window_records, window_cap, period_ms)):
            raise ProvisionError("--raw-scale, --window-records, --window-cap and --period-ms go "
                                 "with a device profile; %s is a config" % from_profile)
        return doc["config"] if isinstance(doc.get("config"), dict) else doc
    return config_from_profile(doc, from_profile, board, board_json or "the board config", raw_scale,
                               window_records, window_cap, period_ms)
