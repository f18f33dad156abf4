"""What the rigs with a serial line share: the capture of every byte the board sends, the
log that ``expect`` reads, and ``dpsense gateway`` on a pty for boards without a network.

    board --serial line--> tap (the rig's thread) --pty--> dpsense gateway --MQTT--> broker

The rig's tap thread holds the board's line, appends what arrives to ``self._serial``
(``serial.bin`` when the tap stops) and, for a board behind a gateway, writes it to the
gateway's pty and passes the gateway's answers back. The gateway's log (the board's
console lines and events, ``idle: ...``) is ``console.log``, which ``expect`` reads; a
board with its own network has no gateway, and its rig writes the console text there.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import tty
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable

from . import wait_in_log
from .cloud import ROOT, CloudSide


class TapRig(ABC):
    """Capture, log and gateway for a rig that talks to a board over a serial line."""

    def __init__(self, workdir: Path, board: str, cloud: CloudSide) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.board = board
        self.cloud = cloud
        self.log_path = self.dir / "console.log"
        self.serial_path = self.dir / "serial.bin"    # every byte the device sent
        self.gateway: subprocess.Popen[bytes] | None = None
        self.repl: Any = None                         # the board's RawRepl, once opened
        self._tap: threading.Thread | None = None
        self._tap_stop = threading.Event()
        self._serial = bytearray()
        self._serial_lock = threading.Lock()
        self._master = self._slave = -1
        self._pos = 0

    # -- the board and the tap thread -------------------------------------------------------
    @abstractmethod
    def _board(self) -> Any:
        """The board's RawRepl, opened (and at its raw prompt) on first use."""

    def _start_tap(self, target: Callable[..., None], *args: Any) -> None:
        self._tap_stop.clear()
        self._tap = threading.Thread(target=target, args=args, daemon=True)
        self._tap.start()

    def _stop_tap(self) -> None:
        if self._tap is not None:
            self._tap_stop.set()
            self._tap.join(5)
            self._tap = None
            self._save_capture()

    def _idle(self) -> None:
        """Stop the firmware (Ctrl-C) and the gateway; the board is at its raw prompt."""
        if self._tap is None and self.gateway is None:
            return
        self._stop_tap()
        if self.repl is not None:
            self.repl.enter()
        self._stop_gateway()

    def exec(self, code: str, timeout_s: float = 30.0) -> str:
        self._idle()
        return self._board().exec(code, timeout_s)

    def stop(self) -> None:
        self._idle()

    def close(self) -> None:
        try:
            self._idle()
        finally:
            if self.repl is not None:
                self.repl.close()
                self.repl = None

    # -- capture ---------------------------------------------------------------------------
    def _capture(self, data: bytes) -> None:
        with self._serial_lock:
            self._serial += data

    def _save_capture(self) -> None:
        with self._serial_lock:
            self.serial_path.write_bytes(bytes(self._serial))

    def console(self) -> str:
        """Every byte the device sent on the serial line, then the log."""
        with self._serial_lock:
            serial = bytes(self._serial)
        log = self.log_path.read_bytes() if self.log_path.exists() else b""
        return (serial + b"\n" + log).decode("latin-1")

    # -- gateway -----------------------------------------------------------------------------
    def _start_gateway(self, config: dict[str, Any]) -> None:
        """`dpsense gateway` on a fresh pty, publishing as the config's device account."""
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        os.set_blocking(self._master, False)
        env = dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_BROKER_PASSWORD=config["broker_password"])
        with open(self.log_path, "ab") as log:
            log.write(b"--- rig: gateway for device %d ---\n" % config["device_id"])
            log.flush()
            self._pos = log.tell()
            self.gateway = subprocess.Popen(
                [sys.executable, "-m", "dpsense.cloud.cli", "gateway", "--port", os.ttyname(self._slave),
                 "--device-id", str(config["device_id"]), "--data-dir", str(self.cloud.dir),
                 "--broker-host", config["broker_host"], "--broker-port", str(config["broker_port"]),
                 # a connection whose PUBACKs the relay drops is given up within ~2 s
                 "--keepalive", "2"],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.expect(r"gateway: reading ", 30)

    def _stop_gateway(self) -> None:
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

    def _from_gateway(self, back: bytearray) -> bytes:
        """The gateway's whole lines so far (``back`` keeps the rest)."""
        try:
            back += os.read(self._master, 4096)
        except (BlockingIOError, OSError):
            pass
        cut = back.rfind(b"\n") + 1
        lines = bytes(back[:cut])
        del back[:cut]
        return lines

    def _to_gateway(self, pending: bytearray) -> None:
        try:
            del pending[:os.write(self._master, pending)]
        except BlockingIOError:
            pass

    def _flush_to_gateway(self, pending: bytearray) -> None:
        """What the device sent reaches the gateway before the tap stops."""
        while pending and self._master >= 0:
            try:
                del pending[:os.write(self._master, pending)]
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break

    # -- waiting -----------------------------------------------------------------------------
    def _seen(self, text: str) -> None:
        """Hook: log text up to a match, for rigs that pick figures out of it."""

    def expect(self, pattern: str, timeout_s: float = 10.0) -> re.Match[str]:
        """Wait for ``pattern`` (a regex) in the log since the last match."""
        def stopped() -> str | None:
            g = self.gateway
            return None if g is None or g.poll() is None else "gateway exited with %s" % g.returncode
        m, end = wait_in_log(self.log_path, self._pos, pattern, timeout_s, stopped,
                             "log: %s, serial: %s" % (self.log_path, self.serial_path))
        self._seen(self.log_path.read_bytes()[self._pos:end].decode(errors="replace"))
        self._pos = end
        return m
