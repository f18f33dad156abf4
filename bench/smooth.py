"""Smooth upper bound of the outlier count's local sensitivity: our exact method vs the paper's search.

    python bench/smooth.py                  # a few minutes (the paper's search is capped at 60 s per N)
    python bench/smooth.py --limit 20       # quicker

Data: "Synthetic 1" of paper 4 (Okada et al. 2015, experiments: 90 % inliers N(0, I_2), 10 % outliers
N((20, 20), diag(100, 100))), scaled by sqrt(N/50) so that every N has the density,
and hence the degree distribution, of the paper's N = 50 set; k = 3, r = 1.1 and
beta = the NRS beta at epsilon = 1, delta = 0.01 (epsilon/25.19).

Rows:

* ``dpsense.cloud.privacy.smooth`` (exact ball counts, all t at once; KD-tree pruning above
  400 records), at N = 50 ... 10,000;
* at the largest N, the same computation as ``smooth.py`` did it before issue 14 (the
  baseline): one ``query_ball_point`` per candidate ball, its Python lists flattened, and
  the (candidate, level) pairs sorted. Both must give the same ``U_0 .. U_N``;
* the paper's route: Algorithm 2 (early stopping, Proposition 1) calling Algorithm 1
  (the ``2**|P|`` subset search pruned by the smallest enclosing ball, Okada et al. 2015, Algorithm 1) for
  every t it needs, implemented here as a reference. Each N runs in a subprocess
  killed after ``--limit`` seconds; the table stops at the first N that does not
  finish. Where both finish, the values must agree (they compute the same maximum).
"""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scipy.spatial import cKDTree  # noqa: E402

from dpsense.cloud.privacy import smooth  # noqa: E402
from dpsense.cloud.privacy.mechanisms import nrs_alpha_beta  # noqa: E402
from dpsense.cloud.privacy.smooth import degrees, smooth_sensitivity  # noqa: E402

K, R = 3, 1.1
_TOL = 1e-9
#: Issue 14: the bound at N = 10,000 within this many seconds.
TARGET_S = 10.0


def data(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([seed, n])
    n_out = max(1, n // 10)
    x = np.vstack([rng.normal(0, 1, (n - n_out, 2)), rng.normal(20, 10, (n_out, 2))])
    return x * math.sqrt(n / 50)


# ---------------------------------------------------------------- the paper's Algorithms 1 and 2

def _circle2(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
    c = (p + q) / 2
    return c, float(np.hypot(*(p - c)))


def _circle3(p: np.ndarray, q: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, float]:
    ax, ay = p
    bx, by = q
    cx, cy = s
    d = 2 * (ax * (by - cy) + bx * (cy - ay) + cx * (ay - by))
    if abs(d) < 1e-300:     # collinear: the widest pair
        best = max((_circle2(u, v) for u, v in ((p, q), (p, s), (q, s))), key=lambda t: t[1])
        return best
    ux = ((ax * ax + ay * ay) * (by - cy) + (bx * bx + by * by) * (cy - ay) + (cx * cx + cy * cy) * (ay - by)) / d
    uy = ((ax * ax + ay * ay) * (cx - bx) + (bx * bx + by * by) * (ax - cx) + (cx * cx + cy * cy) * (bx - ax)) / d
    c = np.array([ux, uy])
    return c, float(np.hypot(*(p - c)))


def _inside(c: np.ndarray, rad: float, p: np.ndarray) -> bool:
    return float(np.hypot(*(p - c))) <= rad * (1 + 1e-12)


def seb(points: list[np.ndarray]) -> float:
    """Radius of the smallest enclosing circle (incremental Welzl, exact up to rounding)."""
    if not points:
        return 0.0
    c, rad = points[0], 0.0
    for i in range(1, len(points)):
        if _inside(c, rad, points[i]):
            continue
        c, rad = points[i], 0.0
        for j in range(i):
            if _inside(c, rad, points[j]):
                continue
            c, rad = _circle2(points[i], points[j])
            for m in range(j):
                if not _inside(c, rad, points[m]):
                    c, rad = _circle3(points[i], points[j], points[m])
    return rad


def algorithm1(pts: list[np.ndarray], radius: float) -> int:
    """E(r, P, {}, 1) of Okada et al. 2015, Algorithm 1: the largest subset of ``pts`` with seb <= radius."""
    limit = radius * (1 + _TOL)
    sys.setrecursionlimit(max(1000, 4 * len(pts) + 100))

    def e(chosen: list[np.ndarray], i: int) -> int:
        if chosen and seb(chosen) > limit:
            return 0
        m = len(chosen)
        if i < len(pts):
            m = max(m, e(chosen + [pts[i]], i + 1), e(chosen, i + 1))
        return m
    return e([], 0)


def algorithm2(x: np.ndarray, k: int, r: float, beta: float) -> tuple[float, int, int]:
    """Paper's Algorithm 2 with Algorithm 1; returns (S, the last t computed, Algorithm-1 calls)."""
    n = x.shape[0]
    deg = degrees(x, r)
    radius = r * math.sqrt(x.shape[1])
    s_max, calls = 0.0, 0
    prev = {k: 0, k - 1: 0}
    for t in range(0, n + 1):
        # S_UB^{t-1} (Proposition 1 with t' = t - 1): a bound for every t'' >= t.
        tp = t - 1
        tt = np.arange(t, n + 1)
        ub = np.zeros(tt.size)
        for m in (k, k - 1):
            lv = np.abs(deg - m)
            extra = np.array([np.count_nonzero((lv > tp) & (lv <= u)) for u in tt])
            ub = np.maximum(ub, prev[m] + extra)
        s_ub = float(np.max(np.exp(-beta * tt) * np.minimum(n, ub + tt + 1)))
        if s_ub <= s_max:
            return s_max, t - 1, calls
        cur = {}
        for m in (k, k - 1):
            p = [x[i] for i in np.flatnonzero(np.abs(deg - m) <= t)]
            cur[m] = algorithm1(p, radius)
            calls += 1
        s_max = max(s_max, math.exp(-t * beta) * min(n, max(cur.values()) + t + 1))
        prev = cur
    return s_max, n, calls


# ---------------------------------------------------------------- the pre-issue-14 pruned path

def before_bounds(x: np.ndarray, k: int, r: float) -> np.ndarray:
    """``U_0 .. U_N`` as ``smooth.local_sensitivity_bounds`` computed them above 400 records before."""
    n = x.shape[0]
    deg = degrees(x, r)
    radius = r * math.sqrt(x.shape[1])
    levels = [np.abs(deg - k), np.abs(deg - (k - 1))]
    centres = smooth._candidate_centres_2d(x, radius)
    limit = radius * radius * (1 + _TOL) ** 2
    tree = cKDTree(x)
    width = n + 1
    best = [np.zeros(width, dtype=np.int64) for _ in levels]
    for s in range(0, centres.shape[0], 20_000):
        c = centres[s:s + 20_000]
        hits = tree.query_ball_point(c, math.sqrt(limit) * (1 + 1e-6), return_sorted=False, workers=-1)
        lengths = np.fromiter((len(h) for h in hits), dtype=np.int64, count=len(hits))
        ci = np.repeat(np.arange(len(hits)), lengths)
        pj = np.fromiter((p for h in hits for p in h), dtype=np.int64, count=int(lengths.sum()))
        keep = ((c[ci] - x[pj]) ** 2).sum(axis=1) <= limit
        ci, pj = ci[keep], pj[keep]
        for b, lev in zip(best, levels, strict=True):
            key = np.sort(ci * width + np.minimum(lev[pj], n))
            c_s, l_s = np.divmod(key, width)
            start = np.flatnonzero(np.r_[True, c_s[1:] != c_s[:-1]])
            rank = np.arange(c_s.size) - np.repeat(start, np.diff(np.r_[start, c_s.size])) + 1
            np.maximum.at(b, l_s, rank)
    bk, bk1 = (np.maximum.accumulate(b) for b in best)
    return np.minimum(n, np.maximum(bk, bk1) + np.arange(n + 1) + 1)


def _paper_worker(n: int, beta: float, q: mp.Queue) -> None:
    x = data(n)
    t0 = time.perf_counter()
    s, t_last, calls = algorithm2(x, K, R, beta)
    q.put((time.perf_counter() - t0, s, t_last, calls))


def time_paper(n: int, beta: float, limit: float) -> tuple[float, float, int, int] | None:
    q: mp.Queue = mp.Queue()
    p = mp.Process(target=_paper_worker, args=(n, beta, q))
    p.start()
    p.join(limit)
    if p.is_alive():
        p.terminate()
        p.join()
        return None
    return q.get() if not q.empty() else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=1.0, help="epsilon of the NRS beta (default 1)")
    ap.add_argument("--limit", type=float, default=60.0, help="seconds per paper-search run (default 60)")
    ap.add_argument("--sizes", default="50,200,1000,2000,5000,10000", help="N for our method")
    ap.add_argument("--paper-sizes", default="10,15,20,25,30,40,50,70,100,150,200",
                    help="N tried for the paper's search, in order")
    args = ap.parse_args()
    _, beta = nrs_alpha_beta(args.epsilon, 0.01)
    print("smooth bound benchmark: k=%d, r=%g, beta=%.5f (NRS, epsilon=%g, delta=0.01)" % (K, R, beta, args.epsilon),
          file=sys.stderr)
    ours: dict[int, tuple[float, float, int]] = {}
    for n in (int(v) for v in args.sizes.split(",")):
        x = data(n)
        t0 = time.perf_counter()
        b = smooth_sensitivity(x, K, R, beta)
        ours[n] = (time.perf_counter() - t0, b.value, b.t)
        print("ours N=%d: %.2f s" % (n, ours[n][0]), file=sys.stderr, flush=True)
    n_top = max(ours)
    x = data(n_top)
    t0 = time.perf_counter()
    u_before = before_bounds(x, K, R)
    before_s = time.perf_counter() - t0
    before_value = float(np.max(np.exp(-beta * np.arange(u_before.size)) * u_before))
    same = tuple(int(v) for v in u_before) == smooth_sensitivity(x, K, R, beta).bounds
    print("before N=%d: %.2f s" % (n_top, before_s), file=sys.stderr, flush=True)
    paper: dict[int, tuple[float, float, int, int]] = {}
    failed = None
    for n in (int(v) for v in args.paper_sizes.split(",")):
        res = time_paper(n, beta, args.limit)
        if res is None:
            failed = n
            print("paper N=%d: over %.0f s, stopping" % (n, args.limit), file=sys.stderr, flush=True)
            break
        paper[n] = res
        print("paper N=%d: %.2f s" % (n, res[0]), file=sys.stderr, flush=True)
        if n not in ours:
            x = data(n)
            t0 = time.perf_counter()
            b = smooth_sensitivity(x, K, R, beta)
            ours[n] = (time.perf_counter() - t0, b.value, b.t)
    print("| N | method | time (s) | S(X) | argmax t | notes |")
    print("|---|---|---|---|---|---|")
    for n in sorted(set(ours) | set(paper)):
        if n in ours:
            tm, s, t = ours[n]
            print("| %d | exact ball counts (`dpsense.cloud.privacy.smooth`) | %.3f | %.3f | %d | all t = 0..N |" % (n, tm, s, t))
        if n in paper:
            tm, s, t_last, calls = paper[n]
            agree = "agrees" if n in ours and abs(s - ours[n][1]) <= 1e-9 * max(1.0, s) else "DIFFERS"
            print("| %d | paper: Alg. 2 + Alg. 1 (2^P search) | %.3f | %.3f | – | stopped after t = %d, %d Alg. 1 "
                  "calls; %s |" % (n, tm, s, t_last, calls, agree))
        if n == n_top:
            print("| %d | baseline: the pruned path before issue 14 | %.3f | %.3f | – | %s; ours %.1f× faster |"
                  % (n, before_s, before_value, "same U_t" if same else "U_t DIFFER", before_s / ours[n][0]))
    if failed is not None:
        print("| %d | paper: Alg. 2 + Alg. 1 (2^P search) | > %.0f | – | – | killed |" % (failed, args.limit))
    largest = max(paper) if paper else None
    print()
    print("Largest N where the paper's search finished within %.0f s: %s." % (args.limit, largest))
    print("Exact ball counts at N = %d: %.2f s (target <= %g s at N = 10,000), baseline %.2f s in the same run."
          % (n_top, ours[n_top][0], TARGET_S, before_s))
    agree = all(abs(paper[n][1] - ours[n][1]) <= 1e-9 * max(1.0, ours[n][1]) for n in paper)
    return 0 if same and agree else 1


if __name__ == "__main__":
    sys.exit(main())
