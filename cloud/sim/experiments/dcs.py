"""What noise on d_diff costs the correction: recall and subset at paper 1's settings.

    rows = run_dcs(Paper1Config(separations=(220.0, 400.0), seeds=(1, 2, 3)), eps_cs=(1.0, 0.5))
    print(markdown(rows))

Two noises act on a record's d_diff (docs/privacy.md):

* the correction server's, towards the analyst (cloud/correction/honest.py): every answer is
  computed from ``d_diff + Z_A``, Z_A discrete Laplace of scale ``ceil(rho) / epsilon_A``, and
  the never-worse thresholds move by the noise's margin (alpha per row);
* the board's optional ``epsilon_cs`` (shared_protocol/mechanism.py), towards the correction
  server: ``d_diff + Z_cs``, Z_cs of scale ``cs_delta / epsilon_cs``. The correction server's
  rules do not know it; what that costs is what this table shows.

Each window is paper 1's (Böhler et al. 2017, Sect. 7; cloud/sim/experiments/paper1.py): the same
data, reference, relaxed sensitivity, DBSCAN and centre; only d_diff changes between the
variants, so their differences are the noise's cost alone. The server's side runs the same
functions as ``CorrectionRounds`` (rules.noise_split, rules.false_negatives with the shifted
radius, bands.run_bands with the shifted radius).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dpsense.cloud.correction.bands import run_bands
from dpsense.cloud.correction.margin import margin
from dpsense.cloud.correction.rules import (
    false_negatives,
    needs_round,
    noise_split,
    noise_threshold,
    reduce_rows,
)
from dpsense.cloud.sim.datasets import paper1_synthetic
from dpsense.cloud.sim.experiments.noise import discrete_laplace
from dpsense.cloud.sim.experiments.paper1 import History, Paper1Config, _dbscan, _score, reference
from dpsense.protocol.distance import isqrt


@dataclass(frozen=True)
class Variant:
    """``eps_a`` None: the exact d_diff (the server before honest rounds). ``aware``: the
    server's thresholds move by the margin of both noises (its ``board_noise_scale``,
    cloud/correction/margin.py), not of its own alone."""

    eps_a: float | None
    eps_cs: float | None
    aware: bool = False

    @property
    def name(self) -> str:
        if self.eps_a is None:
            return "exact d_diff (before)"
        return ("epsilon_A %g" % self.eps_a + (", epsilon_cs %g" % self.eps_cs if self.eps_cs else "")
                + (", rules aware" if self.aware and self.eps_cs else ""))


@dataclass(frozen=True)
class DcsRow:
    separation: float
    epsilon: float
    seed: int
    variant: str
    mode: str
    recall: float
    subset: float


def cs_delta(rs_q: np.ndarray) -> int:
    """The board's bound (shared_protocol/mechanism.py) for relaxed sensitivities ``rs_q``."""
    r2 = isqrt(int(sum(int(round(float(r))) ** 2 for r in rs_q)))
    return r2 + 1 + (r2 + 2) // 2


def run_window(cfg: Paper1Config, hist: History, x_q: np.ndarray, truth: np.ndarray, sep: float, eps: float,
               seed: int, variants: Sequence[Variant]) -> list[DcsRow]:
    n, m = x_q.shape
    rng = np.random.default_rng([seed, int(round(sep * 1000)), int(round(eps * 1e6)), 7])
    scale_q = hist.rs_q / eps
    x_rel = x_q + discrete_laplace(rng, scale_q, x_q.shape)
    d_exact = (np.rint(np.linalg.norm(x_rel - hist.centre_q, axis=1))
               - np.rint(np.linalg.norm(x_q - hist.centre_q, axis=1)))
    dist = np.linalg.norm(x_rel - hist.centre_q, axis=1)
    presumed = np.flatnonzero(_dbscan(cfg, x_rel * cfg.quantum, hist.min_samples))
    go = needs_round(int(presumed.size), n, cfg.outlier_percent / 100, cfg.skip_margin)
    rho = hist.normal_radius_q
    nw = cfg.never_worse(hist.w_o_q, float(scale_q.max()), m, rho)
    rows = []
    for v in variants:
        d = d_exact.copy()
        bc = cs_delta(hist.rs_q) / v.eps_cs if v.eps_cs else 0.0
        if bc:
            d = d + discrete_laplace(rng, bc, n)
        t = t2 = 0.0
        if v.eps_a is not None:
            b = max(1, math.ceil(rho)) / v.eps_a
            d = d + discrete_laplace(rng, b, n)
            seen = bc if v.aware else 0.0
            t, t2 = margin(b, seen, cfg.alpha), margin(b, seen, cfg.alpha / 2)
        bands = run_bands(d, dist, hist.band_width_q, rho + t).r
        if go:
            tau = (noise_threshold(nw.noise_scale, m, cfg.alpha / 2) + t2 if v.eps_a is not None
                   else nw.tau())
            split = noise_split(d, presumed, tau)
            red = reduce_rows(dist, presumed, split.d_tp, nw.w_o)
            fn = false_negatives(d, presumed, red, split, replace(nw, normal_radius=rho + t))
            paper = np.union1d(np.union1d(split.tp, fn.l1), np.union1d(fn.l2, fn.l3))
        else:
            paper = presumed
        for mode, r in (("bands", bands), ("paper", paper)):
            mask = np.zeros(n, dtype=bool)
            mask[r] = True
            rec, _ = _score(mask, truth)
            rows.append(DcsRow(sep, eps, seed, v.name, mode, rec, float(mask.mean())))
    return rows


def run_dcs(cfg: Paper1Config, eps_a: float = 1.0, eps_cs: Sequence[float] = (1.0,),
            progress: Callable[[str], None] | None = None, aware: Sequence[float] = ()) -> list[DcsRow]:
    """``eps_cs``: board epsilons the server's rules ignore; ``aware``: those its rules know."""
    say = progress or (lambda line: None)
    variants = ([Variant(None, None), Variant(eps_a, None)] + [Variant(eps_a, e) for e in eps_cs]
                + [Variant(eps_a, e, True) for e in aware])
    rows: list[DcsRow] = []
    for sep in cfg.separations:
        for seed in cfg.seeds:
            data = paper1_synthetic(cfg.n, sep, cfg.shape, cfg.outlier_percent / 100, seed=seed)
            hist = reference(cfg, sep, seed)
            x_q = np.rint(data.x / cfg.quantum).astype(np.int64)
            for eps in cfg.epsilons:
                rows.extend(run_window(cfg, hist, x_q, data.outlier, sep, eps, seed, variants))
                say("separation %g seed %d epsilon %g done (rho %.1f quanta, cs_delta %d)"
                    % (sep, seed, eps, hist.normal_radius_q, cs_delta(hist.rs_q)))
    return rows


def markdown(rows: Sequence[DcsRow]) -> str:
    """Mean recall and subset (%) per separation, epsilon, variant and mode, over the seeds."""
    keys: list[tuple[float, float, str]] = []
    for r in rows:
        k = (r.separation, r.epsilon, r.variant)
        if k not in keys:
            keys.append(k)
    out = ["| separation | epsilon | d_diff | bands recall % | bands subset % | paper recall % | paper subset % |",
           "|---:|---:|---|---:|---:|---:|---:|"]
    for sep, eps, var in keys:
        cell = []
        for mode in ("bands", "paper"):
            sel = [r for r in rows if (r.separation, r.epsilon, r.variant, r.mode) == (sep, eps, var, mode)]
            cell += ["%.1f" % (100 * np.mean([r.recall for r in sel])),
                     "%.1f" % (100 * np.mean([r.subset for r in sel]))]
        out.append("| %g | %g | %s | %s |" % (sep, eps, var, " | ".join(cell)))
    return "\n".join(out)
