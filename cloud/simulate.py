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

import json
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud import topics
from dpsense.cloud.files import write_private
from dpsense.cloud.config import Settings
from dpsense.cloud.profile import DeviceProfile
from dpsense.protocol import wire
from dpsense.protocol.mechanism import RecordMechanism
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


def boot_id_now() -> int:
    return int(time.time()) & 0xFFFFFFFF


class FleetEncoder:
    """Per-device mechanisms, random sources and sequence numbers, kept across calls."""

    def __init__(self, profile: DeviceProfile, devices: int, seed: int | None, boot_id: int = 1) -> None:
        if devices < 1:
            raise ValueError("devices must be >= 1")
        self.profile = profile
        self.devices = devices
        self.boot_id = boot_id
        self.seeded = seed is not None
        self._rngs = [XorShift32(seed * 1000 + d + 1) if seed is not None else _SystemRandom()
                      for d in range(devices)]
        self._mechs: list[RecordMechanism] = [profile.mechanism(rng) for rng in self._rngs]
        self._seq = [0] * devices
        self._next = 0                  # the device of the next row (round robin)

    def encode(self, x: np.ndarray, progress: Callable[[int, int], None] | None = None) -> Encoded:
        """Perturb and encode every row of ``x`` (units), continuing each device's sequence."""
        n = len(x)
        raw_q = np.rint(x / self.profile.quantum).astype(np.int64)
        dev_ids = np.empty(n, dtype=np.int64)
        seqs = np.empty(n, dtype=np.int64)
        released = np.empty_like(raw_q)
        readings: list[bytes] = []
        corrections: list[bytes] = []
        step = max(1, n // 10)
        for i in range(n):
            d = self._next
            self._next = (d + 1) % self.devices
            _, out, dd = self._mechs[d].perturb([int(v) for v in raw_q[i]])
            tok = new_token(self._rngs[d])
            readings.append(wire.encode_reading(d + 1, self.boot_id, self._seq[d], tok, self.profile.config_id, out))
            corrections.append(wire.encode_correction(tok, dd))
            dev_ids[i] = d + 1
            seqs[i] = self._seq[d]
            released[i] = out
            self._seq[d] += 1
            if progress and (i + 1) % step == 0:
                progress(i + 1, n)
        return Encoded(dev_ids, seqs, readings, corrections, raw_q, released)

    def status(self, device_id: int) -> bytes:
        """The ``boot`` status message of a device, in a board's words (firmware/app.py)."""
        m = self._mechs[device_id - 1]
        doc = {"event": "boot", "device": device_id, "boot": self.boot_id, "board": "simulated",
               "entropy": "xorshift32 (seeded)" if self.seeded else "secrets",
               "eps_record": str(Fraction(*m.epsilon_row())), "eps_record_worst": str(Fraction(*m.epsilon_row_worst())),
               "sensor": "simulated"}
        return json.dumps(doc, separators=(",", ":")).encode()


def encode_fleet(x: np.ndarray, profile: DeviceProfile, devices: int, seed: int | None,
                 boot_id: int = 1, progress: Callable[[int, int], None] | None = None) -> Encoded:
    """Perturb and encode every row of ``x`` (units); row i belongs to device ``i % devices + 1``.

    ``seed`` None (the commands' default): each device draws its noise and tokens from the
    OS CSPRNG, as a board does from its hardware RNG. An int seeds a ``XorShift32`` per
    device: the run is reproducible and its noise can be replayed, so it is not private.
    """
    return FleetEncoder(profile, devices, seed, boot_id).encode(x, progress)


class FleetPublisher:
    """One MQTT connection per virtual device (over TLS when the settings name a CA); QoS 1;
    waits for every PUBACK. ``passwords``: account -> password, as the broker gave them when
    it made the accounts (it keeps no copy)."""

    def __init__(self, settings: Settings, passwords: dict[str, str], devices: int) -> None:
        self.settings = settings
        self.clients: list[mqtt.Client] = []
        self._acked = 0
        self._lock = threading.Lock()
        for d in range(1, devices + 1):
            name = topics.device_username(d)
            if name not in passwords:
                raise ValueError("no password for simulated device %s" % name)
            # The broker makes the account name the client id (cloud/broker.py).
            c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name,
                            clean_session=True, protocol=mqtt.MQTTv311)
            c.username_pw_set(name, passwords[name])
            if settings.tls_ca:
                c.tls_set(ca_certs=settings.tls_ca)
            c.max_inflight_messages_set(1000)
            c.max_queued_messages_set(0)
            c.on_publish = self._on_publish
            self.clients.append(c)

    def _on_publish(self, client: mqtt.Client, userdata: object, mid: int, reason: object, props: object) -> None:
        with self._lock:
            self._acked += 1

    @property
    def acked(self) -> int:
        """Messages the broker acknowledged so far."""
        with self._lock:
            return self._acked

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
    """The raw values, for evaluation only: a file only its owner may read (0600 from the start)."""
    with open(write_private(path, b""), "r+b") as f:
        np.savez_compressed(f, device_id=enc.device_ids, seq=enc.seqs, raw_q=enc.raw_q,
                            released_q=enc.released_q, outlier=outlier,
                            profile=np.array(profile.to_json()))


def stderr_progress(label: str) -> Callable[[int, int], None]:
    def report(i: int, n: int) -> None:
        print("  %s %d / %d" % (label, i, n), file=sys.stderr, flush=True)
    return report
