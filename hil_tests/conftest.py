"""The ``rig`` fixture: ``--rig unix|qemu|serial`` (default unix), ``--port``, ``--board``.

    python -m pytest hil_tests --rig unix -v
    python -m pytest hil_tests --rig serial --port /dev/ttyACM0 --board pico_w

Every test in this folder takes ``rig`` and runs unchanged on each rig. A rig that
cannot run here (no hardware, a missing tool, not built yet) is a skip with the
reason, never a failure.
"""
from __future__ import annotations

import shutil
from typing import Iterator

import pytest

from hil_tests.rigs import BOARDS, DEFAULT_BOARD


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("hil", "hardware-in-the-loop rigs")
    g.addoption("--rig", choices=("unix", "qemu", "serial"), default="unix",
                help="where the firmware runs (default: unix, the MicroPython unix port)")
    g.addoption("--port", default=None, help="serial port of a real board (--rig serial)")
    g.addoption("--board", default=None, choices=sorted(BOARDS),
                help="board profile (default: unix for --rig unix, microbit for --rig qemu)")


def _choice(config: pytest.Config) -> tuple[str, str | None, str | None]:
    rig = config.getoption("--rig")
    return rig, config.getoption("--port"), config.getoption("--board") or DEFAULT_BOARD[rig]


@pytest.fixture()
def rig(request: pytest.FixtureRequest, tmp_path) -> Iterator[object]:
    name, port, board = _choice(request.config)
    if name == "serial" and not port:
        pytest.skip("serial rig: no board on --port (give --port /dev/ttyACM0 --board NAME)")
    if name == "serial" and board is None:
        pytest.skip("serial rig: name the board with --board (%s)"
                    % ", ".join(b for b in sorted(BOARDS) if "serial" in BOARDS[b].rigs))
    if board is None or name not in BOARDS[board].rigs:
        pytest.skip("board %s does not run on the %s rig" % (board, name))
    if shutil.which("mosquitto_passwd") is None:
        pytest.skip("Debian package 'mosquitto' is not installed")
    if name == "qemu":
        yield from _qemu_rig(request, tmp_path, board)
        return
    if name == "serial":
        yield from _serial_rig(request, tmp_path, board, port)
        return
    from tools.flash import micropython_binary
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    from hil_tests.rigs.cloud import CloudSide
    from hil_tests.rigs.unix import UnixRig
    cloud = CloudSide(tmp_path / "cloud")
    r = UnixRig(tmp_path / "board", board, cloud)
    try:
        cloud.start()
        r.deploy()
        yield r
    finally:
        r.close()
        cloud.close()


def _qemu_rig(request: pytest.FixtureRequest, tmp_path, board: str) -> Iterator[object]:
    from tools.qemu import missing_reason
    missing = missing_reason()
    if missing:
        pytest.skip("QEMU micro:bit: %s" % missing)
    from hil_tests.rigs.cloud import CloudSide
    from hil_tests.rigs.qemu import UNSUPPORTED, QemuRig
    reason = UNSUPPORTED.get(request.node.originalname)
    if reason:
        pytest.skip(reason)
    cloud = CloudSide(tmp_path / "cloud")
    r = QemuRig(tmp_path / "board", board, cloud)
    try:
        cloud.start()
        r.deploy()
        yield r
    finally:
        r.close()
        cloud.close()


def _serial_rig(request: pytest.FixtureRequest, tmp_path, board: str, port: str) -> Iterator[object]:
    from hil_tests.rigs.cloud import CloudSide
    from hil_tests.rigs.qemu import UNSUPPORTED
    from hil_tests.rigs.serial import NOT_BUILT, SerialRig
    if board in NOT_BUILT:
        pytest.skip(NOT_BUILT[board])
    reason = UNSUPPORTED.get(request.node.originalname)
    if reason:
        pytest.skip(reason)
    cloud = CloudSide(tmp_path / "cloud")
    r = SerialRig(tmp_path / "board", board, cloud, port)
    try:
        cloud.start()
        r.deploy()
        yield r
    finally:
        r.close()
        cloud.close()
