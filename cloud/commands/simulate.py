"""``dpsense simulate``: a data set published by N virtual devices through the broker.

The command's options (``parser_simulate`` in cloud/commands/services.py) arrive here as
an ``argparse.Namespace``: the data come from ``--csv`` or the paper-1 generator, the
profile is calibrated on reference data (cloud/profile.py) and written to the data
directory for the analyst and the correction server, and the fleet (cloud/simulate.py)
perturbs and publishes every reading.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from dpsense.cloud import topics
from dpsense.cloud.broker import Broker
from dpsense.cloud.config import Settings
from dpsense.cloud.errors import DpsenseError
from dpsense.cloud.profile import calibrate, save_profile
from dpsense.cloud.report import noise_source
from dpsense.cloud.simulate import FleetPublisher, encode_fleet, save_ground_truth, stderr_progress


class FleetError(DpsenseError):
    """The simulation cannot run; the text says why."""


def load_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, outlier, reference)`` from ``--csv`` or the paper-1 generator."""
    from dpsense.cloud.datasets import paper1_synthetic
    csv = getattr(args, "csv", None)
    if csv:
        import csv as csvmod
        with open(csv, newline="") as f:
            rows = list(csvmod.reader(f))
        if len(rows) < 2:
            raise FleetError("%s: need a header row and at least one data row" % csv)
        header = [h.strip() for h in rows[0]]
        label = header.index("outlier") if "outlier" in header else None
        cols = [i for i in range(len(header)) if i != label]
        try:
            data = np.array([[float(r[i]) for i in cols] for r in rows[1:]])
            outlier = (np.array([float(r[label]) for r in rows[1:]]) > 0 if label is not None
                       else np.zeros(len(data), dtype=bool))
        except (ValueError, IndexError) as e:
            raise FleetError("%s: not a numeric CSV (%s)" % (csv, e)) from None
        return data, outlier, data
    n = int(getattr(args, "n"))
    seed = getattr(args, "seed", None)
    seed = 1 if seed is None else int(seed)
    d = paper1_synthetic(n, float(getattr(args, "separation")), str(getattr(args, "shape")), seed=seed)
    ref = paper1_synthetic(n, float(getattr(args, "separation")), str(getattr(args, "shape")),
                           seed=seed + 1000)
    return d.x, d.outlier, ref.x


def run_simulation(settings: Settings, args: argparse.Namespace) -> dict[str, float]:
    devices = int(getattr(args, "devices"))
    if devices < 1:
        raise FleetError("--devices must be >= 1")
    x, outlier, reference = load_data(args)
    profile = calibrate(reference, str(getattr(args, "epsilon")), float(getattr(args, "quantum")))
    broker = Broker(settings.data_dir, port=settings.broker_port, host=settings.broker_host)
    existing = broker.accounts()
    for d in range(1, devices + 1):
        if topics.device_username(d) not in existing:
            broker.add_device(d)
    log = stderr_progress
    seed = getattr(args, "seed", None)
    print("simulate: %d readings x %d columns from %d devices, epsilon %s per column; noise: %s"
          % (len(x), x.shape[1], devices, profile.epsilon, noise_source(seed)),
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    enc = encode_fleet(x, profile, devices, seed, progress=log("perturbed"))
    t_enc = time.perf_counter() - t0
    save_ground_truth(Path(settings.data_dir) / "groundtruth.npz", enc, outlier, profile)
    save_profile(settings.data_dir, profile)
    pub = FleetPublisher(settings, broker, devices)
    try:
        pub.connect()
        t_pub = pub.publish(enc, progress=log("published"))
    except (OSError, ConnectionError) as e:
        raise FleetError("cannot reach the broker at %s:%d (%s); start it with `dpsense broker run`"
                         % (settings.broker_host, settings.broker_port, e)) from None
    finally:
        pub.close()
    stats = {"readings": float(len(x)), "perturb_s": t_enc, "publish_s": t_pub,
             "readings_per_s": len(x) / t_pub if t_pub else 0.0}
    print("simulate: perturbed %d readings in %.1f s; published and acknowledged %d messages in %.1f s "
          "(%.0f readings/s)" % (len(x), t_enc, 2 * len(x), t_pub, stats["readings_per_s"]),
          file=sys.stderr, flush=True)
    return stats
