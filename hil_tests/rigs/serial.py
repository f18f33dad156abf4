"""The serial rig: a board on ``--port``, set up with tools/flash.py, then the same tests.

    python -m pytest hil_tests --rig serial --board microbit --port /dev/ttyACM0
    python -m pytest hil_tests --rig serial --board microbit --port /dev/pts/3   # `flash.py qemu`

micro:bit (serial transport): ``deploy()`` writes the slim node's files with
tools/flash.py's ``plan``/``deploy`` (flat, shrunk, verified) and checks the imports;
``start(config, stimulus)`` provisions ``config.json`` with tools/provision.py
(``build_config``: firmware/config.py's rules, the subset mbnode takes, the broker
account created by the cloud side) and runs ``mbnode.run`` with exactly those values.
Everything after that is the qemu rig's (``rigs/qemu.py``): the rig holds the port,
answers the node's ``?`` lines with stimulus rows, keeps every byte the board sends and
forwards it to ``dpsense gateway`` on a second pty.

Pointing ``--port`` at the pty of ``python tools/flash.py qemu`` runs this rig's own
code path against the emulated micro:bit (hil_tests/README.md).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from tools.flash import BOARDS as FLASH_BOARDS
from tools.provision import build_config, write_config
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
        self.provisioned: dict[str, Any] | None = None

    def _board(self) -> RawRepl:
        if self.repl is None:
            self.repl = RawRepl.open(self.port, 115200, self.profile.chunk_size,
                                     self.profile.pause, self.profile.raw_paste)
            self.repl.enter()
        return self.repl

    def start(self, config: dict[str, Any], stimulus: Sequence[Sequence[int]] | None = None) -> None:
        self._idle()
        cfg = build_config("microbit", config, config["device_id"], None)
        write_config(self._board(), cfg)
        self.provisioned = cfg
        (self.dir / "config.json").write_text(json.dumps(cfg))
        # The node runs with the values just written to config.json (QemuRig.start calls
        # node_call on them, as `tools/flash.py all` does); the gateway gets the broker keys.
        super().start(dict(config, **cfg), stimulus)

    def close(self) -> None:
        try:
            self._idle()
        finally:
            if self.repl is not None:
                self.repl.close()
                self.repl = None
