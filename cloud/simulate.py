"""A simulated fleet: N virtual devices publishing a data set through the real broker.

Every record is scaled, perturbed, measured, tokenised and encoded by ``shared_protocol``
exactly as a board does it (``dpsense.protocol.mechanism.RecordMechanism`` and
``firmware/node.py``'s order of messages), then published with QoS 1 under the device's
own account. The ground truth (raw values and outlier labels) is written next to the
broker data for evaluation only; no service reads it.

The device profile the fleet is provisioned with is cloud/profile.py's; the ``dpsense
simulate`` command (cloud/commands/simulate.py) and the demo (cloud/pipeline.py) are the
only users of this module.
"""
from __future__ import annotations

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
from dpsense.cloud.profile import DeviceProfile
from dpsense.protocol import wire
from dpsense.protocol.rng import XorShift32
from dpsense.protocol.tokens import new_token


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
    """Perturb and encode every row of ``x`` (units); row i belongs to device ``i % devices + 1``.

    ``seed`` None (the commands' default): each device draws its noise and tokens from the
    OS CSPRNG, as a board does from its hardware RNG. An int seeds a ``XorShift32`` per
    device: the run is reproducible and its noise can be replayed, so it is not private.
    """
    n = len(x)
    raw_q = np.rint(x / profile.quantum).astype(np.int64)
    mechs, rngs = [], []
    for d in range(devices):
        rng = XorShift32(seed * 1000 + d + 1) if seed is not None else _SystemRandom()
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
