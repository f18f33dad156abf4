"""The correction server answers honest rounds only, and from noisy distance differences.

Probing rounds (one token, a window asked again, a subset, other index sets) are refused with a
code, logged and counted in the round ledger that `dpsense status` prints.
"""
from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.honest import RecordNoise, Refused, RoundLedger, RoundPolicy, load_key, parse_epsilon
from dpsense.cloud.correction.rules import CorrectionParams
from dpsense.cloud.correction.server import CorrectionRounds
from dpsense.cloud.errors import UsageError

KEY = b"\x01" * 32


def _server(mode="bands", ledger=None, logs=None, min_window=100, min_presumed=10, table=None):
    rng = np.random.default_rng(2)
    tokens = [rng.bytes(8) for _ in range(300)]
    d = table if table is not None else dict(zip(tokens, rng.integers(-30, 30, 300).tolist()))
    params = CorrectionParams(w_o=10.0, normal_radius=20.0)
    rounds = CorrectionRounds(params, lambda ts: {t: d[t] for t in ts if t in d}, grace=0, mode=mode,
                              noise=RecordNoise(KEY, 20.0, Fraction(1)),
                              policy=RoundPolicy(min_window=min_window, min_presumed=min_presumed),
                              ledger=ledger or RoundLedger(), log=(logs.append if logs is not None else None))
    return rounds, tokens


def _bands(rounds, rid, window, tokens, **kw):
    n = len(tokens)
    body = dict(window=window, tokens=msg.tokens_field(tokens), width=10.0, edges=[0.0], bands=[list(range(n))])
    body.update(kw)
    return msg.decode(rounds.handle(msg.decode(msg.encode("bands", rid, **body))))


def _presumed(rounds, rid, window, tokens, presumed):
    return msg.decode(rounds.handle(msg.decode(msg.encode(
        "presumed", rid, window=window, tokens=msg.tokens_field(tokens), presumed=presumed))))


def test_an_honest_window_is_answered_and_a_retry_gets_the_same_answer():
    rounds, tokens = _server()
    first = _bands(rounds, 1, 5, tokens)
    again = _bands(rounds, 2, 5, tokens)
    assert first["step"] == again["step"] == "result"
    assert first["r"] == again["r"]
    assert rounds.ledger.counts() == {"answered": 1, "retries": 1}


def test_a_single_token_round_is_refused_logged_and_counted():
    logs: list[str] = []
    rounds, tokens = _server(logs=logs)
    reply = _bands(rounds, 1, 5, tokens[:1])
    assert reply["step"] == "error" and reply["code"] == "small_window"
    assert any("refused (small_window)" in line for line in logs)
    assert rounds.ledger.counts()["small_window"] == 1 and rounds.refusals == {"small_window": 1}


def test_padding_with_unknown_tokens_does_not_make_a_window():
    rounds, tokens = _server()
    fake = [bytes([i % 256, i // 256]) * 4 for i in range(200)]
    reply = _bands(rounds, 1, 5, tokens[:3] + fake, final=True)
    assert reply["code"] == "small_window"


def test_a_window_asked_again_under_another_id_or_as_a_subset_is_refused():
    rounds, tokens = _server()
    assert _bands(rounds, 1, 5, tokens[:200])["step"] == "result"
    assert _bands(rounds, 2, 6, tokens[:200])["code"] == "overlap"          # the same window, a new id
    assert _bands(rounds, 3, 7, tokens[50:250])["code"] == "overlap"        # overlapping tokens
    assert _bands(rounds, 4, 5, tokens[:150])["code"] == "subset"           # the window id, fewer tokens
    counts = rounds.ledger.counts()
    assert counts["overlap"] == 2 and counts["subset"] == 1 and counts["answered"] == 1


def test_the_same_window_with_other_index_sets_is_refused():
    rounds, tokens = _server()
    assert _bands(rounds, 1, 5, tokens)["step"] == "result"
    other = _bands(rounds, 2, 5, tokens, edges=[40.0])
    assert other["code"] == "repeated"


def test_mode_paper_refuses_small_presumed_sets_and_a_second_set_of_rows():
    rounds, tokens = _server(mode="paper")
    assert _presumed(rounds, 1, 5, tokens, list(range(5)))["code"] == "small_presumed"
    assert _presumed(rounds, 2, 5, tokens, list(range(20)))["step"] == "split"
    res = msg.decode(rounds.handle(msg.decode(msg.encode("rows", 2, i_l2=[30, 31], i_l3=[31]))))
    assert res["step"] == "result"
    assert _presumed(rounds, 3, 5, tokens, list(range(20)))["step"] == "split"      # a retry
    other = msg.decode(rounds.handle(msg.decode(msg.encode("rows", 3, i_l2=list(range(20, 300)), i_l3=[]))))
    assert other["code"] == "repeated"
    assert _presumed(rounds, 4, 5, tokens, list(range(21)))["code"] == "repeated"


def test_a_window_lacking_records_is_not_answered_until_final():
    rounds, tokens = _server()
    extra = [b"\xee" * 8]
    assert _bands(rounds, 1, 5, tokens + extra)["code"] == "missing"
    res = _bands(rounds, 2, 5, tokens + extra, final=True)
    assert res["step"] == "result" and res["unknown"] == [len(tokens)]


def test_a_round_without_a_window_id_is_refused():
    rounds, tokens = _server()
    reply = msg.decode(rounds.handle(msg.decode(msg.encode(
        "bands", 1, tokens=msg.tokens_field(tokens), width=10.0, edges=[0.0], bands=[list(range(300))]))))
    assert reply["code"] == "no_window"


def test_the_ledger_survives_a_restart(tmp_path):
    path = tmp_path / "correction-rounds.db"
    rounds, tokens = _server(ledger=RoundLedger(path))
    assert _bands(rounds, 1, 5, tokens)["step"] == "result"
    rounds.ledger.close()
    rounds, tokens = _server(ledger=RoundLedger(path))
    assert _bands(rounds, 1, 9, tokens)["code"] == "overlap"
    assert (path.stat().st_mode & 0o777) == 0o600


def test_record_noise_is_fixed_by_key_and_token():
    a, b = RecordNoise(KEY, 20.0, Fraction(1)), RecordNoise(b"\x02" * 32, 20.0, Fraction(1))
    tokens = [bytes([i]) * 8 for i in range(200)]
    za = [a.noise(t) for t in tokens]
    assert za == [RecordNoise(KEY, 20.0, Fraction(1)).noise(t) for t in tokens]
    assert za != [b.noise(t) for t in tokens]
    assert a.delta_q == 20 and a.scale == 20.0 and RecordNoise(KEY, 20.5, Fraction(1, 2)).scale == 42.0
    assert a.margin(0.005) == np.ceil(20.0 * np.log(200))


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "abc", "101"])
def test_epsilon_is_validated(bad):
    with pytest.raises(UsageError):
        parse_epsilon(bad)


@pytest.mark.parametrize("kw", [dict(min_window=1), dict(min_presumed=0), dict(min_window=5, min_presumed=6),
                                dict(min_window=True), dict(min_presumed=2.5)])
def test_policy_is_validated(kw):
    with pytest.raises(UsageError):
        RoundPolicy(**kw)


def test_the_noise_key_is_made_once_private_and_a_damaged_one_is_refused(tmp_path):
    path = tmp_path / "k"
    key = load_key(path)
    assert load_key(path) == key and len(key) == 32 and (path.stat().st_mode & 0o777) == 0o600
    path.write_bytes(b"short")
    with pytest.raises(UsageError, match="damaged"):
        load_key(path)


def test_status_prints_the_round_ledger(tmp_path, capsys):
    from dpsense.cloud.cli import main
    from dpsense.cloud.correction.honest import ledger_target
    from dpsense.cloud.storage import open_analyst_store, open_correction_store
    adb, cdb = "sqlite:///%s/a.db" % tmp_path, "sqlite:///%s/c.db" % tmp_path
    open_analyst_store(adb).close()         # status never creates it
    open_correction_store(cdb).close()
    # The ledger is in the correction database, where every correction-server worker finds it.
    ledger = RoundLedger(ledger_target(cdb))
    rounds, tokens = _server(ledger=ledger)
    _bands(rounds, 1, 5, tokens)
    _bands(rounds, 2, 5, tokens)
    _bands(rounds, 3, 6, tokens[:1])
    _bands(rounds, 4, 7, tokens)
    ledger.close()
    code = main(["status", "--data-dir", str(tmp_path), "--analyst-db", adb, "--correction-db", cdb])
    out = capsys.readouterr().out
    assert code == 0
    assert "rounds      1 windows answered (1 retries), 2 refused (overlap 1, small_window 1)" in out


def _analyst_and_server(policy, table=None, **params):
    from dpsense.cloud.analyst.service import AnalystParams
    from tests.cloud.roundkit import Exact
    from tests.cloud.test_correction_service import _analyst, _fleet, _Loop, _window_store
    xp, tokens, full, c, outlier = _fleet()
    table = full if table is None else table(tokens, full)
    rounds = CorrectionRounds(CorrectionParams(w_o=0.0, normal_radius=8.0),
                              lambda ts: {t: table[t] for t in ts if t in table}, grace=0, mode="bands",
                              noise=Exact(), policy=policy)
    a = _analyst(AnalystParams(eps_q=10.0, min_samples=20, window=3000, mode="bands", band_width_q=100.0,
                               centre_q=(100.0, -50.0), **params), _Loop(None, rounds))
    store, w = _window_store(xp, tokens)
    return a, store, w


def test_a_window_the_server_finds_too_small_completes_uncorrected():
    a, store, w = _analyst_and_server(RoundPolicy(min_window=5000, min_presumed=10), min_round=2)
    res = a.process_window(store, w)
    assert res["skipped"] and res["candidate_rows"] == res["presumed_rows"]
    assert store.window_record(w.id).state == "done"


def test_missing_records_hold_the_window_until_the_hold_time_is_over():
    from dpsense.cloud.analyst.service import RoundHeld
    drop = lambda tokens, full: {t: d for i, (t, d) in enumerate(full.items()) if i % 10}  # noqa: E731
    a, store, w = _analyst_and_server(RoundPolicy(), table=drop, max_hold=600.0)
    with pytest.raises(RoundHeld, match="no correction record"):
        a.process_window(store, w)
    a.clock = lambda: w.closed_at + 601.0                    # the hold time is over: final
    res = a.process_window(store, w)
    assert res["missing_corrections"] == 300 and not res["skipped"]


def test_a_retry_marked_final_is_still_a_retry():
    rounds, tokens = _server()
    first = _bands(rounds, 1, 5, tokens)
    assert _bands(rounds, 2, 5, tokens, final=True)["r"] == first["r"]


def test_fresh_tokens_under_a_known_window_id_are_a_new_window():
    # The analyst's store started again and counts windows from 1 once more.
    rounds, tokens = _server()
    assert _bands(rounds, 1, 5, tokens[:150])["step"] == "result"
    assert _bands(rounds, 2, 5, tokens[150:])["step"] == "result"
    assert _bands(rounds, 3, 5, tokens[:150])["code"] == "subset"


def test_a_ledger_refuses_another_noise_key(tmp_path):
    ledger = RoundLedger(tmp_path / "correction-rounds.db")
    ledger.bind_key(KEY)
    ledger.bind_key(KEY)
    with pytest.raises(UsageError, match="restore the key"):
        ledger.bind_key(b"\x02" * 32)


def _secure(rounds, rid, window, tokens, dist, **kw):
    """One mode-secure round in-process; the reply to secure-open if it is an error, else R."""
    import base64

    from dpsense.cloud.correction.mpc.secure import BITS, Evaluator
    ev = Evaluator(dist)
    body = dict(tokens=msg.tokens_field(tokens), bits=BITS, a=base64.b64encode(ev.open()).decode())
    if window is not None:
        body["window"] = window
    body.update(kw)
    base = msg.decode(rounds.handle(msg.decode(msg.encode("secure-open", rid, **body))))
    if base["step"] == "error":
        return base
    u = ev.extend(base["blob"])
    garbled = msg.decode(rounds.handle(msg.decode(msg.encode_blob("secure-ext", rid, u))))
    return ev.finish(garbled["blob"])


def test_secure_rounds_follow_the_honest_rules_on_noisy_d_diff():
    from dpsense.cloud.correction.mpc.secure import candidates
    rng = np.random.default_rng(5)
    tokens = [rng.bytes(8) for _ in range(300)]
    d = rng.integers(-30, 30, 300)
    rounds, _ = _server(mode="secure", table=dict(zip(tokens, d.tolist())))
    dist = rng.uniform(0, 120, 300)
    # The garbler's input is d~ = d_diff + Z_A, and its radius rho + the noise's margin.
    noise = RecordNoise(KEY, 20.0, Fraction(1))
    shifted = 20.0 + noise.margin(rounds.params.alpha)
    want = candidates(noise.noisy(tokens[:150], d[:150].astype(float)), dist[:150], shifted)
    r = _secure(rounds, 1, 5, tokens[:150], dist[:150])
    assert np.array_equal(r, want)
    assert not np.array_equal(want, candidates(d[:150].astype(float), dist[:150], shifted))
    # A retry over the same tokens is answered (the distances are hidden: CS cannot compare them).
    assert np.array_equal(_secure(rounds, 2, 5, tokens[:150], dist[:150]), want)
    assert _secure(rounds, 3, None, tokens[150:], dist[150:])["code"] == "no_window"
    assert _secure(rounds, 4, 6, tokens[150:200], dist[150:200])["code"] == "small_window"
    assert _secure(rounds, 5, 7, tokens[100:250], dist[100:250])["code"] == "overlap"
    assert _secure(rounds, 6, 5, tokens[:140], dist[:140])["code"] == "subset"
    assert rounds.ledger.counts() == {"answered": 1, "retries": 1, "no_window": 1, "overlap": 1, "small_window": 1,
                                      "subset": 1}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def shared_ledger(request, tmp_path):
    """Where correction-server workers keep one ledger: the correction database (SQLite or PostgreSQL)."""
    if request.param == "sqlite":
        return tmp_path / "correction.db"
    from tests.pgserver import create_database
    return create_database(request.getfixturevalue("postgres_url"), "ledger_%s" % tmp_path.name[-20:].lower()
                           .replace("-", "_"))


def test_servers_started_together_on_a_fresh_ledger_all_open_it(shared_ledger):
    """Eight correction servers opening one new ledger at the same moment: each gets it (in
    PostgreSQL, CREATE TABLE IF NOT EXISTS run side by side can fail on the catalog)."""
    import threading
    start = threading.Barrier(8)
    opened: list[RoundLedger] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(RoundLedger(shared_ledger))
        except BaseException as e:          # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(opened) == 8, errors
    assert opened[0].claim(1, "correction-1") and not opened[7].claim(1, "correction-8")
    for led in opened:
        led.close()


def test_two_servers_on_one_ledger_answer_a_round_once(shared_ledger):
    one, two = RoundLedger(shared_ledger), RoundLedger(shared_ledger)
    assert one.claim(7, "correction-1") and not two.claim(7, "correction-2")
    assert one.claim(7, "correction-1")                   # the claimer's later steps of round 7
    assert two.claim(8, "correction-2") and not one.claim(8, "correction-1")
    # The window answered through one server is a retry or a refusal at the other.
    rounds1, tokens = _server(ledger=one)
    rounds2, _ = _server(ledger=two)
    assert _bands(rounds1, 7, 5, tokens)["step"] == "result"
    assert _bands(rounds2, 8, 5, tokens)["step"] == "result"
    assert _bands(rounds2, 9, 5, tokens, width=11.0)["code"] == "repeated"
    assert _bands(rounds2, 10, 6, tokens)["code"] == "overlap"
    assert one.counts() == {"answered": 1, "retries": 1, "overlap": 1, "repeated": 1}
    one.close()
    two.close()


def test_a_race_between_two_servers_is_decided_by_the_ledger(shared_ledger):
    # Both servers pass the opening check before either records its answer; the second to
    # record is refused, so one window keeps one request and a token one window.
    one, two = RoundLedger(shared_ledger), RoundLedger(shared_ledger)
    toks = [bytes([i]) * 8 for i in range(10)]
    assert one.opening(1, "bands", toks, b"a") is False and two.opening(1, "bands", toks, b"b") is False
    one.answered(1, "bands", toks, b"a", toks)
    with pytest.raises(Refused, match="answered by another correction server"):
        two.answered(1, "bands", toks, b"b", toks)
    # A window over tokens of window 1 that passed its check before window 1 was recorded.
    with pytest.raises(Refused, match="answered in window 1 meanwhile"):
        two.answered(2, "bands", toks[5:] + [b"z" * 8], b"c", toks[5:] + [b"z" * 8])
    assert one.counts() == {"answered": 1, "retries": 0}      # the refused records were rolled back
    one.close()
    two.close()


# -- parameters bound to the ledger ---------------------------------------------------------

def _restart(tmp_path, *argv, profile_delta=(8, 8), epsilon_cs="2"):
    """`dpsense correction-server` on one data dir; nothing listens on the broker port, so a server
    that gets past its ledger check stops there (rc 2, "cannot reach the broker")."""
    from dpsense.cloud.deploy.broker import free_port
    from dpsense.cloud.deploy.profile import DeviceProfile, save_profile
    save_profile(tmp_path, DeviceProfile(quantum=1.0, domain=1000.0, delta_q=profile_delta, epsilon="1",
                                         centre_q=(0, 0), w_o_q=30.0, epsilon_cs=epsilon_cs))
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "correction-server", "--data-dir", str(tmp_path),
                        "--broker-port", str(free_port()), "--no-ingest", *argv],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, DPSENSE_BROKER_PASSWORD="unused"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    return r.stderr.strip().splitlines()


@pytest.mark.parametrize("changed, argv, delta, ecs", [
    ("epsilon_A 1 -> 2", ["--analyst-epsilon", "2"], (8, 8), "2"),
    ("normal_radius", [], (9, 8), "2"),                             # a recalibrated rho
    ("mode bands -> paper", ["--correction-mode", "paper"], (8, 8), "2"),
])
def test_a_restart_with_other_parameters_on_the_same_ledger_is_refused(tmp_path, changed, argv, delta, ecs):
    assert "cannot reach the broker" in _restart(tmp_path)[-1]
    assert "cannot reach the broker" in _restart(tmp_path)[-1]          # the same parameters start
    lines = _restart(tmp_path, *argv, profile_delta=delta, epsilon_cs=ecs)
    assert len(lines) == 1 and "parameters are not the ones its round ledger answered with" in lines[0], lines
    assert changed in lines[0] and "--rotate-noise-key" in lines[0]
    # The operator rotates the key: the server starts with the new parameters, and keeps them.
    key = (tmp_path / "correction-noise.key").read_bytes()
    assert "cannot reach the broker" in _restart(tmp_path, "--rotate-noise-key", *argv, profile_delta=delta,
                                                 epsilon_cs=ecs)[-1]
    assert (tmp_path / "correction-noise.key").read_bytes() != key
    assert "cannot reach the broker" in _restart(tmp_path, *argv, profile_delta=delta, epsilon_cs=ecs)[-1]
    assert "round ledger" in _restart(tmp_path)[-1]                    # the old parameters are refused now


def _bound(epsilon="1", rho=20.0):
    from dpsense.cloud.correction.binding import answer_parameters
    params = CorrectionParams(w_o=10.0, normal_radius=rho)
    return answer_parameters("bands", Fraction(epsilon), RecordNoise(KEY, rho, Fraction(epsilon)).delta_q, params)


def test_the_ledger_binds_the_parameters_and_a_rotation_closes_the_answered_windows(tmp_path):
    path = tmp_path / "correction-rounds.db"
    ledger = RoundLedger(path)
    ledger.bind_key(KEY, _bound())
    rounds, tokens = _server(ledger=ledger)
    first = _bands(rounds, 1, 5, tokens[:150])
    assert first["step"] == "result"
    for other in (_bound(epsilon="2"), _bound(rho=20.5)):
        with pytest.raises(UsageError, match="parameters are not the ones"):
            RoundLedger(path).bind_key(KEY, other)
    RoundLedger(path).bind_key(KEY, _bound())                            # the same ones pass
    # A new key and other parameters: no record answered before is answered again.
    new = RoundLedger(path)
    new.rotate(b"\x02" * 32, _bound(epsilon="2"))
    new.bind_key(b"\x02" * 32, _bound(epsilon="2"))
    rounds, _ = _server(ledger=new)
    assert _bands(rounds, 2, 5, tokens[:150])["code"] == "repeated"     # a retry of the answered window
    assert _bands(rounds, 3, 6, tokens[:150])["code"] == "overlap"      # the same records under a new id
    assert _bands(rounds, 4, 7, tokens[150:])["step"] == "result"       # fresh records are answered
    with pytest.raises(UsageError, match="restore the key"):
        RoundLedger(path).bind_key(KEY, _bound(epsilon="2"))


@pytest.mark.postgres
def test_the_shared_ledger_reconnects_after_losing_its_database(postgres_url):
    """A PostgreSQL restart ends the ledger's connection: the step that met it is
    StorageUnavailable (nothing recorded, nothing answered: the server replies an error and the
    analyst asks again), and the next step runs on a new connection with the ledger intact."""
    import psycopg
    from dpsense.cloud.errors import StorageUnavailable
    from tests.pgserver import create_database
    url = create_database(postgres_url, "ledger_reconnect")
    ledger = RoundLedger(url)
    rounds, tokens = _server(ledger=ledger)
    assert _bands(rounds, 1, 5, tokens)["step"] == "result"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    with pytest.raises(StorageUnavailable, match="round ledger .* unavailable"):
        ledger.counts()
    assert ledger.counts() == {"answered": 1, "retries": 0}
    assert _bands(rounds, 2, 5, tokens, width=11.0)["code"] == "repeated"     # the answered window stays answered
    ledger.close()
