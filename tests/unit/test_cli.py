import io

import numpy as np
import pytest

from dpsense.cloud import cli
from dpsense.cloud.sim.datasets import paper1_synthetic, relaxed_sensitivity
from dpsense.cloud.sim.perturb_summary import SummaryOptions, run_summary


def test_perturb_summarises_a_window():
    out = io.StringIO()
    assert run_summary(SummaryOptions(n=3000, epsilon="0.5"), out) == 0
    text = out.getvalue()
    assert "3000 readings" in text
    assert "epsilon 0.5 per column, 1 per row" in text
    assert "reading 34 bytes, correction 28 bytes" in text
    assert "relaxed sensitivity (this mechanism)" in text


@pytest.mark.parametrize("argv", [["perturb", "--epsilon", "-1"], ["perturb", "--epsilon", "abc"],
                                  ["perturb", "--n", "3"], ["perturb", "--shape", "ring"],
                                  ["demo", "--n", "10"], ["demo", "--epsilon", "0"],
                                  ["demo", "--devices", "0"],
                                  ["gateway", "--port", "/dev/null", "--device-id", "7",
                                   "--broker-port", "0"],
                                  ["ingest", "--role", "analyst", "--broker-port", "70000"]])
def test_bad_arguments_are_rejected_clearly(argv, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as e:       # argparse rejects choices itself
        rc = e.code
    assert rc == 2
    assert "dpsense" in capsys.readouterr().err


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_version(capsys):
    assert cli.main(["version"]) == 0
    assert "wire protocol v2" in capsys.readouterr().out


def test_paper1_generator_separates_outliers():
    d = paper1_synthetic(20_000, separation=220, shape="scale", seed=3)
    r = np.linalg.norm(d.x, axis=1)
    assert d.outlier.sum() == 2000
    assert r[d.outlier].min() - r[~d.outlier].max() == pytest.approx(220, rel=0.05)
    s = paper1_synthetic(20_000, separation=50, shape="shift", seed=3)
    rs = np.linalg.norm(s.x, axis=1)
    assert rs[s.outlier].min() - rs[~s.outlier].max() == pytest.approx(50, abs=1)


def test_relaxed_sensitivity_is_the_90_percent_range():
    ref = np.column_stack([np.arange(1001.0), np.arange(1001.0) * 2])
    assert relaxed_sensitivity(ref, 10.0) == pytest.approx([900.0, 1800.0])
    with pytest.raises(ValueError):
        relaxed_sensitivity(ref, 0)
