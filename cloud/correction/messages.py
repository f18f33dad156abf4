"""Messages of one correction round between the analyst A and the correction server CS.

JSON objects on ``dpsense/round/to-cs`` and ``dpsense/round/to-analyst``; every message
carries the round id and its step. The round id counts the analyst's attempts (a held window's
retry is a new round); it names no window, device group or device:

    A -> CS  presumed   tokens of the window (order = row positions), O' as positions
    CS -> A  split      d_TP and w_O                         (SPEC 1.5 line 3)
    A -> CS  rows       I_L2 and I_L3 as positions           (line 4)
    CS -> A  result     FP and FN = FN_L1 | FN_L2 | FN_L3    (line 5-6)

Nothing else crosses: no values, no d_diff, no device identity (tokens are random).
"""
from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

from dpsense.cloud.errors import RoundError
from dpsense.protocol.layout import TOKEN_SIZE

STEPS = ("presumed", "split", "rows", "result", "error")


def encode(step: str, round_id: int, **fields: Any) -> bytes:
    if step not in STEPS:
        raise ValueError("unknown step %r" % step)
    body: dict[str, Any] = {"step": step, "round": int(round_id)}
    for k, v in fields.items():
        if isinstance(v, np.ndarray):
            v = [int(x) for x in v]
        elif isinstance(v, float) and not math.isfinite(v):
            v = None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        body[k] = v
    return json.dumps(body, separators=(",", ":")).encode()


def decode(payload: bytes) -> dict[str, Any]:
    try:
        body = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as e:
        raise RoundError("not JSON: %s" % e) from None
    if not isinstance(body, dict) or body.get("step") not in STEPS or not isinstance(body.get("round"), int):
        raise RoundError("missing or invalid step/round")
    return body


def tokens_field(tokens: list[bytes]) -> str:
    return base64.b64encode(b"".join(tokens)).decode()


def tokens_of(body: dict[str, Any]) -> list[bytes]:
    try:
        raw = base64.b64decode(body["tokens"], validate=True)
    except (KeyError, ValueError, TypeError) as e:
        raise RoundError("bad tokens field: %s" % e) from None
    if len(raw) % TOKEN_SIZE:
        raise RoundError("tokens field is not a whole number of tokens")
    return [raw[i:i + TOKEN_SIZE] for i in range(0, len(raw), TOKEN_SIZE)]


def positions(body: dict[str, Any], key: str, n: int) -> np.ndarray:
    v = body.get(key)
    if not isinstance(v, list) or not all(isinstance(x, int) and 0 <= x < n for x in v):
        raise RoundError("%s must be a list of row positions in [0, %d)" % (key, n))
    return np.array(sorted(set(v)), dtype=np.intp)


def number(body: dict[str, Any], key: str) -> float:
    v = body.get(key)
    if v == "inf":
        return math.inf
    if v == "-inf":
        return -math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RoundError("%s must be a number" % key)
    return float(v)
