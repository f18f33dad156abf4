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

import os
import re
import subprocess
import sys
import threading
import time
import tty
from pathlib import Path
from typing import Any, Sequence

from tools.flash import BOARDS as FLASH_BOARDS
from tools.flash import (MICROBIT_BOOT_FILES, MICROBIT_FILES, check_imports, deploy, plan,
                         resolve_sources)
from tools.microbit import BoardConfigError, boot_microbit_node, check_microbit_config
from tools.provision import config_file
from tools.qemu import QemuMicrobit

from . import RigError
from .cloud import ROOT, CloudSide

# Rig tests that cannot apply to the serial micro:bit node, and why.
UNSUPPORTED = {
    "test_broker_outage_loses_nothing_and_resends_identical_bytes":
        "the micro:bit has no network: the broker connection (outage, reconnect, DUP resends) "
        "is the gateway's MQTT client; the board's own store is tested by the reset test",
    "test_tls_with_a_verified_broker_and_refusal_of_an_unknown_one":
        "the micro:bit has no network and no TLS: the gateway talks to the broker",
}


class QemuRig:
    name = "qemu"
    # The board's resends reach the broker as the gateway's new publishes (no DUP).
    resends_with_dup = False

    def __init__(self, workdir: Path, board: str, cloud: CloudSide) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.board = board
        self.cloud = cloud
        self.log_path = self.dir / "console.log"      # the gateway's log
        self.serial_path = self.dir / "serial.bin"    # every byte the device sent
        self.profile = FLASH_BOARDS["qemu-microbit"]
        self.qemu: QemuMicrobit | None = None
        self.repl = None
        self.gateway: subprocess.Popen[bytes] | None = None
        self.mem_free_after_import: int | None = None
        self.mem_free_at_boot: int | None = None
        self.deploy_log: list[str] = []
        self._serial = bytearray()
        self._serial_lock = threading.Lock()
        self._tap: threading.Thread | None = None
        self._tap_stop = threading.Event()
        self._master = self._slave = -1
        self._pos = 0
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
        self._tap_stop.clear()
        self._tap = threading.Thread(target=self._pump, args=(rest, list(self._rows)), daemon=True)
        self._tap.start()

    def _start_gateway(self, config: dict[str, Any]) -> None:
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        os.set_blocking(self._master, False)
        env = dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_BROKER_PASSWORD=config["broker_password"])
        with open(self.log_path, "ab") as log:
            log.write(b"--- rig: gateway for device %d ---\n" % config["device_id"])
            log.flush()
            self._pos = log.tell()
            self.gateway = subprocess.Popen(
                [sys.executable, "-m", "cloud.cli", "gateway", "--port", os.ttyname(self._slave),
                 "--device-id", str(config["device_id"]), "--data-dir", str(self.cloud.dir),
                 "--broker-host", config["broker_host"], "--broker-port", str(config["broker_port"]),
                 # a connection whose PUBACKs the relay drops is given up within ~2 s
                 "--keepalive", "2"],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.expect(r"gateway: reading ", 30)

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
            try:
                back += os.read(self._master, 4096)
            except (BlockingIOError, OSError):
                pass
            cut = back.rfind(b"\n") + 1
            if cut:
                tr.write(bytes(back[:cut]))
                del back[:cut]
            if data:
                with self._serial_lock:
                    self._serial += data
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
                try:
                    n = os.write(self._master, pending)
                    del pending[:n]
                except BlockingIOError:
                    pass
            try:
                data = tr.read_some(0.01 if pending else 0.02)
            except OSError:
                break
        while pending:                    # what the device sent reaches the gateway
            try:
                del pending[:os.write(self._master, pending)]
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break

    def _stop_tap(self) -> None:
        if self._tap is not None:
            self._tap_stop.set()
            self._tap.join(5)
            self._tap = None
            with self._serial_lock:
                self.serial_path.write_bytes(bytes(self._serial))

    def _idle(self) -> None:
        """Stop the firmware run and the gateway (if any); the board is at its raw prompt."""
        if self._tap is None and self.gateway is None:
            return
        self._stop_tap()
        if self.repl is not None:
            self.repl.enter()
        if self.gateway is not None:
            self.gateway.terminate()
            try:
                self.gateway.wait(15)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
                self.gateway.wait()
            self.gateway = None
        for fd in (self._master, self._slave):
            if fd >= 0:
                os.close(fd)
        self._master = self._slave = -1

    def console(self) -> str:
        """Every byte the device sent on the serial line, then the gateway's log."""
        with self._serial_lock:
            serial = bytes(self._serial)
        log = self.log_path.read_bytes() if self.log_path.exists() else b""
        return (serial + b"\n" + log).decode("latin-1")

    def expect(self, pattern: str, timeout_s: float = 10.0) -> re.Match[str]:
        """Wait for ``pattern`` (a regex) in the gateway's log since the last match."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while True:
            text = self._read_from(self._pos)
            m = rx.search(text)
            if m:
                self._pos += len(text[:m.end()].encode())
                if self.mem_free_at_boot is None:
                    b = re.search(r"boot ok: .* mem_free=(\d+)", text[:m.end()])
                    if b:
                        self.mem_free_at_boot = int(b.group(1))
                return m
            if self.gateway is not None and self.gateway.poll() is not None:
                raise RigError("gateway exited with %s before %r appeared (log: %s)\n%s"
                               % (self.gateway.returncode, pattern, self.log_path, _tail(text)))
            if time.monotonic() > deadline:
                raise RigError("no %r within %.0f s (log: %s, serial: %s)\n%s"
                               % (pattern, timeout_s, self.log_path, self.serial_path, _tail(text)))
            time.sleep(0.02)

    def _read_from(self, pos: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(pos)
            return f.read().decode(errors="replace")

    def wait_exit(self, timeout_s: float = 10.0) -> int:
        """The node's exit status: 2 after a refused config (the node never started)."""
        if self._exit is None:
            raise RigError("the node is running (log: %s)" % self.log_path)
        return self._exit

    def exec(self, code: str, timeout_s: float = 30.0) -> str:
        self._idle()
        return self._board().exec(code, timeout_s)

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

    def stop(self) -> None:
        self._idle()

    def close(self) -> None:
        try:
            self._idle()
        finally:
            if self.qemu is not None:
                self.qemu.close()
                self.qemu = None
                self.repl = None


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])
