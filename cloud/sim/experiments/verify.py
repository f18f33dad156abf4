"""Paper 1 then paper 2: the curator verifies the corrected candidate set with SP anomaly queries.

    cfg = VerifyConfig()                 # n = 20,000, separation 220, epsilon 0.5, seeds 1-5
    results = run_seeds(cfg)
    write_outputs(cfg, results, "out/verify")

Step 1 (paper 1, in-process, as :func:`dpsense.cloud.sim.experiments.paper1.run_window`): the
window is perturbed with the relaxed sensitivity at ``epsilon_ldp`` per column, the
analyst runs DBSCAN on the perturbed data (O'), and the correction protocol returns
the candidate set R. ``candidates`` picks the protocol: ``bands`` (paper 1's headline
mode), ``paper`` (the never-worse rule) or ``reconstruction`` (the 2017 rules, the
candidate set of the first version of docs/paper2.md). DBSCAN's ``min_samples`` is
calibrated per separation on the reference data as in paper 1, unless given.

The ceiling (:func:`ceiling`): for a grid of (beta, r) the exact answers' precision
and recall on R, and what the SP mechanism gives in expectation (its per-record
keep probabilities are known in closed form). It says whether any single (beta, r)
query could reach a precision/recall target on this R at all.

Step 2 (paper 2): the curator, who holds the raw window, answers the (beta, r)-AIQ
for every candidate in R with the ``(epsilon, k)``-SP mechanism (Asif et al. 2019, Theorem 4.6) and keeps
the candidates answered 1. For contrast the same is done with the ``epsilon``-DP
mechanism (Asif et al. 2019, Theorem 4.4).

Matching DBSCAN: DBSCAN noise points are the points that are neither core (at least
``min_samples`` points within ``eps``, itself included) nor within ``eps`` of a core
point. With ``beta = min_samples - 1`` and ``r = eps`` the (beta, r)-anomalies are
exactly the non-core points, a superset of the noise points (it adds the border
points). That is the closest (beta, r) notion; the run reports how many border points
separate the two.

Budget: each answer costs ``epsilon`` of ``(epsilon, k)``-SP for the record it is
about. For the whole candidate set Asif et al. 2019, Claim 5 gives ``m * epsilon``, ``m`` the
largest number of candidates in any ball of radius r (bounded by the largest number
within 2r of a candidate); plain sequential composition would give ``|R| * epsilon``.
These SP costs are on top of, and not comparable with, the local DP of the readings.
"""
from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpsense.cloud.correction.bands import run_bands
from dpsense.cloud.correction.rules import needs_round, run_protocol
from dpsense.cloud.sim.datasets import SENSITIVITY_METHODS, paper1_synthetic
from dpsense.cloud.sim.experiments.noise import discrete_laplace
from dpsense.cloud.sim.experiments.paper1 import Paper1Config, _dbscan, reference
from dpsense.cloud.analyst.outliers.distance import BetaRAnomalies
from dpsense.cloud.privacy.identify import (
    DPAnomalyIdentification,
    SPAnomalyIdentification,
    ball_and_copies_many,
    batch_multiplicity,
    flip_probability,
    is_sensitive,
    mdd_sp,
)

CANDIDATES = ("bands", "paper", "reconstruction")
#: Issue 13's target for the SP verification at epsilon 0.5 (precision, recall, both vs O).
TARGET = (0.5, 0.90, 0.95)
#: The (beta, r) grid of the ceiling: r as multiples of DBSCAN's eps, beta as multiples of min_samples - 1.
CEILING_R = (1.0, 1.25, 1.5, 2.0)
CEILING_BETA = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)


@dataclass(frozen=True)
class VerifyConfig:
    """Settings: the paper-1 window (small default n) and the SP query grid."""

    n: int = 20_000
    separation: float = 220.0
    epsilon_ldp: float = 0.5
    dbscan_eps: float = 12.0
    dbscan_min_samples: int | None = None   # None: calibrated per separation on the reference (paper 1)
    candidates: str = "bands"
    sensitivity: str = "shorth"
    epsilons: tuple[float, ...] = (0.1, 0.5, 1.0)
    ks: tuple[int, ...] = (1, 5)
    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    ceiling: bool = True

    def __post_init__(self) -> None:
        if not self.epsilons or any(not math.isfinite(e) or e <= 0 for e in self.epsilons):
            raise ValueError("epsilons must be finite numbers > 0")
        if not self.ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise ValueError("ks must be ints >= 1")
        if self.dbscan_min_samples is not None and self.dbscan_min_samples < 2:
            raise ValueError("dbscan_min_samples must be >= 2 (beta = min_samples - 1 >= 1)")
        if self.candidates not in CANDIDATES:
            raise ValueError("candidates must be one of %s" % (CANDIDATES,))
        if self.sensitivity not in SENSITIVITY_METHODS:
            raise ValueError("sensitivity must be one of %s" % (SENSITIVITY_METHODS,))
        self.paper1()            # validates the rest (seeds included)

    def paper1(self) -> Paper1Config:
        return Paper1Config(separations=(self.separation,), epsilons=(self.epsilon_ldp,), runs=1, n=self.n,
                            dbscan_eps=self.dbscan_eps, dbscan_min_samples=self.dbscan_min_samples,
                            seeds=self.seeds, sensitivity=self.sensitivity)

    @property
    def r(self) -> float:
        return self.dbscan_eps


@dataclass(frozen=True)
class Line:
    """One verification method applied to R."""

    method: str
    epsilon: float              # nan for the unverified candidate set
    k: int                      # 0 for DP or none
    kept: int
    precision_o: float
    recall_o: float
    precision_true: float
    recall_true: float
    eps_per_record: float
    eps_claim5: float
    eps_sequential: float
    loss_median: float = math.nan   # effective loss of the kept candidates' own presence (Asif et al. 2019, Figs. 2-3)
    loss_max: float = math.nan


@dataclass(frozen=True)
class CeilingRow:
    """One (beta, r) query on R: exact answers, and the SP mechanism's expectation at one epsilon."""

    beta: int
    r: float
    precision_exact: float
    recall_exact: float
    epsilon: float
    k: int
    precision_expected: float
    recall_expected: float


@dataclass
class VerifyResult:
    seed: int
    n: int
    n_o: int
    n_true: int
    n_candidates: int
    n_presumed: int
    beta: int
    r: float
    anomalies_raw: int          # (beta, r)-anomalies of the raw window
    border: int                 # (beta, r)-anomalies that are not DBSCAN noise
    noise_not_anomaly: int      # must be 0
    candidates_sensitive: dict[int, int]
    m: int
    m_lower: int
    lines: list[Line] = field(default_factory=list)
    ceiling: list[CeilingRow] = field(default_factory=list)
    elapsed_s: float = 0.0


def _pr(mask: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    hit = int(np.count_nonzero(mask & truth))
    size = int(np.count_nonzero(mask))
    n_t = int(np.count_nonzero(truth))
    return (hit / size if size else math.nan), (hit / n_t if n_t else math.nan)


def candidate_set(cfg: VerifyConfig, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The paper-1 step: ``(x, o, constructed, r_mask, |O'|, min_samples)`` for one perturbed window.

    The window, its reference and its noise are those of paper 1's ``run_window`` for the
    same seed, separation and epsilon.
    """
    p1 = cfg.paper1()
    data = paper1_synthetic(p1.n, cfg.separation, p1.shape, p1.outlier_percent / 100, seed=seed)
    hist = reference(p1, cfg.separation, seed)
    x_q = np.rint(data.x / p1.quantum).astype(np.int64)
    o = _dbscan(p1, data.x, hist.min_samples)
    rng = np.random.default_rng([seed, int(round(cfg.separation * 1000)), int(round(cfg.epsilon_ldp * 1e6)), 0])
    scale_q = hist.rs_q / cfg.epsilon_ldp
    x_rel = x_q + discrete_laplace(rng, scale_q, x_q.shape)
    d_diff = (np.rint(np.linalg.norm(x_rel - hist.centre_q, axis=1))
              - np.rint(np.linalg.norm(x_q - hist.centre_q, axis=1)))
    dist = np.linalg.norm(x_rel - hist.centre_q, axis=1)
    presumed = np.flatnonzero(_dbscan(p1, x_rel * p1.quantum, hist.min_samples))
    if cfg.candidates == "bands":
        r_idx = run_bands(d_diff, dist, hist.band_width_q, hist.normal_radius_q).r
    elif cfg.candidates == "paper":
        if needs_round(int(presumed.size), p1.n, p1.outlier_percent / 100, p1.skip_margin):
            nw = p1.never_worse(hist.w_o_q, float(scale_q.max()), x_q.shape[1], hist.normal_radius_q)
            r_idx = run_protocol(d_diff, dist, presumed, nw).r
        else:
            r_idx = presumed
    else:
        dist_mean = np.linalg.norm(x_rel - x_rel.mean(axis=0), axis=1)
        r_idx = run_protocol(d_diff, dist_mean, presumed, p1.correction(hist.w_o_q)).r
    r_mask = np.zeros(p1.n, dtype=bool)
    r_mask[r_idx] = True
    return data.x, o, data.outlier, r_mask, int(presumed.size), hist.min_samples


def _keep_probability(b: np.ndarray, c: np.ndarray, beta: int, k: int, epsilon: float) -> np.ndarray:
    """P(the SP mechanism answers 1) per candidate: ``1 - e(Delta)`` for anomalies, ``e(Delta)`` otherwise."""
    out = np.empty(b.size)
    for i, (bi, ci) in enumerate(zip(b, c)):
        e = flip_probability(mdd_sp(int(bi), int(ci), beta, k), epsilon)
        out[i] = 1.0 - e if bi <= beta else e
    return out


def ceiling(x: np.ndarray, cand: np.ndarray, o: np.ndarray, min_samples: int, eps: float,
            epsilons: Sequence[float], ks: Sequence[int]) -> list[CeilingRow]:
    """Exact and expected precision / recall vs O of every (beta, r) query of the grid on R.

    The expected values are ratios of expectations: kept true positives ``sum p_i`` over
    ``i in R & O`` and kept candidates ``sum p_i`` over R, ``p_i`` the mechanism's
    exact probability of answering 1 (:func:`_keep_probability`).
    """
    rows: list[CeilingRow] = []
    n_o = int(o.sum())
    oc = o[cand]
    betas = sorted({max(1, int(round(f * (min_samples - 1)))) for f in CEILING_BETA})
    for fr in CEILING_R:
        r = fr * eps
        b, c = ball_and_copies_many(x, x[cand], r)
        for beta in betas:
            anom = b <= beta
            kept = int(anom.sum())
            tp = int(np.count_nonzero(anom & oc))
            for e in epsilons:
                for k in ks:
                    p = _keep_probability(b, c, beta, k, e)
                    ek, etp = float(p.sum()), float(p[oc].sum())
                    rows.append(CeilingRow(beta, r, tp / kept if kept else math.nan, tp / n_o if n_o else math.nan,
                                           e, k, etp / ek if ek else math.nan, etp / n_o if n_o else math.nan))
    return rows


def run_verify(cfg: VerifyConfig, seed: int | None = None) -> VerifyResult:
    """Verify R of one window (``seed``: default the first of ``cfg.seeds``)."""
    t0 = time.perf_counter()
    seed = cfg.seeds[0] if seed is None else seed
    x, o, true, r_mask, n_presumed, min_samples = candidate_set(cfg, seed)
    beta = min_samples - 1
    cand = np.flatnonzero(r_mask)
    # Reporting only: which rows of the raw window are (beta, r)-anomalies (KD-tree counts).
    anomalies = BetaRAnomalies(beta=beta, r=cfg.r).fit(x).outlier_mask_
    # The curator's answers use the exact pairwise counts of identify.py (ball includes the record).
    b, c = ball_and_copies_many(x, x[cand], cfg.r)
    m = batch_multiplicity(x[cand], cfg.r) if cand.size else 0
    m_lower = int(ball_and_copies_many(x[cand], x[cand], cfg.r)[0].max()) if cand.size else 0
    res = VerifyResult(seed=seed, n=x.shape[0], n_o=int(o.sum()), n_true=int(true.sum()),
                       n_candidates=int(cand.size), n_presumed=n_presumed, beta=beta, r=cfg.r,
                       anomalies_raw=int(anomalies.sum()),
                       border=int(np.count_nonzero(anomalies & ~o)),
                       noise_not_anomaly=int(np.count_nonzero(o & ~anomalies)),
                       candidates_sensitive={k: int(sum(is_sensitive(int(v), beta, k) for v in b))
                                             for k in cfg.ks},
                       m=m, m_lower=m_lower)
    p_o, r_o = _pr(r_mask, o)
    p_t, r_t = _pr(r_mask, true)
    res.lines.append(Line("candidates R (paper 1)", math.nan, 0, int(cand.size), p_o, r_o, p_t, r_t,
                          0.0, 0.0, 0.0))
    exact = np.zeros(x.shape[0], dtype=bool)
    exact[cand[(b <= beta)]] = True
    p_o, r_o = _pr(exact, o)
    p_t, r_t = _pr(exact, true)
    res.lines.append(Line("R ∩ exact (beta, r)-anomalies (no privacy)", math.nan, 0, int(exact.sum()),
                          p_o, r_o, p_t, r_t, math.inf, math.inf, math.inf))
    rng = random.Random(seed)
    for eps in cfg.epsilons:
        for k in (0,) + tuple(cfg.ks):
            mech = (DPAnomalyIdentification(epsilon=eps, beta=beta, rng=rng) if k == 0 else
                    SPAnomalyIdentification(epsilon=eps, beta=beta, k=k, rng=rng))
            bits = np.array([mech.randomise(int(bi), int(ci)) for bi, ci in zip(b, c)], dtype=bool)
            kept = np.zeros(x.shape[0], dtype=bool)
            kept[cand[bits]] = True
            p_o, r_o = _pr(kept, o)
            p_t, r_t = _pr(kept, true)
            loss = np.array([mech.record_loss(int(bi), int(ci)) for bi, ci in zip(b, c)])
            res.lines.append(Line("R, verified by %s" % ("DP-AIQ" if k == 0 else "SP-AIQ k=%d" % k), eps, k,
                                  int(kept.sum()), p_o, r_o, p_t, r_t, eps, m * eps, cand.size * eps,
                                  float(np.median(loss)) if loss.size else math.nan,
                                  float(loss.max()) if loss.size else math.nan))
    if cfg.ceiling and cand.size:
        res.ceiling = ceiling(x, cand, o, min_samples, cfg.r, (TARGET[0],), (1,))
    res.elapsed_s = time.perf_counter() - t0
    return res


def run_seeds(cfg: VerifyConfig, progress: Callable[[str], None] | None = None) -> list[VerifyResult]:
    """:func:`run_verify` for every seed of ``cfg``."""
    out = []
    for seed in cfg.seeds:
        out.append(run_verify(cfg, seed))
        if progress is not None:
            progress("seed %d done in %.1f s" % (seed, out[-1].elapsed_s))
    return out


def target_met(res: VerifyResult) -> bool | None:
    """Issue 13's target on one window: SP-AIQ k=1 at epsilon 0.5 reaches precision >= 90 %
    at recall >= 95 %, both against O (None when epsilon 0.5 or k = 1 was not run)."""
    eps, prec, rec = TARGET
    try:
        ln = lines_by(res, "SP-AIQ k=1", eps)
    except StopIteration:
        return None
    return ln.precision_o >= prec and ln.recall_o >= rec


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else "%.1f" % (100 * v)


def _eps(v: float) -> str:
    return "-" if v == 0 else ("∞ (no privacy)" if math.isinf(v) else "%g" % v)


def _seed_table(res: VerifyResult) -> list[str]:
    lines = ["|O| (DBSCAN on raw, min_samples %d) = %d, constructed outliers = %d, |O'| = %d, |R| = %d."
             % (res.beta + 1, res.n_o, res.n_true, res.n_presumed, res.n_candidates),
             "(beta, r) = (%d, %g) = (min_samples - 1, eps): %d anomalies in the raw window, %d of them "
             "not DBSCAN noise (border points); DBSCAN noise points that are not anomalies: %d."
             % (res.beta, res.r, res.anomalies_raw, res.border, res.noise_not_anomaly),
             "Candidates that are k-sensitive (ball count >= beta - k + 1): %s. Claim-5 multiplicity: "
             "%d <= m <= %d (most candidates within r of a candidate, resp. within 2r; the upper bound is "
             "charged)." % (", ".join("k=%d: %d" % (k, v) for k, v in res.candidates_sensitive.items()),
                            res.m_lower, res.m), "",
             "| method | ε | kept | shrink % | precision vs O % | recall vs O % | precision vs constructed % "
             "| recall vs constructed % | ε per record | ε for R (Claim 5, m·ε) | ε for R (sequential) "
             "| own-presence loss, median / max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ln in res.lines:
        shrink = 1 - ln.kept / res.n_candidates if res.n_candidates else math.nan
        loss = "-" if math.isnan(ln.loss_median) else "%.3g / %.3g" % (ln.loss_median, ln.loss_max)
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            ln.method, "-" if math.isnan(ln.epsilon) else "%g" % ln.epsilon, ln.kept, _pct(shrink),
            _pct(ln.precision_o), _pct(ln.recall_o), _pct(ln.precision_true), _pct(ln.recall_true),
            _eps(ln.eps_per_record), _eps(ln.eps_claim5), _eps(ln.eps_sequential), loss))
    return lines


def _spread(values: Sequence[float]) -> str:
    a = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if a.size == 0:
        return "-"
    if a.size == 1:
        return "%.1f" % (100 * a[0])
    return "%.1f (%.1f-%.1f)" % (100 * a.mean(), 100 * a.min(), 100 * a.max())


def _ceiling_lines(results: Sequence[VerifyResult]) -> list[str]:
    eps, prec, rec = TARGET
    lines = ["## Ceiling: every (beta, r) query of the grid on R", "",
             "r in %s x eps, beta in %s x (min_samples - 1). Per seed: the best precision vs O among the "
             "queries whose recall vs O is >= %d %%, and the best recall among those whose precision is "
             ">= %d %%; exact answers (no privacy) and the SP mechanism (k = 1, ε = %g) in expectation. "
             "'none' = no query of the grid qualifies." % (
                 ", ".join("%g" % f for f in CEILING_R), ", ".join("%g" % f for f in CEILING_BETA),
                 round(100 * rec), round(100 * prec), eps), "",
             "| seed | exact: best precision at recall >= %d %% | exact: best recall at precision >= %d %% "
             "| SP ε %g: best precision at recall >= %d %% | SP ε %g: best recall at precision >= %d %% |"
             % (round(100 * rec), round(100 * prec), eps, round(100 * rec), eps, round(100 * prec)),
             "|---:|---|---|---|---|"]

    def best(rows: list[tuple[float, float, CeilingRow]], by_precision: bool) -> str:
        if by_precision:
            ok = [t for t in rows if t[1] >= rec]
            if not ok:
                return "none"
            t = max(ok, key=lambda t: t[0])
        else:
            ok = [t for t in rows if t[0] >= prec]
            if not ok:
                return "none"
            t = max(ok, key=lambda t: t[1])
        return "%.1f / %.1f at (%d, %g)" % (100 * t[0], 100 * t[1], t[2].beta, t[2].r)

    for res in results:
        exact = [(c.precision_exact, c.recall_exact, c) for c in res.ceiling]
        mech = [(c.precision_expected, c.recall_expected, c) for c in res.ceiling]
        lines.append("| %d | %s | %s | %s | %s |" % (res.seed, best(exact, True), best(exact, False),
                                                    best(mech, True), best(mech, False)))
    lines += ["", "Cells: precision / recall vs O in %, at (beta, r).", ""]
    return lines


def markdown(cfg: VerifyConfig, results: Sequence[VerifyResult]) -> str:
    elapsed = sum(r.elapsed_s for r in results)
    lines = ["# Verifying the paper-1 candidate set with sensitively private anomaly queries", "",
             "Window: n = %d, separation %g, LDP epsilon %g per column (relaxed sensitivity `%s`), candidates "
             "from `%s`, DBSCAN eps %g with min_samples %s; seeds %s; run time %.1f s."
             % (cfg.n, cfg.separation, cfg.epsilon_ldp, cfg.sensitivity, cfg.candidates, cfg.dbscan_eps,
                cfg.dbscan_min_samples if cfg.dbscan_min_samples is not None else "calibrated per seed (%s)"
                % ", ".join(str(r.beta + 1) for r in results),
                ",".join(str(r.seed) for r in results), elapsed), ""]
    eps, prec, rec = TARGET
    met = [target_met(r) for r in results]
    if all(m is not None for m in met):
        lines += ["Target (SP-AIQ k=1 at ε %g: precision >= %d %% at recall >= %d %%, vs O): met on %d of %d seeds."
                  % (eps, round(100 * prec), round(100 * rec), sum(bool(m) for m in met), len(met)), ""]
    lines += ["## Over the seeds: mean (min-max)", "",
              "| method | ε | kept | precision vs O % | recall vs O % | precision vs constructed % "
              "| recall vs constructed % |", "|---|---:|---:|---:|---:|---:|---:|"]
    for i, ln in enumerate(results[0].lines):
        same = [r.lines[i] for r in results]
        kept = np.array([s.kept for s in same], dtype=float)
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            ln.method, "-" if math.isnan(ln.epsilon) else "%g" % ln.epsilon,
            "%.0f (%d-%d)" % (kept.mean(), kept.min(), kept.max()) if len(same) > 1 else "%d" % kept[0],
            _spread([s.precision_o for s in same]), _spread([s.recall_o for s in same]),
            _spread([s.precision_true for s in same]), _spread([s.recall_true for s in same])))
    lines += [""]
    if any(r.ceiling for r in results):
        lines += _ceiling_lines(results)
    lines += ["## Seed %d in detail" % results[0].seed, ""] + _seed_table(results[0])
    lines += ["", "The DP-AIQ costs ε of ε-DP per record; SP-AIQ costs ε of (ε, k)-SP. 'shrink' = share of "
              "R removed. Recall is against all of O (or all constructed outliers), so it cannot exceed R's. "
              "Own-presence loss: max over outputs of |ln P(M(x)=o) - ln P(M(x - e_i)=o)| for each candidate i "
              "(Asif et al. 2019, Figs. 2-3); it exceeds ε for candidates that are not k-sensitive: that is what SP gives up.", ""]
    return "\n".join(lines)


def write_outputs(cfg: VerifyConfig, results: Sequence[VerifyResult], out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, "results.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write(markdown(cfg, results))
    return [md]


def main(cfg: VerifyConfig, out_dir: str) -> int:
    def say(line: str) -> None:
        print("verify: " + line, file=sys.stderr, flush=True)

    results = run_seeds(cfg, say)
    for path in write_outputs(cfg, results, out_dir):
        say("wrote %s" % path)
    say("done in %.1f s" % sum(r.elapsed_s for r in results))
    return 0


def lines_by(res: VerifyResult, method: str, epsilon: float) -> Line:
    """The line of ``method`` (a prefix of its name) at ``epsilon``."""
    return next(ln for ln in res.lines if ln.method.endswith(method) and ln.epsilon == epsilon)


__all__: Sequence[str] = ["CANDIDATES", "CeilingRow", "Line", "TARGET", "VerifyConfig", "VerifyResult",
                          "candidate_set", "ceiling", "lines_by", "main", "markdown", "run_seeds", "run_verify",
                          "target_met", "write_outputs"]
