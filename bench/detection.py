"""DBSCAN outlier detection on 100,000 perturbed readings: time and peak memory.

    python bench/detection.py                       # about a minute
    python bench/detection.py --sklearn-budget-mb 300   # smaller sklearn runs

The readings are paper 1's synthetic window (separation 400, ``scale`` generator)
perturbed with discrete Laplace noise at epsilon 0.1, 0.5 and 1, as in ``dpsense
experiment paper1``, with DBSCAN(eps = 12, min_samples = 60). Every measurement runs
in a fresh subprocess; the memory figure is the growth of its peak resident set size
across the ``fit`` call (Linux: the peak is reset through ``/proc/self/clear_refs``
just before ``fit`` and read from ``VmHWM``), so imports and data do not count. Freed
heap pages that the allocator reuses do not raise the RSS, so a second ``fit`` under
``tracemalloc`` gives the peak of the Python and numpy allocations as well; it misses
buffers allocated in compiled code, such as scikit-learn's neighbourhood lists.

Rows per epsilon: ``dpsense.cloud.analyst.outliers.DBSCANOutliers`` (the grid of
``cloud/analyst/outliers/grid.py`` for these two columns) on all 100,000 readings; its KD-tree
path (``dbscan.tree_core_noise``, what ``DBSCANOutliers`` ran before the grid and still
runs above three columns) on the same readings; and scikit-learn's DBSCAN. That one stores
every neighbourhood, which takes ``n * mean neighbours * 8`` bytes: the table gives
that estimate at 100,000 and runs scikit-learn on the largest random subsample whose
estimate fits ``--sklearn-budget-mb`` (memory grows with n squared at a fixed density),
next to ``DBSCANOutliers`` on the same subsample. All noise sets of one n must agree.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

N = 100_000
QUANTUM = 0.01
EPS, MIN_SAMPLES = 12.0, 60


def readings(epsilon: float, n: int, seed: int = 1) -> np.ndarray:
    """The perturbed window in data units; a seeded random subsample when ``n < N``."""
    from dpsense.cloud.sim.datasets import paper1_synthetic, relaxed_sensitivity
    from dpsense.cloud.sim.experiments.noise import discrete_laplace

    data = paper1_synthetic(N, 400.0, "scale", seed=seed)
    ref = paper1_synthetic(N, 400.0, "scale", seed=seed + 1000)
    rs_q = np.rint(relaxed_sensitivity(ref.x) / QUANTUM)
    x_q = np.rint(data.x / QUANTUM).astype(np.int64)
    x = (x_q + discrete_laplace(np.random.default_rng(seed), rs_q / epsilon, x_q.shape)) * QUANTUM
    if n < N:
        x = x[np.sort(np.random.default_rng(seed + 1).choice(N, n, replace=False))]
    return x


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> int:
    """Reset the peak RSS to the current RSS where Linux allows it; the baseline in bytes."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        rss = _status_kib("VmRSS")
        if rss is not None:
            return rss * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024     # Linux reports KiB


def _peak_bytes() -> int:
    hwm = _status_kib("VmHWM")
    return hwm * 1024 if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


#: Time and memory the detector must stay within on 100,000 readings (issue 14).
TARGET_S, TARGET_MB = 1.0, 100.0
DETECTORS = {"ours": "DBSCANOutliers", "tree": "KD-tree path (before)", "sklearn": "sklearn DBSCAN"}


def worker(detector: str, epsilon: float, n: int, jobs: int) -> dict:
    """One fit in this process: wall time, peak-RSS growth and the noise set's digest."""
    from sklearn.cluster import DBSCAN

    from dpsense.cloud.analyst.outliers import DBSCANOutliers
    from dpsense.cloud.analyst.outliers.dbscan import tree_core_noise

    x = readings(epsilon, n)

    def fit(x: np.ndarray) -> np.ndarray:
        if detector == "ours":
            return DBSCANOutliers(EPS, MIN_SAMPLES, n_jobs=jobs).fit(x).outlier_mask_
        if detector == "tree":
            return tree_core_noise(x, EPS, MIN_SAMPLES, jobs)[1]
        return DBSCAN(eps=EPS, min_samples=MIN_SAMPLES, n_jobs=jobs).fit(x).labels_ == -1

    before = _reset_peak()
    t0 = time.perf_counter()
    mask = fit(x)
    elapsed = time.perf_counter() - t0
    rss = _peak_bytes() - before
    tracemalloc.start()
    fit(x)
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"seconds": elapsed, "rss_mb": rss / 1e6, "traced_mb": traced / 1e6,
            "outliers": int(mask.sum()), "digest": int(np.flatnonzero(mask).sum() % 1_000_003)}


def run(detector: str, epsilon: float, n: int, jobs: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", detector, "--epsilon", repr(epsilon),
                           "--n", str(n), "--jobs", str(jobs), "--size", str(N)],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": "exit %d: %s" % (proc.returncode, proc.stderr.strip().splitlines()[-1:])}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mean_neighbours(epsilon: float) -> float:
    """Mean points within eps (itself included) at n = 100,000, from a sample of 2,000."""
    from sklearn.neighbors import KDTree

    x = readings(epsilon, N)
    sample = x[np.random.default_rng(3).choice(N, 2000, replace=False)]
    return float(KDTree(x).query_radius(sample, EPS, count_only=True).mean())


def main(argv: list[str] | None = None) -> int:
    global N
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sklearn-budget-mb", type=float, default=1000.0,
                    help="largest estimated neighbourhood memory to give scikit-learn (default 1000)")
    ap.add_argument("--jobs", type=int, default=1, help="threads for both detectors (default 1)")
    ap.add_argument("--worker", choices=tuple(DETECTORS), help=argparse.SUPPRESS)
    ap.add_argument("--epsilon", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=N,
                    help="readings per window (default %d; a smaller one for a smoke run)" % N)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 1.0],
                    help="the windows' epsilon (default 0.1 0.5 1)")
    args = ap.parse_args(argv)
    N = args.size
    if args.worker:
        print(json.dumps(worker(args.worker, args.epsilon, args.n, args.jobs)))
        return 0

    print("DBSCAN(%g, %d) outliers of perturbed paper-1 readings (separation 400), %d thread(s)\n"
          % (EPS, MIN_SAMPLES, args.jobs))
    print("| ε | n | detector | time s | × DBSCANOutliers | peak RSS growth MB | traced peak MB | outliers "
          "| same noise set |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---|")

    def row(eps: float, n: int, name: str, res: dict, ref: dict | None) -> None:
        if "error" in res:
            print("| %g | %d | %s | failed: %s | | | | | |" % (eps, n, DETECTORS[name], res["error"]), flush=True)
            return
        same = "" if ref is None else ("yes" if (res["outliers"], res["digest"]) == (ref["outliers"], ref["digest"])
                                       else "NO")
        ratio = "1.0" if ref is None else "%.1f" % (res["seconds"] / ref["seconds"])
        print("| %g | %d | %s | %.2f | %s | %.0f | %.1f | %d | %s |"
              % (eps, n, DETECTORS[name], res["seconds"], ratio, res["rss_mb"], res["traced_mb"],
                 res["outliers"], same), flush=True)

    notes, worst_s, worst_mb, all_same = [], 0.0, 0.0, True
    for eps in args.epsilons:
        ours = run("ours", eps, N, args.jobs)
        row(eps, N, "ours", ours, None)
        if "error" in ours:
            all_same = False
            continue
        worst_s = max(worst_s, ours["seconds"])
        worst_mb = max(worst_mb, ours["rss_mb"], ours["traced_mb"])
        tree = run("tree", eps, N, args.jobs)
        row(eps, N, "tree", tree, ours)
        k = mean_neighbours(eps)
        est_mb = N * k * 8 / 1e6
        n_sk = min(N, int(N * math.sqrt(args.sklearn_budget_mb / est_mb)) // 1000 * 1000)
        notes.append("ε = %g: mean neighbourhood %.0f points, so scikit-learn needs about %.1f GB of "
                     "neighbourhood indices at n = %d; run on n = %d." % (eps, k, est_mb / 1e3, N, n_sk))
        small = ours
        if n_sk < N:
            small = run("ours", eps, n_sk, args.jobs)
            row(eps, n_sk, "ours", small, None)
        sk = run("sklearn", eps, n_sk, args.jobs)
        row(eps, n_sk, "sklearn", sk, small)
        for other, ref in ((tree, ours), (sk, small)):
            all_same &= "error" not in other and "error" not in ref and \
                (other["outliers"], other["digest"]) == (ref["outliers"], ref["digest"])
    print()
    for line in notes:
        print("* " + line)
    print("* DBSCANOutliers on %d readings: slowest ε %.2f s (target <= %g s), largest peak memory growth "
          "%.0f MB (target <= %g MB); noise sets %s."
          % (N, worst_s, TARGET_S, worst_mb, TARGET_MB, "all equal" if all_same else "DIFFER"))
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
