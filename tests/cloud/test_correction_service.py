"""The correction round as two parties exchanging messages equals the in-process protocol."""
from __future__ import annotations

import numpy as np
import pytest

from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.rules import CorrectionParams, reduce_rows, run_protocol
from dpsense.cloud.correction.server import CorrectionRounds
from tests.cloud.roundkit import LOOSE, Exact, Wire


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
        "presumed", 7, window=1, final=True, tokens=msg.tokens_field(tokens), presumed=presumed))))
    assert split["step"] == "split"
    rows = reduce_rows(dist, presumed, msg.number(split, "d_tp"), msg.number(split, "w_o"))
    res = msg.decode(rounds.handle(msg.decode(msg.encode("rows", 7, i_l2=rows.i_l2, i_l3=rows.i_l3))))
    assert res["step"] == "result"
    return split, res


@pytest.mark.parametrize("split", ["otsu", "gap", "trimmed_gap"])
def test_two_party_round_equals_run_protocol(split):
    tokens, d_diff, dist, presumed = _window()
    params = CorrectionParams(w_o=50.0, split=split, guard=False, normal_radius=20.0)
    table = dict(zip(tokens, d_diff.tolist()))
    rounds = CorrectionRounds(params, lambda ts: {t: table[t] for t in ts if t in table}, grace=0,
                              noise=Exact(), policy=LOOSE)
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
    params = CorrectionParams(w_o=50.0, guard=False, normal_radius=20.0)
    rounds = CorrectionRounds(params, lambda ts: {t: table[t] for t in ts if t in table}, grace=0,
                              noise=Exact(), policy=LOOSE)
    _, res = _round(rounds, tokens, dist, presumed)
    assert res["missing"] == len(lost)
    decided = set(res["fp"]) | set(res["fn"])
    assert not decided & lost


def test_what_crosses_is_tokens_positions_and_scalars():
    tokens, d_diff, dist, presumed = _window(200)
    table = dict(zip(tokens, d_diff.tolist()))
    rounds = CorrectionRounds(CorrectionParams(w_o=5.0, normal_radius=20.0), lambda ts: {t: table[t] for t in ts}, grace=0,
                              noise=Exact(), policy=LOOSE)
    split, res = _round(rounds, tokens, dist, presumed)
    assert set(split) == {"step", "round", "d_tp", "w_o"}
    assert set(res) <= {"step", "round", "fp", "fn", "fn_l1", "fn_l2", "fn_l3", "missing", "split_accepted"}


def test_bad_messages_get_an_error_reply_not_a_crash():
    rounds = CorrectionRounds(CorrectionParams(w_o=5.0, normal_radius=20.0), lambda ts: {}, grace=0,
                              noise=Exact(), policy=LOOSE)
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
    from dpsense.cloud.analyst.service import Analyst, AnalystParams
    from dpsense.cloud.transport.session import Connection
    rng = np.random.default_rng(1)
    values = np.vstack([rng.normal(0, 1, (300, 2)), [[40.0, 40.0]]])
    a = Analyst(Connection("127.0.0.1", 1, "analyst", "x", "t"), lambda: None,
                AnalystParams(eps_q=2.0, min_samples=5, detector=detector))
    flagged = np.flatnonzero(a.detector().fit_predict(values) == -1)
    assert 300 in flagged and len(flagged) < 30


def test_analyst_rejects_an_unknown_detector():
    from dpsense.cloud.analyst.service import AnalystParams
    with pytest.raises(ValueError):
        AnalystParams(eps_q=1.0, min_samples=5, detector="iforest")


def test_bands_round_equals_run_bands_and_leaves_unknown_rows_to_the_analyst():
    from dpsense.cloud.correction.bands import make_bands, run_bands
    tokens, d_diff, dist, _ = _window()
    table = dict(zip(tokens, d_diff.tolist()))
    lost = set(range(3, 2000, 11))
    for i in lost:
        del table[tokens[i]]
    params = CorrectionParams(w_o=0.0, normal_radius=20.0)
    rounds = CorrectionRounds(params, lambda ts: {t: table[t] for t in ts if t in table}, grace=0, mode="bands",
                              noise=Exact(), policy=LOOSE)
    bands = make_bands(dist, 30.0)
    res = msg.decode(rounds.handle(msg.decode(msg.encode(
        "bands", 9, window=1, final=True, tokens=msg.tokens_field(tokens), width=bands.width, edges=[float(e) for e in bands.edges],
        bands=bands.members))))
    assert res["step"] == "result" and res["missing"] == len(lost)
    assert set(res) == {"step", "round", "r", "unknown", "missing"}
    ref = run_bands(d_diff, dist, 30.0, 20.0).r
    assert res["r"] == sorted(set(ref.tolist()) - lost)
    assert res["unknown"] == sorted(lost)


@pytest.mark.parametrize("mode, opening", [("paper", "bands"), ("bands", "presumed"), ("bands", "secure-open"),
                                           ("secure", "bands")])
def test_a_server_refuses_the_other_modes_rounds(mode, opening):
    tokens, d_diff, dist, presumed = _window(200)
    table = dict(zip(tokens, d_diff.tolist()))
    rounds = CorrectionRounds(CorrectionParams(w_o=5.0, normal_radius=20.0), lambda ts: table, grace=0, mode=mode,
                              noise=Exact(), policy=LOOSE)
    body = {"step": opening, "round": 1, "window": 1, "tokens": msg.tokens_field(tokens), "presumed": [], "width": 10,
            "edges": [], "bands": []}
    reply = msg.decode(rounds.handle(body))
    assert reply["step"] == "error" and "answers mode %r rounds only" % mode in reply["reason"]


def test_bands_mode_needs_a_normal_radius_and_a_known_mode():
    with pytest.raises(ValueError):
        CorrectionRounds(CorrectionParams(w_o=5.0), lambda ts: {}, mode="bands", noise=Exact(), policy=LOOSE)
    with pytest.raises(ValueError):
        CorrectionRounds(CorrectionParams(w_o=5.0), lambda ts: {}, mode="secure", noise=Exact(), policy=LOOSE)


@pytest.mark.parametrize("bad", [
    {"width": 10, "edges": [0, 10], "bands": [[0]]},                 # one index set for two edges
    {"width": 10, "edges": [0, 10], "bands": [[0], [0]]},            # a row in two bands
    {"width": 10, "edges": [10, 0], "bands": [[0], [1]]},            # edges not ascending
    {"width": 0, "edges": [0], "bands": [[0]]},
    {"width": 10, "edges": ["a"], "bands": [[0]]},
    {"width": 10, "edges": [0], "bands": [[999]]},                   # outside the window
])
def test_bad_bands_messages_get_an_error_reply(bad):
    tokens, d_diff, _, _ = _window(200)
    rounds = CorrectionRounds(CorrectionParams(w_o=0.0, normal_radius=5.0), lambda ts: {}, grace=0, mode="bands",
                              noise=Exact(), policy=LOOSE)
    reply = msg.decode(rounds.handle({"step": "bands", "round": 2, "window": 1, "tokens": msg.tokens_field(tokens), **bad}))
    assert reply["step"] == "error"


def _window_store(values, tokens):
    """An analyst store holding one closed window of released values (quanta), rows 1..n."""
    from dpsense.cloud.storage import Reading, open_analyst_store
    store = open_analyst_store("sqlite://")
    store.add_batch([Reading(1 + i % 10, 1, i // 10, t, 1, tuple(int(x) for x in v), "dpsense/readings/d%d" % (1 + i % 10),
                             1000.0) for i, (v, t) in enumerate(zip(values, tokens))], [])
    w = store.close_window("default", "count", upto_row=store.max_row_id(), closed_at=1001.0, limit=len(tokens))
    assert w is not None and w.n == len(tokens)
    return store, w


class _Loop:
    """The broker: the analyst's round messages go to the correction server's logic and back."""

    def __init__(self, analyst, rounds):
        self.analyst, self.rounds = analyst, rounds
        self.wire = Wire()

    def publish(self, topic, payload, qos=0):
        body = self.wire.take(payload)
        reply = self.rounds.handle(body) if body is not None else None
        if reply is not None:
            self.analyst._q.put(msg.decode(reply))


def _fleet(n=3000, seed=5):
    """A board-made window: core within 5 quanta of c = (100, -50), 300 outliers 400-600 out,
    discrete Laplace noise of scale 8 quanta, d_diff as the boards compute it."""
    from dpsense.cloud.sim.experiments.noise import discrete_laplace
    from dpsense.protocol.distance import distance_difference
    rng = np.random.default_rng(seed)
    c = np.array([100, -50])
    ang = rng.uniform(0, 2 * np.pi, n)
    rad = np.where(np.arange(n) < 300, rng.uniform(400, 600, n), rng.uniform(0, 5, n))
    x = np.rint(c + rad[:, None] * np.c_[np.cos(ang), np.sin(ang)]).astype(np.int64)
    xp = x + discrete_laplace(rng, 8.0, x.shape)
    d = [distance_difference(list(map(int, a)), list(map(int, b)), [100, -50]) for a, b in zip(x, xp)]
    tokens = [rng.bytes(8) for _ in range(n)]
    return xp, tokens, dict(zip(tokens, d)), c, np.arange(n) < 300


def _analyst(params, client, profile=None):
    from dpsense.cloud.analyst.service import Analyst
    from dpsense.cloud.transport.session import Connection
    a = Analyst(Connection("127.0.0.1", 1, "analyst", "x", "t"), lambda: None, params, log=lambda s: None,
                clock=lambda: 1001.0, profile=profile)
    a._client = client
    if client is not None:
        client.analyst = a
    return a


@pytest.mark.parametrize("mode", ["paper", "bands", "secure"])
def test_analyst_window_round_in_each_mode(mode):
    from dpsense.cloud.analyst.service import AnalystParams
    xp, tokens, table, c, outlier = _fleet()
    params = CorrectionParams(w_o=200.0, split="noise", layers="provable", noise_scale=8.0, normal_radius=8.0)
    rounds = CorrectionRounds(params, lambda ts: {t: table[t] for t in ts if t in table}, grace=0, mode=mode,
                              noise=Exact(), policy=LOOSE)
    a = _analyst(AnalystParams(eps_q=10.0, min_samples=20, window=3000, mode=mode, band_width_q=100.0,
                               centre_q=(100.0, -50.0), skip_margin=-1.0), _Loop(None, rounds))
    store, w = _window_store(xp, tokens)
    res = a.process_window(store, w)
    assert dict(store.window_results())[w.id] == res and res["mode"] == mode and not res["skipped"]
    assert store.window_record(w.id).state == "done" and res["round"] == 1
    cand = np.zeros(len(tokens), dtype=bool)
    cand[np.asarray(res["candidate_rows"]) - 1] = True
    # Every outlier is 400+ quanta out, every normal row within 5 (rho = 8): modes bands and
    # secure find exactly the outliers; mode paper keeps O' and adds only abnormal rows.
    if mode in ("bands", "secure"):
        assert np.array_equal(cand, outlier)
    else:
        presumed = np.zeros(len(tokens), dtype=bool)
        presumed[np.asarray(res["presumed_rows"]) - 1] = True
        assert not (cand & ~presumed & ~outlier).any()
    verdicts = store.verdicts(candidates_only=True)
    assert sorted(v.row_id for v in verdicts) == res["candidate_rows"]


def test_analyst_skips_the_paper_round_when_o_prime_is_near_the_expected_share():
    from dpsense.cloud.analyst.service import AnalystParams
    xp, tokens, table, c, outlier = _fleet()
    a = _analyst(AnalystParams(eps_q=10.0, min_samples=20, window=3000, mode="paper", centre_q=(100.0, -50.0),
                               skip_margin=0.1), None)       # a round would fail: there is no broker
    store, w = _window_store(xp, tokens)
    res = a.process_window(store, w)
    # |O'| = 322 is within 10 % of the expected 300.
    assert res["skipped"] and res["candidate_rows"] == res["presumed_rows"]
    assert res["presumed"] == 322
    # No round ran: no round id spent, no attempt counted.
    assert res["round"] is None and store.window_record(w.id).attempts == 0


def test_mode_bands_holds_its_windows_until_the_profile_gives_width_and_centre():
    from dpsense.cloud.analyst.service import AnalystParams
    from dpsense.cloud.deploy.profile import DeviceProfile
    xp, tokens, table, c, outlier = _fleet()
    rounds = CorrectionRounds(CorrectionParams(w_o=0.0, normal_radius=8.0),
                              lambda ts: {t: table[t] for t in ts if t in table}, grace=0, mode="bands",
                              noise=Exact(), policy=LOOSE)
    profile: list[DeviceProfile] = []
    a = _analyst(AnalystParams(eps_q=10.0, min_samples=20, window=3000, mode="bands"), _Loop(None, rounds),
                 profile=lambda: profile[0] if profile else None)
    store, w = _window_store(xp, tokens)
    with pytest.raises(msg.RoundError, match="not known yet"):
        a.process_window(store, w)
    assert store.window_record(w.id).attempts == 0 and not store.window_results()
    profile.append(DeviceProfile(quantum=1.0, domain=1000.0, delta_q=(8, 8), epsilon="1", centre_q=(100, -50),
                                 band_width_q=100.0))
    res = a.process_window(store, w)
    cand = np.zeros(len(tokens), dtype=bool)
    cand[np.asarray(res["candidate_rows"]) - 1] = True
    assert np.array_equal(cand, outlier) and a.params.centre_q == (100.0, -50.0)


@pytest.mark.parametrize("mode", ["paper", "bands"])
def test_without_the_provisioned_centre_there_is_no_round(mode):
    # Distances from any other point (the window's mean) would void "no normal reading added".
    from dpsense.cloud.analyst.service import AnalystParams
    xp, tokens, table, c, outlier = _fleet()
    a = _analyst(AnalystParams(eps_q=10.0, min_samples=20, window=3000, mode=mode, band_width_q=100.0,
                               skip_margin=-1.0), None)
    store, w = _window_store(xp, tokens)
    with pytest.raises(msg.RoundError, match="provisioned centre"):
        a.process_window(store, w)
    assert store.window_record(w.id).attempts == 0


def test_the_server_refuses_rounds_until_its_parameters_are_known():
    from fractions import Fraction

    from dpsense.cloud.correction.honest import RoundLedger
    from dpsense.cloud.correction.server import CorrectionServer
    from dpsense.cloud.errors import UsageError
    from dpsense.cloud.transport.session import Connection
    known: list[CorrectionParams] = []
    key = dict(noise_key=b"k" * 32, epsilon=Fraction(1))
    server = CorrectionServer(Connection("127.0.0.1", 1, "correction", "x", "t"),
                              lambda: known[0] if known else None, lambda: None, log=lambda s: None, mode="bands",
                              **key)
    assert server._rounds(lambda ts: {}, RoundLedger()) is None
    known.append(CorrectionParams(w_o=0.0))                 # no normal radius: no noise, no round
    with pytest.raises(UsageError):
        server._rounds(lambda ts: {}, RoundLedger())
    known[0] = CorrectionParams(w_o=0.0, normal_radius=8.0)
    rounds = server._rounds(lambda ts: {}, RoundLedger())
    assert rounds is not None and rounds.mode == "bands" and rounds.noise.scale == 8.0
    with pytest.raises(ValueError):
        CorrectionServer(Connection("127.0.0.1", 1, "correction", "x", "t"), CorrectionParams(w_o=0.0),
                         lambda: None, mode="bands", **key)
    with pytest.raises(UsageError):
        CorrectionServer(Connection("127.0.0.1", 1, "correction", "x", "t"), lambda: None,
                         lambda: None, mode="bands", noise_key=b"k" * 32, epsilon=Fraction(0))


def test_bad_secure_messages_get_an_error_reply():
    import base64
    tokens, d_diff, dist, presumed = _window(200)
    table = dict(zip(tokens, d_diff.tolist()))
    rounds = CorrectionRounds(CorrectionParams(w_o=0.0, normal_radius=5.0), lambda ts: table, grace=0, mode="secure",
                              noise=Exact(), policy=LOOSE)
    opening = {"step": "secure-open", "round": 1, "window": 1, "tokens": msg.tokens_field(tokens), "bits": 32,
               "a": base64.b64encode(bytes(256)).decode()}                # zero is no group element
    twice = msg.tokens_field(tokens[:3] + tokens[:1])
    for body in (opening, dict(opening, bits=16), dict(opening, a="***"), dict(opening, tokens=twice),
                 {"step": "secure-ext", "round": 2, "blob": bytes(10)}):   # round 2 never opened
        reply = msg.decode(rounds.handle(body))
        assert reply["step"] == "error" and reply["round"] == body["round"]


def test_secure_messages_round_trip_with_a_binary_part():
    blob = bytes(range(256)) * 3 + b"\n{"
    body = msg.decode(msg.encode_blob("secure-ext", 4, blob))
    assert body["step"] == "secure-ext" and body["round"] == 4 and body["blob"] == blob
    assert "blob" not in msg.decode(msg.encode("result", 4, r=[1]))
