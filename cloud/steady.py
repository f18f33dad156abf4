"""A steady fleet: ``dpsense simulate --rate R --duration D``, R readings per second for D seconds.

    enc = FleetEncoder(profile, devices=10, seed=1, boot_id=boot_id_now())
    batch = enc.encode(x)            # sequence numbers continue from the previous call
    run_steady(settings, args, stop) # paces, publishes, waits for every PUBACK

Readings go round robin over the devices, so each device publishes R / devices readings per
second, perturbed record by record by ``shared_protocol`` as on a board. The data are the
paper-1 generator's, drawn afresh per block (or the rows of ``--csv``, over and over). Each
device first publishes a ``boot`` status message with its epsilons, as a board does. A run is
one boot of every device: its boot id is the start time in seconds, so a second run never
repeats a (device, boot, seq) key of the first.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np

from dpsense.cloud import topics
from dpsense.cloud.broker import Broker
from dpsense.cloud.config import Settings
from dpsense.cloud.simulate import (
    DeviceProfile,
    Encoded,
    FleetError,
    FleetPublisher,
    _SystemRandom,
    calibrate,
    load_data,
)
from dpsense.protocol import wire
from dpsense.protocol.mechanism import RecordMechanism
from dpsense.protocol.rng import XorShift32
from dpsense.protocol.tokens import new_token

TICK = 0.02            # pacing step: at most this late against the schedule


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
        self.seeded = bool(seed)
        self._rngs = [XorShift32(seed * 1000 + d + 1) if seed else _SystemRandom() for d in range(devices)]
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


def data_blocks(args: object, block: int) -> Iterator[np.ndarray]:
    """Endless blocks of rows: fresh paper-1 draws (seed + block number), or the CSV over and over."""
    from dpsense.cloud.datasets import paper1_synthetic
    if getattr(args, "csv", None):
        x, _, _ = load_data(args)
        while True:
            yield x
    seed = int(getattr(args, "seed")) or int(time.time())
    k = 0
    while True:
        k += 1
        yield paper1_synthetic(max(block, 10), float(getattr(args, "separation")), str(getattr(args, "shape")),
                               seed=seed + 7919 * k).x


def run_steady(settings: Settings, args: object, stop: threading.Event) -> dict[str, float]:
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
    (Path(settings.data_dir) / "profile.json").write_text(profile.to_json())
    broker = Broker(settings.data_dir, port=settings.broker_port, host=settings.broker_host)
    existing = broker.accounts()
    for d in range(1, devices + 1):
        if topics.device_username(d) not in existing:
            broker.add_device(d)
    seed = int(getattr(args, "seed"))
    enc = FleetEncoder(profile, devices, seed, boot_id_now())
    blocks = data_blocks(args, int(min(max(rate, 100), 10_000)))
    say = _say
    say("simulate: %g readings/s from %d devices (boot %d), %s; epsilon %s per column"
        % (rate, devices, enc.boot_id, "for %g s" % float(duration) if duration else "until stopped",
           profile.epsilon))
    pub = FleetPublisher(settings, broker, devices)
    try:
        pub.connect()
    except (OSError, ConnectionError) as e:
        pub.close()
        raise FleetError("cannot reach the broker at %s:%d (%s); start it with `dpsense broker run`"
                         % (settings.broker_host, settings.broker_port, e)) from None
    sent = 0
    t0 = time.monotonic()
    try:
        for d in range(1, devices + 1):
            pub.clients[d - 1].publish(topics.STATUS % topics.device_username(d), enc.status(d), qos=1)
        batch: Encoded | None = None
        i = 0
        last_said = t0 = time.monotonic()
        total = None if duration is None else int(round(rate * float(duration)))
        while not stop.is_set():
            now = time.monotonic()
            due = int(rate * (now - t0)) + 1
            if total is not None:
                due = min(due, total)
            while sent < due:
                if batch is None or i == len(batch.readings):
                    batch, i = enc.encode(next(blocks)), 0
                d = int(batch.device_ids[i])
                c = pub.clients[d - 1]
                c.publish(topics.READINGS % topics.device_username(d), batch.readings[i], qos=1)
                c.publish(topics.CORRECTIONS, batch.corrections[i], qos=1)
                i += 1
                sent += 1
            if total is not None and sent >= total:
                break
            if now - last_said >= 10:
                say("simulate: %d readings published (%.1f/s)" % (sent, sent / (now - t0)))
                last_said = now
            stop.wait(TICK)
    except KeyboardInterrupt:
        pass
    elapsed = time.monotonic() - t0
    try:
        _wait_acked(pub, 2 * sent + devices, 30.0)
    finally:
        pub.close()
    say("simulate: published and acknowledged %d readings in %.1f s (%.1f/s)"
        % (sent, elapsed, sent / elapsed if elapsed else 0.0))
    return {"readings": float(sent), "seconds": elapsed}


def _wait_acked(pub: FleetPublisher, total: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pub.acked < total:
        if time.monotonic() > deadline:
            raise FleetError("only %d of %d messages acknowledged by the broker" % (pub.acked, total))
        time.sleep(0.01)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
