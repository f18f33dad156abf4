"""Rigs: where the firmware runs. One interface, one table of boards.

Every rig offers ``deploy(paths)``, ``put(name, data)``, ``start(config, stimulus)``, ``expect(pattern,
timeout_s)``, ``exec(code)``, ``stop()``, ``reset()`` and ``close()``, plus ``cloud``
(the broker, ingest and relay of rigs/cloud.py) and ``config(device_id, **keys)``
(a provisioning config that reaches that cloud). Failure text names the log file.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


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
    Board("microbit", "serial", 32, ("qemu", "serial"), "prng_no_dp"),
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
    "test_tls_without_a_ca_is_refused_unless_the_insecure_switch_is_named":
        "the %s has no network and no TLS: the gateway talks to the broker",
}


def skip_reason(board: str, test: str) -> str | None:
    """Why ``test`` cannot run on ``board``, or None."""
    if BOARDS[board].transport == "serial" and test in NO_NETWORK:
        return NO_NETWORK[test] % board
    return None


def read_from(path: Path, pos: int) -> str:
    """The text of the log ``path`` from byte ``pos`` ("" while it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


def wait_in_log(path: Path, pos: int, pattern: str, timeout_s: float,
                stopped: Callable[[], str | None], where: str) -> tuple[re.Match[str], int]:
    """Wait for the regex ``pattern`` in the log ``path`` after byte ``pos``: the match and the
    position after it. ``stopped()`` says which process ended (no more text can come) or
    None; ``where`` names the logs in the failure text."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while True:
        ended = stopped()                  # before reading: its last words count
        text = read_from(path, pos)
        m = rx.search(text)
        if m:
            return m, pos + len(text[:m.end()].encode())
        if ended:
            raise RigError("%s before %r appeared (%s)\n%s" % (ended, pattern, where, tail(text)))
        if time.monotonic() > deadline:
            raise RigError("no %r within %.0f s (%s)\n%s" % (pattern, timeout_s, where, tail(text)))
        time.sleep(0.02)
