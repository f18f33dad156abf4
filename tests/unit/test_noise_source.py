"""The demo, the simulator and ``dpsense perturb`` draw fresh noise unless a seed is asked
for, and then say "reproducible, not private" (issue 12, item 7: with the old fixed seed,
replaying it recovered every raw reading)."""
from __future__ import annotations

import io

import numpy as np
import pytest

from dpsense.cloud import cli
from dpsense.cloud.sim.datasets import paper1_synthetic
from dpsense.cloud.sim.perturb_summary import SummaryOptions, run_summary
from dpsense.cloud.sim.demo import DemoOptions
from dpsense.cloud.sim.calibration import calibrate
from dpsense.cloud.sim.report import NOT_PRIVATE, noise_source
from dpsense.cloud.sim.simulate import encode_fleet


@pytest.mark.parametrize("command", ["demo", "simulate", "perturb"])
def test_no_seed_by_default(command: str) -> None:
    args = cli.build_parser().parse_args([command])
    assert args.seed is None


def test_demo_options_draw_fresh_noise_by_default() -> None:
    assert DemoOptions().seed is None


def _fleet(seed: int | None) -> np.ndarray:
    d = paper1_synthetic(200, 220.0, "scale", seed=1)
    profile = calibrate(d.x, "0.5", 0.01)
    return encode_fleet(d.x, profile, 2, seed).released_q


def test_fleet_noise_is_fresh_without_a_seed_and_replays_with_one() -> None:
    # 200 records x 2 columns of discrete Laplace noise (scale > 1000 quanta here): two
    # fresh runs agree on every value with probability far below 1e-100.
    assert not np.array_equal(_fleet(None), _fleet(None))
    assert np.array_equal(_fleet(7), _fleet(7))
    assert not np.array_equal(_fleet(7), _fleet(8))


def test_the_output_names_the_noise_source() -> None:
    assert NOT_PRIVATE not in noise_source(None)
    assert noise_source(3) == "seed 3: reproducible, not private"
    fresh, seeded = io.StringIO(), io.StringIO()
    assert run_summary(SummaryOptions(n=3000), fresh) == 0
    assert run_summary(SummaryOptions(n=3000, seed=3), seeded) == 0
    assert "noise      fresh entropy" in fresh.getvalue()
    assert NOT_PRIVATE not in fresh.getvalue()
    assert "noise      seed 3: reproducible, not private" in seeded.getvalue()


@pytest.mark.parametrize("argv", [["demo", "--seed", "-1"], ["simulate", "--seed", "x"],
                                  ["perturb", "--seed", "4000001"]])
def test_bad_seed_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "--seed" in capsys.readouterr().err
