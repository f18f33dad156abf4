"""A simulated fleet: N virtual devices publishing a data set through the real broker.

Every record is scaled, perturbed, measured, tokenised and encoded by ``shared_protocol``
exactly as a board does it (``dpsense.protocol.mechanism.RecordMechanism`` and
``firmware/node.py``'s order of messages), then published with QoS 1 under the device's
own account. The ground truth (raw values and outlier labels) is written next to the
broker data for evaluation only; no service reads it.

The connections are cloud/sim/fleetpub.py's ``FleetPublisher`` (one per device, in worker
processes). The device profile the fleet is provisioned with is cloud/deploy/profile.py's; the ``dpsense
simulate`` command (cloud/cli/commands/simulate.py) and the demo (cloud/sim/demo.py) are the
only users of this module.
"""
from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from dpsense.cloud.correction.sealed import DeviceKeys, sealer_for
from dpsense.cloud.deploy.files import write_private
from dpsense.cloud.sim.fleetpub import FleetPublisher
from dpsense.cloud.deploy.profile import DeviceProfile
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

    def __init__(self, profile: DeviceProfile, devices: int, seed: int | None, boot_id: int = 1,
                 keys: Sequence[DeviceKeys] | None = None) -> None:
        if devices < 1:
            raise ValueError("devices must be >= 1")
        if keys is not None and len(keys) != devices:
            raise ValueError("one key pair per device")
        self.profile = profile
        self.devices = devices
        self.boot_id = boot_id
        self.seeded = seed is not None
        self._rngs = [XorShift32(seed * 1000 + d + 1) if seed is not None else _SystemRandom()
                      for d in range(devices)]
        self._mechs: list[RecordMechanism] = [profile.mechanism(rng) for rng in self._rngs]
        self._seq = [0] * devices
        # With keys, correction records are sealed (kind 3) as a board seals them; the nonce
        # is a counter per device, from 0, under keys that are new for this fleet.
        self._sealers = [sealer_for(k) for k in keys] if keys is not None else None
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
            if self._sealers is not None:
                sealer = self._sealers[d]
                corrections.append(sealer.seal(d + 1, self.boot_id, self._seq[d], sealer.last + 1, tok, dd))
            else:
                corrections.append(wire.encode_correction(d + 1, self.boot_id, self._seq[d], tok, dd))
            dev_ids[i] = d + 1
            seqs[i] = self._seq[d]
            released[i] = out
            self._seq[d] += 1
            if progress and (i + 1) % step == 0:
                progress(i + 1, n)
        return Encoded(dev_ids, seqs, readings, corrections, raw_q, released)

    def status(self, device_id: int, event: str = "boot") -> bytes:
        """A status message of a device, in a board's words (firmware/app.py): ``boot``, or ``done``
        with ``last_seq``, the last sequence number it released (docs/protocol.md 13.2)."""
        m = self._mechs[device_id - 1]
        doc: dict[str, object] = {"event": event, "device": device_id, "boot": self.boot_id, "board": "simulated",
               "entropy": "xorshift32 (seeded)" if self.seeded else "secrets",
               "eps_record": str(Fraction(*m.epsilon_row())), "eps_record_worst": str(Fraction(*m.epsilon_row_worst())),
               "sensor": "simulated"}
        released = self._seq[device_id - 1]
        if event != "boot" and released:
            doc["released"] = released
            doc["last_seq"] = released - 1
        return json.dumps(doc, separators=(",", ":")).encode()


def encode_fleet(x: np.ndarray, profile: DeviceProfile, devices: int, seed: int | None,
                 boot_id: int = 1, progress: Callable[[int, int], None] | None = None,
                 keys: Sequence[DeviceKeys] | None = None) -> Encoded:
    """Perturb and encode every row of ``x`` (units); row i belongs to device ``i % devices + 1``.

    ``seed`` None (the commands' default): each device draws its noise and tokens from the
    OS CSPRNG, as a board does from its hardware RNG. An int seeds a ``XorShift32`` per
    device: the run is reproducible and its noise can be replayed, so it is not private.
    ``keys`` (one pair per device, cloud/correction/sealed.py ``provision_keys``): the
    correction records are sealed; without them they are plain 16-byte records, which a
    correction server refuses.
    """
    return FleetEncoder(profile, devices, seed, boot_id, keys).encode(x, progress)


__all__ = ["Encoded", "FleetEncoder", "FleetPublisher", "boot_id_now", "encode_fleet", "save_ground_truth",
           "stderr_progress"]


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
