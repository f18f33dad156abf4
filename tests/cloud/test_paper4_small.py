"""Paper-4 experiments at small size: the directions of Figs. 3-7 and of the calibration pitfall in docs/paper4.md, and the outputs."""
import numpy as np
import pytest

from dpsense.cloud import cli
from dpsense.cloud.sim.experiments.paper4 import (
    Paper4Config, gumbel_top_h, markdown1, markdown2, run_scenario1, run_scenario2, summarise1, summarise2)
from dpsense.cloud.privacy.subspaces import selection_probabilities


@pytest.fixture(scope="module")
def s1():
    cfg = Paper4Config(scenario=1, datasets=("synthetic1",), draws=2)
    rows = run_scenario1(cfg)
    return cfg, rows, summarise1(rows)


@pytest.fixture(scope="module")
def s2():
    cfg = Paper4Config(scenario=2, datasets=("synthetic2",), draws=2, runs=2000, epsilons=(0.2, 1.6, 6.4))
    rows, info = run_scenario2(cfg)
    return cfg, rows, info, summarise2(rows)


def test_global_sigma_matches_spec_table(s1):
    _, _, s = s1
    # Okada et al. 2015, experiments (Synthetic 1 baseline): sigma_global (GS lower bound 13) = 423.2 at eps 0.1, 47.0 at eps 0.9
    assert s[("synthetic1", 0.1)]["global_lb"] == pytest.approx(423.2, abs=0.05)
    assert s[("synthetic1", 0.9)]["global_lb"] == pytest.approx(47.0, abs=0.05)
    assert s[("synthetic1", 0.1)]["global_ub"] == pytest.approx(423.2 * 19 / 13, abs=0.1)


def test_noise_falls_with_epsilon(s1):
    cfg, _, s = s1
    for m in ("global_lb", "global_ub", "smooth", "smooth_paper"):
        vals = [s[("synthetic1", e)][m] for e in cfg.epsilons]
        assert all(a > b for a, b in zip(vals, vals[1:])), m


def test_direction_of_the_calibration_pitfall(s1):
    """docs/paper4.md, "Where we differ": correct (NRS) smooth noise is LARGER than global; only the paper's calibration is smaller."""
    cfg, _, s = s1
    for e in cfg.epsilons:
        v = s[("synthetic1", e)]
        assert v["smooth"] > 3 * v["global_ub"] > 3 * v["global_lb"]
        assert v["smooth_paper"] < v["global_lb"]
        assert 15 < v["s_nrs"] < 50 and v["s_paper"] < 8      # magnitudes of docs/paper4.md's S at N = 50
    assert s[("synthetic1", 0.9)]["smooth_paper"] < 10


def test_markdown_labels_paper_mode(s1):
    cfg, rows, _ = s1
    md = markdown1(cfg, rows)
    assert "NOT DP" in md and "NOT differentially private" in md and "| 0.1 |" in md


def test_gumbel_top_h_is_sequential_exponential_mechanism():
    rng = np.random.default_rng(3)
    u = np.array([3.0, 2.0, 1.0, 0.5])
    idx = gumbel_top_h(rng, u, 0.7, 2, 40_000)
    p1 = selection_probabilities(u, [], 1.4, 1)          # coefficient 1.4 / 2 = 0.7
    first = np.bincount(idx[:, 0], minlength=4) / idx.shape[0]
    assert np.abs(first - p1).max() < 0.01
    p_pair = p1[0] * selection_probabilities(u, [0], 1.4, 1)[1]
    assert np.mean((idx[:, 0] == 0) & (idx[:, 1] == 1)) == pytest.approx(p_pair, abs=0.01)


def test_scenario2_directions(s2):
    cfg, _, info, s = s2
    u, truth = info["synthetic2"][0]
    assert truth.tolist() == [True, True] + [False] * 8
    # precision grows with epsilon (h = 1), for both calibrations
    for mode in ("dp", "paper"):
        assert s[("synthetic2", 1, 0.2, mode)][0] + 0.2 < s[("synthetic2", 1, 6.4, mode)][0]
    # the paper's form (2 eps-DP) is more concentrated than the eps-DP form at the same nominal eps
    assert s[("synthetic2", 1, 1.6, "paper")][0] > s[("synthetic2", 1, 1.6, "dp")][0]
    # precision falls as h grows (Fig. 5); recall grows with h at small epsilon
    assert s[("synthetic2", 1, 6.4, "dp")][0] > s[("synthetic2", 5, 6.4, "dp")][0]
    assert s[("synthetic2", 5, 0.2, "dp")][1] > s[("synthetic2", 1, 0.2, "dp")][1]
    # near-uniform at tiny epsilon: precision close to 2/10
    assert abs(s[("synthetic2", 3, 0.2, "dp")][0] - 0.2) < 0.06


def test_scenario2_markdown(s2):
    cfg, rows, info, _ = s2
    md = markdown2(cfg, rows, info)
    assert "2ε-DP, NOT ε-DP" in md and "ε-DP overall" in md


def test_config_validation():
    for kw in (dict(scenario=3), dict(scenario=1, datasets=("ionosphere",)), dict(epsilons=(0.0,)),
               dict(draws=0), dict(hs=(0,)), dict(delta=1.0), dict(adult_positive="yes")):
        with pytest.raises(ValueError):
            Paper4Config(**kw)


def test_cli_writes_outputs(tmp_path, capsys):
    out = tmp_path / "p4"
    assert cli.main(["experiment", "paper4", "--scenario", "2", "--draws", "1", "--runs", "50",
                     "--epsilons", "0.8,3.2", "--hs", "1,2", "--out", str(out)]) == 0
    assert (out / "scenario2.md").read_text().count("synthetic2") >= 1
    assert (out / "scenario2.png").stat().st_size > 1000
    assert "paper4: done" in capsys.readouterr().err
    assert cli.main(["experiment", "paper4", "--scenario", "1", "--hs", "1.5", "--out", str(out)]) == 2


def test_cli_query_count_and_subspaces(tmp_path, capsys):
    rng = np.random.default_rng(1)
    x = np.vstack([rng.normal(0, 1, (45, 3)), rng.normal(20, 10, (5, 3))])
    csv = tmp_path / "x.csv"
    np.savetxt(csv, x, delimiter=",", header="a,b,c", comments="")
    db = tmp_path / "b.db"
    assert cli.main(["curator", "budget", "set", "--dataset", "x", "--epsilon", "1", "--delta", "0.05",
                     "--db", str(db)]) == 0
    capsys.readouterr()
    assert cli.main(["query", "count", "--csv", str(csv), "--r", "1.1", "--epsilon", "0.5", "--subspace", "0,1",
                     "--dataset", "x", "--db", str(db), "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "outlier count (subspace 0,1)" in out and "DP" in out and "spent      epsilon=0.5" in out
    # The paper's count calibration is not DP and cannot be charged: the command does not offer it.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["query", "count", "--csv", str(csv), "--r", "1.1", "--epsilon", "0.5", "--paper-mode",
                  "--dataset", "x", "--db", str(db)])
    assert exit_.value.code == 2 and "--paper-mode" in capsys.readouterr().err
    assert cli.main(["query", "subspaces", "--csv", str(csv), "--r", "0.2", "--h", "2", "--epsilon-select", "0.3",
                     "--epsilon-count", "0.2", "--dataset", "x", "--db", str(db)]) == 0
    assert capsys.readouterr().out.count("subspace ") == 2
    # budget exhausted: refused with exit status 1 (docs/curator.md, docs/paper4.md)
    assert cli.main(["query", "subspaces", "--csv", str(csv), "--r", "0.2", "--h", "1", "--epsilon-select", "0.1",
                     "--dataset", "x", "--db", str(db)]) == 1
    assert "does not fit" in capsys.readouterr().err
