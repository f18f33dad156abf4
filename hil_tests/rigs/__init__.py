"""Rigs: where the firmware runs. One interface, one table of boards.

Every rig offers ``deploy(paths)``, ``put(name, data)``, ``start(config, stimulus)``, ``expect(pattern,
timeout_s)``, ``exec(code)``, ``stop()``, ``reset()`` and ``close()``, plus ``cloud``
(the broker, ingest and relay of rigs/cloud.py) and ``config(device_id, **keys)``
(a provisioning config that reaches that cloud). Failure text names the log file.
"""
from __future__ import annotations

from dataclasses import dataclass


class RigError(AssertionError):
    """The device did not do what the test expected; the text names the log file."""


@dataclass(frozen=True)
class Board:
    name: str
    transport: str          # "mqtt" or "serial"
    float_bits: int
    rigs: tuple[str, ...]   # rigs that can run this board
    entropy: str            # the noise source its profile declares (and its status reports)


BOARDS = {b.name: b for b in (
    Board("unix", "mqtt", 64, ("unix",), "os.urandom"),
    Board("esp32", "mqtt", 32, ("serial",), "os.urandom"),
    Board("pico_w", "mqtt", 32, ("serial",), "os.urandom"),
    Board("pico", "serial", 32, ("serial",), "os.urandom"),
    Board("microbit", "serial", 32, ("qemu", "serial"), "getrandbits"),
)}

DEFAULT_BOARD = {"unix": "unix", "qemu": "microbit", "serial": None}
