"""The ``rig`` fixture: ``--rig unix|qemu|serial`` (default unix), ``--port``, ``--board``.

    python -m pytest hil_tests --rig unix -v
    python -m pytest hil_tests --rig serial --port /dev/ttyACM0 --board pico
    python -m pytest hil_tests --rig serial --port /dev/ttyUSB0 --board esp32 \\
        --broker-host 192.168.1.20 --wifi-ssid lab --wifi-password secret
    python -m pytest hil_tests --rig serial --board pico --stand-in

Every test in this folder takes ``rig`` and runs unchanged on each rig. A rig that
cannot run here (no hardware, a missing tool) or a test that cannot apply to a board
is a skip with the reason, never a failure.
"""
from __future__ import annotations

import os
import shutil
from typing import Iterator

import pytest

from hil_tests.rigs import BOARDS, DEFAULT_BOARD, skip_reason


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("hil", "hardware-in-the-loop rigs")
    g.addoption("--rig", choices=("unix", "qemu", "serial"), default="unix",
                help="where the firmware runs (default: unix, the MicroPython unix port)")
    g.addoption("--port", default=None, help="serial port of a real board (--rig serial)")
    g.addoption("--board", default=None, choices=sorted(BOARDS),
                help="board profile (default: unix for --rig unix, microbit for --rig qemu)")
    g.addoption("--stand-in", action="store_true",
                help="--rig serial without a board: the MicroPython unix port behind a pty "
                     "(tools/ptyboard.py) takes the board's place on the port")
    g.addoption("--broker-host", default=None,
                help="--rig serial, MQTT boards: an address of this machine the board reaches; "
                     "the relays then listen on every interface (default with --stand-in: "
                     "127.0.0.1)")
    g.addoption("--wifi-ssid", default=os.environ.get("DPSENSE_WIFI_SSID"),
                help="--rig serial, esp32/pico_w: the access point (env DPSENSE_WIFI_SSID)")
    g.addoption("--wifi-password", default=os.environ.get("DPSENSE_WIFI_PASSWORD", ""),
                help="its password (env DPSENSE_WIFI_PASSWORD)")


def _choice(config: pytest.Config) -> tuple[str, str | None, str | None]:
    rig = config.getoption("--rig")
    return rig, config.getoption("--port"), config.getoption("--board") or DEFAULT_BOARD[rig]


@pytest.fixture(scope="session")
def stand_in(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[str | None]:
    """The pty of a stand-in board for the session (``--stand-in``), else None."""
    if not request.config.getoption("--stand-in"):
        yield None
        return
    from dpsense.tools.deploy import micropython_binary
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    from dpsense.tools.ptyboard import PtyBoard
    board = PtyBoard(tmp_path_factory.mktemp("stand-in"))
    board.start()
    try:
        yield board.pty
    finally:
        board.close()


@pytest.fixture()
def rig(request: pytest.FixtureRequest, tmp_path, stand_in) -> Iterator[object]:
    name, port, board = _choice(request.config)
    if name == "serial" and stand_in:
        if board in (None, "microbit", "unix"):
            pytest.skip("--stand-in takes the place of an esp32, pico_w or pico (--board)")
        port = stand_in
    if name == "serial" and not port:
        pytest.skip("serial rig: no board on --port (give --port /dev/ttyACM0 --board NAME, "
                    "or --stand-in)")
    if name == "serial" and board is None:
        pytest.skip("serial rig: name the board with --board (%s)"
                    % ", ".join(b for b in sorted(BOARDS) if "serial" in BOARDS[b].rigs))
    if board is None or name not in BOARDS[board].rigs:
        pytest.skip("board %s does not run on the %s rig" % (board, name))
    if shutil.which("mosquitto_passwd") is None:
        pytest.skip("Debian package 'mosquitto' is not installed")
    reason = skip_reason(board, request.node.originalname)
    if reason:
        pytest.skip(reason)
    if name == "qemu":
        yield from _qemu_rig(tmp_path, board)
        return
    if name == "serial":
        yield from _serial_rig(request, tmp_path, board, port, bool(stand_in))
        return
    from dpsense.tools.deploy import micropython_binary
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    from hil_tests.rigs.cloud import CloudSide
    from hil_tests.rigs.unix import UnixRig
    cloud = CloudSide(tmp_path / "cloud")
    r = UnixRig(tmp_path / "board", board, cloud)
    yield from _running(cloud, r)


def _running(cloud, r) -> Iterator[object]:
    try:
        cloud.start()
        r.deploy()
        yield r
    finally:
        r.close()
        cloud.close()


def _qemu_rig(tmp_path, board: str) -> Iterator[object]:
    from dpsense.tools.qemu import missing_reason
    missing = missing_reason()
    if missing:
        pytest.skip("QEMU micro:bit: %s" % missing)
    from hil_tests.rigs.cloud import CloudSide
    from hil_tests.rigs.qemu import QemuRig
    cloud = CloudSide(tmp_path / "cloud")
    yield from _running(cloud, QemuRig(tmp_path / "board", board, cloud))


def _serial_rig(request: pytest.FixtureRequest, tmp_path, board: str, port: str,
                stand_in: bool) -> Iterator[object]:
    from hil_tests.rigs.cloud import CloudSide
    from hil_tests.rigs.serial import FirmwareRig, SerialRig, relay_bind
    if board == "microbit":
        cloud = CloudSide(tmp_path / "cloud")
        yield from _running(cloud, SerialRig(tmp_path / "board", board, cloud, port))
        return
    host = request.config.getoption("--broker-host") or ("127.0.0.1" if stand_in else None)
    ssid = request.config.getoption("--wifi-ssid") or ("stand-in" if stand_in else None)
    if BOARDS[board].transport == "mqtt":
        if host is None:
            pytest.skip("serial rig, %s: give --broker-host, an address of this machine the "
                        "board reaches over Wi-Fi" % board)
        if ssid is None:
            pytest.skip("serial rig, %s: give --wifi-ssid and --wifi-password (or set "
                        "DPSENSE_WIFI_SSID and DPSENSE_WIFI_PASSWORD)" % board)
    host = host or "127.0.0.1"
    cloud = CloudSide(tmp_path / "cloud", bind=relay_bind(host))
    r = FirmwareRig(tmp_path / "board", board, cloud, port, broker_host=host,
                    wifi=(ssid or "", request.config.getoption("--wifi-password") or ""))
    yield from _running(cloud, r)
