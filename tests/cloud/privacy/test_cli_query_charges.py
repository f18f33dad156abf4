"""The curator's queries cannot leak by accident: every answer is charged, the defaults fit the
documented budget, answers come in their valid range with an error bar, refusals exit 1."""
from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from dpsense.cloud import cli
from dpsense.cloud.privacy.accountant import BudgetAccountant
from dpsense.cloud.privacy.outlier_count import dp_outlier_count
from dpsense.cloud.privacy.subspaces import subspaces_with_counts


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:     # argparse: a required option is missing
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def data(tmp_path: Path) -> tuple[str, str]:
    rng = np.random.default_rng(3)
    x = np.vstack([rng.normal(0, 1, (40, 2)), rng.normal(9, 4, (6, 2))])
    csv = tmp_path / "x.csv"
    np.savetxt(csv, x, delimiter=",", header="a,b", comments="")
    db = str(tmp_path / "budget.db")
    # The budget of docs/curator.md's example.
    BudgetAccountant(db).set_budget("fleet", 1, Decimal("1e-6"))
    return str(csv), db


QUERIES = {
    "count": ["count", "--r", "1.1", "--epsilon", "0.05"],
    "count-global": ["count", "--r", "1.1", "--epsilon", "0.05", "--method", "global"],
    "subspaces": ["subspaces", "--r", "0.3", "--h", "1", "--epsilon-select", "0.05", "--epsilon-count", "0.05"],
    "identify": ["identify", "--record", "9,9", "--beta", "3", "--r", "1", "--epsilon", "0.05"],
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_no_query_answers_without_a_dataset(name: str, data: tuple[str, str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    csv, db = data
    q = QUERIES[name]
    rc, out, err = _run(capsys, ["query", q[0], "--csv", csv, "--db", db] + q[1:])
    assert rc == 2 and out == "" and "--dataset" in err
    assert BudgetAccountant(db).spends("fleet") == []
    # With it, the same query answers and is charged.
    rc, out, err = _run(capsys, ["query", q[0], "--csv", csv, "--db", db, "--dataset", "fleet", "--seed", "1"] + q[1:])
    assert rc == 0, err
    assert len(BudgetAccountant(db).spends("fleet")) == 1


def test_default_delta_fits_the_documented_budget(data: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    csv, db = data
    for q in ("count", "subspaces"):
        rc, _, err = _run(capsys, ["query", *QUERIES[q][:1], "--csv", csv, "--db", db, "--dataset", "fleet"]
                          + QUERIES[q][1:])
        assert rc == 0, err


def test_answers_are_clamped_with_an_error_bar(data: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    csv, db = data
    BudgetAccountant(db).set_budget("fleet", 100, Decimal("1e-4"))
    seen_clamped = 0
    for seed in range(12):
        for q in ("count", "count-global", "subspaces"):
            rc, out, err = _run(capsys, ["query", QUERIES[q][0], "--csv", csv, "--db", db, "--dataset", "fleet",
                                         "--seed", str(seed)] + QUERIES[q][1:])
            assert rc == 0, err
            m = re.search(r"outlier count[^\n]*?([-0-9.e+]+) of 46 records", out)
            assert m is not None, out
            assert 0 <= float(m.group(1)) <= 46
            assert "error bar +-" in out and ("sigma =" in out) == (q == "count-global")
            seen_clamped += "clamped to [0, 46]" in out
    assert seen_clamped > 0          # at epsilon 0.05 the raw answers leave the range


def test_api_releases_carry_the_clamped_answer_and_a_public_sigma_bound() -> None:
    x = np.random.default_rng(4).normal(0, 1, (30, 2))
    for method in ("smooth", "global"):
        rel = dp_outlier_count(x, k=3, r=0.5, epsilon=0.05, delta=1e-7, method=method)  # type: ignore[arg-type]
        assert rel.n == 30 and rel.clamped == min(max(rel.value, 0), 30)
        assert rel.sigma_bound is not None and rel.sigma_bound > 0
        if method == "global":
            assert rel.sigma_bound == rel.sigma
    sub = subspaces_with_counts(x, k=3, r=0.5, h=1, epsilon_select=0.1, epsilon_count=0.1, delta=1e-7)
    assert sub.n == 30 and len(sub.sigma_bounds) == 1 and all(0 <= c <= 30 for c in sub.clamped)


def test_refusals_exit_1(data: tuple[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv, db = data
    q = QUERIES["count"]
    over = ["query", q[0], "--csv", csv, "--db", db, "--dataset", "fleet"] + q[1:-1] + ["2"]
    rc, out, err = _run(capsys, over)
    assert rc == 1 and out == "" and "does not fit" in err
    rc, out, err = _run(capsys, ["query", q[0], "--csv", csv, "--db", db, "--dataset", "other"] + q[1:])
    assert rc == 1 and out == "" and "no budget" in err
    rc, out, err = _run(capsys, ["query", q[0], "--csv", csv, "--db", str(tmp_path / "none.db"), "--dataset",
                                 "fleet"] + q[1:])
    assert rc == 1 and out == "" and "no budget database" in err and not (tmp_path / "none.db").exists()
    rc, _, err = _run(capsys, ["query", q[0], "--csv", csv, "--db", db, "--dataset", "fleet", "--r", "-1",
                               "--epsilon", "0.1"])
    assert rc == 2 and "r must be" in err         # a bad value is still 2
