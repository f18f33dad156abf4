"""``dpsense simulate``: a data set published by N virtual devices through the broker.

The command's options (``parser_simulate`` in cloud/cli/commands/services.py) arrive here as
an ``argparse.Namespace``: the data come from ``--csv`` or the paper-1 generator, the
profile is calibrated on reference data (cloud/deploy/profile.py) and written to the data
directory for the analyst and the correction server, and the fleet (cloud/sim/simulate.py)
perturbs and publishes every reading.

``--rate R --duration D`` (``run_steady``) makes it a steady fleet: R readings per second
for D seconds (or until stopped), round robin over the devices, perturbed record by record
as on a board. The data are drawn afresh per block from ``--data`` (the paper-1 generator, the
simulated sensor fleet of cloud/sim/sensors.py or a family of cloud/sim/families.py), or are
the rows of ``--csv``, over and over. Each device first publishes a ``boot`` status message with
its epsilons, as a board does. A run is one boot of every device: its boot id is the start
time in seconds, so a second run never repeats a (device, boot, seq) key of the first.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker
from dpsense.cloud.cli.commands.common import check_transport
from dpsense.cloud.deploy.config import Settings
from dpsense.cloud.errors import DpsenseError
from dpsense.cloud.deploy.profile import DeviceProfile, save_profile
from dpsense.cloud.sim.calibration import calibrate
from dpsense.cloud.sim.report import noise_source
from dpsense.cloud.correction.sealed import provision_keys
from dpsense.cloud.sim.simulate import (Encoded, FleetEncoder, FleetPublisher, boot_id_now, encode_fleet,
                                    save_ground_truth, stderr_progress)


class FleetError(DpsenseError):
    """The simulation cannot run; the text says why."""


def synthetic(args: argparse.Namespace, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of ``--data`` from ``seed`` and their ground truth. Sensors: one simulated sensor
    per device, in the fleet's round-robin order, so a fault episode is one board's."""
    from dpsense.cloud.sim.datasets import paper1_synthetic
    data = str(getattr(args, "data", "paper1"))
    if data == "paper1":
        d = paper1_synthetic(n, float(getattr(args, "separation")), str(getattr(args, "shape")), seed=seed)
        return d.x, d.outlier
    if data == "sensors":
        from dpsense.cloud.sim.sensors import sensor_fleet
        devices = int(getattr(args, "devices"))
        if n < 20 or devices > n // 10:
            raise FleetError("--data sensors needs at least 10 readings per device (--n >= %d)" % max(20, 10 * devices))
        s = sensor_fleet(n, seed, devices=devices)
        return s.x, s.outlier
    from dpsense.cloud.sim.families import family
    try:
        f = family(data, n, seed)
    except ValueError as e:
        raise FleetError("--data %s: %s" % (data, e)) from None
    return f.x, f.outlier


def load_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, outlier, reference)`` from ``--csv`` or the ``--data`` generator (reference: seed + 1000)."""
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
    x, outlier = synthetic(args, n, seed)
    return x, outlier, synthetic(args, n, seed + 1000)[0]


def run_simulation(settings: Settings, args: argparse.Namespace) -> dict[str, float]:
    devices = int(getattr(args, "devices"))
    if devices < 1:
        raise FleetError("--devices must be >= 1")
    x, outlier, reference = load_data(args)
    profile = calibrate(reference, str(getattr(args, "epsilon")), float(getattr(args, "quantum")))
    check_transport(settings)
    # The broker keeps no password in clear, so the fleet's accounts get new ones for this
    # run, held in memory only.
    broker = Broker(settings.data_dir, port=settings.broker_port, host=settings.broker_host)
    passwords = broker.add_devices(list(range(1, devices + 1)))
    print("simulate: new passwords for the simulated device accounts d1..d%d" % devices,
          file=sys.stderr, flush=True)
    log = stderr_progress
    seed = getattr(args, "seed", None)
    print("simulate: %d readings x %d columns from %d devices, epsilon %s per column; noise: %s"
          % (len(x), x.shape[1], devices, profile.epsilon, noise_source(seed)),
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    # New keys for this fleet: the correction server opens only sealed records.
    keys = provision_keys(settings.cs_dir, list(range(1, devices + 1)))
    enc = encode_fleet(x, profile, devices, seed, progress=log("perturbed"), keys=keys)
    t_enc = time.perf_counter() - t0
    save_ground_truth(Path(settings.data_dir) / "groundtruth.npz", enc, outlier, profile)
    share_profile(settings, profile)
    wait = str(getattr(args, "wait", "committed"))
    pub = FleetPublisher(settings, passwords, devices, on_event=lambda e: _say("simulate: " + e))
    try:
        pub.connect()
        t_pub = pub.publish(enc, progress=log(wait), timeout=float(getattr(args, "commit_timeout", 120.0)),
                            wait=wait)
    except (OSError, ConnectionError) as e:
        raise FleetError("cannot reach the broker at %s:%d (%s); start it with `dpsense broker run`"
                         % (settings.broker_host, settings.broker_port, e)) from None
    except TimeoutError as e:
        raise FleetError("%s%s" % (e, _NOT_COMMITTED if wait == "committed" else "")) from None
    finally:
        pub.close()
    stats = {"readings": float(len(x)), "perturb_s": t_enc, "publish_s": t_pub,
             "readings_per_s": len(x) / t_pub if t_pub else 0.0}
    print("simulate: perturbed %d readings in %.1f s; %s in %.1f s (%.0f readings/s)"
          % (len(x), t_enc, ("all %d records committed by the cloud" % len(x)) if wait == "committed" else
             ("%d messages acknowledged by the broker (delivery not checked)" % (2 * len(x))),
             t_pub, stats["readings_per_s"]), file=sys.stderr, flush=True)
    return stats


_NOT_COMMITTED = ("; the rest were not acknowledged as committed (are the analyst's and the correction "
                  "server's ingests running on this broker?)")


TICK = 0.02            # pacing step: at most this late against the schedule


def data_blocks(args: argparse.Namespace, block: int) -> Iterator[np.ndarray]:
    """Endless blocks of rows: fresh draws of ``--data`` (seed + 7919 x block number), or the CSV over and over."""
    if getattr(args, "csv", None):
        x, _, _ = load_data(args)
        while True:
            yield x
    seed = getattr(args, "seed", None)
    seed = int(time.time()) if seed is None else int(seed)
    devices = int(getattr(args, "devices"))
    # Whole rounds of the devices: row i of every block is device i % devices's, as in the data.
    size = -(-max(block, 10 * devices, 20) // devices) * devices
    k = 0
    while True:
        k += 1
        yield synthetic(args, size, seed + 7919 * k)[0]


def run_steady(settings: Settings, args: argparse.Namespace, stop: threading.Event) -> dict[str, float]:
    """Publish ``args.rate`` readings per second for ``args.duration`` seconds (None: until ``stop``)."""
    rate = float(getattr(args, "rate"))
    duration = getattr(args, "duration", None)
    devices = int(getattr(args, "devices"))
    if not rate > 0:
        raise FleetError("--rate must be > 0 readings per second")
    if duration is not None and not float(duration) > 0:
        raise FleetError("--duration must be > 0 seconds")
    if devices < 1:
        raise FleetError("--devices must be >= 1")
    _, _, reference = load_data(args)
    profile = calibrate(reference, str(getattr(args, "epsilon")), float(getattr(args, "quantum")))
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    # Written before the first reading, so a correction server waiting for w_O gets it.
    share_profile(settings, profile)
    check_transport(settings)
    # The broker keeps no password in clear: the fleet's accounts get new ones for this run,
    # held in memory only.
    broker = Broker(settings.data_dir, port=settings.broker_port, host=settings.broker_host)
    passwords = broker.add_devices(list(range(1, devices + 1)))
    seed = getattr(args, "seed", None)
    enc = FleetEncoder(profile, devices, seed, boot_id_now(),
                       keys=provision_keys(settings.cs_dir, list(range(1, devices + 1))))
    blocks = data_blocks(args, int(min(max(rate, 100), 10_000)))
    say = _say
    say("simulate: %g readings/s from %d devices (boot %d), %s; epsilon %s per column; %s"
        % (rate, devices, enc.boot_id, "for %g s" % float(duration) if duration else "until stopped",
           profile.epsilon, noise_source(seed)))
    wait = str(getattr(args, "wait", "committed"))
    pub = FleetPublisher(settings, passwords, devices, on_event=lambda e: _say("simulate: " + e))
    try:
        pub.connect()
    except (OSError, ConnectionError) as e:
        pub.close()
        raise FleetError("cannot reach the broker at %s:%d (%s); start it with `dpsense broker run`"
                         % (settings.broker_host, settings.broker_port, e)) from None
    sent = 0
    t0 = time.monotonic()
    try:
        pub.send([(d, topics.STATUS % topics.device_username(d), enc.status(d)) for d in range(1, devices + 1)])
        batch: Encoded | None = None
        i = 0
        last_said = t0 = time.monotonic()
        total = None if duration is None else int(round(rate * float(duration)))
        while not stop.is_set():
            now = time.monotonic()
            due = int(rate * (now - t0)) + 1
            if total is not None:
                due = min(due, total)
            out: list[tuple[int, bytes, bytes]] = []
            while sent < due:
                if batch is None or i == len(batch.readings):
                    batch, i = enc.encode(next(blocks)), 0
                out.append((int(batch.device_ids[i]), batch.readings[i], batch.corrections[i]))
                i += 1
                sent += 1
            # Into the books: a record the cloud has not committed is sent again, as a board does.
            pub.stream_records(out)
            if total is not None and sent >= total:
                break
            if now - last_said >= 10:
                say("simulate: %d readings published (%.1f/s)" % (sent, sent / (now - t0)))
                last_said = now
            stop.wait(TICK)
    except KeyboardInterrupt:
        pass
    elapsed = time.monotonic() - t0
    timeout = float(getattr(args, "commit_timeout", 120.0))
    try:
        # Each device's last seq: a tail the cloud never stored shows against it (dpsense status).
        pub.send([(d, topics.STATUS % topics.device_username(d), enc.status(d, "done"))
                  for d in range(1, devices + 1)])
        if wait == "committed":
            if not pub.wait_committed(timeout):
                raise FleetError("%d of %d records not committed %.0f s after the last was sent%s"
                                 % (pub.uncommitted, sent, timeout, _NOT_COMMITTED))
        else:
            _wait_acked(pub, 2 * sent + 2 * devices, timeout)
    finally:
        pub.close()
    say("simulate: published %d readings in %.1f s (%.1f/s); %s"
        % (sent, elapsed, sent / elapsed if elapsed else 0.0,
           "every record committed by the cloud" if wait == "committed"
           else "every message acknowledged by the broker (delivery not checked)"))
    return {"readings": float(sent), "seconds": elapsed}


def _wait_acked(pub: FleetPublisher, total: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pub.acked < total:
        if time.monotonic() > deadline:
            raise FleetError("only %d of %d messages acknowledged by the broker" % (pub.acked, total))
        time.sleep(0.01)


def share_profile(settings: Settings, profile: DeviceProfile) -> None:
    """The profile in the data dir, and in the correction server's folder too when that is a
    zone of its own (public parameters: w_O, the sensitivities, the centre). Written by root,
    each copy gets its folder's owner, the service that reads it."""
    from dpsense.cloud.deploy.files import folder_owner
    for folder in (settings.data_dir, settings.cs_dir) if settings.two_zones else (settings.data_dir,):
        owner = folder_owner(folder)
        path = save_profile(folder, profile)
        if owner is not None:
            os.chown(path, *owner)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
