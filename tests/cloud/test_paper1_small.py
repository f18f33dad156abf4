"""Paper-1 experiment at small n: the directions of Fig. 3, the modes' guarantees, the outputs
and the noise sampler.

n = 20,000 and two seeds; DBSCAN's min_samples is calibrated per separation on the
reference, as in the full run. Mode secure's garbled circuit runs only in the tests that
check it (about 0.5 s per 3,000-row window), not in the shared fixture.
"""
import csv
import math
import pathlib

import numpy as np
import pytest
from scipy import stats

from dpsense.cloud import cli
from dpsense.cloud.sim.experiments.noise import discrete_laplace, discrete_laplace_pmf
from dpsense.cloud.sim.experiments import paper1
from dpsense.cloud.sim.experiments.paper1 import Paper1Config, markdown, run_paper1, summarise, target_check

SEPS = (220.0, 400.0)
EPS = (0.1, 0.5, 1.0)


@pytest.fixture(scope="module")
def summary():
    cfg = Paper1Config(n=20_000, seeds=(1, 2), separations=SEPS, epsilons=EPS, circuit_checks=0)
    history = {}
    rows = run_paper1(cfg, history=history)
    s = summarise(rows)

    def get(sep, eps, method, metric="recall"):
        return s[(sep, eps, method)][metric][0]

    get.rows = rows
    get.cfg = cfg
    get.history = history
    return get


def _windows(rows, method):
    return {(r.separation, r.epsilon, r.seed, r.run): r for r in rows if r.method == method}


def test_recall_grows_with_epsilon(summary):
    for sep in SEPS:
        assert summary(sep, 0.1, "relaxed") + 0.05 < summary(sep, 0.5, "relaxed")
    assert summary(400.0, 1.0, "relaxed") >= summary(400.0, 0.5, "relaxed") - 0.01


def test_detector_is_calibrated_so_that_o_is_the_construction(summary):
    for sep in SEPS:
        assert all(h.jaccard_ref == 1.0 for h in summary.history[sep])
        assert summary(sep, 0.5, "raw", "jaccard") == 1.0


def test_mode_bands_meets_the_targets_on_every_seed(summary):
    assert all(ok for _, _, ok, _ in target_check(summary.cfg, summary.rows, "bands"))


def test_mode_secure_meets_the_targets_and_adds_few_normal_rows(summary):
    # Its predicate is mode bands' at a band width of one quantum, on d_diff + Z_A with rho moved
    # by the noise's margin: a row within rho is a candidate only where Z_A exceeds the margin,
    # with probability <= alpha / 2 = 0.0025 (about 45 of the 18,000 normal rows expected); the
    # bound below is twice that, more than ten standard deviations of the binomial away.
    assert summary.cfg.server == "deployed"
    assert all(ok for _, _, ok, _ in target_check(summary.cfg, summary.rows, "secure"))
    relaxed = _windows(summary.rows, "relaxed")
    for key, r in _windows(summary.rows, "secure").items():
        normal_in_r = round(r.subset * 20_000) - round(r.recall * r.n_outliers)
        assert normal_in_r <= 0.005 * (20_000 - r.n_outliers) and r.recall >= relaxed[key].recall
        assert r.circuit_matched is None            # the fixture runs no circuit


def test_the_idealised_server_adds_no_normal_row_and_is_labelled():
    # With the exact d_diff no row within rho is a candidate, and here every normal row lies
    # within rho: precision 100 %. Its rows say that they are the idealised server's.
    cfg = Paper1Config(n=5_000, seeds=(1,), separations=(220.0,), epsilons=(0.5,), circuit_checks=0, server="exact")
    rows = run_paper1(cfg)
    assert all(r.precision == 1.0 for r in rows if r.method in ("secure", "bands"))
    text = markdown(cfg, rows)
    assert "| mode bands [idealised: exact d_diff] |" in text and "IDEALISED" in text
    assert "[idealised" not in markdown(Paper1Config(n=5_000, seeds=(1,), separations=(220.0,), epsilons=(0.5,)),
                                        rows)


def test_mode_paper_is_never_worse_than_o_prime(summary):
    # Recall may drop only by the noise split's removals (expected share <= alpha =
    # 0.005); additions are abnormal rows but where the server's noise Z_A exceeds its margin
    # (probability <= alpha / 2 per row), so precision falls by at most a few such rows.
    relaxed = _windows(summary.rows, "relaxed")
    for key, r in _windows(summary.rows, "paper").items():
        assert r.recall >= relaxed[key].recall - 0.005
        assert r.precision >= relaxed[key].precision - 0.005


def test_the_2017_reconstruction_loses_true_positives_at_epsilon_0_5(summary):
    # Issue 13: the accepted Otsu split cuts into the true positives' upper tail.
    for sep in SEPS:
        assert summary(sep, 0.5, "reconstruction") < summary(sep, 0.5, "relaxed") - 0.02


def test_global_sensitivity_baseline_is_much_worse(summary):
    for sep in SEPS:
        for eps in EPS:
            assert summary(sep, eps, "global", "subset") > 0.9
            assert summary(sep, eps, "global", "precision") <= 0.11
            assert summary(sep, eps, "bands", "precision") > 5 * summary(sep, eps, "global", "precision")


def test_markdown_has_one_row_per_setting_and_method(summary):
    text = markdown(summary.cfg, summary.rows, elapsed_s=1.0, history=summary.history)
    table = [line for line in text.splitlines() if line.startswith("| 220 | 0.1 |")]
    # nine methods, the diagnostics row and the epsilon_cs check against today's bands
    assert len(table) == 9 + 1 + 1
    assert sum(line.endswith(("| yes |", "| not checked |")) or "| no: seed" in line for line in table) == 1
    assert "mode bands" in text and "mode paper, never-worse rule" in text and "2017 reconstruction" in text
    assert "mode secure (predicate, circuit-checked)" in text
    assert "| bands (headline) | 220 | 0.1 | yes |" in text and "| secure | 220 | 0.1 | yes |" in text
    # No circuit ran: the diagnostics say 0 of 0 windows, not that it matched.
    assert table[-1].endswith("| 0/0 | - |")


def test_cli_writes_the_outputs(tmp_path, capsys):
    out = tmp_path / "p1"
    rc = cli.main(["experiment", "paper1", "--n", "3000", "--seeds", "1,2", "--separations", "400",
                   "--epsilons", "0.5", "--out", str(out)])
    assert rc == 0
    assert {p.name for p in out.iterdir()} == {"results.md", "runs.csv", "paper1.png"}
    assert (out / "paper1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "results.md").read_text()
    assert "| 400 | 0.5 | mode bands |" in text and "| 400 | 0.5 | mode secure (predicate, circuit-checked) |" in text
    with open(out / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 2 * 9
    # The circuit ran on seed 1's window (the default: one seed per setting) and matched.
    secure = {r["seed"]: r["circuit_matched"] for r in runs if r["method"] == "secure"}
    assert secure == {"1": "True", "2": ""}
    assert "| 1/1 |" in text.splitlines()[-1]
    err = capsys.readouterr().err
    assert "paper1: separation 400" in err and "target, mode bands, separation 400, eps 0.5: met" in err
    assert "mode secure: the garbled circuit gave the predicate's R on 1 of 1 windows" in err


def test_a_circuit_that_disagrees_with_the_predicate_fails_the_run(tmp_path, monkeypatch, capsys):
    real = paper1.run_secure

    def off_by_one_row(d_diff, dist, rho):
        got = real(d_diff, dist, rho)
        flipped = np.zeros(len(dist), dtype=bool)
        flipped[got.r] = True
        flipped[0] = not flipped[0]
        return type(got)(r=np.flatnonzero(flipped), to_cs=got.to_cs, to_analyst=got.to_analyst)

    monkeypatch.setattr(paper1, "run_secure", off_by_one_row)
    cfg = Paper1Config(n=3000, seeds=(1,), separations=(400.0,), epsilons=(0.5,), mode="secure")
    assert paper1.main(cfg, str(tmp_path)) == 1
    assert "the garbled circuit disagreed with its predicate at separation 400 eps 0.5 seed 1" \
        in capsys.readouterr().err
    assert "| 0/1 |" in (tmp_path / "results.md").read_text().splitlines()[-1]


@pytest.mark.parametrize("argv", [["--epsilons", "0"], ["--epsilons", "a,b"], ["--runs", "0"],
                                  ["--split", "median"], ["--kappa-sep", "-1"], ["--seeds", "1,1"],
                                  ["--seeds", "1.5"], ["--mode", "oracle"], ["--band-width", "0"],
                                  ["--alpha", "1"], ["--sensitivity", "mad"], ["--circuit-checks", "-1"],
                                  ["--circuit-checks", "x"]])
def test_cli_rejects_bad_arguments(argv, tmp_path):
    try:
        rc = cli.main(["experiment", "paper1", "--out", str(tmp_path)] + argv)
    except SystemExit as e:           # argparse rejects types and choices itself
        rc = e.code
    assert rc == 2
    assert not any(pathlib.Path(tmp_path).iterdir())


def test_config_validation():
    with pytest.raises(ValueError):
        Paper1Config(separations=())
    with pytest.raises(ValueError):
        Paper1Config(bound="R9")
    with pytest.raises(ValueError):
        Paper1Config(split="noise")
    with pytest.raises(ValueError):
        Paper1Config(circuit_checks=-1)
    with pytest.raises(ValueError):
        Paper1Config(mode="oracle")


@pytest.mark.parametrize("scale", [0.7, 2.5, 40.0])
def test_discrete_laplace_sampler_matches_the_exact_pmf(scale):
    """Chi-square goodness of fit on 200,000 draws, bins |y| <= 3b plus two tails.

    Seeded; at a true pmf the test fails with probability 1e-4 per scale.
    """
    y = discrete_laplace(np.random.default_rng(11), scale, 200_000)
    assert y.dtype == np.int64
    edge = max(2, int(3 * scale))
    support = np.arange(-edge, edge + 1)
    p = discrete_laplace_pmf(support, scale)
    tail = (1.0 - p.sum()) / 2.0
    expected = np.concatenate([[tail], p, [tail]]) * y.size
    observed = np.concatenate([[np.sum(y < -edge)],
                               np.bincount(y[np.abs(y) <= edge] + edge, minlength=support.size),
                               [np.sum(y > edge)]])
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_discrete_laplace_sampler_variance_and_per_column_scales():
    b = np.array([3.0, 1.0e5])
    y = discrete_laplace(np.random.default_rng(2), b, (100_000, 2))
    q = np.exp(-1.0 / b)
    sd = np.sqrt(2 * q) / (1 - q)
    # sd of the sample sd is about sd * sqrt((kurtosis - 1) / 4n) < 1 % here.
    np.testing.assert_allclose(y.std(axis=0), sd, rtol=0.02)
    assert abs(discrete_laplace_pmf(0, 3.0) - math.tanh(1 / 6)) < 1e-15
    with pytest.raises(ValueError):
        discrete_laplace(np.random.default_rng(0), 0.0, 3)


def test_calibration_fixes_the_ground_truth_at_separation_50():
    # DBSCAN(12, 12) at n = 20,000 (the old fixed setting) keeps most of the constructed ring
    # as a cluster; calibrated on the reference, O is the construction.
    fixed = Paper1Config(n=20_000, seeds=(1,), separations=(50.0,), epsilons=(0.5,), dbscan_min_samples=12)
    calibrated = Paper1Config(n=20_000, seeds=(1,), separations=(50.0,), epsilons=(0.5,))
    j_fixed = next(r.jaccard for r in run_paper1(fixed) if r.method == "raw")
    j_cal = next(r.jaccard for r in run_paper1(calibrated) if r.method == "raw")
    assert j_fixed < 0.5 and j_cal == 1.0


def test_recall_against_o_is_undefined_when_dbscan_finds_no_raw_outliers():
    # The 'shift' generator makes a dense ring that DBSCAN(12, 12) at n = 20,000 keeps as a
    # cluster: O is empty, so recall against O is shown as "-", not as 0 %.
    cfg = Paper1Config(n=20_000, seeds=(1,), separations=(220.0,), epsilons=(0.5,), shape="shift",
                       dbscan_min_samples=12)
    rows = run_paper1(cfg)
    assert all(r.n_o == 0 and math.isnan(r.recall_o) for r in rows)
    assert any(line.startswith("| 220 | 0.5 | mode bands |") and line.endswith("| - |")
               for line in markdown(cfg, rows).splitlines())


def test_docs_paper1_shows_every_mode_and_its_figure():
    # docs/paper1.md carries the full run's results.md: every mode in the target table and the
    # main table, bands and secure meeting every target, every circuit check equal to the
    # predicate, and the run's figure next to it.
    docs = pathlib.Path(__file__).resolve().parents[2] / "docs"
    text = (docs / "paper1.md").read_text(encoding="utf-8")
    targets = [line for line in text.splitlines() if line.startswith(("| bands", "| secure", "| paper |"))]
    for mode in ("bands (headline)", "secure"):
        cells = [line for line in targets if line.startswith("| %s |" % mode)]
        assert len(cells) == 6 and all("| yes |" in line for line in cells)
    for method in paper1.METHODS:
        assert text.count("| %s |" % paper1.label(Paper1Config(), method)) == 12
    diagnostics = [line for line in text.splitlines() if line.count("|") == 14 and line[2].isdigit()]
    assert len(diagnostics) == 12 and all(line.split("|")[12].strip() == "1/1" for line in diagnostics)
    assert "](paper1.png)" in text and (docs / "paper1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
