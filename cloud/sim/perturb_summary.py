"""``dpsense perturb``: a fleet window through the exact board-side code, with a plain summary.

Every record is scaled, perturbed, measured (d_diff), tokenised and encoded by
``shared_protocol`` exactly as a board does it; the summary shows what the analyst
and the correction server would receive and what privacy that costs.
"""
from __future__ import annotations

import math
import secrets
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import TextIO

import numpy as np

from dpsense.cloud.sim.datasets import paper1_synthetic, relaxed_sensitivity
from dpsense.cloud.sim.report import noise_source
from dpsense.protocol import framing, wire
from dpsense.protocol.fixedpoint import Affine, parse_decimal
from dpsense.protocol.mechanism import Column, RecordMechanism
from dpsense.protocol.rng import XorShift32
from dpsense.protocol.tokens import new_token


@dataclass(frozen=True)
class SummaryOptions:
    n: int = 100_000
    separation: float = 220.0
    shape: str = "scale"
    epsilon: str = "0.5"
    quantum: float = 0.01
    domain: float = 2000.0
    seed: int | None = None         # None: noise from the OS CSPRNG (data: seed 1)


def run_summary(opts: SummaryOptions, out: TextIO = sys.stdout) -> int:
    eps = parse_decimal(opts.epsilon)
    w = out.write
    w("dpsense perturb: one window of a simulated sensor fleet through the board-side code\n\n")
    data_seed = 1 if opts.seed is None else opts.seed
    data = paper1_synthetic(opts.n, opts.separation, opts.shape, seed=data_seed)
    reference = paper1_synthetic(opts.n, opts.separation, opts.shape, seed=data_seed + 1000)
    rs_units = relaxed_sensitivity(reference.x)
    raw = np.rint(data.x / opts.quantum).astype(np.int64)
    span = int(round(opts.domain / opts.quantum))
    cols = [Column(Affine(1, 1, 0, -span, span), max(1, int(round(r / opts.quantum))), eps)
            for r in rs_units]
    centre = [0, 0]
    rng = XorShift32(opts.seed + 1) if opts.seed is not None else _SystemRandom()
    mech = RecordMechanism(cols, centre, rng)
    w("data       paper-1 synthetic: %d readings x 2 columns, %d%% outliers, separation %g (%s)\n"
      % (opts.n, round(100 * data.outlier.mean()), opts.separation, opts.shape))
    w("quantum    %g units; domain clamped to +-%g units (%d quanta per column)\n"
      % (opts.quantum, opts.domain, 2 * span))
    w("noise      %s\n" % noise_source(opts.seed))
    w("relaxed sensitivity from reference data (95th - 5th percentile): %s units\n\n"
      % ", ".join("%.2f" % r for r in rs_units))
    out.flush()

    released = np.empty_like(raw)
    ddiff = np.empty(opts.n, dtype=np.int64)
    t0 = time.perf_counter()
    step = max(1, opts.n // 10)
    for i in range(opts.n):
        _, y, d = mech.perturb([int(raw[i, 0]), int(raw[i, 1])])
        released[i] = y
        ddiff[i] = d
        if (i + 1) % step == 0:
            print("  perturbed %7d / %d readings" % (i + 1, opts.n), file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - t0
    print("", file=sys.stderr, flush=True)

    noise = (released - raw).astype(float)
    w("column  RS (quanta)  epsilon  scale b  noise sd: measured  exact  mean\n")
    for j, c in enumerate(cols):
        b = Fraction(*c.scale)
        q = math.exp(-1 / float(b))
        exact_sd = float(np.sqrt(2 * q) / (1 - q))
        w("%6d  %11d  %7s  %7.1f  %17.1f  %5.1f  %+5.1f\n"
          % (j, c.delta_q, opts.epsilon, float(b), noise[:, j].std(), exact_sd, noise[:, j].mean()))

    row = Fraction(*mech.epsilon_row())
    worst = Fraction(*mech.epsilon_row_worst())
    w("\nprivacy    normal readings: epsilon %s per column, %s per row (2 columns, sequential)\n"
      % (opts.epsilon, _fmt(row)))
    w("           outliers (any two values in the domain): epsilon %s per row, by design\n"
      % _fmt(worst))

    o, nrm = data.outlier, ~data.outlier
    w("\ncorrection signal d_diff = |x' - c| - |x - c| (quanta, median [5%, 95%]):\n")
    for name, mask in (("normal readings", nrm), ("true outliers", o)):
        p5, p50, p95 = np.percentile(ddiff[mask], [5, 50, 95])
        w("  %-16s %+9.0f [%+.0f, %+.0f]\n" % (name, p50, p5, p95))
    w("  (normal readings are pushed outward by the noise; outliers move inward about as\n"
      "   often as outward: the correction server uses this to find false positives)\n")

    tok = new_token(rng)
    rec = wire.encode_reading(1, 1, 0, tok, 1, [int(v) for v in released[0]])
    cor = wire.encode_correction(1, 1, 0, tok, int(ddiff[0]))
    w("\nwire v%d    reading %d bytes, correction %d bytes, serial frame %d bytes (docs/protocol.md)\n"
      % (wire.VERSION, len(rec), len(cor), len(framing.frame(rec))))
    w("speed      %.0f records/s through shared_protocol on CPython (%.1f s)\n"
      % (opts.n / elapsed, elapsed))
    w("visible    true outliers still beyond the 99th percentile of normal readings' radius:\n")
    w("           relaxed sensitivity (this mechanism): %5.1f%%\n" % (100 * _visible(released, o)))
    gs_scale = 2 * span / (eps[0] / eps[1])
    baseline = raw + np.random.default_rng(opts.seed).laplace(0.0, gs_scale, size=raw.shape)
    w("           global sensitivity (uniform LDP):     %5.1f%%  (noise scale %.0f quanta)\n"
      % (100 * _visible(baseline, o), gs_scale))
    return 0


def _visible(points: np.ndarray, outlier: np.ndarray) -> float:
    r = np.linalg.norm(points.astype(float), axis=1)
    return float(np.mean(r[outlier] > np.percentile(r[~outlier], 99)))


def _fmt(f: Fraction) -> str:
    if f.denominator == 1:
        return str(f.numerator)
    return "%.4g" % float(f) if f.denominator > 1000 else "%s (= %.4g)" % (f, float(f))


class _SystemRandom:
    """``getrandbits`` over the OS CSPRNG, for a demo run without a fixed seed."""

    def getrandbits(self, k: int) -> int:
        return secrets.randbits(k)
