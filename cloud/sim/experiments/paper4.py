"""Paper 4 (Okada et al. 2015) experiments: Scenario 1 (noise of the DP outlier count)
and Scenario 2 (precision/recall of the DP top-h subspaces).

    python -m dpsense.cloud.cli experiment paper4 --scenario 1 --out out/paper4

Scenario 1 (Synthetic 1, Adult 1; Figs. 3-4): per epsilon, the standard deviation of
the noise of each count mechanism, averaged over ``draws`` data draws:

* ``global_lb``: Gaussian with the GS *lower* bound ``min(N, 2dk+1)`` and the classical
  ``sigma = GS sqrt(2 ln(2/delta))/epsilon``: the paper's "Global" baseline. DP only
  for d = 1 (there the bound is exact); for d >= 2 it is NOT a DP guarantee.
* ``global_ub``: the same with Theorem 4's upper bound ``min(N, k K_d + 1)``: DP.
* ``smooth``: ``S(X)/alpha`` with the NRS constants: DP (our default).
* ``smooth_paper``: beta = epsilon and ``S sqrt(2 ln(2/delta))/epsilon``: the paper's
  calibration, **NOT differentially private** (beta = epsilon is not a valid smooth-sensitivity calibration; docs/paper4.md).

The smooth noise scale is data-dependent; it is reported here as an analysis of the
mechanism, never released by the query.

Scenario 2 (Synthetic 2, Adult 2, Ionosphere; Figs. 5-7): utilities of the one-column
subspaces, then ``runs`` selections of h subspaces per (h, epsilon) with the DP
exponential mechanism (``exp(eps u / 2h)`` per round, epsilon-DP overall) and with the
paper's form (``exp(eps u / h)``, 2 epsilon-DP, labelled). The selection law is drawn
with the Gumbel-top-h trick (identical to h sequential draws without replacement);
the exact sampler of the query is not needed for a simulation. A subspace is "true"
when it contains outliers: dims 1 and 2 for Synthetic 2; for the real data, when at
least one labelled outlier is an outlier in it (our reading; Okada et al. 2015 do not say).
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from dpsense.cloud.sim.datasets import DataNotInstalled
from dpsense.cloud.privacy.mechanisms import PaperModeWarning, SmoothSensitivityGaussian
from dpsense.cloud.privacy.outlier_count import global_sensitivity, smooth_bound, subspace_degrees
from dpsense.cloud.privacy.subspaces import coefficient, utilities

#: Adult columns (Okada et al. 2015 use 7 columns but do not name them). Default: the 5 continuous
#: attributes without fnlwgt, plus sex == Male and race == White (a guess, configurable).
ADULT_COLUMNS = ("age", "education-num", "capital-gain", "capital-loss", "hours-per-week", "sex", "race")

EPS1 = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
EPS2 = (0.2, 0.4, 0.8, 1.6, 3.2)
HS = (1, 2, 3, 4, 5)


class DatasetSpec(TypedDict):
    """One data set of a scenario: rows drawn (inliers, outliers) and the query's k and r."""

    n_in: int
    n_out: int
    k: int
    r: float


S1_DATASETS: dict[str, DatasetSpec] = {
    "synthetic1": DatasetSpec(n_in=45, n_out=5, k=3, r=1.1),
    "adult1": DatasetSpec(n_in=45, n_out=5, k=3, r=0.35)}
S2_DATASETS: dict[str, DatasetSpec] = {
    "synthetic2": DatasetSpec(n_in=490, n_out=10, k=3, r=0.13),
    "adult2": DatasetSpec(n_in=369, n_out=10, k=3, r=0.02),
    "ionosphere": DatasetSpec(n_in=225, n_out=10, k=3, r=0.06)}

MECH_LABELS = {
    "global_lb": "Global, GS lower bound (paper baseline; DP only for d = 1)",
    "global_ub": "Global, GS upper bound (DP)",
    "smooth": "Smooth, NRS constants (DP, ours)",
    "smooth_paper": "Smooth, paper calibration (NOT DP)",
}


@dataclass(frozen=True)
class Paper4Config:
    """Settings of one paper-4 run (defaults: fast; ``full()`` for paper-size averaging)."""

    scenario: int = 1
    epsilons: tuple[float, ...] = ()
    hs: tuple[int, ...] = HS
    delta: float = 0.01
    draws: int = 3
    runs: int = 1000
    datasets: tuple[str, ...] = ()
    adult_columns: tuple[str, ...] = ADULT_COLUMNS
    adult_positive: str = ">50K"
    seed: int = 1
    skipped: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.scenario not in (1, 2):
            raise ValueError("scenario must be 1 or 2")
        if not self.epsilons:
            object.__setattr__(self, "epsilons", EPS1 if self.scenario == 1 else EPS2)
        if not self.datasets:
            object.__setattr__(self, "datasets", tuple(S1_DATASETS if self.scenario == 1 else S2_DATASETS))
        known = S1_DATASETS if self.scenario == 1 else S2_DATASETS
        bad = [d for d in self.datasets if d not in known]
        if bad:
            raise ValueError("unknown data set(s) %s for scenario %d; choose from %s" % (bad, self.scenario,
                                                                                          list(known)))
        if any(not math.isfinite(e) or e <= 0 for e in self.epsilons):
            raise ValueError("epsilons must be finite numbers > 0")
        if not 0 < self.delta < 1:
            raise ValueError("delta must be in (0, 1)")
        if self.draws < 1 or self.runs < 1:
            raise ValueError("draws and runs must be >= 1")
        if any(h < 1 for h in self.hs) or not self.hs:
            raise ValueError("hs must be integers >= 1")
        if self.adult_positive not in (">50K", "<=50K"):
            raise ValueError("adult_positive must be '>50K' or '<=50K'")


# ----------------------------------------------------------------------------------------- data

def _zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std(axis=0)
    out: np.ndarray = np.where(sd > 0, (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0), 0.0)
    return out


def synthetic(rng: np.random.Generator, n_in: int, n_out: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Inliers N(0, I_d); outliers N(mu, Sigma) with mu_1 = mu_2 = 20, Sigma_11 = Sigma_22 = 100."""
    x_in = rng.normal(0.0, 1.0, (n_in, d))
    x_out = rng.normal(0.0, 1.0, (n_out, d))
    x_out[:, :2] = rng.normal(20.0, 10.0, (n_out, 2))
    return np.vstack([x_in, x_out]), np.r_[np.zeros(n_in, bool), np.ones(n_out, bool)]


_CACHE: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def adult_matrix(columns: Sequence[str], positive: str) -> tuple[np.ndarray, np.ndarray]:
    """All Adult rows, chosen columns z-scored over the whole set; returns (x, is_positive)."""
    key = "adult|%s|%s" % (",".join(columns), positive)
    if key not in _CACHE:
        from dpsense.cloud.sim.datasets import load_adult
        rows = load_adult()
        cols = []
        for c in columns:
            if c == "sex":
                cols.append([1.0 if r["sex"] == "Male" else 0.0 for r in rows])
            elif c == "race":
                cols.append([1.0 if r["race"] == "White" else 0.0 for r in rows])
            else:
                cols.append([float(r[c]) for r in rows])
        x = _zscore(np.array(cols).T)
        pos = np.array([r["income"] == positive for r in rows])
        _CACHE[key] = (x, pos)
    return _CACHE[key]


def ionosphere_matrix() -> tuple[np.ndarray, np.ndarray]:
    """Ionosphere (UCI 34-column layout, constant column 2 left at 0), z-scored; (x, good)."""
    if "iono" not in _CACHE:
        from dpsense.cloud.sim.datasets import load_ionosphere
        x, good = load_ionosphere(uci_layout=True)
        _CACHE["iono"] = (_zscore(x), good)
    return _CACHE["iono"]


def subsample(rng: np.random.Generator, x: np.ndarray, positive: np.ndarray, n_in: int,
              n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_in`` positive rows (inliers) and ``n_out`` negative rows (outliers), at random."""
    i_in = rng.choice(np.flatnonzero(positive), n_in, replace=False)
    i_out = rng.choice(np.flatnonzero(~positive), n_out, replace=False)
    return np.vstack([x[i_in], x[i_out]]), np.r_[np.zeros(n_in, bool), np.ones(n_out, bool)]


def make_data(cfg: Paper4Config, name: str, draw: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``draw`` of data set ``name`` (seeded by ``cfg.seed``, the name and the draw)."""
    spec = (S1_DATASETS if cfg.scenario == 1 else S2_DATASETS)[name]
    rng = np.random.default_rng([cfg.seed, cfg.scenario, sorted(S1_DATASETS | S2_DATASETS).index(name), draw])
    if name == "synthetic1":
        return synthetic(rng, spec["n_in"], spec["n_out"], 2)
    if name == "synthetic2":
        return synthetic(rng, spec["n_in"], spec["n_out"], 10)
    if name in ("adult1", "adult2"):
        x, pos = adult_matrix(cfg.adult_columns, cfg.adult_positive)
    else:
        x, pos = ionosphere_matrix()
    return subsample(rng, x, pos, spec["n_in"], spec["n_out"])


# ------------------------------------------------------------------------------------ scenario 1

@dataclass(frozen=True)
class S1Row:
    dataset: str
    draw: int
    epsilon: float
    n: int
    d: int
    count: int
    bound_kind: str
    s_nrs: float
    s_paper: float
    sigma: dict[str, float]


def scenario1_rows(cfg: Paper4Config, name: str, x: np.ndarray, draw: int) -> list[S1Row]:
    spec = S1_DATASETS[name]
    k, r = spec["k"], spec["r"]
    n, d = x.shape
    q = int(np.count_nonzero(subspace_degrees(x, r) < k))
    c = math.sqrt(2.0 * math.log(2.0 / cfg.delta))
    rows = []
    for eps in cfg.epsilons:
        nrs = SmoothSensitivityGaussian(epsilon=eps, delta=cfg.delta)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PaperModeWarning)   # labelled in every output instead
            paper = SmoothSensitivityGaussian(epsilon=eps, delta=cfg.delta, paper_mode=True)
        s_nrs, kind = smooth_bound(x, k, r, nrs.beta)
        s_paper, _ = smooth_bound(x, k, r, paper.beta)
        sig = {
            "global_lb": global_sensitivity(d, k, n, "lower") * c / eps,
            "global_ub": global_sensitivity(d, k, n, "upper") * c / eps,
            "smooth": nrs.sigma(s_nrs),
            "smooth_paper": paper.sigma(s_paper),
        }
        rows.append(S1Row(name, draw, eps, n, d, q, kind, s_nrs, s_paper, sig))
    return rows


def run_scenario1(cfg: Paper4Config, progress: Callable[[str], None] | None = None) -> list[S1Row]:
    rows: list[S1Row] = []
    for name in cfg.datasets:
        for draw in range(cfg.draws):
            try:
                x, _ = make_data(cfg, name, draw)
            except DataNotInstalled as e:
                cfg.skipped[name] = str(e)
                if progress:
                    progress("skip %s: %s" % (name, e))
                break
            t0 = time.perf_counter()
            rows += scenario1_rows(cfg, name, x, draw)
            if progress:
                progress("scenario 1 %s draw %d/%d: %.1f s" % (name, draw + 1, cfg.draws, time.perf_counter() - t0))
    return rows


def summarise1(rows: Sequence[S1Row]) -> dict[tuple[str, float], dict[str, float]]:
    out: dict[tuple[str, float], dict[str, float]] = {}
    keys = sorted({(r.dataset, r.epsilon) for r in rows}, key=lambda t: (t[0], t[1]))
    for key in keys:
        sel = [r for r in rows if (r.dataset, r.epsilon) == key]
        s = {m: float(np.mean([r.sigma[m] for r in sel])) for m in MECH_LABELS}
        s.update(count=float(np.mean([r.count for r in sel])), s_nrs=float(np.mean([r.s_nrs for r in sel])),
                 s_paper=float(np.mean([r.s_paper for r in sel])))
        out[key] = s
    return out


# ------------------------------------------------------------------------------------ scenario 2

@dataclass(frozen=True)
class S2Row:
    dataset: str
    draw: int
    h: int
    epsilon: float
    mode: str            # "dp" (epsilon-DP) or "paper" (2 epsilon-DP)
    precision: float
    recall: float
    n_true: int


def true_subspaces(name: str, x: np.ndarray, is_out: np.ndarray, k: int, r: float) -> np.ndarray:
    """Boolean per one-column subspace: does it contain outliers (Okada et al. 2015, experiments)?"""
    d = x.shape[1]
    if name == "synthetic2":
        t = np.zeros(d, bool)
        t[:2] = True
        return t
    return np.array([bool(np.any(subspace_degrees(x[:, [j]], r)[is_out] < k)) for j in range(d)])


def gumbel_top_h(rng: np.random.Generator, u: np.ndarray, coef: float, h: int, runs: int) -> np.ndarray:
    """``runs`` x ``h`` indices, each row h draws without replacement from softmax(coef u)."""
    g = coef * u[None, :] + rng.gumbel(size=(runs, u.size))
    idx: np.ndarray = np.argsort(-g, axis=1)[:, :h]
    return idx


def scenario2_rows(cfg: Paper4Config, name: str, x: np.ndarray, is_out: np.ndarray, draw: int,
                   rng: np.random.Generator) -> tuple[list[S2Row], np.ndarray, np.ndarray]:
    spec = S2_DATASETS[name]
    k, r = spec["k"], spec["r"]
    u = utilities(x, k, r)
    truth = true_subspaces(name, x, is_out, k, r)
    rows = []
    for h in cfg.hs:
        if h > u.size:
            continue
        for eps in cfg.epsilons:
            for mode in ("dp", "paper"):
                sel = gumbel_top_h(rng, u, coefficient(eps, h, mode == "paper"), h, cfg.runs)
                tp = truth[sel].sum(axis=1)
                prec = float(np.mean(tp / h))
                rec = float(np.mean(tp / truth.sum())) if truth.any() else math.nan
                rows.append(S2Row(name, draw, h, eps, mode, prec, rec, int(truth.sum())))
    return rows, u, truth


def run_scenario2(cfg: Paper4Config, progress: Callable[[str], None] | None = None
                  ) -> tuple[list[S2Row], dict[str, list[tuple[np.ndarray, np.ndarray]]]]:
    rows: list[S2Row] = []
    info: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    rng = np.random.default_rng([cfg.seed, 2, 99])
    for name in cfg.datasets:
        for draw in range(cfg.draws):
            try:
                x, is_out = make_data(cfg, name, draw)
            except DataNotInstalled as e:
                cfg.skipped[name] = str(e)
                if progress:
                    progress("skip %s: %s" % (name, e))
                break
            t0 = time.perf_counter()
            rr, u, truth = scenario2_rows(cfg, name, x, is_out, draw, rng)
            rows += rr
            info.setdefault(name, []).append((u, truth))
            if progress:
                progress("scenario 2 %s draw %d/%d: %.1f s" % (name, draw + 1, cfg.draws, time.perf_counter() - t0))
    return rows, info


def summarise2(rows: Sequence[S2Row]) -> dict[tuple[str, int, float, str], tuple[float, float]]:
    out = {}
    for key in sorted({(r.dataset, r.h, r.epsilon, r.mode) for r in rows}):
        sel = [r for r in rows if (r.dataset, r.h, r.epsilon, r.mode) == key]
        out[key] = (float(np.mean([r.precision for r in sel])), float(np.nanmean([r.recall for r in sel])
                                                                       if any(not math.isnan(r.recall) for r in sel)
                                                                       else math.nan))
    return out


# ---------------------------------------------------------------------------------------- output

def markdown1(cfg: Paper4Config, rows: Sequence[S1Row], elapsed_s: float | None = None) -> str:
    s = summarise1(rows)
    lines = ["# Paper 4, Scenario 1: noise of the DP outlier count (Okada et al. 2015, Figs. 3-4)", "",
             "delta = %g, %d data draw(s), seed %d. Standard deviation of the Gaussian noise, mean over draws."
             % (cfg.delta, cfg.draws, cfg.seed),
             "**`smooth_paper` is NOT differentially private** (paper calibration, beta = epsilon; docs/paper4.md); "
             "`global_lb` is the paper's baseline and a DP guarantee only for d = 1.", ""]
    for name in cfg.datasets:
        if name in cfg.skipped:
            lines += ["## %s: skipped (%s)" % (name, cfg.skipped[name]), ""]
            continue
        sub = [r for r in rows if r.dataset == name]
        if not sub:
            continue
        r0 = sub[0]
        spec = S1_DATASETS[name]
        lines += ["## %s (N = %d, d = %d, k = %d, r = %g; smooth bound: %s)" % (
            name, r0.n, r0.d, spec["k"], spec["r"], r0.bound_kind), "",
            "| ε | true count | S (NRS β) | σ smooth (DP) | σ global, GS upper (DP) | σ global, GS lower "
            "(paper baseline) | S (β = ε) | σ smooth, paper mode (**NOT DP**) | global_lb / smooth_paper |",
            "|---|---|---|---|---|---|---|---|---|"]
        for eps in cfg.epsilons:
            v = s[(name, eps)]
            lines.append("| %g | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f× |" % (
                eps, v["count"], v["s_nrs"], v["smooth"], v["global_ub"], v["global_lb"], v["s_paper"],
                v["smooth_paper"], v["global_lb"] / v["smooth_paper"]))
        lines.append("")
    if elapsed_s is not None:
        lines.append("Run time: %.1f s." % elapsed_s)
    return "\n".join(lines) + "\n"


def markdown2(cfg: Paper4Config, rows: Sequence[S2Row], info: dict[str, list[tuple[np.ndarray, np.ndarray]]],
              elapsed_s: float | None = None) -> str:
    s = summarise2(rows)
    lines = ["# Paper 4, Scenario 2: DP top-h subspaces (Okada et al. 2015, Figs. 5-7)", "",
             "One-column candidate subspaces; %d data draw(s) x %d selections per cell, seed %d. "
             "Cells are precision / recall." % (cfg.draws, cfg.runs, cfg.seed),
             "`DP`: exp(ε u / 2h) per round, **ε-DP overall**. `paper`: exp(ε u / h) as printed, "
             "**2ε-DP, NOT ε-DP** (Okada et al. 2015, Theorem 7 and Algorithm 3).", ""]
    for name in cfg.datasets:
        if name in cfg.skipped:
            lines += ["## %s: skipped (%s)" % (name, cfg.skipped[name]), ""]
            continue
        if name not in info:
            continue
        spec = S2_DATASETS[name]
        u0, t0 = info[name][0]
        lines += ["## %s (N = %d, d = %d, k = %d, r = %g)" % (name, spec["n_in"] + spec["n_out"], u0.size,
                                                            spec["k"], spec["r"]), "",
                  "True subspaces (draw 1): %s; mean number over draws %.1f of %d. Utilities u = count/7 "
                  "(draw 1): %s" % (
                      [int(j) + 1 for j in np.flatnonzero(t0)],
                      float(np.mean([t.sum() for _, t in info[name]])), u0.size,
                      " ".join("%.2f" % v for v in u0[:12]) + (" …" if u0.size > 12 else "")), ""]
        head = "| h | " + " | ".join("ε = %g DP" % e for e in cfg.epsilons) + " | " + \
               " | ".join("ε = %g paper (2ε-DP)" % e for e in cfg.epsilons) + " |"
        lines += [head, "|---|" + "---|" * (2 * len(cfg.epsilons))]
        for h in cfg.hs:
            if (name, h, cfg.epsilons[0], "dp") not in s:
                continue
            cells = ["%.2f / %.2f" % s[(name, h, e, m)] for m in ("dp", "paper") for e in cfg.epsilons]
            lines.append("| %d | %s |" % (h, " | ".join(cells)))
        lines.append("")
    if elapsed_s is not None:
        lines.append("Run time: %.1f s." % elapsed_s)
    return "\n".join(lines) + "\n"


def plot1(cfg: Paper4Config, rows: Sequence[S1Row], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = summarise1(rows)
    names = [n for n in cfg.datasets if any(r.dataset == n for r in rows)]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(5.5 * max(1, len(names)), 4.3), squeeze=False)
    styles = {"global_lb": "s-", "global_ub": "^-", "smooth": "o-", "smooth_paper": "x--"}
    for ax, name in zip(axes[0], names):
        for m, lab in MECH_LABELS.items():
            ax.plot(cfg.epsilons, [s[(name, e)][m] for e in cfg.epsilons], styles[m], label=lab)
        ax.plot(cfg.epsilons, [s[(name, e)]["count"] for e in cfg.epsilons], "k:", label="true count")
        ax.set_yscale("log")
        ax.set_xlabel("ε (δ = %g)" % cfg.delta)
        ax.set_ylabel("noise standard deviation")
        ax.set_title(name)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Paper 4, Scenario 1 (dashed: paper calibration, NOT differentially private)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot2(cfg: Paper4Config, rows: Sequence[S2Row], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = summarise2(rows)
    names = [n for n in cfg.datasets if any(r.dataset == n for r in rows)]
    fig, axes = plt.subplots(2, max(1, len(names)), figsize=(4.8 * max(1, len(names)), 7.0), squeeze=False,
                             sharey=True)
    for j, name in enumerate(names):
        for i, metric in enumerate(("precision", "recall")):
            ax = axes[i][j]
            for n_h, h in enumerate(cfg.hs):
                if (name, h, cfg.epsilons[0], "dp") not in s:
                    continue
                col = "C%d" % n_h
                ax.plot(cfg.epsilons, [s[(name, h, e, "dp")][i] for e in cfg.epsilons], "o-", color=col,
                        label="h = %d, ε-DP" % h)
                ax.plot(cfg.epsilons, [s[(name, h, e, "paper")][i] for e in cfg.epsilons], "x--", color=col,
                        label="h = %d, paper (2ε-DP, NOT ε-DP)" % h)
            ax.set_xscale("log", base=2)
            ax.set_title("%s: %s" % (name, metric))
            ax.set_xlabel("ε")
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.suptitle("Paper 4, Scenario 2: top-h subspaces (dashed: paper form, 2ε-DP, NOT ε-DP)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(cfg: Paper4Config, out_dir: str) -> int:
    """Run a scenario, write ``scenarioN.md`` and ``scenarioN.png`` into ``out_dir``, progress on stderr."""
    def say(line: str) -> None:
        print("paper4: " + line, file=sys.stderr, flush=True)

    os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    md = os.path.join(out_dir, "scenario%d.md" % cfg.scenario)
    png = os.path.join(out_dir, "scenario%d.png" % cfg.scenario)
    if cfg.scenario == 1:
        rows1 = run_scenario1(cfg, say)
        text = markdown1(cfg, rows1, time.perf_counter() - t0)
        if rows1:
            plot1(cfg, rows1, png)
    else:
        rows2, info = run_scenario2(cfg, say)
        text = markdown2(cfg, rows2, info, time.perf_counter() - t0)
        if rows2:
            plot2(cfg, rows2, png)
    with open(md, "w", encoding="utf-8") as f:
        f.write(text)
    say("wrote %s" % md)
    if os.path.exists(png):
        say("wrote %s" % png)
    say("done in %.1f s" % (time.perf_counter() - t0))
    return 0


__all__ = ["ADULT_COLUMNS", "MECH_LABELS", "Paper4Config", "S1Row", "S2Row", "gumbel_top_h", "main", "make_data",
           "markdown1", "markdown2", "run_scenario1", "run_scenario2", "summarise1", "summarise2",
           "true_subspaces"]
