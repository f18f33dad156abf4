"""Messages of one correction round between the analyst A and the correction server CS.

JSON objects on ``dpsense/round/to-cs`` and ``dpsense/round/to-analyst``, each sent in chunks
under the broker's packet limit (cloud/correction/chunks.py); every message carries the round
id and its step. The round id counts the analyst's attempts (a held window's retry is a new
round). The opening step names the mode of the round (``MODES``), the analyst's window id
(``window``, a counter of the analyst's store: it names no device group or device) and every
token of the window; ``final: true`` asks CS to answer although some records are missing (the
analyst's hold time is over). A correction server answers only the mode it runs and only
honest rounds (cloud/correction/honest.py); anything else gets ``error`` with a ``reason`` and,
for a policy refusal, a ``code``.

Mode ``paper`` (Böhler et al. 2017, Sect. 6):

    A -> CS  presumed   window, tokens (order = row positions), O' as positions
    CS -> A  split      d_TP and w_O                         (line 3)
    A -> CS  rows       I_L2 and I_L3 as positions           (line 4)
    CS -> A  result     FP and FN = FN_L1 | FN_L2 | FN_L3    (line 5-6)

Mode ``bands`` (cloud/correction/bands.py):

    A -> CS  bands      window, tokens, band width, the lower edge of each non-empty band and
                        its rows as positions
    CS -> A  result     R (positions) and the positions without a correction record

Mode ``secure`` (cloud/correction/mpc/secure.py; binary parts follow the JSON header after a
newline; a message may reach ``secure.MAX_MESSAGE`` bytes, in chunks like every other):

    A -> CS  secure-open     window, tokens, bits, a: A's base-OT element (256 bytes, base64)
    CS -> A  secure-base     the positions without a correction record; binary: 128 base-OT replies
    A -> CS  secure-ext      binary: the IKNP matrix u (128 x 32 n bits)
    CS -> A  secure-garbled  binary: OT corrections y, CS's input labels, the garbled gates
                             and the output decode bits; A decodes R itself

What A learns. No value, no device identity (tokens are random) and no d_diff crosses, but
d_TP, FP, FN and R (mode secure's output too) are functions of the window's distance differences, and with its own
released value A can turn any of them into information about a reading's distance from the
centre. CS therefore computes them from ``d_diff + Z`` (Z: discrete Laplace fixed per record,
honest.py; in mode secure ``d_diff + Z`` is CS's input to the garbled comparison) and, on top of the released values, A's view of each reading within the normal radius is
epsilon_A-DP, measured by tests/statistical/test_round_view.py (the whole view of a pair:
cloud/privacy/analyst_view.py). docs/protocol.md lists the
fields.
"""
from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

from dpsense.cloud.errors import RoundError
from dpsense.protocol.layout import TOKEN_SIZE

STEPS = ("presumed", "split", "rows", "bands", "result", "error",
         "secure-open", "secure-base", "secure-ext", "secure-garbled")
MODES = ("paper", "bands", "secure")
#: The step that opens a round of each mode.
OPENING = {"paper": "presumed", "bands": "bands", "secure": "secure-open"}


def encode(step: str, round_id: int, **fields: Any) -> bytes:
    if step not in STEPS:
        raise ValueError("unknown step %r" % step)
    body: dict[str, Any] = {"step": step, "round": int(round_id)}
    for k, v in fields.items():
        if isinstance(v, np.ndarray):
            v = [int(x) for x in v]
        elif isinstance(v, list):
            v = [[int(x) for x in a] if isinstance(a, np.ndarray) else a for a in v]
        elif isinstance(v, float) and not math.isfinite(v):
            v = None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        body[k] = v
    return json.dumps(body, separators=(",", ":")).encode()


def encode_blob(step: str, round_id: int, blob: bytes, **fields: Any) -> bytes:
    """A JSON header, a newline, then binary ``blob`` (mode secure's large parts)."""
    return encode(step, round_id, **fields) + b"\n" + blob


def decode(payload: bytes) -> dict[str, Any]:
    """A round message; the binary part after a JSON header's newline, if any, is ``body["blob"]``."""
    blob = None
    cut = payload.find(b"\n")            # compact JSON holds no raw newline
    if cut >= 0:
        payload, blob = payload[:cut], payload[cut + 1:]
    try:
        body = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as e:
        raise RoundError("not JSON: %s" % e) from None
    if not isinstance(body, dict) or body.get("step") not in STEPS or not isinstance(body.get("round"), int):
        raise RoundError("missing or invalid step/round")
    if blob is not None:
        body["blob"] = blob
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


def bands_of(body: dict[str, Any], n: int) -> tuple[float, list[float], list[np.ndarray]]:
    """``(width, edges, index sets)`` of a ``bands`` message; row positions checked against n."""
    width = number(body, "width")
    edges, sets = body.get("edges"), body.get("bands")
    if not isinstance(edges, list) or not all(isinstance(e, (int, float)) and not isinstance(e, bool)
                                              for e in edges):
        raise RoundError("edges must be a list of numbers")
    if not isinstance(sets, list) or len(sets) != len(edges):
        raise RoundError("bands must be a list of position lists, one per edge")
    out = []
    for k in range(len(sets)):
        key = "bands[%d]" % k
        out.append(positions({key: sets[k]}, key, n))
    return width, [float(e) for e in edges], out
