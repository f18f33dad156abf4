"""Time of each correction mode on 100,000-record windows, next to numpy.sort of the same n.

    python bench/correction.py            # about 1-2 min (windows are built with DBSCAN)
    python bench/correction.py --quick    # fewer repetitions

Each window is paper 1's synthetic data (separation 400, ``scale`` generator, seed 1)
perturbed with discrete Laplace noise at epsilon 0.1, 0.5 and 1, with everything the
reference gives as in ``dpsense experiment paper1`` (relaxed sensitivity, DBSCAN
calibrated on the reference, w_O, rho, band width); O' is DBSCAN on the perturbed
window. Only the correction logic is timed, in-process, both parties in one process:

* mode paper, 2017 reconstruction: ``run_protocol`` with Otsu + guard, R1;
* mode paper, never-worse rule: ``run_protocol`` with the noise split and provable layers;
* mode bands: ``make_bands`` (analyst) and ``lower_edges`` + ``band_candidates``
  (correction server).

The baseline, ``numpy.sort`` of 100,000 random floats, is timed in the same process so
the ratios carry over between machines. The table also gives the size of the JSON
messages of one round of each mode (``cloud/correction/messages.py``), tokens included.
The paper reports 30-40 ms in R 3.3.1 for its correction logic. A second table times the
correction server's noise per record (cloud/correction/honest.py), which every answer is
computed from.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.bands import band_candidates, lower_edges, make_bands
from dpsense.cloud.correction.rules import reduce_rows, run_protocol
from dpsense.cloud.datasets import paper1_synthetic
from dpsense.cloud.experiments.noise import discrete_laplace
from dpsense.cloud.experiments.paper1 import Paper1Config, _dbscan, reference

N = 100_000
SEPARATION = 400.0


def median_ms(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and 90th percentile of ``repeats`` timed calls, in ms (after one warm-up)."""
    fn()
    t = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        t[i] = time.perf_counter() - t0
    return 1e3 * float(np.median(t)), 1e3 * float(np.percentile(t, 90))


def window(cfg: Paper1Config, eps: float, seed: int = 1) -> dict[str, object]:
    """One perturbed window and the parameters every party holds, in quanta."""
    hist = reference(cfg, SEPARATION, seed)
    data = paper1_synthetic(N, SEPARATION, "scale", seed=seed)
    x_q = np.rint(data.x / cfg.quantum).astype(np.int64)
    scale_q = hist.rs_q / eps
    x_p = x_q + discrete_laplace(np.random.default_rng(seed), scale_q, x_q.shape)
    d_diff = (np.rint(np.linalg.norm(x_p - hist.centre_q, axis=1))
              - np.rint(np.linalg.norm(x_q - hist.centre_q, axis=1)))
    return {
        "d_diff": d_diff, "dist": np.linalg.norm(x_p - hist.centre_q, axis=1),
        "dist_mean": np.linalg.norm(x_p - x_p.mean(axis=0), axis=1),
        "presumed": np.flatnonzero(_dbscan(cfg, x_p * cfg.quantum, hist.min_samples)),
        "recon": cfg.correction(hist.w_o_q),
        "nw": cfg.never_worse(hist.w_o_q, float(scale_q.max()), x_q.shape[1], hist.normal_radius_q),
        "width": hist.band_width_q, "rho": hist.normal_radius_q,
    }


def message_bytes(w: dict[str, object], tokens: str) -> tuple[int, int]:
    """Bytes of one round's messages: mode paper (4 messages), mode bands (2)."""
    d, dist, presumed = w["d_diff"], w["dist"], w["presumed"]
    res = run_protocol(d, dist, presumed, w["nw"])
    rows = reduce_rows(dist, presumed, res.split.d_tp, w["nw"].w_o)
    paper = [msg.encode("presumed", 1, tokens=tokens, presumed=presumed),
             msg.encode("split", 1, d_tp=res.split.d_tp, w_o=w["nw"].w_o),
             msg.encode("rows", 1, i_l2=rows.i_l2, i_l3=rows.i_l3),
             msg.encode("result", 1, fp=res.fp, fn=np.setdiff1d(res.r, presumed))]
    bands = make_bands(dist, w["width"])
    r = band_candidates(d, lower_edges(N, bands), w["rho"])
    band_msgs = [msg.encode("bands", 1, tokens=tokens, width=bands.width, edges=[float(e) for e in bands.edges],
                            bands=bands.members),
                 msg.encode("result", 1, r=r, unknown=np.empty(0, dtype=np.intp), missing=0)]
    return sum(len(m) for m in paper), sum(len(m) for m in band_msgs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 repetitions instead of 100")
    ap.add_argument("--repeats", type=int, help="timed calls per cell (default 100, --quick 20)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (20 if args.quick else 100)
    cfg = Paper1Config(n=N)

    rng = np.random.default_rng(0)
    floats = rng.random(N)
    sort_ms, sort_p90 = median_ms(lambda: np.sort(floats), repeats)
    tokens = msg.tokens_field([rng.bytes(msg.TOKEN_SIZE) for _ in range(N)])

    print("Correction modes on %d records, separation %g (median of %d calls; numpy %s, %s, Python %s)\n"
          % (N, SEPARATION, repeats, np.__version__, platform.machine(), platform.python_version()))
    print("numpy.sort of %d floats: median %.3f ms (p90 %.3f ms)\n" % (N, sort_ms, sort_p90))
    print("| ε | abs(O') | paper, 2017 ms | paper, never-worse ms | bands: A ms | bands: CS ms | bands ms (p90) "
          "| ÷ numpy.sort: 2017 / never-worse / bands | messages KB: paper / bands |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for eps in (0.1, 0.5, 1.0):
        w = window(cfg, eps)
        d, dist, dist_mean, presumed = w["d_diff"], w["dist"], w["dist_mean"], w["presumed"]
        recon, _ = median_ms(lambda: run_protocol(d, dist_mean, presumed, w["recon"]), repeats)
        nw, _ = median_ms(lambda: run_protocol(d, dist, presumed, w["nw"]), repeats)
        bands = make_bands(dist, w["width"])
        a_ms, _ = median_ms(lambda: make_bands(dist, w["width"]), repeats)
        cs_ms, _ = median_ms(lambda: band_candidates(d, lower_edges(N, bands), w["rho"]), repeats)
        both, both_p90 = median_ms(lambda: band_candidates(d, lower_edges(N, make_bands(dist, w["width"])),
                                                           w["rho"]), repeats)
        kb_paper, kb_bands = message_bytes(w, tokens)
        print("| %g | %d | %.2f | %.2f | %.2f | %.2f | %.2f (%.2f) | %.1f / %.1f / %.1f | %.0f / %.0f |"
              % (eps, presumed.size, recon, nw, a_ms, cs_ms, both, both_p90, recon / sort_ms, nw / sort_ms,
                 both / sort_ms, kb_paper / 1024, kb_bands / 1024))
    noise_table(w, [rng.bytes(msg.TOKEN_SIZE) for _ in range(N)], sort_ms, repeats)
    return 0


def noise_table(w: dict[str, object], toks: list[bytes], sort_ms: float, repeats: int) -> None:
    """The correction server's per-record noise (cloud/correction/honest.py) on one window: the
    first pass draws every record's noise (HMAC-SHA256 stream + exact sampler), later rounds
    over the same records (retries) find it cached."""
    from fractions import Fraction

    from dpsense.cloud.correction.honest import RecordNoise
    noise = RecordNoise(bytes(32), float(w["rho"]), Fraction(1))
    d = np.asarray(w["d_diff"], dtype=float)
    t0 = time.perf_counter()
    noise.noisy(toks, d)
    first = 1e3 * (time.perf_counter() - t0)
    cached, _ = median_ms(lambda: noise.noisy(toks, d), repeats)
    print("\nNoise per record at the correction server, %d records, epsilon_A 1 (scale %g quanta):\n" % (N, noise.scale))
    print("| pass | ms | ÷ numpy.sort |")
    print("|---|---:|---:|")
    print("| first (every record's noise drawn; one call) | %.0f | %.0f |" % (first, first / sort_ms))
    print("| again (cached; median) | %.1f | %.1f |" % (cached, cached / sort_ms))


if __name__ == "__main__":
    sys.exit(main())
