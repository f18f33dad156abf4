"""The analyst's view of a reading after a correction round: epsilon_A-DP, measured.

Two neighbouring raw readings within the normal radius rho = 20 quanta of the centre: one at the
centre (d_diff = 100 for the released distance 100) and one 20 quanta out (d_diff = 80), both
behind the same released value, which the analyst knows. The correction server runs with
epsilon_A = 1 (noise scale ceil(rho) / 1 = 20). A malicious analyst asks the most revealing round
the policy lets through at its loosest (2-token windows, 1 presumed outlier):

* mode bands: bands whose edge puts the candidate threshold at d~ <= 80, so the reading is a
  candidate for d~ below the smaller d_diff (where the Laplace ratio is exactly e^epsilon);
* mode paper: O' = {the reading}, so d_TP is the reading's own noisy d_diff.

``privacy_ratio_check`` (cloud/privacy/audit.py) flags any output class whose frequency ratio
between the two inputs significantly exceeds e^epsilon; at the DP boundary its false-alarm
probability is at most ALPHA = 1e-6 per check, so this file fails a correct server with
probability at most 4e-6. Power: the same check on the server without noise (the behaviour before
cloud/correction/honest.py: every answer exact) and with noise at twice the claimed epsilon
(scale 10, a wrong scale) fails, as the last two tests show (3,000 rounds per input; paper's d_TP
pooled into d_TP <= 80 for the latter).
"""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.honest import RecordNoise, RoundLedger
from dpsense.cloud.correction.rules import CorrectionParams
from dpsense.cloud.correction.server import CorrectionRounds, Noise
from dpsense.cloud.privacy.audit import privacy_ratio_check
from tests.cloud.roundkit import LOOSE, Exact

RHO = 20.0
EPSILON = 1.0
RELEASED = 100                 # |x' - c| of the reading, known to the analyst
D_CENTRE, D_EDGE = 100, 80     # d_diff for x at c and for x at distance rho
N = 10_000                     # rounds per input for the bound
N_POWER = 3_000                # rounds per input for the power checks
ALPHA = 1e-6
KEY = bytes(range(32))


def _rounds(mode: str, noise: Noise, table: dict[bytes, int]) -> CorrectionRounds:
    params = CorrectionParams(w_o=10.0, normal_radius=RHO)
    return CorrectionRounds(params, lambda ts: {t: table[t] for t in ts if t in table}, grace=0, mode=mode,
                            noise=noise, policy=LOOSE, ledger=RoundLedger())


def view(mode: str, d: int, noise: Noise, salt: int, n: int = N) -> list[object]:
    """The answer about the reading in n rounds, each over a fresh 2-token window."""
    table: dict[bytes, int] = {}
    rounds = _rounds(mode, noise, table)
    margin = noise.margin(rounds.params.alpha)
    out: list[object] = []
    for i in range(n):
        target = b"T" + salt.to_bytes(2, "big") + i.to_bytes(5, "big")
        filler = b"F" + salt.to_bytes(2, "big") + i.to_bytes(5, "big")
        table[target], table[filler] = d, 0
        tokens = msg.tokens_field([target, filler])
        if mode == "bands":
            # candidate iff e - d~ - 1 > rho + margin, i.e. d~ <= D_EDGE
            edge = D_EDGE + 2 + RHO + margin
            body = msg.encode("bands", i, window=i, tokens=tokens, width=1.0, edges=[edge], bands=[[0]])
            res = msg.decode(rounds.handle(msg.decode(body)) or b"")
            assert res["step"] == "result", res
            out.append(0 in res["r"])
        else:
            body = msg.encode("presumed", i, window=i, tokens=tokens, presumed=[0])
            res = msg.decode(rounds.handle(msg.decode(body)) or b"")
            assert res["step"] == "split", res
            out.append(msg.number(res, "d_tp"))
    return out


def _check(mode: str, noise: Noise, n: int = N, key=None):
    return privacy_ratio_check(view(mode, D_CENTRE, noise, 1, n), view(mode, D_EDGE, noise, 2, n), EPSILON,
                               alpha=ALPHA, key=key)


def _at_most_edge(out: object) -> bool:
    # Bands answers are already this bit; paper's d_TP is pooled into it for the power checks.
    return bool(out) if isinstance(out, bool) else float(out) <= D_EDGE  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bands", "paper"])
def test_the_view_after_a_round_is_within_epsilon(mode):
    report = _check(mode, RecordNoise(KEY, RHO, Fraction(1)))
    assert report.ok, str(report)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bands", "paper"])
def test_the_check_catches_the_server_without_noise(mode):
    report = _check(mode, Exact(), N_POWER)
    assert not report.ok and report.impossible


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bands", "paper"])
def test_the_check_catches_a_noise_scale_half_the_claimed(mode):
    report = _check(mode, RecordNoise(KEY, RHO, Fraction(2)), N_POWER, key=_at_most_edge)
    assert not report.ok, str(report)
