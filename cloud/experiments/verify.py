"""Paper 1 then paper 2: the curator verifies the corrected candidate set with SP anomaly queries.

    cfg = VerifyConfig()                 # n = 20,000, separation 220, epsilon 0.5
    res = run_verify(cfg)
    write_outputs(cfg, res, "out/verify")

Step 1 (paper 1, in-process, as :func:`dpsense.cloud.experiments.paper1.run_window`): the
window is perturbed with the relaxed sensitivity at ``epsilon_ldp`` per column, the
analyst runs DBSCAN on the perturbed data (O'), and the correction protocol returns
the candidate set R.

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
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dpsense.cloud.correction.rules import run_protocol
from dpsense.cloud.datasets import paper1_synthetic
from dpsense.cloud.experiments.noise import discrete_laplace
from dpsense.cloud.experiments.paper1 import Paper1Config, _dbscan, reference
from dpsense.cloud.outliers.distance import BetaRAnomalies
from dpsense.cloud.privacy.identify import (
    DPAnomalyIdentification,
    SPAnomalyIdentification,
    ball_and_copies_many,
    batch_multiplicity,
    is_sensitive,
)


@dataclass(frozen=True)
class VerifyConfig:
    """Settings: the paper-1 window (small default n) and the SP query grid."""

    n: int = 20_000
    separation: float = 220.0
    epsilon_ldp: float = 0.5
    dbscan_eps: float = 12.0
    dbscan_min_samples: int = 12      # (12, 60) at n = 100,000, scaled with n as in tests/cloud/test_paper1_small.py
    epsilons: tuple[float, ...] = (0.1, 0.5, 1.0)
    ks: tuple[int, ...] = (1, 5)
    seed: int = 1

    def __post_init__(self) -> None:
        if not self.epsilons or any(not math.isfinite(e) or e <= 0 for e in self.epsilons):
            raise ValueError("epsilons must be finite numbers > 0")
        if not self.ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise ValueError("ks must be ints >= 1")
        if self.dbscan_min_samples < 2:
            raise ValueError("dbscan_min_samples must be >= 2 (beta = min_samples - 1 >= 1)")
        self.paper1()            # validates the rest

    def paper1(self) -> Paper1Config:
        # The percentile sensitivity and the 2017 rules keep the candidate set of docs/paper2.md.
        return Paper1Config(separations=(self.separation,), epsilons=(self.epsilon_ldp,), runs=1, n=self.n,
                            dbscan_eps=self.dbscan_eps, dbscan_min_samples=self.dbscan_min_samples,
                            seeds=(self.seed,), sensitivity="percentile")

    @property
    def beta(self) -> int:
        return self.dbscan_min_samples - 1

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


@dataclass
class VerifyResult:
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
    elapsed_s: float = 0.0


def _pr(mask: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    hit = int(np.count_nonzero(mask & truth))
    size = int(np.count_nonzero(mask))
    n_t = int(np.count_nonzero(truth))
    return (hit / size if size else math.nan), (hit / n_t if n_t else math.nan)


def candidate_set(cfg: VerifyConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The paper-1 step: ``(x, o, constructed, r_mask, |O'|)`` for one perturbed window."""
    p1 = cfg.paper1()
    data = paper1_synthetic(p1.n, cfg.separation, p1.shape, p1.outlier_percent / 100, seed=cfg.seed)
    hist = reference(p1, cfg.separation, cfg.seed)
    x_q = np.rint(data.x / p1.quantum).astype(np.int64)
    o = _dbscan(p1, data.x)
    rng = np.random.default_rng([cfg.seed, int(round(cfg.separation * 1000)), int(round(cfg.epsilon_ldp * 1e6)), 0])
    x_rel = x_q + discrete_laplace(rng, hist.rs_q / cfg.epsilon_ldp, x_q.shape)
    d_diff = (np.rint(np.linalg.norm(x_rel - hist.centre_q, axis=1))
              - np.rint(np.linalg.norm(x_q - hist.centre_q, axis=1)))
    dist = np.linalg.norm(x_rel - x_rel.mean(axis=0), axis=1)
    presumed = np.flatnonzero(_dbscan(p1, x_rel * p1.quantum))
    res = run_protocol(d_diff, dist, presumed, p1.correction(hist.w_o_q))
    r_mask = np.zeros(p1.n, dtype=bool)
    r_mask[res.r] = True
    return data.x, o, data.outlier, r_mask, int(presumed.size)


def run_verify(cfg: VerifyConfig) -> VerifyResult:
    t0 = time.perf_counter()
    x, o, true, r_mask, n_presumed = candidate_set(cfg)
    cand = np.flatnonzero(r_mask)
    # Reporting only: which rows of the raw window are (beta, r)-anomalies (KD-tree counts).
    anomalies = BetaRAnomalies(beta=cfg.beta, r=cfg.r).fit(x).outlier_mask_
    # The curator's answers use the exact pairwise counts of identify.py (ball includes the record).
    b, c = ball_and_copies_many(x, x[cand], cfg.r)
    m = batch_multiplicity(x[cand], cfg.r) if cand.size else 0
    m_lower = int(ball_and_copies_many(x[cand], x[cand], cfg.r)[0].max()) if cand.size else 0
    res = VerifyResult(n=x.shape[0], n_o=int(o.sum()), n_true=int(true.sum()), n_candidates=int(cand.size),
                       n_presumed=n_presumed, beta=cfg.beta, r=cfg.r, anomalies_raw=int(anomalies.sum()),
                       border=int(np.count_nonzero(anomalies & ~o)),
                       noise_not_anomaly=int(np.count_nonzero(o & ~anomalies)),
                       candidates_sensitive={k: int(sum(is_sensitive(int(v), cfg.beta, k) for v in b))
                                             for k in cfg.ks},
                       m=m, m_lower=m_lower)
    p_o, r_o = _pr(r_mask, o)
    p_t, r_t = _pr(r_mask, true)
    res.lines.append(Line("candidates R (paper 1)", math.nan, 0, int(cand.size), p_o, r_o, p_t, r_t,
                          0.0, 0.0, 0.0))
    exact = np.zeros(x.shape[0], dtype=bool)
    exact[cand[(b <= cfg.beta)]] = True
    p_o, r_o = _pr(exact, o)
    p_t, r_t = _pr(exact, true)
    res.lines.append(Line("R ∩ exact (beta, r)-anomalies (no privacy)", math.nan, 0, int(exact.sum()),
                          p_o, r_o, p_t, r_t, math.inf, math.inf, math.inf))
    rng = random.Random(cfg.seed)
    for eps in cfg.epsilons:
        for k in (0,) + tuple(cfg.ks):
            mech = (DPAnomalyIdentification(epsilon=eps, beta=cfg.beta, rng=rng) if k == 0 else
                    SPAnomalyIdentification(epsilon=eps, beta=cfg.beta, k=k, rng=rng))
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
    res.elapsed_s = time.perf_counter() - t0
    return res


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else "%.1f" % (100 * v)


def _eps(v: float) -> str:
    return "-" if v == 0 else ("∞ (no privacy)" if math.isinf(v) else "%g" % v)


def markdown(cfg: VerifyConfig, res: VerifyResult) -> str:
    lines = ["# Verifying the paper-1 candidate set with sensitively private anomaly queries", "",
             "Window: n = %d, separation %g, LDP epsilon %g per column, DBSCAN(eps = %g, min_samples = %d), "
             "seed %d; run time %.1f s." % (cfg.n, cfg.separation, cfg.epsilon_ldp, cfg.dbscan_eps,
                                            cfg.dbscan_min_samples, cfg.seed, res.elapsed_s), "",
             "|O| (DBSCAN on raw) = %d, constructed outliers = %d, |O'| = %d, |R| = %d."
             % (res.n_o, res.n_true, res.n_presumed, res.n_candidates),
             "(beta, r) = (%d, %g) = (min_samples - 1, eps): %d anomalies in the raw window, %d of them "
             "DBSCAN border points (not noise); DBSCAN noise points that are not anomalies: %d."
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
    lines += ["", "The DP-AIQ costs ε of ε-DP per record; SP-AIQ costs ε of (ε, k)-SP. 'shrink' = share of "
              "R removed. Recall is against all of O (or all constructed outliers), so it cannot exceed R's. "
              "Own-presence loss: max over outputs of |ln P(M(x)=o) - ln P(M(x - e_i)=o)| for each candidate i "
              "(Asif et al. 2019, Figs. 2-3); it exceeds ε for candidates that are not k-sensitive: that is what SP gives up.", ""]
    return "\n".join(lines)


def write_outputs(cfg: VerifyConfig, res: VerifyResult, out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, "results.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write(markdown(cfg, res))
    return [md]


def main(cfg: VerifyConfig, out_dir: str) -> int:
    res = run_verify(cfg)
    for path in write_outputs(cfg, res, out_dir):
        print("verify: wrote %s" % path, file=sys.stderr, flush=True)
    print("verify: done in %.1f s" % res.elapsed_s, file=sys.stderr, flush=True)
    return 0


def lines_by(res: VerifyResult, method: str, epsilon: float) -> Line:
    """The line of ``method`` (a prefix of its name) at ``epsilon``."""
    return next(ln for ln in res.lines if ln.method.endswith(method) and ln.epsilon == epsilon)


__all__: Sequence[str] = ["Line", "VerifyConfig", "VerifyResult", "candidate_set", "lines_by", "main",
                          "markdown", "run_verify", "write_outputs"]
