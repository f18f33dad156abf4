"""`dpsense aggregate` end to end: readings released by the board's own mechanism, stored in a real
SQLite analyst store, aggregated per group and hour; the estimators' parameter checks."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from dpsense.cloud.cli import main
from dpsense.cloud.privacy.aggregate import NoiseLaw, count_between, mean, quantile, sum_halfwidth
from dpsense.cloud.privacy.stream_aggregates import Stat, aggregate, parse_stat
from dpsense.cloud.deploy.profile import DeviceProfile, save_profile
from dpsense.cloud.storage import Reading, open_analyst_store
from dpsense.protocol.rng import XorShift32

HOUR = 3600.0
T0 = 1_760_000_400.0 - 1_760_000_400.0 % HOUR      # an hour boundary
PROFILE = DeviceProfile(quantum=0.01, domain=100.0, delta_q=(40, 300), epsilon="2", centre_q=(2000, 0))


def _store(tmp_path: Path) -> tuple[str, np.ndarray]:
    """Two hours of hall-a readings (device 1, 400 and 150) and noise from other groups."""
    url = "sqlite:///" + str(tmp_path / "analyst.db")
    rng = np.random.default_rng(5)
    mech = PROFILE.mechanism(XorShift32(11))
    raw = np.stack([rng.normal(20.0, 3.0, 550), rng.normal(0.0, 5.0, 550)], axis=1)
    raw_q = np.rint(raw / PROFILE.quantum).astype(np.int64)
    readings, arrivals = [], np.r_[T0 + np.linspace(1, HOUR - 1, 400), T0 + HOUR + np.linspace(1, HOUR - 1, 150)]
    for i, (q, at) in enumerate(zip(raw_q, arrivals)):
        _, out, _ = mech.perturb([int(v) for v in q])
        readings.append(Reading(1, 1, i, struct.pack("<Q", i), PROFILE.config_id, tuple(out), "dpsense/readings/d1",
                                float(at)))
    # Another group's device, and a reading of another configuration in hall-a.
    readings.append(Reading(2, 1, 0, bytes(8), PROFILE.config_id, (10**6, 10**6), "dpsense/readings/d2", T0 + 5))
    readings.append(Reading(1, 1, 999, bytes([1] * 8), 7, (0, 0), "dpsense/readings/d1", T0 + 6))
    with open_analyst_store(url) as st:
        st.set_device_group(1, "hall-a", T0)
        st.set_device_group(2, "hall-b", T0)
        st.add_batch(readings, [])
    save_profile(tmp_path, PROFILE)
    return url, raw_q


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:         # argparse
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_aggregate_mean_json_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, raw_q = _store(tmp_path)
    base = ["aggregate", "--analyst-db", url, "--data-dir", str(tmp_path), "--group", "hall-a", "--window", "1h",
            "--since", str(T0), "--until", str(T0 + 2 * HOUR)]
    # At 99.9 % (the coverage rate itself is tests/statistical/test_aggregate_coverage.py's).
    rc, out, err = _run(capsys, *base, "--column", "0", "--stat", "mean", "--format", "json", "--level", "0.999")
    assert rc == 0, err
    doc = json.loads(out)
    assert "spends no privacy budget" in doc["privacy"] and doc["windows"][0]["level"] == 0.999
    assert "spends no privacy budget" in doc["privacy"] and "post-processing" in doc["privacy"]
    w = doc["windows"]
    assert [r["n"] for r in w] == [400, 150] and [r["set_apart"] for r in w] == [1, 0]
    for r, part in zip(w, (raw_q[:400, 0], raw_q[400:, 0])):
        truth = part.mean() * PROFILE.quantum          # physical units (degrees, not quanta)
        assert r["lo"] <= truth <= r["hi"] and 15 < r["estimate"] < 25
        assert abs(r["estimate"] - truth) < 1.0
    rc, out, _ = _run(capsys, *base, "--column", "1", "--stat", "count-above", "2.5")
    assert rc == 0 and out.splitlines()[-1].startswith("privacy: this spends no privacy budget")
    assert "> 2.5" in out and len(out.splitlines()) == 4
    rc, out, _ = _run(capsys, *base, "--column", "1", "--stat", "histogram", "--edges=-5,0,5", "--format", "csv")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 1 + 2 * 4 and lines[0].startswith("group,start,end")
    rc, out, _ = _run(capsys, *base, "--column", "0", "--stat", "quantile", "0.5", "--format", "json",
                        "--level", "0.999")
    med = json.loads(out)["windows"][0]
    assert rc == 0 and med["lo"] <= np.median(raw_q[:400, 0]) * PROFILE.quantum <= med["hi"]


@pytest.mark.parametrize("extra, says", [
    (["--column", "2"], "column must be in 0..1"),
    (["--stat", "median"], "--stat is one of"),
    (["--stat", "count-above"], "count-above needs a finite number"),
    (["--stat", "quantile", "1.5"], "quantile q must be in (0, 1)"),
    (["--stat", "mean", "3"], "mean takes no number"),
    (["--window", "1000"], "a duration here"),
    (["--window", "soon"], "--window is a number of readings"),
    (["--since", "yesterday"], "--since is a duration ago"),
    (["--stat", "histogram", "--edges", "5,1"], "increasing"),
    (["--profile", "/nonexistent/profile.json"], "no profile at"),
    (["--level", "1.2"], "confidence level"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                          says: str) -> None:
    url, _ = _store(tmp_path)
    rc, _, err = _run(capsys, "aggregate", "--analyst-db", url, "--data-dir", str(tmp_path), *extra)
    assert rc == 2 and says in err and err.count("\n") == 1, err


def test_no_profile_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "aggregate", "--analyst-db", "sqlite://", "--data-dir", str(tmp_path / "none"))
    assert rc == 2 and "no device profile" in err
    for text in ("{", '{"quantum": 0.01}', "[]"):
        (tmp_path / "p.json").write_text(text)
        rc, _, err = _run(capsys, "aggregate", "--analyst-db", "sqlite://", "--profile", str(tmp_path / "p.json"))
        assert rc == 2 and "is not a device profile" in err and err.count("\n") == 1, err


def test_parameters_are_validated() -> None:
    law = NoiseLaw.for_column(40, "2")
    assert (law.num, law.den) == (20, 1)
    y = np.arange(10, dtype=np.int64)
    for bad in (lambda: NoiseLaw(0, 1), lambda: NoiseLaw.for_column(0, "1"), lambda: mean(y, law, level=1.0),
                lambda: mean(np.zeros(0, dtype=np.int64), law), lambda: mean(y.astype(float), law),
                lambda: count_between(y, law, lo=5, hi=4), lambda: count_between(y, law, lo=1.5),
                lambda: quantile(y, law, 0.0), lambda: sum_halfwidth(law, 0, 0.95), lambda: parse_stat(["x"]),
                lambda: Stat("mean", edges=(1.0, 2.0))):
        with pytest.raises((ValueError, TypeError)):
            bad()
    with open_analyst_store("sqlite://") as st:
        with pytest.raises(ValueError):
            aggregate(st, PROFILE, group="", window_s=60, since=0, until=1, column=0, stat=Stat("mean"))


def test_noise_law_moments_and_exact_sum_quantile() -> None:
    law = NoiseLaw(7, 2)                     # b = 3.5 quanta
    p = np.exp(-2 / 7)
    z = np.arange(-400, 401)
    pmf = (1 - p) / (1 + p) * p ** np.abs(z)
    assert abs(law.variance - float(pmf @ z ** 2)) < 1e-9
    # The exact quantile of the sum of two: from the convolution, directly.
    two = np.convolve(pmf, pmf)
    k = np.arange(-800, 801)
    t = sum_halfwidth(law, 2, 0.95)
    assert two[np.abs(k) <= t].sum() >= 0.95 > two[np.abs(k) <= t - 1].sum()
    t1 = sum_halfwidth(law, 1, 0.95)
    assert pmf[np.abs(z) <= t1].sum() >= 0.95 > pmf[np.abs(z) <= t1 - 1].sum()
    # Beyond the FFT grid (2^21 points): Cornish-Fisher, against the normal limit.
    big = NoiseLaw(10**6, 1)
    t = sum_halfwidth(big, 4000, 0.95)
    assert abs(t / (1.959964 * np.sqrt(4000 * big.variance)) - 1) < 1e-3


def test_a_histogram_gives_the_released_counts_beside_the_estimates(tmp_path: Path) -> None:
    """The released counts per bin are the noisy values as released (what a naive reader counts),
    bin for bin with the deconvolved estimates; the two differ by the noise's spill-over."""
    url, _ = _store(tmp_path)
    edges = (-5.0, 0.0, 5.0)
    with open_analyst_store(url) as st:
        (w, _) = aggregate(st, PROFILE, group="hall-a", window_s=HOUR, since=T0, until=T0 + 2 * HOUR, column=1,
                           stat=Stat("histogram", edges=edges))
        rows = st.released_rows("hall-a", T0, T0 + HOUR)
    y = np.array([struct.unpack("<2i", bytes(v))[1] for _, cid, v in rows if cid == PROFILE.config_id]) * PROFILE.quantum
    want = [int((y < -5).sum()), int(((y >= -5) & (y < 0)).sum()), int(((y >= 0) & (y < 5)).sum()), int((y >= 5).sum())]
    assert list(w.released) == want and sum(want) == w.n == 400
    assert len(w.rows) == len(w.released)
    with open_analyst_store(url) as st:
        (m, _) = aggregate(st, PROFILE, group="hall-a", window_s=HOUR, since=T0, until=T0 + 2 * HOUR, column=1,
                           stat=Stat("mean"))
    assert m.released == ()


def test_results_windows_can_show_each_windows_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dpsense results windows --mean C`: each window's mean of column C over its released
    readings, in physical units with its interval (the same estimator as `dpsense aggregate`)."""
    url, raw_q = _store(tmp_path)
    with open_analyst_store(url) as st:
        w = st.close_window("hall-a", "count", upto_row=st.max_row_id(), closed_at=T0 + 2 * HOUR)
        assert w is not None
        members = st.window_members(w.id, columns=2, config_id=PROFILE.config_id)
    rc, out, err = _run(capsys, "results", "windows", "--mean", "0", "--format", "json", "--analyst-db", url,
                        "--data-dir", str(tmp_path))
    assert rc == 0, err
    (row,) = [r for r in json.loads(out) if r["window"] == w.id]
    want = mean([int(v[0]) for v in members.values], NoiseLaw.for_column(PROFILE.delta_q[0], PROFILE.epsilon))
    assert (row["mean"], row["mean_lo"], row["mean_hi"]) == pytest.approx(
        (want.value * PROFILE.quantum, want.lo * PROFILE.quantum, want.hi * PROFILE.quantum))
    truth = raw_q[:, 0].mean() * PROFILE.quantum
    assert row["mean_lo"] - 0.5 <= truth <= row["mean_hi"] + 0.5
    rc, _, err = _run(capsys, "results", "windows", "--mean", "5", "--analyst-db", url, "--data-dir", str(tmp_path))
    assert rc == 2 and "column must be in 0..1" in err
