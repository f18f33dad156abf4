"""A simulated fleet: N virtual devices publishing a data set through the real broker.

Every record is scaled, perturbed, measured, tokenised and encoded by ``shared_protocol``
exactly as a board does it (``dpsense.protocol.mechanism.RecordMechanism`` and
``firmware/node.py``'s order of messages), then published with QoS 1 under the device's
own account. The ground truth (raw values and outlier labels) is written next to the
broker data for evaluation only; no service reads it.
"""
from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud import topics
from dpsense.cloud.broker import Broker
from dpsense.cloud.config import Settings
from dpsense.protocol import wire
from dpsense.protocol.fixedpoint import Affine, parse_decimal
from dpsense.protocol.mechanism import Column, RecordMechanism
from dpsense.protocol.rng import XorShift32
from dpsense.protocol.tokens import new_token


@dataclass(frozen=True)
class DeviceProfile:
    """What provisioning gives a device: scaling, relaxed sensitivity, epsilon, centre."""

    quantum: float
    domain: float
    delta_q: tuple[int, ...]
    epsilon: str
    centre_q: tuple[int, ...]
    config_id: int = 1
    w_o_q: float = 0.0
    dbscan_eps: float = 12.0
    dbscan_min_samples: int = 60
    band_width_q: float = 0.0

    def mechanism(self, rng: object) -> RecordMechanism:
        span = int(round(self.domain / self.quantum))
        eps = parse_decimal(self.epsilon)
        cols = [Column(Affine(1, 1, 0, -span, span), d, eps) for d in self.delta_q]
        return RecordMechanism(cols, list(self.centre_q), rng)

    def noise_scale_q(self) -> float:
        """b, the largest per-column noise scale in quanta (public: sensitivity / epsilon)."""
        num, den = parse_decimal(self.epsilon)
        return max(self.delta_q) * den / num

    def normal_radius_q(self) -> float:
        """rho in quanta: half the diagonal of the relaxed-sensitivity box."""
        from dpsense.cloud.correction.rules import normal_radius
        return normal_radius(self.delta_q)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


@dataclass
class Encoded:
    """Payloads of one fleet run, in publishing order, and the ground truth."""

    device_ids: np.ndarray          # per record
    seqs: np.ndarray
    readings: list[bytes]
    corrections: list[bytes]
    raw_q: np.ndarray               # scaled raw values (quanta), evaluation only
    released_q: np.ndarray


class _SystemRandom:
    def getrandbits(self, k: int) -> int:
        return secrets.randbits(k)


def encode_fleet(x: np.ndarray, profile: DeviceProfile, devices: int, seed: int | None,
                 boot_id: int = 1, progress: Callable[[int, int], None] | None = None) -> Encoded:
    """Perturb and encode every row of ``x`` (units); row i belongs to device ``i % devices + 1``."""
    n = len(x)
    raw_q = np.rint(x / profile.quantum).astype(np.int64)
    mechs, rngs = [], []
    for d in range(devices):
        rng = XorShift32(seed * 1000 + d + 1) if seed else _SystemRandom()
        rngs.append(rng)
        mechs.append(profile.mechanism(rng))
    seq_next = [0] * devices
    dev_ids = np.empty(n, dtype=np.int64)
    seqs = np.empty(n, dtype=np.int64)
    released = np.empty_like(raw_q)
    readings: list[bytes] = []
    corrections: list[bytes] = []
    step = max(1, n // 10)
    for i in range(n):
        d = i % devices
        _, out, dd = mechs[d].perturb([int(v) for v in raw_q[i]])
        tok = new_token(rngs[d])
        readings.append(wire.encode_reading(d + 1, boot_id, seq_next[d], tok, profile.config_id, out))
        corrections.append(wire.encode_correction(tok, dd))
        dev_ids[i] = d + 1
        seqs[i] = seq_next[d]
        released[i] = out
        seq_next[d] += 1
        if progress and (i + 1) % step == 0:
            progress(i + 1, n)
    return Encoded(dev_ids, seqs, readings, corrections, raw_q, released)


class FleetPublisher:
    """One MQTT connection per virtual device; QoS 1; waits for every PUBACK."""

    def __init__(self, settings: Settings, broker: Broker, devices: int) -> None:
        self.settings = settings
        self.clients: list[mqtt.Client] = []
        self._acked = 0
        self._lock = threading.Lock()
        for d in range(1, devices + 1):
            name = topics.device_username(d)
            c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="sim-" + name,
                            clean_session=True, protocol=mqtt.MQTTv311)
            c.username_pw_set(name, broker.password(name))
            c.max_inflight_messages_set(1000)
            c.max_queued_messages_set(0)
            c.on_publish = self._on_publish
            self.clients.append(c)

    def _on_publish(self, client: mqtt.Client, userdata: object, mid: int, reason: object, props: object) -> None:
        with self._lock:
            self._acked += 1

    def connect(self) -> None:
        for c in self.clients:
            c.connect(self.settings.broker_host, self.settings.broker_port, keepalive=30)
            c.loop_start()
        deadline = time.monotonic() + 10
        while not all(c.is_connected() for c in self.clients):
            if time.monotonic() > deadline:
                raise ConnectionError("simulated devices could not connect to the broker")
            time.sleep(0.01)

    def publish(self, enc: Encoded, progress: Callable[[int, int], None] | None = None,
                timeout: float = 600.0) -> float:
        """Publish every record; return seconds until the last PUBACK arrived."""
        n = len(enc.readings)
        total = 2 * n
        t0 = time.perf_counter()
        step = max(1, n // 10)
        for i in range(n):
            c = self.clients[int(enc.device_ids[i]) - 1]
            c.publish(topics.READINGS % topics.device_username(int(enc.device_ids[i])), enc.readings[i], qos=1)
            c.publish(topics.CORRECTIONS, enc.corrections[i], qos=1)
            if progress and (i + 1) % step == 0:
                progress(i + 1, n)
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._acked >= total:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("only %d of %d messages acknowledged" % (self._acked, total))
            time.sleep(0.005)
        return time.perf_counter() - t0

    def close(self) -> None:
        for c in self.clients:
            c.disconnect()
            c.loop_stop()


def save_ground_truth(path: Path, enc: Encoded, outlier: np.ndarray, profile: DeviceProfile) -> None:
    np.savez_compressed(path, device_id=enc.device_ids, seq=enc.seqs, raw_q=enc.raw_q,
                        released_q=enc.released_q, outlier=outlier,
                        profile=np.array(profile.to_json()))


def stderr_progress(label: str) -> Callable[[int, int], None]:
    def report(i: int, n: int) -> None:
        print("  %s %d / %d" % (label, i, n), file=sys.stderr, flush=True)
    return report


class FleetError(RuntimeError):
    """The simulation cannot run; the text says why."""


def load_data(args: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    seed = int(getattr(args, "seed")) or 1
    d = paper1_synthetic(n, float(getattr(args, "separation")), str(getattr(args, "shape")), seed=seed)
    ref = paper1_synthetic(n, float(getattr(args, "separation")), str(getattr(args, "shape")),
                           seed=seed + 1000)
    return d.x, d.outlier, ref.x


def calibrate(reference: np.ndarray, epsilon: str, quantum: float, dbscan_eps: float = 12.0,
              dbscan_min_samples: int = 60) -> DeviceProfile:
    """Deployment parameters from reference (historical) data, never from the data released:
    relaxed sensitivity per column (SPEC 1.3, the narrowest 90 % range), centre, domain,
    the outlier-layer width w_O for the correction server (SPEC 1.6.2: spread of the
    detected outliers' radii) and the analyst's band width (half the detected border)."""
    from dpsense.cloud.correction.bands import width_from_history
    from dpsense.cloud.correction.rules import normal_radius
    from dpsense.cloud.datasets import relaxed_sensitivity
    from dpsense.cloud.outliers.dbscan import DBSCANOutliers
    rs = relaxed_sensitivity(reference, method="shorth")
    domain = float(np.max(np.abs(reference))) * 1.5 + 1.0
    centre = reference.mean(axis=0)
    out = DBSCANOutliers(dbscan_eps, dbscan_min_samples).fit(reference).outlier_mask_
    radii = np.linalg.norm(reference[out] - centre, axis=1)
    w_o = float(radii.max() - radii.min()) if radii.size > 1 else 0.0
    delta_q = tuple(max(1, int(round(r / quantum))) for r in rs)
    band = width_from_history(radii / quantum, normal_radius(delta_q))
    return DeviceProfile(quantum=quantum, domain=domain, delta_q=delta_q,
                         epsilon=epsilon, centre_q=tuple(int(c) for c in np.rint(centre / quantum)),
                         w_o_q=w_o / quantum, dbscan_eps=dbscan_eps, dbscan_min_samples=dbscan_min_samples,
                         band_width_q=band)


def load_profile(data_dir: Path | str) -> DeviceProfile | None:
    p = Path(data_dir) / "profile.json"
    if not p.exists():
        return None
    d = json.loads(p.read_text())
    d["delta_q"] = tuple(d["delta_q"])
    d["centre_q"] = tuple(d["centre_q"])
    return DeviceProfile(**d)


def run_simulation(settings: Settings, args: object) -> dict[str, float]:
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
    print("simulate: %d readings x %d columns from %d devices, epsilon %s per column"
          % (len(x), x.shape[1], devices, profile.epsilon), file=sys.stderr, flush=True)
    seed = int(getattr(args, "seed"))
    t0 = time.perf_counter()
    enc = encode_fleet(x, profile, devices, seed, progress=log("perturbed"))
    t_enc = time.perf_counter() - t0
    save_ground_truth(Path(settings.data_dir) / "groundtruth.npz", enc, outlier, profile)
    (Path(settings.data_dir) / "profile.json").write_text(profile.to_json())
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
