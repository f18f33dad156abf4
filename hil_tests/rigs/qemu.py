"""The qemu rig: the real micro:bit MicroPython under QEMU, the slim serial node, `dpsense gateway`.

    device (QEMU, firmware/mbnode.py) --UART pty--> tap (this rig) --pty--> dpsense gateway
        --MQTT as d<N>, through the cloud side's relay--> Mosquitto --> dpsense ingest --> SQLite

``deploy()`` boots QEMU and writes the node's modules (tools/flash.py's MICROBIT_FILES:
flat, shrunk, verified), then soft-resets and imports them to measure the heap.
``start(config, stimulus)`` writes the config as the board's ``config.txt``, lets the
board check it (tools/microbit.py ``check_microbit_config``: firmware/mbcfg.py in a boot
of its own; a ``config error`` line is logged as the board's console and the "board" has
stopped with status 2), then starts the gateway on the tap's pty and the node
(``boot_microbit_node``: its ledger read back, then ``mbnode.run`` with the checked
arguments), through the raw REPL as `tools/flash.py all` does. ``reset()``
presses the emulated reset button (QEMU ``system_reset``: RAM lost, flash kept) in the
middle of a run and starts the node again with the same call, as a main.py would.

The tap holds QEMU's pty for the whole test (QEMU drops output while nobody holds it),
keeps every byte the device sends (``serial.bin``; ``console()`` includes it, so the
raw-value scan covers the whole serial line), forwards it to the gateway, answers
each ``?`` line of the node with the next stimulus row (``.`` when done): the micro:bit
file system (~15 KB) could not hold the stimulus of the noise test; and passes the
gateway's acknowledgement lines to the board, whole lines only, while the node runs.
The gateway's log (``console.log``: the board's console lines and events, ``idle: ...``)
is what ``expect`` reads.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from dpsense.tools.deploy import BOARDS as FLASH_BOARDS
from dpsense.tools.deploy import (MICROBIT_BOOT_FILES, MICROBIT_FILES, check_imports, deploy, plan,
                                  resolve_sources)
from dpsense.tools.microbit import BoardConfigError, boot_microbit_node, check_microbit_config
from dpsense.protocol.ledgerfile import microbit_fresh
from dpsense.tools.provision import config_file
from dpsense.tools.qemu import QemuMicrobit

from . import RigError
from .cloud import CloudSide
from .tap import TapRig

class QemuRig(TapRig):
    name = "qemu"
    # The board's resends reach the broker as the gateway's new publishes (no DUP).
    resends_with_dup = False

    def __init__(self, workdir: Path, board: str, cloud: CloudSide) -> None:
        super().__init__(workdir, board, cloud)
        self.profile = FLASH_BOARDS["qemu-microbit"]
        self.qemu: QemuMicrobit | None = None
        self.mem_free_after_import: int | None = None
        self.mem_free_at_boot: int | None = None
        self.deploy_log: list[str] = []
        self._rows: list[bytes] = []
        self._exit: int | None = None

    # -- files -----------------------------------------------------------------------------
    def _board(self):
        if self.qemu is None:
            self.qemu = QemuMicrobit().start()
            self.repl = self.qemu.repl(self.profile.chunk_size, self.profile.pause)
            self.repl.enter()
        return self.repl

    def deploy(self, paths: Sequence[str] | None = None) -> list[str]:
        """Boot QEMU, write the node's files with tools/flash.py, import them, measure the heap.

        Every other file goes first (records kept by an earlier test, its config): the board
        belongs to the test, and the file system has room for the node and little more."""
        repl = self._board()
        uploads = plan(self.profile, resolve_sources(
            list(paths or MICROBIT_FILES + MICROBIT_BOOT_FILES)))
        repl.soft_reset()             # a board used by an earlier test holds its modules
        repl.exec("import os\nfor n in os.listdir():\n if n not in %r:\n  os.remove(n)"
                  % [u.target for u in uploads], 30)
        deploy(repl, self.profile, uploads, log=self.deploy_log.append)
        self.mem_free_after_import = check_imports(
            repl, [u.module for u in uploads if u.module not in MICROBIT_BOOT_FILES],
            log=self.deploy_log.append)
        return [u.target for u in uploads]

    def put(self, name: str, data: bytes) -> None:
        self._idle()
        self._board().write_file(name, data)

    def config(self, device_id: int, **keys: Any) -> dict[str, Any]:
        """The same provisioning keys as the unix rig; the gateway publishes as ``user``."""
        user, password = self.cloud.add_device(device_id)
        # No AES on the micro:bit: its plain correction records are accepted only by name.
        self.cloud.plaintext_device(device_id)
        cfg = {"device_id": device_id, "broker_host": "127.0.0.1",
               "broker_port": self.cloud.relay.port, "broker_user": user,
               "broker_password": password}
        cfg.update(keys)
        return cfg

    # -- running -----------------------------------------------------------------------------
    def start(self, config: dict[str, Any], stimulus: Sequence[Sequence[int]] | None = None) -> None:
        self._idle()
        self._exit = None
        self._rows = [(",".join(str(int(v)) for v in r) + "\n").encode() for r in (stimulus or [])]
        repl = self._board()
        name, data = config_file("microbit", config)
        repl.write_file(name, data)
        # Provisioning writes a fresh ledger (tools/provision.py write_config); without one
        # the node releases nothing (firmware/mbstate.py).
        present = repl.listdir()
        for ledger in ("la", "lb"):
            if ledger not in present:
                repl.write_file(ledger, microbit_fresh())
        try:
            check_microbit_config(repl)
        except BoardConfigError as e:
            # the board stopped: its line, as the gateway would have logged it
            with open(self.log_path, "a") as log:
                log.write("console: %s\n" % e)
            self._exit = 2
            return
        self._start_gateway(config)
        self._run_node()

    def _run_node(self) -> None:
        rest = boot_microbit_node(self._board())     # as `tools/flash.py all` starts it
        self._start_tap(self._pump, rest, list(self._rows))

    def _pump(self, first: bytes, rows: list[bytes]) -> None:
        """Device -> capture + gateway pty; each ``?`` line of the device -> the next row;
        the gateway's lines -> the device."""
        assert self.repl is not None
        tr = self.repl.transport
        pending = bytearray()
        line = bytearray()
        back = bytearray()
        i = 0
        data = first
        while not self._tap_stop.is_set():
            answers = self._from_gateway(back)
            if answers:
                tr.write(answers)
            if data:
                self._capture(data)
                for b in data:
                    line.append(b)
                    if b == 10:
                        if line.rstrip(b"\r\n") == b"?":       # the rig's request, not the gateway's
                            tr.write(rows[i] if i < len(rows) else b".\n")
                            i += 1
                        else:
                            pending += line
                        line.clear()
            if pending:
                self._to_gateway(pending)
            try:
                data = tr.read_some(0.01 if pending else 0.02)
            except OSError:
                break
        self._flush_to_gateway(pending)

    def _seen(self, text: str) -> None:
        if self.mem_free_at_boot is None:
            b = re.search(r"boot ok: .* mem_free=(\d+)", text)
            if b:
                self.mem_free_at_boot = int(b.group(1))

    def wait_exit(self, timeout_s: float = 10.0) -> int:
        """The node's exit status: 2 after a refused config (the node never started)."""
        if self._exit is None:
            raise RigError("the node is running (log: %s)" % self.log_path)
        return self._exit

    def reset(self) -> None:
        """Reset button mid-run (RAM lost, flash kept), then the board boots as it does
        every time (its ledger read back, then the node) with the same stimulus; the
        gateway keeps running, and its answers wait in its pty until the new node reads
        them."""
        if self._tap is None:
            raise RigError("reset: the node is not running")
        self._stop_tap()
        self._hard_reset()
        assert self.repl is not None
        self.repl.enter()
        self._run_node()

    def _hard_reset(self) -> None:
        assert self.qemu is not None
        self.qemu.reset()

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.qemu is not None:
                self.qemu.close()
                self.qemu = None
