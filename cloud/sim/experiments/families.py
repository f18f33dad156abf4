"""Recall and subset per data family: the detector alone (O'), mode bands as deployed, and the default
(bands with the model-fit check of cloud/correction/fit.py).

    rows = run_families(FamiliesConfig(seeds=(7, 13, 21)))
    print(markdown(FamiliesConfig(), rows))

Each window follows the deployed path in-process (cloud/sim/experiments/dcs.py does the same
for paper 1): a reference data set of the family (seed + 1000) gives the profile (relaxed
sensitivity by the narrowest 90 % range, centre, DBSCAN min_samples as paper 1 calibrates it,
band width half the border the reference's outliers leave, rho when they leave none); the
window is perturbed with the boards' discrete Laplace noise; DBSCAN finds O'; the correction
server answers mode bands from ``d_diff + Z_A`` (epsilon_A 1, rho moved by the noise's
margin, cloud/correction/honest.py); the analyst's fit check decides whether R is used.

Seeds: ``TUNING_SEEDS`` (1-5) chose the fit thresholds; the tables report other seeds (``REPORT_SEEDS``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpsense.cloud.analyst.outliers.dbscan import DBSCANOutliers
from dpsense.cloud.correction.bands import run_bands, width_from_history
from dpsense.cloud.correction.fit import MAX_ADDED, MAX_SHORTFALL, Fit, model_fit
from dpsense.cloud.correction.mpc.secure import candidates as secure_candidates
from dpsense.cloud.correction.rules import CorrectionParams, needs_round, normal_radius
from dpsense.cloud.sim.datasets import relaxed_sensitivity
from dpsense.cloud.sim.experiments.noise import discrete_laplace
from dpsense.cloud.sim.experiments.paper1 import calibrate_min_samples, deployed_paper
from dpsense.cloud.sim.families import FAMILIES, family

TUNING_SEEDS = (1, 2, 3, 4, 5)
REPORT_SEEDS = (7, 13, 21)


@dataclass(frozen=True)
class FamiliesConfig:
    families: tuple[str, ...] = tuple(FAMILIES)
    seeds: tuple[int, ...] = REPORT_SEEDS
    epsilons: tuple[float, ...] = (0.5, 1.0)
    n: int = 5_000
    eps_a: float = 1.0
    alpha: float = 0.005
    outlier_share: float = 0.10
    quantum: float = 0.01
    dbscan_eps: float = 12.0
    max_shortfall: float = MAX_SHORTFALL
    max_added: float = MAX_ADDED

    def __post_init__(self) -> None:
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown or not self.families:
            raise ValueError("families must be some of %s, got %s" % (sorted(FAMILIES), unknown))
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError("seeds must be distinct ints >= 0")
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ValueError("epsilons must be finite numbers > 0")
        if self.n < 100:
            raise ValueError("n must be >= 100")
        if not (self.eps_a > 0 and 0 < self.alpha < 1 and 0 < self.outlier_share < 1):
            raise ValueError("eps_a must be > 0, alpha and outlier_share in (0, 1)")


@dataclass(frozen=True)
class Profile:
    rs_q: np.ndarray
    centre_q: np.ndarray
    min_samples: int
    rho_q: float
    band_q: float
    w_o_q: float = 0.0       # mode paper's outlier-layer width: the spread of the detected outliers' radii
    share: float = 0.10      # the outlier share the fit check expects: calibrated on the reference


@dataclass(frozen=True)
class Window:
    """One window through the deployed path: row positions of O' and of each mode's R (the server
    answering from honest-round noise), and the fit check of mode bands' R."""

    n: int
    presumed: np.ndarray
    r: dict[str, np.ndarray]
    fit: Fit


@dataclass(frozen=True)
class FamilyRow:
    family: str
    seed: int
    epsilon: float
    recall_o: float          # O', the detector alone
    subset_o: float
    recall_bands: float      # mode bands' R, always used
    subset_bands: float
    recall: float            # the default: R where the model fits, O' where not
    subset: float
    fits: bool
    dropped: float           # share of O' not in R
    size: int                # |R|, and the smallest |R| of a window that fits
    least: float
    added: float             # rows of R outside O', as a share of |O'|
    reason: str | None


def profile_of(cfg: FamiliesConfig, ref_x: np.ndarray, ref_outlier: np.ndarray,
               min_samples: int | None = None) -> Profile:
    """The profile the curator would provision from reference data, in quanta.

    The outlier share the fit check expects is the reference's (its known outliers, as paper 1's
    history has them), not a constant; ``cfg.outlier_share`` is the share the relaxed sensitivity
    leaves out (paper 1's 10 %). ``min_samples`` None: DBSCAN's as paper 1 calibrates it (every
    known outlier a non-core point, times 1.25)."""
    q = cfg.quantum
    rs_q = np.maximum(1, np.rint(relaxed_sensitivity(ref_x, 100 * cfg.outlier_share, "shorth") / q))
    centre = ref_x.mean(axis=0)
    m = calibrate_min_samples(ref_x, ref_outlier, cfg.dbscan_eps, 1.25, 1) if min_samples is None else min_samples
    rho = normal_radius(rs_q)
    band = width_from_history(np.linalg.norm(ref_x[ref_outlier] - centre, axis=1) / q, rho)
    o_ref = DBSCANOutliers(cfg.dbscan_eps, m, n_jobs=1).fit(ref_x).outlier_mask_
    radii = np.linalg.norm(ref_x[o_ref] - centre, axis=1) / q
    share = float(np.mean(ref_outlier))
    return Profile(rs_q=rs_q, centre_q=np.rint(centre / q), min_samples=m, rho_q=rho,
                   band_q=band if band > 0 else rho, w_o_q=float(np.ptp(radii)) if radii.size > 1 else 0.0,
                   share=min(0.5, max(share, 1.0 / len(ref_x))))


def _score(mask: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    return float((mask & truth).sum() / max(1, truth.sum())), float(mask.mean())


def deployed_window(cfg: FamiliesConfig, prof: Profile, x: np.ndarray, seed: int, eps: float,
                    modes: Sequence[str] = ("bands",)) -> Window:
    """Perturb ``x`` (data units) as the boards do, detect O' and answer each of ``modes`` (bands,
    secure, paper) as the correction server does from honest-round noise (epsilon_A ``cfg.eps_a``,
    thresholds moved by the noise's margin, cloud/correction/server.py); the fit check is mode bands'."""
    n, m = x.shape
    rng = np.random.default_rng([seed, int(round(eps * 1e6)), 25])
    x_q = np.rint(x / cfg.quantum).astype(np.int64)
    x_rel = x_q + discrete_laplace(rng, prof.rs_q / eps, x_q.shape)
    d_diff = (np.rint(np.linalg.norm(x_rel - prof.centre_q, axis=1))
              - np.rint(np.linalg.norm(x_q - prof.centre_q, axis=1)))
    dist = np.linalg.norm(x_rel - prof.centre_q, axis=1)
    presumed = np.flatnonzero(DBSCANOutliers(cfg.dbscan_eps, prof.min_samples, n_jobs=1)
                              .fit(x_rel * cfg.quantum).outlier_mask_)
    b = max(1, math.ceil(prof.rho_q)) / cfg.eps_a
    t = float(math.ceil(b * math.log(1.0 / cfg.alpha)))
    d = d_diff + discrete_laplace(rng, b, n)
    r: dict[str, np.ndarray] = {"bands": run_bands(d, dist, prof.band_q, prof.rho_q + t).r}
    if "secure" in modes:
        r["secure"] = secure_candidates(d, dist, prof.rho_q + t)
    if "paper" in modes:
        r["paper"] = _paper(cfg, prof, d, dist, presumed, float((prof.rs_q / eps).max()), m, b)
    fit = model_fit(n, presumed, r["bands"], prof.share, cfg.max_shortfall, cfg.max_added)
    return Window(n, presumed, r, fit)


def _paper(cfg: FamiliesConfig, prof: Profile, d: np.ndarray, dist: np.ndarray, presumed: np.ndarray,
           noise_scale: float, m: int, b: float) -> np.ndarray:
    """Mode paper as deployed: no round where the analyst skips one (|O'| within 5 % of the
    expected count, or below 10 rows), else the never-worse rules with the shifted thresholds."""
    if presumed.size < 10 or not needs_round(int(presumed.size), len(d), prof.share, 0.05):
        return presumed
    nw = CorrectionParams(w_o=prof.w_o_q, split="noise", layers="provable", noise_scale=noise_scale,
                          columns=m, alpha=cfg.alpha, normal_radius=prof.rho_q)
    t = float(math.ceil(b * math.log(1.0 / cfg.alpha)))
    t2 = float(math.ceil(b * math.log(2.0 / cfg.alpha)))
    return deployed_paper(d, dist, presumed, nw, t, t2)[0]


def run_window(cfg: FamiliesConfig, name: str, prof: Profile, x: np.ndarray, truth: np.ndarray, seed: int,
               eps: float) -> FamilyRow:
    w = deployed_window(cfg, prof, x, seed, eps)
    n, presumed, r, fit = w.n, w.presumed, w.r["bands"], w.fit
    masks = []
    for idx in (presumed, r, r if fit.fits else presumed):
        m = np.zeros(n, dtype=bool)
        m[idx] = True
        masks.append(_score(m, truth))
    (ro, so), (rb, sb), (rd, sd) = masks
    return FamilyRow(name, seed, eps, ro, so, rb, sb, rd, sd, fit.fits, fit.dropped, fit.size, fit.least, fit.added,
                     fit.reason)


def run_families(cfg: FamiliesConfig, progress: Callable[[str], None] | None = None) -> list[FamilyRow]:
    say = progress or (lambda line: None)
    rows = []
    for name in cfg.families:
        for seed in cfg.seeds:
            ref = family(name, cfg.n, seed + 1000, cfg.outlier_share)
            prof = profile_of(cfg, ref.x, ref.outlier)
            data = family(name, cfg.n, seed, cfg.outlier_share)
            for eps in cfg.epsilons:
                rows.append(run_window(cfg, name, prof, data.x, data.outlier, seed, eps))
                say("%s seed %d epsilon %g: %s" % (name, seed, eps, rows[-1]))
    return rows


def _range(values: Sequence[float]) -> str:
    lo, hi = 100 * min(values), 100 * max(values)
    return "%.1f" % lo if round(lo, 1) == round(hi, 1) else "%.1f-%.1f" % (lo, hi)


def markdown(cfg: FamiliesConfig, rows: Sequence[FamilyRow]) -> str:
    """Per family and epsilon: recall / subset (%) ranges over the seeds, and the windows kept on O'."""
    out = ["| family | epsilon | O' recall / subset | bands recall / subset | default recall / subset "
           "| windows on O' |", "|---|---:|---|---|---|---:|"]
    for name in cfg.families:
        for eps in cfg.epsilons:
            sel = [r for r in rows if r.family == name and r.epsilon == eps]
            if not sel:
                continue
            cells = ["%s / %s" % (_range([getattr(r, "recall" + s) for r in sel]),
                                  _range([getattr(r, "subset" + s) for r in sel])) for s in ("_o", "_bands", "")]
            out.append("| %s | %g | %s | %d of %d |" % (name, eps, " | ".join(cells),
                                                         sum(not r.fits for r in sel), len(sel)))
    return "\n".join(out)
