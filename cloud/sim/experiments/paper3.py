"""Paper 3 (Jiang et al. 2013) on UCI Adult: DP-PCA error vs LAP/EXP, DP-LDA accuracy and AUC (the paper's experiments).

    cfg = Paper3Config(trials=1, epsilons=(0.5, 1.5), ks=(1, 5))
    pca_rows, lda_rows, info = run_paper3(cfg)
    write_outputs(cfg, pca_rows, lda_rows, info, "out/paper3", elapsed_s=1.0)

Encoding (:func:`adult_matrix`): the numerics age, education-num, capital-gain,
capital-loss, hours-per-week with public bounds (the UCI value ranges), then one-hot
workclass (the 8 UCI levels, "Never-worked" has no row after dropping '?'),
marital-status 7, relationship 6, race 5, sex 2, and for DP-PCA income 2: p = 35, the
paper's count. DP-LDA uses income as the label and the other 33 columns as features.

DP-PCA error: ``||X_pub - X||_F^2 / n`` in [0, 1] units after post-processing (numerics
clipped, categoricals argmaxed), for non-private PCA, DP-PCA, LAP and EXP; LAP and EXP
do not depend on k. DP-LDA: 2/3 of the rows (random per trial) are the private training
data, the rest the test set; LDA and an entropy decision tree (the C4.5 stand-in) are
trained on the synthetic records. The noise comes from numpy generators (fast float
samplers; experiments only, see :mod:`dpsense.cloud.privacy.publishing`).
"""
from __future__ import annotations

import csv
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from dpsense.cloud.privacy.lda import dp_lda_synthesise
from dpsense.cloud.privacy.publishing import (
    PCARelease,
    Schema,
    dp_pca_publish,
    exponential_publish,
    laplace_publish,
    lda_sensitivity,
)

NUMERIC = (("age", 17.0, 90.0), ("education-num", 1.0, 16.0), ("capital-gain", 0.0, 99999.0),
           ("capital-loss", 0.0, 4356.0), ("hours-per-week", 1.0, 99.0))
CATEGORICAL = (
    ("workclass", ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                   "Without-pay", "Never-worked")),
    ("marital-status", ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                        "Married-spouse-absent", "Married-AF-spouse")),
    ("relationship", ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried")),
    ("race", ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black")),
    ("sex", ("Female", "Male")),
)
INCOME = ("income", ("<=50K", ">50K"))


@dataclass(frozen=True)
class Paper3Config:
    """Settings; defaults are the fast run (about a minute), see ``--full`` for the paper's sizes."""

    epsilons: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 1.25, 1.5)
    ks: tuple[int, ...] = tuple(range(1, 11))
    trials: int = 3
    n: int | None = None                 # rows of Adult to use (None = all 45,222)
    lda_synthetic: int | None = 5000     # synthetic records per DP-LDA run (None = as many as training rows)
    exp_grid: int = 101
    seed: int = 1

    def __post_init__(self) -> None:
        if not self.epsilons or any(not e > 0 for e in self.epsilons):
            raise ValueError("epsilons must be > 0")
        if not self.ks or any(not 1 <= k <= 35 for k in self.ks):
            raise ValueError("k must be in 1..35")
        if self.trials < 1:
            raise ValueError("trials must be >= 1")
        if self.n is not None and self.n < 100:
            raise ValueError("n must be >= 100")
        if self.lda_synthetic is not None and self.lda_synthetic < 10:
            raise ValueError("lda_synthetic must be >= 10")
        if self.exp_grid < 2:
            raise ValueError("exp_grid must be >= 2")


def adult_matrix(rows: Sequence[Mapping[str, str | float]], with_income: bool = True) -> tuple[np.ndarray, np.ndarray, Schema]:
    """``(x, y, schema)``: the encoded Adult matrix, the label (income >50K) and its public schema."""
    cats = CATEGORICAL + ((INCOME,) if with_income else ())
    cols = [np.array([float(r[name]) for r in rows]) for name, _, _ in NUMERIC]
    for name, levels in cats:
        index = {v: i for i, v in enumerate(levels)}
        codes = np.array([index[str(r[name])] for r in rows])
        cols.extend(np.eye(len(levels))[codes].T)
    x = np.column_stack(cols)
    y = np.array([1 if r["income"] == ">50K" else 0 for r in rows])
    schema = Schema(bounds=tuple((lo, hi) for _, lo, hi in NUMERIC), levels=tuple(len(v) for _, v in cats))
    return x, y, schema


@dataclass(frozen=True)
class PCARow:
    trial: int
    epsilon: float
    k: int
    method: str          # pca, dp-pca, lap, exp
    error: float         # ||X_pub - X||_F^2 / n in [0, 1] units
    negative_eigenvalues: int = 0
    error_numeric: float = float("nan")       # the part of ``error`` on the p1 numeric columns
    limit: float = float("nan")               # DP-PCA only: the same release with the data left out of Y


@dataclass(frozen=True)
class LDARow:
    trial: int
    epsilon: float       # nan for the non-private rows
    method: str          # original (BA), majority (LA), dp-lda
    classifier: str      # lda, tree
    accuracy: float
    auc: float
    best_accuracy: float = float("nan")   # the best accuracy of the same scores over all thresholds (test labels: an upper bound)
    root: str = ""                        # tree: the feature of the root split
    largest_leaf: float = float("nan")    # tree: share of the test rows in its most populated leaf


def _pca_error(z: np.ndarray, k: int) -> np.ndarray:
    mu = z.mean(axis=0)
    w, v = np.linalg.eigh(np.cov(z.T, bias=True))
    u = v[:, np.argsort(w)[::-1][:k]]
    return (z - mu) @ u @ u.T + mu


def run_pca(cfg: Paper3Config, x: np.ndarray, schema: Schema,
            say: Callable[[str], None]) -> list[PCARow]:
    z = schema.encode(x)
    n = len(z)
    rows: list[PCARow] = []

    def err(out: np.ndarray) -> float:
        return float(np.sum((out - z) ** 2) / n)

    def err_num(out: np.ndarray) -> float:
        return float(np.sum((out[:, :schema.p1] - z[:, :schema.p1]) ** 2) / n)

    for k in cfg.ks:
        rows.append(PCARow(0, float("nan"), k, "pca", err(schema.recover(_pca_error(z, k)))))
    for t in range(cfg.trials):
        for e in cfg.epsilons:
            rng = np.random.default_rng([cfg.seed, t, int(round(e * 1000))])
            for k in cfg.ks:
                rel = dp_pca_publish(x, schema=schema, epsilon=e, k=k, noise=rng)
                rows.append(PCARow(t, e, k, "dp-pca", err(rel.normalised), rel.negative_eigenvalues,
                                   err_num(rel.normalised), err(_data_free(rel, schema, e, n, [cfg.seed, t, k]))))
            _, lap = laplace_publish(x, schema=schema, epsilon=e, noise=rng)
            _, ex = exponential_publish(x, schema=schema, epsilon=e, grid=cfg.exp_grid, noise=rng)
            for k in cfg.ks:
                rows.append(PCARow(t, e, k, "lap", err(lap), error_numeric=err_num(lap)))
                rows.append(PCARow(t, e, k, "exp", err(ex), error_numeric=err_num(ex)))
            say("dp-pca trial %d/%d epsilon %g done" % (t + 1, cfg.trials, e))
    return rows


def _data_free(rel: PCARelease, schema: Schema, epsilon: float, n: int, seed: list[int]) -> np.ndarray:
    """DP-PCA's release with Y's data part set to zero: ``mu + Lap(2t/epsilon) U_k^T``, post-processed.

    It keeps what DP-PCA learns from the moments (noisy mean and components) and drops
    every record's own projection; where its error equals DP-PCA's, the released rows
    carry no information about their records beyond the moments.
    """
    k = rel.components.shape[1]
    b = 2 * math.sqrt(k * schema.record_l2_squared()) / epsilon
    noise = np.random.default_rng(seed + [int(round(epsilon * 1000)), 1]).laplace(0.0, b, size=(n, k))
    return schema.recover(noise @ rel.components.T + rel.mean)


def _best_accuracy(scores: np.ndarray, y: np.ndarray) -> float:
    """Largest accuracy of ``scores > c`` over every threshold c (c = max: all negative)."""
    order = np.argsort(-scores, kind="stable")
    ys = y[order]
    # after predicting the top j positive: correct = positives among them + negatives below
    tp = np.concatenate([[0], np.cumsum(ys)])
    neg_below = (len(ys) - int(ys.sum())) - (np.arange(len(ys) + 1) - tp)
    correct = tp + neg_below
    # only cut between distinct scores
    s = scores[order]
    ok = np.concatenate([[True], s[1:] != s[:-1], [True]])
    return float(correct[ok].max() / len(ys))


def _fit_score(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, yte: np.ndarray,
               seed: int, names: Sequence[str] = ()) -> dict[str, tuple[float, float, float, str, float]]:
    """Per classifier ``(accuracy, AUC, best accuracy over thresholds, root feature, largest leaf share)``."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.metrics import roc_auc_score
    from sklearn.tree import DecisionTreeClassifier
    out = {}
    if len(np.unique(ytr)) < 2:
        maj = float(np.mean(yte == ytr[0]))
        return {"lda": (maj, 0.5, maj, "", float("nan")), "tree": (maj, 0.5, maj, "", float("nan"))}
    models = {"lda": LinearDiscriminantAnalysis(solver="lsqr", shrinkage=1e-6),
              "tree": DecisionTreeClassifier(criterion="entropy", min_samples_leaf=20, random_state=seed)}
    for name, m in models.items():
        m.fit(xtr, ytr)
        acc = float(np.mean(m.predict(xte) == yte))
        score = m.predict_proba(xte)[:, 1]
        auc = float(roc_auc_score(yte, score))
        root, leaf = "", float("nan")
        if name == "tree":
            f = int(m.tree_.feature[0])
            root = (names[f] if f < len(names) else "f%d" % f) if f >= 0 else "(leaf)"
            leaf = float(np.bincount(m.apply(xte)).max() / len(yte))
        out[name] = (acc, auc, _best_accuracy(score, yte), root, leaf)
    return out


def feature_names() -> list[str]:
    """Column names of the DP-LDA features (numerics, then ``group=level`` dummies)."""
    names = [name for name, _, _ in NUMERIC]
    for group, levels in CATEGORICAL:
        names += ["%s=%s" % (group, v) for v in levels]
    return names


def run_lda(cfg: Paper3Config, x: np.ndarray, y: np.ndarray, schema: Schema,
            say: Callable[[str], None]) -> list[LDARow]:
    rows: list[LDARow] = []
    n = len(x)
    for t in range(cfg.trials):
        perm = np.random.default_rng([cfg.seed, 99, t]).permutation(n)
        tr, te = perm[: 2 * n // 3], perm[2 * n // 3:]
        ztr, zte = schema.encode(x[tr]), schema.encode(x[te])
        names = feature_names()
        for clf, (acc, auc, best, root, leaf) in _fit_score(ztr, y[tr], zte, y[te], cfg.seed, names).items():
            rows.append(LDARow(t, float("nan"), "original", clf, acc, auc, best, root, leaf))
        maj = int(np.mean(y[tr]) >= 0.5)
        for clf in ("lda", "tree"):
            rows.append(LDARow(t, float("nan"), "majority", clf, float(np.mean(y[te] == maj)), 0.5))
        for e in cfg.epsilons:
            rng = np.random.default_rng([cfg.seed, 7, t, int(round(e * 1000))])
            rel = dp_lda_synthesise(x[tr], y[tr], schema=schema, epsilon=e, n_synthetic=cfg.lda_synthetic,
                                    noise=rng)
            for clf, (acc, auc, best, root, leaf) in _fit_score(rel.normalised, rel.labels, zte, y[te], cfg.seed,
                                                                names).items():
                rows.append(LDARow(t, e, "dp-lda", clf, acc, auc, best, root, leaf))
            say("dp-lda trial %d/%d epsilon %g done" % (t + 1, cfg.trials, e))
    return rows


class AdultInfo(TypedDict):
    """What :func:`run_paper3` reports about the data: sizes, positives, covariance energy."""

    n: int
    p: int
    p_lda: int
    positives: int
    energy_top10: float
    lda_signal: float               # ||class-1 mean - class-0 mean|| of the encoded features ([0, 1] units)
    lda_signal_median: float        # median |difference| over the features
    lda_noise: dict[float, float]   # per epsilon: sd of the Laplace noise on one coordinate of that difference


def run_paper3(cfg: Paper3Config, progress: Callable[[str], None] | None = None,
               rows: Sequence[Mapping[str, str | float]] | None = None) -> tuple[list[PCARow], list[LDARow], AdultInfo]:
    """Both experiments; ``rows`` defaults to :func:`dpsense.cloud.sim.datasets.load_adult`."""
    say = progress or (lambda s: None)
    if rows is None:
        from dpsense.cloud.sim.datasets import load_adult
        rows = load_adult()
    if cfg.n is not None and cfg.n < len(rows):
        idx = np.random.default_rng([cfg.seed, 5]).choice(len(rows), cfg.n, replace=False)
        rows = [rows[i] for i in sorted(idx)]
    x, y, schema = adult_matrix(rows, with_income=True)
    say("Adult: %d rows, p = %d (%d numeric, %d categorical)" % (len(x), schema.p, schema.p1, schema.p2))
    pca_rows = run_pca(cfg, x, schema, say)
    xl, yl, schema_l = adult_matrix(rows, with_income=False)
    lda_rows = run_lda(cfg, xl, yl, schema_l, say)
    z = schema.encode(x)
    w = np.sort(np.linalg.eigvalsh(np.cov(z.T, bias=True)))[::-1]
    zl = schema_l.encode(xl)
    diff = np.abs(zl[yl == 1].mean(axis=0) - zl[yl == 0].mean(axis=0))
    info = AdultInfo(n=len(x), p=schema.p, p_lda=schema_l.p, positives=int(y.sum()),
                     energy_top10=float(w[:10].sum() / w.sum()), lda_signal=float(np.linalg.norm(diff)),
                     lda_signal_median=float(np.median(diff)),
                     lda_noise={e: lda_mean_noise(schema_l, len(xl) * 2 // 3, float(yl.mean()), e) for e in cfg.epsilons})
    return pca_rows, lda_rows, info


def lda_mean_noise(schema: Schema, n_train: int, positive_share: float, epsilon: float,
                   count_share: float = 0.05) -> float:
    """Standard deviation of DP-LDA's noise on one coordinate of (class-1 mean - class-0 mean).

    Each class sum gets ``Lap(s_L / ((1 - count_share) epsilon))`` per entry (sd ``sqrt(2)`` times
    the scale); dividing by the class sizes ``n1``, ``n0`` and subtracting adds the variances.
    """
    n1 = positive_share * n_train
    n0 = n_train - n1
    scale = lda_sensitivity(schema) / ((1 - count_share) * epsilon)
    return float(math.sqrt(2) * scale * math.sqrt(1 / n1 ** 2 + 1 / n0 ** 2))


def _ms(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def pca_summary(rows: Sequence[PCARow]) -> dict[tuple[str, float, int], tuple[float, float]]:
    """Mean and sd of the error per (method, epsilon, k); PCA has epsilon nan -> key epsilon 0."""
    groups: dict[tuple[str, float, int], list[float]] = {}
    for r in rows:
        key = (r.method, 0.0 if r.method == "pca" else r.epsilon, r.k)
        groups.setdefault(key, []).append(r.error)
    return {key: _ms(v) for key, v in groups.items()}


def lda_summary(rows: Sequence[LDARow]) -> dict[tuple[str, str, float], dict[str, tuple[float, float]]]:
    groups: dict[tuple[str, str, float], list[LDARow]] = {}
    for r in rows:
        key = (r.method, r.classifier, 0.0 if r.method != "dp-lda" else r.epsilon)
        groups.setdefault(key, []).append(r)
    return {key: {"accuracy": _ms([r.accuracy for r in v]), "auc": _ms([r.auc for r in v])}
            for key, v in groups.items()}


def markdown(cfg: Paper3Config, pca_rows: Sequence[PCARow], lda_rows: Sequence[LDARow],
             info: AdultInfo, elapsed_s: float | None = None) -> str:
    ps = pca_summary(pca_rows)
    ls = lda_summary(lda_rows)
    out = ["# Paper 3 on UCI Adult: DP-PCA and DP-LDA (Jiang et al. 2013)", "",
           "n = %s rows, p = %s encoded columns for DP-PCA (%s for DP-LDA, income is the label); "
           "%d trial(s); noise from numpy generators (experiment mode)."
           % (info["n"], info["p"], info["p_lda"], cfg.trials), ""]
    if elapsed_s is not None:
        out += ["Run time %.0f s." % elapsed_s, ""]
    out += ["## DP-PCA: error ||X_pub - X||_F^2 / n ([0, 1] units, after clipping and argmax)", "",
            "LAP and EXP do not depend on k. Divide by p = %s for the per-entry MSE. The top 10 "
            "eigenvalues of the (non-private) covariance carry %.1f %% of its trace."
            % (info["p"], 100 * info["energy_top10"]), ""]
    head = "| epsilon | method | " + " | ".join("k=%d" % k for k in cfg.ks) + " |"
    out += [head, "|" + "---|" * (len(cfg.ks) + 2)]
    out.append("| - | PCA (no privacy) | " + " | ".join("%.3f" % ps[("pca", 0.0, k)][0] for k in cfg.ks) + " |")
    for e in cfg.epsilons:
        for m, label in (("dp-pca", "DP-PCA"), ("lap", "LAP"), ("exp", "EXP")):
            cells = []
            for k in cfg.ks:
                mean, sd = ps[(m, e, k)]
                cells.append("%.2f" % mean if m != "dp-pca" or cfg.trials == 1 else "%.2f ± %.2f" % (mean, sd))
            out.append("| %g | %s | %s |" % (e, label, " | ".join(cells)))
    out += ["", "## DP-LDA: classification on the real test third", "",
            "| epsilon | classifier | accuracy | AUC |", "|---|---|---|---|"]
    for clf in ("lda", "tree"):
        for m, label in (("original", "BA (original data)"), ("majority", "LA (majority class)")):
            s = ls[(m, clf, 0.0)]
            out.append("| %s | %s | %.3f | %.3f |" % (label, clf, s["accuracy"][0], s["auc"][0]))
    for e in cfg.epsilons:
        for clf in ("lda", "tree"):
            s = ls[("dp-lda", clf, e)]
            out.append("| %g | %s | %.3f ± %.3f | %.3f ± %.3f |" % (e, clf, *s["accuracy"], *s["auc"]))
    out += pca_diagnosis(cfg, pca_rows) + lda_diagnosis(cfg, lda_rows)
    out += ["", "DP-LDA noise against signal: the class means differ by %.3f in norm over the %s features (median "
            "%.3f per feature); the Laplace noise on one coordinate of that difference has sd %s (norm over the "
            "features: %s)." % (info["lda_signal"], info["p_lda"], info["lda_signal_median"],
                                ", ".join("%.3f at epsilon %g" % (v, e) for e, v in info["lda_noise"].items()),
                                ", ".join("%.2f" % (v * math.sqrt(info["p_lda"])) for v in info["lda_noise"].values()))]
    return "\n".join(out) + "\n"


def pca_diagnosis(cfg: Paper3Config, rows: Sequence[PCARow]) -> list[str]:
    """Table: DP-PCA's error split into numeric and categorical parts, next to its data-free limit and EXP."""
    ks: list[int] = [k for k in (1, 3, 10) if k in cfg.ks] or [cfg.ks[0]]
    out = ["", "## DP-PCA against EXP: where the error comes from", "",
           "Means over the trials. num / cat = the part of the error on the 5 numeric columns / on the one-hot "
           "groups. Data-free limit = the same release with every record's own projection left out of Y "
           "(noisy mean and components kept, `_data_free`).", "",
           "| epsilon | method | total | num | cat | data-free limit |", "|---|---|---|---|---|---|"]

    def mean(vals: list[float]) -> float:
        return float(np.mean(vals)) if vals else float("nan")

    for e in cfg.epsilons:
        for k in ks:
            sel = [r for r in rows if r.method == "dp-pca" and r.epsilon == e and r.k == k]
            tot, num = mean([r.error for r in sel]), mean([r.error_numeric for r in sel])
            out.append("| %g | DP-PCA k=%d | %.2f | %.2f | %.2f | %.2f |"
                       % (e, k, tot, num, tot - num, mean([r.limit for r in sel])))
        for m, label in (("exp", "EXP"), ("lap", "LAP")):
            sel = [r for r in rows if r.method == m and r.epsilon == e and r.k == cfg.ks[0]]
            tot, num = mean([r.error for r in sel]), mean([r.error_numeric for r in sel])
            out.append("| %g | %s | %.2f | %.2f | %.2f | - |" % (e, label, tot, num, tot - num))
    return out


def lda_diagnosis(cfg: Paper3Config, rows: Sequence[LDARow]) -> list[str]:
    """Tables: DP-LDA's best accuracy over thresholds; the tree's root split and largest leaf; paired AUC changes."""
    out = ["", "## DP-LDA diagnostics", "",
           "Best threshold = the largest accuracy the classifier's scores reach at any threshold on the test "
           "third (it uses the test labels: an upper bound, not a classifier). Tree: the share of trials whose "
           "root split is on capital-gain or capital-loss, the mean share of test rows in the most populated "
           "leaf, and the AUC with and without such a root.", "",
           "| epsilon | LDA accuracy | LDA best threshold | LDA AUC | tree AUC | tree root on capital-gain/-loss "
           "| largest leaf | tree AUC, root capital-* | tree AUC, other root |",
           "|---|---|---|---|---|---|---|---|---|"]

    def ms(vals: list[float]) -> str:
        if not vals:
            return "-"
        a = np.asarray(vals)
        return "%.3f ± %.3f" % (a.mean(), a.std(ddof=1)) if a.size > 1 else "%.3f" % a[0]

    capital = ("capital-gain", "capital-loss")
    for e in cfg.epsilons:
        lda = [r for r in rows if r.method == "dp-lda" and r.classifier == "lda" and r.epsilon == e]
        tree = [r for r in rows if r.method == "dp-lda" and r.classifier == "tree" and r.epsilon == e]
        cap = [r.auc for r in tree if r.root in capital]
        other = [r.auc for r in tree if r.root not in capital]
        out.append("| %g | %s | %s | %s | %s | %d/%d | %.2f | %s | %s |" % (
            e, ms([r.accuracy for r in lda]), ms([r.best_accuracy for r in lda]), ms([r.auc for r in lda]),
            ms([r.auc for r in tree]), len(cap), len(tree), float(np.mean([r.largest_leaf for r in tree])),
            ms(cap), ms(other)))
    base = [r for r in rows if r.method == "original" and r.classifier == "lda"]
    maj = [r for r in rows if r.method == "majority" and r.classifier == "lda"]
    if base and maj:
        out += ["", "Original data: LDA best threshold %s; majority rate %s."
                % (ms([r.best_accuracy for r in base]), ms([r.accuracy for r in maj]))]
    by = {(r.trial, r.epsilon): r.auc for r in rows if r.method == "dp-lda" and r.classifier == "tree"}
    if 1.0 in cfg.epsilons and cfg.trials > 1:
        out += ["", "Tree AUC, paired by trial (same training third) against epsilon 1:", "",
                "| epsilon | mean change | sd | trials lower than at epsilon 1 |", "|---|---|---|---|"]
        for e in cfg.epsilons:
            if e <= 1.0:
                continue
            d = np.array([by[(t, e)] - by[(t, 1.0)] for t in range(cfg.trials) if (t, e) in by and (t, 1.0) in by])
            out.append("| %g | %+.3f | %.3f | %d/%d |" % (e, d.mean(), d.std(ddof=1), int(np.sum(d < 0)), d.size))
    return out


def plot(cfg: Paper3Config, pca_rows: Sequence[PCARow], lda_rows: Sequence[LDARow], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ps = pca_summary(pca_rows)
    ls = lda_summary(lda_rows)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    ks = list(cfg.ks)
    ax[0].plot(ks, [ps[("pca", 0.0, k)][0] for k in ks], "k--", label="PCA (no privacy)")
    for e in cfg.epsilons:
        ax[0].plot(ks, [ps[("dp-pca", e, k)][0] for k in ks], marker="o", label="DP-PCA eps=%g" % e)
    ax[0].set_xlabel("k")
    ax[0].set_ylabel("||X_pub - X||_F^2 / n")
    ax[0].set_title("DP-PCA error vs k")
    ax[0].legend(fontsize=7)
    es = list(cfg.epsilons)
    kbest = min(ks)
    for m, label in (("dp-pca", "DP-PCA (k=%d)" % kbest), ("lap", "LAP"), ("exp", "EXP")):
        ax[1].plot(es, [ps[(m, e, kbest)][0] for e in es], marker="o", label=label)
    ax[1].set_xlabel("epsilon")
    ax[1].set_title("DP-PCA vs baselines")
    ax[1].legend(fontsize=8)
    for clf, style in (("lda", "-o"), ("tree", "-s")):
        ax[2].plot(es, [ls[("dp-lda", clf, e)]["accuracy"][0] for e in es], style, label="accuracy, %s" % clf)
        ax[2].plot(es, [ls[("dp-lda", clf, e)]["auc"][0] for e in es], style, alpha=0.5, label="AUC, %s" % clf)
    ax[2].axhline(ls[("original", "lda", 0.0)]["accuracy"][0], color="k", ls="--", lw=0.8, label="BA accuracy (lda)")
    ax[2].axhline(ls[("majority", "lda", 0.0)]["accuracy"][0], color="grey", ls=":", lw=0.8, label="LA accuracy")
    ax[2].set_xlabel("epsilon")
    ax[2].set_title("DP-LDA synthetic data")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(cfg: Paper3Config, pca_rows: Sequence[PCARow], lda_rows: Sequence[LDARow],
                  info: AdultInfo, out_dir: str, elapsed_s: float | None = None) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, "results.md")
    with open(md, "w") as f:
        f.write(markdown(cfg, pca_rows, lda_rows, info, elapsed_s))
    runs = os.path.join(out_dir, "runs.csv")
    with open(runs, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["experiment", "trial", "epsilon", "k", "method", "classifier", "error", "accuracy", "auc",
                    "negative_eigenvalues", "error_numeric", "data_free_limit", "best_accuracy", "root",
                    "largest_leaf"])
        for r in pca_rows:
            w.writerow(["pca", r.trial, r.epsilon, r.k, r.method, "", r.error, "", "", r.negative_eigenvalues,
                        r.error_numeric, r.limit, "", "", ""])
        for q in lda_rows:
            w.writerow(["lda", q.trial, q.epsilon, "", q.method, q.classifier, "", q.accuracy, q.auc, "", "", "",
                        q.best_accuracy, q.root, q.largest_leaf])
    png = os.path.join(out_dir, "paper3.png")
    plot(cfg, pca_rows, lda_rows, png)
    return [md, runs, png]


def main(cfg: Paper3Config, out_dir: str) -> int:
    """Run, write the outputs and report progress on stderr (DataNotInstalled: Adult is missing)."""
    def say(line: str) -> None:
        print("paper3: " + line, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    pca_rows, lda_rows, info = run_paper3(cfg, say)
    elapsed = time.perf_counter() - t0
    for path in write_outputs(cfg, pca_rows, lda_rows, info, out_dir, elapsed):
        say("wrote %s" % path)
    say("done in %.0f s" % elapsed)
    return 0


__all__ = ["AdultInfo", "LDARow", "PCARow", "Paper3Config", "adult_matrix", "lda_summary", "main", "markdown",
           "pca_summary", "run_lda", "run_paper3", "run_pca", "write_outputs"]
