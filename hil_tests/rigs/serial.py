"""The serial rig: a board on ``--port``, set up with tools/flash.py, then the same tests.

    python -m pytest hil_tests --rig serial --board microbit --port /dev/ttyACM0
    python -m pytest hil_tests --rig serial --board microbit --port /dev/pts/3   # `flash.py qemu`

micro:bit (serial transport): everything is the qemu rig's (``rigs/qemu.py``) on a real
port: ``deploy()`` writes the slim node's files with tools/flash.py's ``plan``/``deploy``
(flat, shrunk, verified) and checks the imports; ``start(config, stimulus)`` writes
``config.txt``, lets the board check it (mbcfg) and runs the node with what the check
wrote; the rig holds the port, answers the node's ``?`` lines with stimulus rows, keeps
every byte the board sends and forwards it to ``dpsense gateway`` on a second pty, and
passes the gateway's answers back. ``reset()`` is ``microbit.reset()`` (a software reset:
RAM lost, flash kept) sent over the REPL after interrupting the node.

Pointing ``--port`` at the pty of ``python tools/flash.py qemu`` runs this rig's own
code path against the emulated micro:bit (hil_tests/README.md).
"""
from __future__ import annotations

import time
from pathlib import Path

from tools.flash import BOARDS as FLASH_BOARDS
from tools.rawrepl import RawRepl

from . import RigError
from .cloud import CloudSide
from .qemu import QemuRig

# Boards whose serial-rig path is not built yet, and why (the fixture skips with this).
NOT_BUILT = {
    "esp32": "serial rig for MQTT boards (esp32, pico_w) is not built yet: their ADC profile "
             "has no stimulus input for the tests' readings (hil_tests/README.md)",
    "pico_w": "serial rig for MQTT boards (esp32, pico_w) is not built yet: their ADC profile "
              "has no stimulus input for the tests' readings (hil_tests/README.md)",
    "pico": "serial rig for the Pico is not built yet: its ADC profile has no stimulus input "
            "for the tests' readings (hil_tests/README.md)",
}


class SerialRig(QemuRig):
    name = "serial"

    def __init__(self, workdir: Path, board: str, cloud: CloudSide, port: str) -> None:
        super().__init__(workdir, board, cloud)
        if board != "microbit":
            raise RigError(NOT_BUILT.get(board, "board %s: not on the serial rig" % board))
        self.port = port
        self.profile = FLASH_BOARDS["microbit"]

    def _board(self) -> RawRepl:
        if self.repl is None:
            self.repl = RawRepl.open(self.port, 115200, self.profile.chunk_size,
                                     self.profile.pause, self.profile.raw_paste)
            self.repl.enter()
        return self.repl

    def _hard_reset(self) -> None:
        assert self.repl is not None
        self.repl.enter()
        self.repl.exec_start("import microbit\nmicrobit.reset()")
        time.sleep(1.0)             # the board reboots; enter() then finds its prompt

    def close(self) -> None:
        try:
            self._idle()
        finally:
            if self.repl is not None:
                self.repl.close()
                self.repl = None
