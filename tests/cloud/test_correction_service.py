"""The correction round as two parties exchanging messages equals the in-process protocol."""
from __future__ import annotations

import numpy as np
import pytest

from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.rules import CorrectionParams, reduce_rows, run_protocol
from dpsense.cloud.correction.server import CorrectionRounds


def _window(n: int = 2000, seed: int = 4):
    rng = np.random.default_rng(seed)
    tokens = [rng.bytes(8) for _ in range(n)]
    d_diff = rng.normal(30, 20, n)
    d_diff[:100] = rng.normal(-5, 10, 100)          # true outliers barely move
    dist = np.abs(rng.normal(40, 30, n))
    dist[:100] += 300
    presumed = np.sort(np.concatenate([np.arange(80), rng.choice(np.arange(100, n), 60, replace=False)]))
    return tokens, np.rint(d_diff).astype(int), dist, presumed


def _round(rounds: CorrectionRounds, tokens, dist, presumed):
    split = msg.decode(rounds.handle(msg.decode(msg.encode(
        "presumed", 7, tokens=msg.tokens_field(tokens), presumed=presumed))))
    assert split["step"] == "split"
    rows = reduce_rows(dist, presumed, msg.number(split, "d_tp"), msg.number(split, "w_o"))
    res = msg.decode(rounds.handle(msg.decode(msg.encode("rows", 7, i_l2=rows.i_l2, i_l3=rows.i_l3))))
    assert res["step"] == "result"
    return split, res


@pytest.mark.parametrize("split", ["otsu", "gap", "trimmed_gap"])
def test_two_party_round_equals_run_protocol(split):
    tokens, d_diff, dist, presumed = _window()
    params = CorrectionParams(w_o=50.0, split=split, guard=False)
    table = dict(zip(tokens, d_diff.tolist()))
    rounds = CorrectionRounds(params, lambda ts: {t: table[t] for t in ts if t in table}, grace=0)
    _, res = _round(rounds, tokens, dist, presumed)
    ref = run_protocol(d_diff, dist, presumed, params)
    n = len(tokens)
    r = np.union1d(np.setdiff1d(presumed, msg.positions(res, "fp", n)), msg.positions(res, "fn", n))
    assert np.array_equal(r, ref.r)
    assert np.array_equal(msg.positions(res, "fp", n), ref.fp)
    assert res["missing"] == 0


def test_rows_without_a_correction_record_are_never_decided_on():
    tokens, d_diff, dist, presumed = _window()
    table = dict(zip(tokens, d_diff.tolist()))
    lost = set(range(0, 2000, 7))                    # their correction records never arrived
    for i in lost:
        del table[tokens[i]]
    params = CorrectionParams(w_o=50.0, guard=False)
    rounds = CorrectionRounds(params, lambda ts: {t: table[t] for t in ts if t in table}, grace=0)
    _, res = _round(rounds, tokens, dist, presumed)
    assert res["missing"] == len(lost)
    decided = set(res["fp"]) | set(res["fn"])
    assert not decided & lost


def test_what_crosses_is_tokens_positions_and_scalars():
    tokens, d_diff, dist, presumed = _window(200)
    table = dict(zip(tokens, d_diff.tolist()))
    rounds = CorrectionRounds(CorrectionParams(w_o=5.0), lambda ts: {t: table[t] for t in ts}, grace=0)
    split, res = _round(rounds, tokens, dist, presumed)
    assert set(split) == {"step", "round", "d_tp", "w_o"}
    assert set(res) <= {"step", "round", "fp", "fn", "fn_l1", "fn_l2", "fn_l3", "missing", "split_accepted"}


def test_bad_messages_get_an_error_reply_not_a_crash():
    rounds = CorrectionRounds(CorrectionParams(w_o=5.0), lambda ts: {}, grace=0)
    reply = msg.decode(rounds.handle({"step": "rows", "round": 3, "i_l2": [], "i_l3": []}))
    assert reply["step"] == "error" and "resend presumed" in reply["reason"]
    reply = msg.decode(rounds.handle({"step": "presumed", "round": 4, "tokens": "!!", "presumed": []}))
    assert reply["step"] == "error"
    reply = msg.decode(rounds.handle({"step": "presumed", "round": 5, "tokens": msg.tokens_field([b"x" * 8]),
                                      "presumed": [3]}))
    assert reply["step"] == "error"
    for bad in (b"", b"[]", b'{"step": "nope", "round": 1}', b'{"step": "split"}'):
        with pytest.raises(msg.RoundError):
            msg.decode(bad)


@pytest.mark.parametrize("detector", ["dbscan", "kr", "beta_r"])
def test_analyst_detectors_find_an_isolated_reading(detector):
    from dpsense.cloud.analyst import Analyst, AnalystParams
    from dpsense.cloud.ingest.service import Connection
    rng = np.random.default_rng(1)
    values = np.vstack([rng.normal(0, 1, (300, 2)), [[40.0, 40.0]]])
    a = Analyst(Connection("127.0.0.1", 1, "analyst", "x", "t"), lambda: None,
                AnalystParams(eps_q=2.0, min_samples=5, detector=detector))
    flagged = np.flatnonzero(a.detector().fit_predict(values) == -1)
    assert 300 in flagged and len(flagged) < 30


def test_analyst_rejects_an_unknown_detector():
    from dpsense.cloud.analyst import AnalystParams
    with pytest.raises(ValueError):
        AnalystParams(eps_q=1.0, min_samples=5, detector="iforest")
