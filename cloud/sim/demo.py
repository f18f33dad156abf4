"""``dpsense demo``: the whole system on one machine, start to finish.

Starts Mosquitto, the correction server and the analyst as separate processes with
their own accounts and databases, publishes a simulated fleet (the paper-1 synthetic
data, perturbed record by record by ``shared_protocol``), lets the analyst detect and
run the correction round, then compares the candidates with the ground truth, prints a
table and writes an HTML report. Everything it started is stopped at the end. Its data
directory is 0700 and every file in it 0600 (cloud/deploy/files.py); each service gets its
broker password in its own environment, and no password is written anywhere.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from collections.abc import Callable
from typing import TextIO

import numpy as np

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, die_with_parent, free_port
from dpsense.cloud.deploy.config import Settings
from dpsense.cloud.sim.datasets import paper1_synthetic
from dpsense.cloud.errors import DpsenseError
from dpsense.cloud.deploy.files import private_dir, write_private
from dpsense.cloud.sim.report import NOT_PRIVATE, evaluate, noise_source, scatter_png, sweep_png, write_html
from dpsense.cloud.deploy.profile import save_profile
from dpsense.cloud.sim.calibration import calibrate
from dpsense.cloud.correction.sealed import provision_keys
from dpsense.cloud.sim.simulate import FleetPublisher, encode_fleet, save_ground_truth
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.protocol.fixedpoint import parse_decimal

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DemoOptions:
    n: int = 100_000
    devices: int = 10
    separation: float = 220.0
    shape: str = "scale"
    epsilon: str = "0.5"
    quantum: float = 0.01
    seed: int | None = None         # None: noise from the OS CSPRNG (data: seed 1)
    out: Path = Path("out/demo")
    sweep: bool = True
    timeout: float = 600.0
    mode: str = "bands"

    def __post_init__(self) -> None:
        if self.n < 1000:
            raise ValueError("n must be >= 1000")
        if self.devices < 1:
            raise ValueError("devices must be >= 1")
        parse_decimal(self.epsilon)
        if self.mode not in ("paper", "bands"):
            raise ValueError("mode must be paper or bands")


class DemoError(DpsenseError):
    pass


def _say(msg: str) -> None:
    print("demo: " + msg, file=sys.stderr, flush=True)


def _service(args: list[str], log: Path, password: str) -> subprocess.Popen[bytes]:
    """A service process; its broker password travels in its environment only."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DPSENSE_BROKER_PASSWORD=password)
    with open(write_private(log, b""), "wb") as f:
        # A killed demo takes its services with it (and its broker, below).
        return subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", *args], env=env,
                                stdout=f, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)


def _wait_sessions(logs: list[tuple[Path, str]], timeout: float = 30.0) -> None:
    """Devices may publish only once both ingest sessions are subscribed at the broker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() and ("ingest: subscribed to " + topic).encode() in p.read_bytes() for p, topic in logs):
            return
        time.sleep(0.1)
    raise DemoError("services did not subscribe within %.0f s (logs: %s)"
                    % (timeout, ", ".join(str(p) for p, _ in logs)))


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_pipeline_demo(opts: DemoOptions, out: TextIO = sys.stdout) -> int:
    t_all = time.perf_counter()
    data_dir = opts.out / "data"
    logs = opts.out / "logs"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    private_dir(data_dir)
    private_dir(logs)
    settings = Settings(data_dir=data_dir, broker_port=free_port())
    common = ["--data-dir", str(data_dir), "--broker-port", str(settings.broker_port)]

    _say("generating %d readings (paper-1 synthetic, separation %g) and calibrating on reference data"
         % (opts.n, opts.separation))
    data_seed = 1 if opts.seed is None else opts.seed
    data = paper1_synthetic(opts.n, opts.separation, opts.shape, seed=data_seed)
    ref = paper1_synthetic(opts.n, opts.separation, opts.shape, seed=data_seed + 1000)
    profile = calibrate(ref.x, opts.epsilon, opts.quantum)
    save_profile(data_dir, profile)

    broker = Broker(data_dir, port=settings.broker_port, die_with_parent=True)
    # Passwords live in this process and the environment of the service they belong to.
    analyst_pw = broker.add_account("analyst")
    correction_pw = broker.add_account("correction")
    device_pws = broker.add_devices(list(range(1, opts.devices + 1)))
    cs = analyst = None
    timings: dict[str, float] = {}
    try:
        broker.start()
        _say("broker on 127.0.0.1:%d; starting the correction server and the analyst (logs in %s)"
             % (settings.broker_port, logs))
        mode = ["--correction-mode", opts.mode]
        cs = _service(["correction-server", *common, *mode], logs / "correction-server.log", correction_pw)
        analyst = _service(["analyst", *common, *mode, "--window", str(opts.n), "--flush-idle", "3",
                            "--exit-when-done"], logs / "analyst.log", analyst_pw)
        _wait_sessions([(logs / "analyst.log", topics.READINGS_ALL),
                        (logs / "correction-server.log", topics.CORRECTIONS)])

        _say("perturbing on %d simulated devices (shared_protocol, exact discrete Laplace)" % opts.devices)
        t0 = time.perf_counter()
        keys = provision_keys(data_dir, list(range(1, opts.devices + 1)))
        enc = encode_fleet(data.x, profile, opts.devices, opts.seed, progress=_progress("perturbed"), keys=keys)
        timings["perturb"] = time.perf_counter() - t0
        save_ground_truth(data_dir / "groundtruth.npz", enc, data.outlier, profile)
        pub = FleetPublisher(settings, device_pws, opts.devices, on_event=lambda e: _say("fleet: " + e))
        pub.connect()
        try:
            _say("publishing %d messages with QoS 1; a record counts once both ingests committed it"
                 % (2 * opts.n))
            timings["publish"] = pub.publish(enc, progress=_progress("committed"), timeout=opts.timeout)
        except TimeoutError as e:
            raise DemoError("the cloud did not commit every record: %s (logs: %s)" % (e, logs)) from None
        finally:
            left = pub.close()
        if left:
            raise DemoError("%d records were never committed (logs: %s)" % (left, logs))
        t0 = time.perf_counter()
        _say("waiting for the analyst: ingest, detection and the correction round")
        deadline = time.monotonic() + opts.timeout
        while analyst.poll() is None:
            if time.monotonic() > deadline:
                raise DemoError("the analyst did not finish within %.0f s (log: %s)"
                                % (opts.timeout, logs / "analyst.log"))
            time.sleep(0.5)
        timings["analyst"] = time.perf_counter() - t0
        if analyst.returncode != 0:
            raise DemoError("the analyst failed (log: %s)" % (logs / "analyst.log"))
    finally:
        _stop(analyst)
        _stop(cs)
        broker.stop()
    _say("all services stopped; evaluating against the ground truth")

    truth = dict(np.load(data_dir / "groundtruth.npz"))
    with open_analyst_store(settings.analyst_db) as store:
        ev = evaluate(store, truth, profile.dbscan_eps, profile.dbscan_min_samples, opts.quantum)
        results = [r for _, r in store.window_results()]
        gaps = store.gaps()
        stored, dead = store.count(), store.dead_letter_count()
    with open_correction_store(settings.correction_db) as cstore:
        corr = cstore.count()
    detect_s = sum(r["detect_s"] for r in results)
    round_s = sum(r["round_s"] for r in results)

    rows = []
    if opts.sweep:
        _say("recall vs epsilon: the same data through the in-process experiment at epsilon 0.1, 0.5, 1")
        from dpsense.cloud.sim.experiments.paper1 import Paper1Config, run_paper1
        # The sweep shows no mode secure row, so it runs no garbled circuit.
        cfg = Paper1Config(separations=(opts.separation,), epsilons=(0.1, 0.5, 1.0), seeds=(data_seed,), n=opts.n,
                           shape=opts.shape, circuit_checks=0)
        rows = run_paper1(cfg)

    eps = Fraction(*parse_decimal(opts.epsilon))
    m = len(profile.delta_q)
    worst = max(Fraction(round(profile.domain * 2 / opts.quantum), d) for d in profile.delta_q) * eps * m
    w = out.write
    w("\ndpsense demo: %d readings from %d simulated devices through Mosquitto, the analyst and the "
      "correction server\n" % (opts.n, opts.devices))
    w("data: paper-1 synthetic, separation %g (%s); O = DBSCAN(%g, %d) on the raw data: %d outliers\n\n"
      % (opts.separation, opts.shape, profile.dbscan_eps, profile.dbscan_min_samples, ev.outliers))
    w("%-40s %16s %20s %10s\n" % ("", "recall", "subset", "precision"))
    w("%-40s %9d (%5.1f%%) %12d (%5.1f%%) %9.1f%%\n" % ("relaxed sensitivity, no correction", ev.found_presumed,
      100 * ev.accuracy_presumed, ev.presumed, 100 * ev.subset_presumed, 100 * ev.precision_presumed))
    w("%-40s %9d (%5.1f%%) %12d (%5.1f%%) %9.1f%%\n" % ("relaxed + correction (this run)", ev.found,
      100 * ev.accuracy, ev.candidates, 100 * ev.subset, 100 * ev.precision))
    w("%-40s %9d\n" % ("missed outliers", ev.outliers - ev.found))
    w("%s\n" % ev.explanation())
    w("\nprivacy   epsilon %s per column, %s per reading for normal readings (relaxed sensitivity %s quanta);\n"
      "          readings outside the normal range get up to epsilon %.4g per reading, by design\n"
      % (opts.epsilon, eps * m, "/".join(str(d) for d in profile.delta_q), float(worst)))
    w("noise     %s\n" % noise_source(opts.seed))
    w("delivery  %d readings and %d correction records stored, %d dead letters, %d missing sequence numbers\n"
      % (stored, corr, dead, sum(g.missing for g in gaps)))
    w("timings   perturb %.1f s, publish until committed %.1f s (%.0f readings/s), analyst after that %.1f s "
      "(detection %.1f s, correction round %.2f s)\n" % (timings["perturb"], timings["publish"],
        opts.n / timings["publish"], timings["analyst"], detect_s, round_s))
    if rows:
        w("\nrecall vs epsilon (same data, in-process, DBSCAN calibrated on the reference, 1 run, seed %d: %s):\n"
          % (data_seed, NOT_PRIVATE))
        w("%-8s %-36s %10s %10s %10s\n" % ("epsilon", "method", "recall", "subset", "precision"))
        for r in rows:
            if r.method in ("global", "relaxed", "paper", "bands", "default"):
                w("%-8g %-36s %9.1f%% %9.1f%% %9.1f%%\n" % (r.epsilon, r.method, 100 * r.recall, 100 * r.subset,
                                                          100 * r.precision))

    report = opts.out / "report.html"
    images = [("Raw vs released readings, candidates marked", scatter_png(truth, ev, opts.quantum))]
    if rows:
        images.append(("Recall and candidate share vs epsilon", sweep_png(rows)))
    table = [
        ("readings", "%d from %d devices" % (opts.n, opts.devices)),
        ("epsilon", "%s per column, %s per reading (normal readings)" % (opts.epsilon, eps * m)),
        ("noise", noise_source(opts.seed)),
        ("outliers O (DBSCAN on raw)", str(ev.outliers)),
        ("without correction: recall, subset, precision", "%d (%.1f%%), %d candidates (%.1f%%), %.1f%%" % (
            ev.found_presumed, 100 * ev.accuracy_presumed, ev.presumed, 100 * ev.subset_presumed,
            100 * ev.precision_presumed)),
        ("with correction (mode %s): recall, subset, precision" % opts.mode,
         "%d (%.1f%%), %d candidates (%.1f%%), %.1f%%" % (ev.found, 100 * ev.accuracy, ev.candidates,
                                                          100 * ev.subset, 100 * ev.precision)),
        ("stored / dead letters", "%d / %d" % (stored, dead)),
        ("detection / correction round", "%.1f s / %.2f s" % (detect_s, round_s)),
    ]
    write_html(report, "dpsense demo", table, images, [
        ev.explanation(),
        "Recall = |R ∩ O| / |O| with O the DBSCAN outliers of the raw data (the paper's accuracy); "
        "subset = |R| / n; precision = |R ∩ O| / |R|. The analyst saw only the released readings; the "
        "correction server only tokens, distance differences and the round's index sets.",
    ])
    w("\nreport    %s (total %.0f s)\n" % (report, time.perf_counter() - t_all))
    return 0


def _progress(label: str) -> Callable[[int, int], None]:
    def report(i: int, n: int) -> None:
        print("  %s %d / %d" % (label, i, n), file=sys.stderr, flush=True)
    return report
