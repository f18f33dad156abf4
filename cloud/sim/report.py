"""Evaluate a pipeline run against the ground truth, and write the HTML report.

Only the demo and experiments use this: the ground truth (raw values, labels) is the
data owner's and no service reads it.
"""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dpsense.cloud.analyst.outliers.dbscan import DBSCANOutliers

NOT_PRIVATE = "reproducible, not private"


def noise_source(seed: int | None) -> str:
    """How a run drew its boards' noise, for its output: fresh entropy unless a seed was asked for.

    A seeded run's noise can be replayed from the seed (the issue's replay recovered every raw
    reading), so its output says so wherever it reports the privacy it had.
    """
    if seed is None:
        return "fresh entropy (secrets, the OS CSPRNG)"
    return "seed %d: %s" % (seed, NOT_PRIVATE)


@dataclass
class Evaluation:
    n: int
    outliers: int                    # O: DBSCAN on the raw data (the paper's reference)
    constructed: int                 # outliers made by the generator
    presumed: int                    # O': DBSCAN on the released data
    candidates: int                  # R after correction
    found_presumed: int              # |O' & O|
    found: int                       # |R & O|
    found_constructed: int           # |R & constructed|
    fp_removed: int
    fn_added: int
    removed: int = 0                 # |O' - R|
    removed_outliers: int = 0        # |(O' - R) & O|
    added: int = 0                   # |R - O'|
    added_outliers: int = 0          # |(R - O') & O|
    windows: int = 0
    rounds: int = 0                  # windows whose correction round ran
    mode: str = ""
    masks: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.found / self.outliers if self.outliers else float("nan")

    @property
    def accuracy_presumed(self) -> float:
        return self.found_presumed / self.outliers if self.outliers else float("nan")

    @property
    def subset(self) -> float:
        return self.candidates / self.n

    @property
    def subset_presumed(self) -> float:
        return self.presumed / self.n

    @property
    def precision(self) -> float:
        return self.found / self.candidates if self.candidates else float("nan")

    @property
    def precision_presumed(self) -> float:
        return self.found_presumed / self.presumed if self.presumed else float("nan")

    def explanation(self) -> str:
        """One sentence: why the corrected row differs from the uncorrected one."""
        if self.rounds == 0:
            return ("No correction round ran (in every window O' already held about the expected share of "
                    "outliers), so the candidates are O' itself.")
        return ("The correction (mode %s, %d of %d windows) dropped %d of the %d presumed outliers, %d of them "
                "real, and added %d rows O' had missed, %d of them real, so recall went from %.1f%% to %.1f%% "
                "and the candidate share from %.1f%% to %.1f%%."
                % (self.mode or "?", self.rounds, self.windows, self.removed, self.presumed, self.removed_outliers,
                   self.added, self.added_outliers, 100 * self.accuracy_presumed, 100 * self.accuracy,
                   100 * self.subset_presumed, 100 * self.subset))


def evaluate(store: Any, truth: Any, dbscan_eps: float, min_samples: int, quantum: float) -> Evaluation:
    """Join the analyst's window results with the ground truth by (device, seq)."""
    index = {(int(d), int(s)): i for i, (d, s) in enumerate(zip(truth["device_id"], truth["seq"]))}
    n = len(index)
    row_to_truth: dict[int, int] = {}
    after = 0
    while True:
        chunk = store.readings_after(after, 20_000)
        if not chunk:
            break
        for row_id, r in chunk:
            i = index.get((r.device_id, r.seq))
            if i is not None:
                row_to_truth[row_id] = i
        after = chunk[-1][0]
    presumed = np.zeros(n, dtype=bool)
    cand = np.zeros(n, dtype=bool)
    fp = fn = windows = rounds = 0
    modes = set()
    for _, res in store.window_results():
        presumed[[row_to_truth[r] for r in res["presumed_rows"] if r in row_to_truth]] = True
        cand[[row_to_truth[r] for r in res["candidate_rows"] if r in row_to_truth]] = True
        fp += int(res["fp"])
        fn += int(res["fn"])
        windows += 1
        rounds += not res.get("skipped", False)
        modes.add(str(res.get("mode", "paper")))
    raw = truth["raw_q"] * quantum
    o = DBSCANOutliers(dbscan_eps, min_samples).fit(raw).outlier_mask_
    constructed = np.asarray(truth["outlier"], dtype=bool)
    removed, added = presumed & ~cand, cand & ~presumed
    return Evaluation(n=n, outliers=int(o.sum()), constructed=int(constructed.sum()),
                      presumed=int(presumed.sum()), candidates=int(cand.sum()),
                      found_presumed=int((presumed & o).sum()), found=int((cand & o).sum()),
                      found_constructed=int((cand & constructed).sum()), fp_removed=fp, fn_added=fn,
                      removed=int(removed.sum()), removed_outliers=int((removed & o).sum()),
                      added=int(added.sum()), added_outliers=int((added & o).sum()), windows=windows,
                      rounds=rounds, mode="/".join(sorted(modes)),
                      masks={"o": o, "presumed": presumed, "candidates": cand})


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def scatter_png(truth: Any, ev: Evaluation, quantum: float, max_points: int = 20_000) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    raw = truth["raw_q"] * quantum
    rel = truth["released_q"] * quantum
    rng = np.random.default_rng(0)
    keep = rng.permutation(len(raw))[:max_points]
    o, cand = ev.masks["o"][keep], ev.masks["candidates"][keep]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    ax = axes[0]
    ax.scatter(*raw[keep][~o].T, s=2, c="#9aa5b1", label="normal (raw)")
    ax.scatter(*raw[keep][o].T, s=4, c="#d62728", label="outlier O (DBSCAN on raw)")
    ax.set_title("raw readings (never leave the board)")
    ax.legend(loc="upper right", markerscale=3)
    ax = axes[1]
    tn = ~o & ~cand
    ax.scatter(*rel[keep][tn].T, s=2, c="#9aa5b1", label="not a candidate")
    ax.scatter(*rel[keep][cand & ~o].T, s=4, c="#ff9f1c", label="candidate, not in O (FP)")
    ax.scatter(*rel[keep][cand & o].T, s=4, c="#2ca02c", label="candidate in O (TP)")
    ax.scatter(*rel[keep][o & ~cand].T, s=10, c="#d62728", marker="x", label="missed outlier (FN)")
    ax.set_title("released readings, as the analyst sees them")
    ax.legend(loc="upper right", markerscale=3)
    for a in axes:
        a.set_aspect("equal", adjustable="datalim")
    url = _png(fig)
    plt.close(fig)
    return url


def sweep_png(rows: Sequence[Any]) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = {"global": "global sensitivity", "relaxed": "relaxed, no correction",
              "paper": "mode paper (never-worse rule)", "bands": "mode bands", "raw": "raw data (upper bound)"}
    for method, label in labels.items():
        pts = sorted({r.epsilon for r in rows if r.method == method})
        if not pts:
            continue
        acc = [np.nanmean([r.recall for r in rows if r.method == method and r.epsilon == e]) for e in pts]
        sub = [np.nanmean([r.subset for r in rows if r.method == method and r.epsilon == e]) for e in pts]
        axes[0].plot(pts, acc, marker="o", label=label)
        axes[1].plot(pts, sub, marker="o", label=label)
    axes[0].set_ylabel("recall |R & T| / |T|")
    axes[1].set_ylabel("candidate share |R| / n")
    for a in axes:
        a.set_xlabel("epsilon per column")
        a.set_xscale("log")
        a.grid(alpha=0.3)
    axes[1].legend()
    url = _png(fig)
    plt.close(fig)
    return url


def write_html(path: Path, title: str, table: list[tuple[str, str]], images: list[tuple[str, str]],
               notes: list[str]) -> None:
    rows = "\n".join("<tr><td>%s</td><td>%s</td></tr>" % (html.escape(k), html.escape(v)) for k, v in table)
    imgs = "\n".join('<h2>%s</h2><img src="%s" style="max-width:100%%">' % (html.escape(t), u) for t, u in images)
    ps = "\n".join("<p>%s</p>" % html.escape(n) for n in notes)
    path.write_text("""<!doctype html><html><head><meta charset="utf-8"><title>%s</title>
<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
table{border-collapse:collapse}td{border:1px solid #ccc;padding:4px 10px}</style></head>
<body><h1>%s</h1><table>%s</table>%s%s</body></html>
""" % (html.escape(title), html.escape(title), rows, ps, imgs))
