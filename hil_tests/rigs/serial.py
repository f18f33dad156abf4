"""The serial rig: a board on ``--port``, set up with tools/flash.py, then the same tests.

    python -m pytest hil_tests --rig serial --board microbit --port /dev/ttyACM0
    python -m pytest hil_tests --rig serial --board pico --port /dev/ttyACM0
    python -m pytest hil_tests --rig serial --board esp32 --port /dev/ttyUSB0 \\
        --broker-host 192.168.1.20 --wifi-ssid lab --wifi-password secret
    python -m pytest hil_tests --rig serial --board pico --stand-in   # no board: tools/ptyboard.py

micro:bit (``SerialRig``): everything is the qemu rig's (``rigs/qemu.py``) on a real
port: the slim node's files, ``config.txt`` checked by the board (mbcfg), stimulus rows
answered over the UART, ``dpsense gateway`` on a second pty; ``reset()`` is
``microbit.reset()`` sent over the REPL after interrupting the node. Pointing ``--port``
at the pty of ``python tools/flash.py qemu`` runs this path against the emulated micro:bit.

ESP32, Pico W, Pico (``FirmwareRig``): the full firmware (firmware/app.py).

* ``deploy()`` writes tools/flash.py's default upload set for the board (shared_protocol/,
  the firmware, the board's profile; compiled with mpy-cross where the board imports its
  .mpy files, as `flash.py deploy` does) through the raw REPL, skipping files whose sha256
  on the board already matches, removes what earlier tests left (ring, ledger, config,
  stimulus, certificates), and imports every module on the board.
* ``start(config, stimulus)`` soft-resets the board, writes the stimulus as
  ``stimulus.txt`` and the config as ``config.json`` (with ``board`` and ``stimulus`` set:
  the readings are the test's, not the ADC's, and the boot line says ``sensor=stimulus``),
  then runs ``app.main("config.json")``, the call main.py makes at boot, in the raw REPL,
  printing its exit status (``wait_exit``: 2 after a config error).
* The tap holds the port while the firmware runs. An MQTT board's console text is the
  log ``expect`` reads, and its records go over Wi-Fi to the cloud side's relay, which
  listens on ``--broker-host`` (an address of this machine the board can reach). A Pico's
  console is its record line: the tap hands it to ``dpsense gateway`` on a pty and
  passes the gateway's acknowledgements back (docs/protocol.md 2.1).
* ``reset()`` interrupts the firmware (Ctrl-C) and resets the board: ``machine.reset()``
  on an ESP32, a soft reset on a Pico or Pico W, whose USB serial would drop the boot
  lines while it re-enumerates (``USB_CDC``). Either way RAM is lost, the files are kept,
  and main.py runs the firmware on them, as at power-up; the tap reopens a port that
  goes away.

``--stand-in`` replaces the board by tools/ptyboard.py: the MicroPython unix port behind a
pseudo-terminal, answering the raw REPL, soft and hard resets like a board. It runs this
rig's whole path (deploy, config, console, gateway, resets) on every ``make test``; what
it cannot show (Wi-Fi, ADC, USB re-enumeration, flash timing) is in hil_tests/README.md.
"""
from __future__ import annotations

import ipaddress
import json
import re
import time
from pathlib import Path
from typing import Any, Sequence

from dpsense.tools.deploy import BOARDS as FLASH_BOARDS
from dpsense.tools.deploy import board_uploads, check_imports, default_uploads, deploy, importable
from dpsense.protocol.ledgerfile import fresh
from dpsense.tools.provision import board_digests, board_profile, host_digest
from dpsense.tools.rawrepl import RawRepl, ReplError

from . import BOARDS, RigError
from .cloud import CloudSide
from .qemu import QemuRig
from .tap import TapRig

# Files a test leaves on a board with folders, removed before the next test's deploy.
STATE_FILES = ("config.json", "stimulus.txt", "ring.bin", "ledger.bin", "ca.der", "other-ca.der")

# Boards whose console is the RP2040's own USB serial. MicroPython drops what it prints
# while no host holds that port, and machine.reset() takes the port away for a second or
# two, so the boot lines after a hard reset would be lost; the rig resets these boards
# with a soft reset (RAM lost, files kept, main.py run), which keeps USB up.
USB_CDC = ("pico", "pico_w")

# Run in the raw REPL by start(): main.py's call, with its exit status made visible
# (a SystemExit at the raw REPL would soft-reset a board and hide it).
RUN = ("import app\n"
       "try:\n"
       " app.main('config.json')\n"
       " print('rig: exit 0')\n"
       "except SystemExit as e:\n"
       " print('rig: exit %d' % (e.args[0] if e.args else 0))\n")


class SerialRig(QemuRig):
    """The micro:bit on a real port: the qemu rig's code path."""

    name = "serial"

    def __init__(self, workdir: Path, board: str, cloud: CloudSide, port: str) -> None:
        super().__init__(workdir, board, cloud)
        if board != "microbit":
            raise RigError("board %s: use FirmwareRig" % board)
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


class FirmwareRig(TapRig):
    """ESP32, Pico W or Pico running firmware/app.py, on ``port``."""

    name = "serial"

    def __init__(self, workdir: Path, board: str, cloud: CloudSide, port: str,
                 broker_host: str = "127.0.0.1", wifi: tuple[str, str] = ("", ""),
                 reopen_s: float = 10.0) -> None:
        super().__init__(workdir, board, cloud)
        if board not in ("esp32", "pico_w", "pico"):
            raise RigError("board %s does not run the full firmware on the serial rig" % board)
        self.port = port
        self.profile = FLASH_BOARDS[board]
        self.transport = BOARDS[board].transport
        # A board behind the gateway reaches the broker through the gateway's own client.
        self.resends_with_dup = self.transport == "mqtt"
        self.broker_host = broker_host
        self.tls_host = tls_hostname(broker_host)
        self.wifi = wifi
        self.reopen_s = reopen_s
        self.deploy_log: list[str] = []
        self.written: list[str] = []
        self._run_from = 0          # capture offset where the current run began
        self.account = (0, "")      # (device id, broker password) of the last config()

    # -- the port ----------------------------------------------------------------------------
    def _board(self) -> RawRepl:
        if self.repl is None:
            self.repl = self._open()
            self.repl.enter()
        return self.repl

    def _open(self) -> RawRepl:
        """The port, retried while it is away (USB serial re-enumerating after a reset)."""
        deadline = time.monotonic() + self.reopen_s
        while True:
            try:
                return RawRepl.open(self.port, 115200, self.profile.chunk_size,
                                    self.profile.pause, self.profile.raw_paste)
            except (OSError, ReplError) as e:
                if time.monotonic() > deadline:
                    raise RigError("port %s did not come back within %.0f s: %s"
                                   % (self.port, self.reopen_s, e)) from e
                time.sleep(0.2)

    # -- files -------------------------------------------------------------------------------
    def deploy(self, paths: Sequence[str] | None = None) -> list[str]:
        """tools/flash.py's upload set for the board, written where the board's copy differs;
        then the files earlier tests left are removed and every module is imported."""
        repl = self._board()
        repl.soft_reset()
        uploads = board_uploads(self.profile, default_uploads(self.profile, list(paths) if paths else None),
                                None, repl, log=self.deploy_log.append)
        algo, got = board_digests(repl, [u.target for u in uploads], log=self.deploy_log.append)
        stale = [u for u in uploads if got.get(u.target) != host_digest(u.data, algo)]
        deploy(repl, self.profile, stale, log=self.deploy_log.append)
        self.written = [u.target for u in stale]
        repl.exec("import os\nfor n in %r:\n try:\n  os.remove(n)\n except OSError:\n  pass"
                  % (STATE_FILES,), 30)
        check_imports(repl, importable(uploads), log=self.deploy_log.append)
        return [u.target for u in uploads]

    def put(self, name: str, data: bytes) -> None:
        """One more file on the board's file system (a CA certificate, say)."""
        self._idle()
        self._board().write_file(name, data)

    def config(self, device_id: int, **keys: Any) -> dict[str, Any]:
        """A provisioning config whose broker is the cloud side's relay (for a Pico: the
        account its gateway publishes as)."""
        user, password = self.cloud.add_device(device_id)
        self.account = (device_id, password)
        # Keys with a fresh ledger, as provisioning writes them (the seal's nonce is its counter).
        self.put("seal.key", self.cloud.seal_keys(device_id))
        ledger = board_profile(self.board).get("ledger_path")
        if ledger:
            self._board().exec("import os\ntry:\n os.remove(%r)\nexcept OSError:\n pass" % ledger, 30)
        cfg: dict[str, Any] = {"device_id": device_id, "broker_host": self.broker_host,
                               "broker_port": self.cloud.relay.port, "broker_user": user,
                               "broker_password": password}
        if self.transport == "mqtt":
            cfg["backoff_max_ms"] = 1000
        if self.board in ("esp32", "pico_w"):
            cfg["wifi_ssid"], cfg["wifi_password"] = self.wifi
        cfg.update(keys)
        return cfg

    # -- running -----------------------------------------------------------------------------
    def start(self, config: dict[str, Any], stimulus: Sequence[Sequence[int]] | None = None) -> None:
        self._idle()
        repl = self._board()
        repl.soft_reset()           # a fresh interpreter, as after power-up
        on_board = dict(config, board=self.board)
        if self.transport == "serial":
            on_board.pop("broker_password", None)      # the gateway logs in for the board
        if stimulus is not None:
            text = "".join(",".join(str(int(v)) for v in row) + "\n" for row in stimulus)
            repl.write_file("stimulus.txt", text.encode())
            on_board["stimulus"] = "stimulus.txt"
        repl.write_file("config.json", json.dumps(on_board).encode())
        # Provisioning writes a fresh ledger (tools/provision.py write_config); a rig that
        # starts the same board again keeps the one it has, as a reset does.
        ledger = on_board.get("ledger_path") or board_profile(self.board).get("ledger_path")
        if ledger and ledger not in repl.listdir():
            repl.write_file(ledger, fresh())
        if self.transport == "serial":
            # the rig's own account: a test's broken config is for the board to refuse
            dev, password = self.account
            self._start_gateway({"device_id": dev, "broker_password": password,
                                 "broker_host": "127.0.0.1", "broker_port": self.cloud.relay.port})
        else:
            with open(self.log_path, "ab") as log:
                log.write(b"--- rig: start ---\n")
                self._pos = log.tell()
        with self._serial_lock:
            self._run_from = len(self._serial)
        self._start_tap(self._pump, repl.exec_start(RUN))

    def _pump(self, first: bytes) -> None:
        """Board -> capture, and the log (MQTT boards) or the gateway (a Pico); the
        gateway's answers -> the board, whole lines."""
        assert self.repl is not None
        tr = self.repl.transport
        gateway = self._master >= 0
        pending = bytearray()
        back = bytearray()
        data = first
        with open(self.log_path, "ab", buffering=0) as log:
            while not self._tap_stop.is_set():
                if gateway:
                    answers = self._from_gateway(back)
                    if answers:
                        tr.write(answers)
                if data:
                    self._capture(data)
                    if gateway:
                        pending += data
                    else:
                        log.write(data.replace(b"\r", b""))
                if pending:
                    self._to_gateway(pending)
                try:
                    data = tr.read_some(0.01 if pending else 0.02)
                except OSError:
                    if self._tap_stop.is_set():
                        break
                    # a USB serial port goes away while its board reboots
                    self.repl.close()
                    self.repl = self._open()
                    tr = self.repl.transport
                    data = b""
        self._flush_to_gateway(pending)

    def wait_exit(self, timeout_s: float = 10.0) -> int:
        """The exit status of the firmware started by ``start``: 2 after a config error."""
        deadline = time.monotonic() + timeout_s
        rx = re.compile(rb"rig: exit (\d+)")
        while True:
            with self._serial_lock:
                m = rx.search(bytes(self._serial[self._run_from:]))
            if m:
                return int(m.group(1))
            if time.monotonic() > deadline:
                raise RigError("the firmware still runs after %.0f s (serial: %s)"
                               % (timeout_s, self.serial_path))
            time.sleep(0.05)

    def reset(self) -> None:
        """Reset mid-run: Ctrl-C, then ``machine.reset()`` (ESP32: its USB-UART bridge keeps
        the port) or a soft reset (Pico, Pico W: see ``USB_CDC``); main.py then runs the
        firmware on the same files, as at power-up. The gateway keeps running."""
        if self._tap is None:
            raise RigError("reset: the firmware is not running")
        self._stop_tap()
        assert self.repl is not None
        self.repl.enter()
        if self.board in USB_CDC:
            self.repl.exit()
            self.repl.transport.write(b"\x04")      # Ctrl-D at >>>: soft reboot, main.py
        else:
            self.repl.exec_start("import machine\nmachine.reset()")
        self._start_tap(self._pump, b"")    # the tap reopens a port that goes away meanwhile


def relay_bind(broker_host: str) -> str:
    """Where the cloud side's relays listen for a board given ``--broker-host``: loopback
    for a board on this machine (the stand-in), every interface for one on the LAN."""
    if broker_host in ("localhost", "127.0.0.1"):
        return "127.0.0.1"
    return "0.0.0.0"


def tls_hostname(broker_host: str) -> str | None:
    """The name the TLS test's certificate is made for: None when the board reaches the
    broker by an IP address (MicroPython checks the certificate against a host name)."""
    if broker_host in ("localhost", "127.0.0.1"):
        return "localhost"
    try:
        ipaddress.ip_address(broker_host)
    except ValueError:
        return broker_host
    return None
