"""A fleet of temperature and humidity sensors, with the common sensor faults and their ground truth.

    data = sensor_fleet(n=20_000, seed=7)          # SensorData: x (n, 2), outlier, fault, device, hour
    data.x[:, 0]                                   # temperature, degrees C
    data.x[:, 1]                                   # relative humidity, %
    data.fault == FAULTS.index("spike")            # which readings are spikes

The readings arrive round robin over ``devices`` sensors (reading i is device ``i % devices``
at step ``i // devices``), the steps spread evenly over ``hours`` (default one day: a window of
the whole fleet sees one daily cycle). What a device measures:

* the room: temperature ``21 + 3 sin(2 pi (h - 9) / 24)`` degrees C (warmest at 15:00) and
  relative humidity ``50 - 4 sin(...)`` % (humidity falls as the air warms);
* per device an offset (N(0, 0.5) degrees C, N(0, 1) %) and a gain (N(1, 0.02) per column)
  of its own, the calibration spread of cheap sensors;
* a slow drift (sensor ageing): per device N(0, 0.5) degrees C and N(0, 1) % per day;
* measurement noise N(0, 0.15) degrees C and N(0, 0.5) %.

These are the normal readings (``fault == 0``). The faults are the five types of the
sensor-fault literature (e.g. Ni et al. 2009, "Sensor network data fault types"; Sharma et al.
2010, "Sensor faults: detection methods and prevalence in real-world datasets"), each about a
fifth of ``fault_share`` of the readings, placed in episodes on random devices at random times:

* ``spike``: one reading off by 15-60 in one or both columns, either sign (a glitch);
* ``stuck``: 10-40 readings of one device that repeat the reading before the episode
  (a frozen sensor or driver); the values are normal ones, so no distance can find them;
* ``drift``: 20-60 readings with an offset that grows linearly to 20-50 in both columns
  (a failing element): its first readings are still within the normal range;
* ``burst``: 10-40 readings with added noise of standard deviation 6-15 (a loose
  connection, interference);
* ``dropout``: 3-15 readings of a failed read reported as the driver's default value,
  0 degrees C and 0 % (a bus error; a missing reading is no reading and is not modelled).

``outlier`` is ``fault != 0``: the ground truth. Everything is drawn from one
``numpy.random.Generator`` made from ``seed`` (or passed as ``rng``), so a seed fixes the data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FAULTS = ("none", "spike", "stuck", "drift", "burst", "dropout")
FAULT_TYPES = FAULTS[1:]

ROOM_C, ROOM_RH = 21.0, 50.0
CYCLE_C, CYCLE_RH = 3.0, 4.0
# Episode lengths (readings of one device) per fault type, inclusive bounds.
_LENGTH = {"spike": (1, 1), "stuck": (10, 40), "drift": (20, 60), "burst": (10, 40), "dropout": (3, 15)}


@dataclass(frozen=True)
class SensorData:
    """Readings in arrival order: ``x`` (n, 2) in degrees C and %, the ground truth ``outlier`` and
    ``fault`` (an index into ``FAULTS``), the ``device`` (0-based) and the ``hour`` of each."""

    x: np.ndarray
    outlier: np.ndarray
    fault: np.ndarray
    device: np.ndarray
    hour: np.ndarray


def _check(n: int, devices: int, fault_share: float, hours: float) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 20:
        raise ValueError("n must be an int >= 20, got %r" % (n,))
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or not 1 <= devices <= n // 10:
        raise ValueError("devices must be an int in [1, n / 10], got %r" % (devices,))
    if not (math.isfinite(fault_share) and 0 <= fault_share < 0.5):
        raise ValueError("fault_share must be in [0, 0.5), got %r" % (fault_share,))
    if not (math.isfinite(hours) and hours > 0):
        raise ValueError("hours must be > 0, got %r" % (hours,))


def sensor_fleet(n: int, seed: int | None = None, devices: int = 20, fault_share: float = 0.10,
                 hours: float = 24.0, start_hour: float = 0.0,
                 rng: np.random.Generator | None = None) -> SensorData:
    """``n`` readings of ``devices`` sensors over ``hours`` from ``start_hour``; see the module docstring."""
    _check(n, devices, fault_share, hours)
    if rng is None:
        if seed is None:
            raise ValueError("give seed or rng")
        rng = np.random.default_rng([int(seed), 31])
    steps = -(-n // devices)
    hour = start_hour + hours * np.arange(steps) / steps                       # (steps,)
    phase = np.sin(2 * np.pi * (hour - 9.0) / 24.0)
    room = np.c_[ROOM_C + CYCLE_C * phase, ROOM_RH - CYCLE_RH * phase]          # (steps, 2)
    offset = rng.normal(0.0, [0.5, 1.0], (devices, 2))
    gain = rng.normal(1.0, 0.02, (devices, 2))
    drift = rng.normal(0.0, [0.5, 1.0], (devices, 2))                          # per day
    noise = rng.normal(0.0, [0.15, 0.5], (devices, steps, 2))
    x = (room[None] * gain[:, None] + offset[:, None] + drift[:, None] * (hour / 24.0)[None, :, None]
         + noise)                                                               # (devices, steps, 2)
    fault = np.zeros((devices, steps), dtype=np.int8)
    used = np.zeros((devices, steps), dtype=bool)
    past = np.arange(n, devices * steps)                                        # arrival slots past n: no reading
    used[past % devices, past // devices] = True
    # Episodes per type until each holds its share of the readings; an episode never
    # overlaps another, so every fault reading has one type.
    quota = int(round(fault_share * n / len(FAULT_TYPES)))
    for code, name in enumerate(FAULT_TYPES, start=1):
        lo, hi = _LENGTH[name]
        placed = 0
        for _ in range(100 * max(1, quota)):
            if placed >= quota:
                break
            length = min(int(rng.integers(lo, hi + 1)), quota - placed)
            d = int(rng.integers(devices))
            s = int(rng.integers(1, steps - length + 1)) if steps > length else 0
            # One step of margin on each side keeps episodes apart and gives stuck its last good value.
            if used[d, max(0, s - 1):s + length + 1].any():
                continue
            seg = slice(s, s + length)
            _inject(rng, name, x[d], seg)
            fault[d, seg] = code
            used[d, seg] = True
            placed += length
    # Arrival order: step-major, round robin over the devices.
    order_x = x.transpose(1, 0, 2).reshape(-1, 2)[:n]
    order_f = fault.T.reshape(-1)[:n]
    dev = np.tile(np.arange(devices), steps)[:n]
    hr = np.repeat(hour, devices)[:n]
    return SensorData(x=order_x, outlier=order_f != 0, fault=order_f.astype(np.int64), device=dev, hour=hr)


def _inject(rng: np.random.Generator, name: str, xd: np.ndarray, seg: slice) -> None:
    """Overwrite ``xd[seg]`` (one device's readings) with fault ``name``."""
    k = seg.stop - seg.start
    if name == "spike":
        size = rng.uniform(15.0, 60.0, 2) * rng.choice([-1.0, 1.0], 2)
        which = int(rng.integers(3))            # temperature, humidity or both
        if which < 2:
            size[1 - which] = 0.0
        xd[seg] += size
    elif name == "stuck":
        xd[seg] = xd[seg.start - 1] if seg.start > 0 else xd[seg.start]
    elif name == "drift":
        end = rng.uniform(20.0, 50.0) * rng.choice([-1.0, 1.0], 2)
        xd[seg] += np.linspace(0.0, 1.0, k + 1)[1:, None] * end
    elif name == "burst":
        xd[seg] += rng.normal(0.0, rng.uniform(6.0, 15.0), (k, 2))
    else:
        xd[seg] = 0.0


def fault_counts(data: SensorData) -> dict[str, int]:
    """Readings per fault type (and ``none``)."""
    return {name: int((data.fault == i).sum()) for i, name in enumerate(FAULTS)}
