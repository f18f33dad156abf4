"""DP calibration of the device profile (cloud/privacy/calibration.py) and `dpsense curator calibrate`."""
import json
import math
import random

import numpy as np
import pytest

from dpsense.cloud import cli
from dpsense.cloud.sim.datasets import paper1_synthetic
from dpsense.cloud.privacy.accountant import BudgetAccountant, BudgetError
from dpsense.cloud.privacy.calibration import CalibrationShares, dp_calibrate, dp_mean, dp_quantile
from dpsense.cloud.deploy.profile import DeviceProfile, load_profile
from dpsense.cloud.sim.calibration import calibrate


def _untouchable():
    raise AssertionError("the data were read before the budget check")


@pytest.mark.parametrize("q", [0.05, 0.5, 0.95])
def test_dp_quantile_is_accurate_at_large_epsilon(q):
    """eps = 50: the rank error exceeds 2 (ln(grid) + ln(1/beta))/eps = 0.6 ranks only with probability
    below beta = 1e-4 (McSherry-Talwar), i.e. the answer is within one grid step of the exact quantile."""
    x = np.random.default_rng(1).uniform(-5, 5, 1000)
    v = dp_quantile(x, q=q, bounds=(-10, 10), epsilon=50, grid=2001, rng=random.Random(2))
    step = 20 / 2000
    assert abs(v - np.quantile(x, q)) <= step + np.max(np.diff(np.sort(x)))


def test_dp_quantile_error_grows_as_epsilon_falls():
    x = np.random.default_rng(3).normal(0, 1, 2000)
    errs = {}
    for eps in (0.02, 5.0):
        vals = [dp_quantile(x, q=0.5, bounds=(-10, 10), epsilon=eps, grid=401, rng=random.Random(s))
                for s in range(15)]
        errs[eps] = np.mean(np.abs(np.array(vals) - np.median(x)))
    assert errs[5.0] < 0.05 < errs[0.02]


def test_dp_mean_scale():
    """Noise sd sqrt(2) (hi - lo)/(n eps) = sqrt(2) * 0.1; 400 releases: sample sd within 20 %
    (relative sd of the sd estimate about sqrt(5/400)/2 = 0.056, so 3.6 sd)."""
    x = np.full(100, 3.0)
    rng = random.Random(4)
    vals = np.array([dp_mean(x, bounds=(0, 10), epsilon=1, rng=rng) for _ in range(400)])
    assert np.std(vals) / (math.sqrt(2) * 0.1) == pytest.approx(1, abs=0.2)
    assert abs(vals.mean() - 3.0) < 0.05


@pytest.mark.parametrize("fn,kwargs,exc", [
    (dp_quantile, dict(q=1.5, bounds=(0, 1), epsilon=1), ValueError),
    (dp_quantile, dict(q="0.5", bounds=(0, 1), epsilon=1), TypeError),
    (dp_quantile, dict(q=0.5, bounds=None, epsilon=1), ValueError),
    (dp_quantile, dict(q=0.5, bounds=(1, 1), epsilon=1), ValueError),
    (dp_quantile, dict(q=0.5, bounds=(0, 1), epsilon=0), ValueError),
    (dp_quantile, dict(q=0.5, bounds=(0, 1), epsilon=1, grid=1), ValueError),
    (dp_quantile, dict(q=0.5, bounds=(0, 1), epsilon=1, grid=3.0), TypeError),
    (dp_mean, dict(bounds=(2, 1), epsilon=1), ValueError),
    (dp_mean, dict(bounds=[0, 1], epsilon=1), TypeError),
    (dp_calibrate, dict(bounds=(0, 1), epsilon=1, device_epsilon=0.5, quantum=0.01), TypeError),
    (dp_calibrate, dict(bounds=(0, 1), epsilon=1, device_epsilon="-1", quantum=0.01), ValueError),
    (dp_calibrate, dict(bounds=(0, 1), epsilon=1, device_epsilon="0.5", quantum=0), ValueError),
    (dp_calibrate, dict(bounds=(0, 1), epsilon=1, device_epsilon="0.5", quantum=0.01, outlier_percent=0),
     ValueError),
    (dp_calibrate, dict(bounds=None, epsilon=1, device_epsilon="0.5", quantum=0.01), ValueError),
])
def test_validation(fn, kwargs, exc):
    with pytest.raises(exc):
        fn(_untouchable, **kwargs)


def test_shares_must_sum_to_one():
    with pytest.raises(ValueError):
        CalibrationShares(0.5, 0.5, 0.5)
    assert CalibrationShares(0.6, 0.2, 0.2).sensitivity == CalibrationShares(0.6, 0.2, 0.2).sensitivity


def test_refused_before_the_data_are_touched(tmp_path):
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("cal", 0.5)
    with pytest.raises(BudgetError):
        dp_quantile(_untouchable, q=0.5, bounds=(0, 1), epsilon=1, accountant=acct, dataset="cal")
    with pytest.raises(BudgetError):
        dp_mean(_untouchable, bounds=(0, 1), epsilon=1, accountant=acct, dataset="cal")
    with pytest.raises(BudgetError):
        dp_calibrate(_untouchable, bounds=(0, 1), epsilon=1, device_epsilon="0.5", quantum=0.01,
                     accountant=acct, dataset="cal")
    assert acct.spends("cal") == []


@pytest.fixture(scope="module")
def reference():
    return paper1_synthetic(100_000, 220.0, "scale", seed=1001).x


def test_close_to_the_non_private_calibration(reference, tmp_path):
    """Paper-1 reference data (n = 100,000), curator epsilon 2: RS within 25 %, centre within 0.5
    units, w_O within [0.4, 1.5] of the non-private value. The non-private w_O is the spread of the
    DBSCAN outliers' radii up to the single largest one; the DP version stops a rank-error margin
    inside the layer, so it is usually lower and varies more (docs/paper3.md). Seeds 2-11 were all
    within these bounds (9 of 10 within [0.4, 1.2])."""
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("cal", 2)
    ref = calibrate(reference, "0.5", 0.01)
    dp = dp_calibrate(lambda: reference, bounds=(-600, 600), epsilon=2, device_epsilon="0.5", quantum=0.01,
                      grid=10001, rng=random.Random(1), accountant=acct, dataset="cal")
    assert acct.spent("cal").epsilon == 2 and len(acct.spends("cal")) == 3
    assert set(DeviceProfile.__dataclass_fields__) == set(json.loads(dp.to_json()))
    for a, b in zip(dp.delta_q, ref.delta_q):
        assert abs(a - b) <= 0.25 * b
    for a, b in zip(dp.centre_q, ref.centre_q):
        assert abs(a - b) * dp.quantum <= 0.5
    assert 0.4 * ref.w_o_q <= dp.w_o_q <= 1.5 * ref.w_o_q
    assert dp.epsilon == ref.epsilon and dp.quantum == ref.quantum
    (tmp_path / "profile.json").write_text(dp.to_json())
    assert load_profile(tmp_path) == dp


def test_cli_calibrate(tmp_path, capsys):
    x = paper1_synthetic(3000, 220.0, "scale", seed=3)
    csv = tmp_path / "ref.csv"
    np.savetxt(csv, np.column_stack([x.x, x.outlier]), delimiter=",", header="a,b,outlier", comments="")
    db, out = str(tmp_path / "b.db"), tmp_path / "data" / "profile.json"
    argv = ["curator", "calibrate", "--csv", str(csv), "--epsilon", "1", "--bounds=-600,600", "--dataset", "cal",
            "--db", db, "--out", str(out), "--seed", "1", "--grid", "2001"]
    assert cli.main(argv) == 1 and not out.exists()          # no budget yet: a refusal
    assert cli.main(["curator", "budget", "set", "--dataset", "cal", "--epsilon", "1.5", "--db", db]) == 0
    assert cli.main(argv) == 0
    prof = load_profile(out.parent)
    assert prof is not None and len(prof.delta_q) == 2 and prof.epsilon == "0.5" and prof.w_o_q > 0
    assert cli.main(argv) == 1                               # 1 + 1 > 1.5: refused
    assert cli.main(argv[:-4] + ["--bounds=1,2,3", "--out", str(out)]) == 2
    capsys.readouterr()


def test_too_few_readings_for_w_o_are_refused_before_anything_is_spent(tmp_path, capsys):
    """2,000 readings at curator epsilon 1 and grid 2001 used to give ``"w_o_q": 0.0``: each radius
    quantile's rank error, 2 ln(2001) / (1/8) ~ 6 % of n, is more than half the outer 10 %, so the
    upper quantile fell below the lower one and w_O was clamped to 0, a width the correction server
    cannot use. Now refused with one line, nothing charged (n is public: the refusal leaks nothing);
    the smallest n the message names is accepted."""
    x = paper1_synthetic(2000, 220.0, "scale", seed=3)
    csv = tmp_path / "ref.csv"
    np.savetxt(csv, x.x, delimiter=",", header="a,b", comments="")
    db, out = str(tmp_path / "b.db"), tmp_path / "profile.json"
    assert cli.main(["curator", "budget", "set", "--dataset", "cal", "--epsilon", "5", "--db", db]) == 0
    argv = ["curator", "calibrate", "--csv", str(csv), "--epsilon", "1", "--bounds=-600,600", "--dataset", "cal",
            "--db", db, "--out", str(out), "--seed", "1", "--grid", "2001"]
    capsys.readouterr()
    assert cli.main(argv) == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "w_O: 2000 readings are too few" in err[0] and "at least 2433 readings" in err[0]
    assert BudgetAccountant(db).spent("cal").epsilon == 0
    acct = BudgetAccountant(tmp_path / "c.db")
    acct.set_budget("cal", 1)
    prof = dp_calibrate(paper1_synthetic(2433, 220.0, "scale", seed=3).x, bounds=(-600, 600), epsilon=1,
                        device_epsilon="0.5", quantum=0.01, grid=2001, rng=random.Random(1),
                        accountant=acct, dataset="cal")
    assert prof.w_o_q > 0
    with pytest.raises(ValueError, match="2432 readings are too few"):
        dp_calibrate(paper1_synthetic(2432, 220.0, "scale", seed=3).x, bounds=(-600, 600), epsilon=1,
                     device_epsilon="0.5", quantum=0.01, grid=2001, rng=random.Random(1))


@pytest.mark.parametrize("text", ['{"quantum": 0.01}', "not json", '{"config": {"epsilon": "1"}}', "[1]"])
def test_a_profile_that_is_not_one_is_refused_naming_the_file(tmp_path, text):
    from dpsense.cloud.errors import UsageError
    (tmp_path / "profile.json").write_text(text)
    with pytest.raises(UsageError, match="profile %s: not a device profile" % (tmp_path / "profile.json")):
        load_profile(tmp_path)
