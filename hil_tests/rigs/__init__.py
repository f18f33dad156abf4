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


# Rig tests that cannot apply to a board without a network of its own (a board behind
# ``dpsense gateway``), and why.
NO_NETWORK = {
    "test_broker_outage_loses_nothing_and_resends_identical_bytes":
        "the %s has no network: the broker connection (outage, reconnect, DUP resends) "
        "is the gateway's MQTT client; the board's own store is tested by the reset test",
    "test_tls_with_a_verified_broker_and_refusal_of_an_unknown_one":
        "the %s has no network and no TLS: the gateway talks to the broker",
}


def skip_reason(board: str, test: str) -> str | None:
    """Why ``test`` cannot run on ``board``, or None."""
    if BOARDS[board].transport == "serial" and test in NO_NETWORK:
        return NO_NETWORK[test] % board
    return None
