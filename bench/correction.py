"""Time of the correction logic (SPEC 1.5, lines 3-6) on 100,000-record windows.

    python bench/correction.py            # about 10 s (windows are built with DBSCAN)
    python bench/correction.py --quick    # fewer repetitions, about 5 s

Each window is paper 1's synthetic data (separation 400, ``scale`` generator) perturbed
with discrete Laplace noise at epsilon 0.1, 0.5 and 1; O' is DBSCAN(12, 60) on the
perturbed window, as in ``dpsense experiment paper1``. Only the correction logic is
timed: the in-process ``run_protocol`` and, separately, each party's function. The
baseline, ``numpy.sort`` of 100,000 random floats, is timed in the same process so
the ratio carries over between machines. The paper reports 30-40 ms in R 3.3.1.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dpsense.cloud.correction.rules import (  # noqa: E402
    CorrectionParams,
    false_negatives,
    reduce_rows,
    run_protocol,
    split_presumed,
)
from dpsense.cloud.datasets import paper1_synthetic, relaxed_sensitivity  # noqa: E402
from dpsense.cloud.experiments.noise import discrete_laplace  # noqa: E402
from dpsense.cloud.outliers import DBSCANOutliers  # noqa: E402

N = 100_000
QUANTUM = 0.01


def median_ms(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and 90th percentile of ``repeats`` timed calls, in ms (after one warm-up)."""
    fn()
    t = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        t[i] = time.perf_counter() - t0
    return 1e3 * float(np.median(t)), 1e3 * float(np.percentile(t, 90))


def window(eps: float, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(d_diff, dist_perturbed, presumed, w_o)`` of one perturbed window, in quanta."""
    data = paper1_synthetic(N, 400.0, "scale", seed=seed)
    ref = paper1_synthetic(N, 400.0, "scale", seed=seed + 1000)
    rs_q = np.rint(relaxed_sensitivity(ref.x) / QUANTUM)
    centre_q = np.rint(ref.x.mean(axis=0) / QUANTUM)
    x_q = np.rint(data.x / QUANTUM).astype(np.int64)
    x_p = x_q + discrete_laplace(np.random.default_rng(seed), rs_q / eps, x_q.shape)
    d_diff = np.rint(np.linalg.norm(x_p - centre_q, axis=1)) - np.rint(np.linalg.norm(x_q - centre_q, axis=1))
    dist = np.linalg.norm(x_p - x_p.mean(axis=0), axis=1)
    presumed = np.flatnonzero(DBSCANOutliers(12.0, 60, n_jobs=-1).fit(x_p * QUANTUM).outlier_mask_)
    r = np.linalg.norm(ref.x[ref.outlier] - ref.x.mean(axis=0), axis=1)
    return d_diff, dist, presumed, float(r.max() - r.min()) / QUANTUM


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50 repetitions instead of 300")
    ap.add_argument("--repeats", type=int, help="timed calls per cell (default 300, --quick 50)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (50 if args.quick else 300)

    rng = np.random.default_rng(0)
    floats = rng.random(N)
    sort_ms, sort_p90 = median_ms(lambda: np.sort(floats), repeats)

    print("Correction logic on %d records (median of %d calls; numpy %s, %s, Python %s)\n"
          % (N, repeats, np.__version__, platform.machine(), platform.python_version()))
    print("numpy.sort of %d floats: median %.3f ms (p90 %.3f ms)\n" % (N, sort_ms, sort_p90))
    print("| ε | abs(O') | split accepted | run_protocol ms (p90) | line 3 CS ms | line 4 A ms "
          "| line 5 CS ms | ÷ numpy.sort |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for eps in (0.1, 0.5, 1.0):
        d_diff, dist, presumed, w_o = window(eps)
        p = CorrectionParams(w_o=w_o)
        res = run_protocol(d_diff, dist, presumed, p)
        s = res.split
        rows = res.rows
        total, total_p90 = median_ms(lambda: run_protocol(d_diff, dist, presumed, p), repeats)
        l3, _ = median_ms(lambda: split_presumed(d_diff, presumed, p), repeats)
        l4, _ = median_ms(lambda: reduce_rows(dist, presumed, s.d_tp, p.w_o), repeats)
        l5, _ = median_ms(lambda: false_negatives(d_diff, presumed, rows, s, p), repeats)
        print("| %g | %d | %s | %.2f (%.2f) | %.2f | %.2f | %.2f | %.1f |"
              % (eps, presumed.size, "yes" if s.accepted else "no", total, total_p90, l3, l4, l5,
                 total / sort_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
