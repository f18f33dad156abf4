"""firmware/package.json installs the firmware with mip, and what mip installed runs.

Two installers, as MicroPython users run them:

* the board's own ``mip`` (here the unix port's: ``micropython -m mip install --target DIR
  URL``) from the repository served over HTTP on 127.0.0.1 (only firmware/ and
  shared_protocol/, as a repository's raw files are served), then the installed firmware
  run with a unix-board config and with the Pico's serial path;
* ``mpremote mip install --target . firmware/package.json`` from this checkout onto a
  stand-in board (tools/ptyboard.py), then ``flash.py verify`` comparing its files with the
  checkout's.
"""
from __future__ import annotations

import functools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dpsense.cloud.correction.sealed import DeviceKeys, open_record
from dpsense.protocol import __version__, wire
from dpsense.protocol.layout import KIND_SEALED
from dpsense.protocol.framing import unframe
from dpsense.protocol.ledgerfile import fresh
from dpsense.tools.deploy import micropython_binary

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = json.loads((ROOT / "firmware" / "package.json").read_text())
COLUMN = {"num": 1, "den": 1, "offset": 0, "raw_min": -5000, "raw_max": 5000, "delta_q": 25}
STIMULUS = [[-1200], [0], [4321]]
KEYS = DeviceKeys(bytes(range(16)), bytes(range(100, 132)))    # the board's correction-record keys


def _provision(board: Path) -> None:
    """What provisioning writes next to the config: a fresh ledger and the seal keys."""
    (board / "ledger.bin").write_bytes(fresh())
    (board / "seal.key").write_bytes(KEYS.to_bytes())


def _config(**keys: object) -> dict[str, object]:
    cfg: dict[str, object] = {"device_id": 7, "config_id": 1, "columns": [COLUMN],
                              "epsilon": "0.5", "centre": [0], "window_records": 600,
                              "window_cap": "60", "period_ms": 0, "stimulus": STIMULUS}
    cfg.update(keys)
    return cfg


@pytest.fixture(scope="module")
def upy() -> str:
    try:
        return micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def repo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The repository's firmware/ and shared_protocol/ over HTTP on a free loopback port."""
    root = tmp_path_factory.mktemp("repo")
    for d in ("firmware", "shared_protocol"):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def installed(upy: str, repo_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    board = tmp_path_factory.mktemp("board")
    r = subprocess.run([upy, "-m", "mip", "install", "--target", str(board),
                        repo_url + "/firmware/package.json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Done" in r.stdout, r.stdout + r.stderr
    return board


def _tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def _run_until(cmd: list[str], cwd: Path, done: str, timeout: float = 20.0) -> list[str]:
    """Console lines of ``cmd`` up to the first one containing ``done`` (then it is
    stopped), or up to its exit."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None
    lines: list[str] = []
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            *full, buf = buf.split(b"\n")
            lines += [ln.decode(errors="replace").rstrip("\r") for ln in full]
            if any(done in ln for ln in lines):
                break
        else:
            pytest.fail("no %r within %.0f s:\n%s" % (done, timeout, "\n".join(lines[-20:])))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        proc.stdin.close()      # type: ignore[union-attr]
        proc.stdout.close()
    return lines


def test_mip_installs_every_file_of_the_package(installed: Path) -> None:
    assert _tree(installed) == {t for t, _ in PACKAGE["urls"]}
    for target, url in PACKAGE["urls"]:
        assert (installed / target).read_bytes() == (ROOT / "firmware" / url).read_bytes(), target


def test_the_installed_firmware_boots_with_its_version_and_releases_readings(
        upy: str, installed: Path, tmp_path: Path) -> None:
    board = tmp_path / "unix"
    shutil.copytree(installed, board)
    # A broker port nothing listens on: the records wait in the ring, as in an outage.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _config(broker_host="127.0.0.1", broker_port=port, broker_user="d7",
                  broker_password="unused", backoff_max_ms=200)
    (board / "config.json").write_text(json.dumps(cfg))
    _provision(board)
    lines = _run_until([upy, "main.py", "config.json"], board, "stimulus done:")
    boot = [ln for ln in lines if ln.startswith("boot ok:")]
    assert len(boot) == 1, lines
    assert boot[0].startswith("boot ok: board=unix device=7 ")
    assert " version=%s " % __version__ in boot[0], boot[0]
    assert any(ln.startswith("stimulus done: 3 readings, 3 released") for ln in lines), lines


def test_the_installed_firmware_writes_records_on_the_serial_path(
        upy: str, installed: Path, tmp_path: Path) -> None:
    """The Pico's profile under the unix port: the records come out as framed lines
    (docs/protocol.md 2), which the host decodes: the firmware mip installed is whole."""
    board = tmp_path / "pico"
    shutil.copytree(installed, board)
    (board / "config.json").write_text(json.dumps(_config(board="pico")))
    _provision(board)
    lines = _run_until([upy, "main.py", "config.json"], board, "stimulus done:")
    assert lines[0].startswith("boot ok: board=pico device=7 ") and \
        " version=%s " % __version__ in lines[0], lines
    status = json.loads(lines[1][len("status: "):])
    assert (status["event"], status["version"]) == ("boot", __version__)
    boot_id = int(lines[0].split(" boot=")[1].split()[0])
    frames = [unframe(ln.encode()) for ln in lines if ln.startswith("~")]
    readings = [wire.decode_reading(f) for f in frames if f[1] == wire.KIND_READING]
    # one sealed correction record per reading, opened with the board's keys
    corrections = [open_record(KEYS, f) for f in frames if f[1] == KIND_SEALED]
    assert [r[:3] for r in readings] == [(7, boot_id, 0), (7, boot_id, 1), (7, boot_id, 2)]
    assert [c[:3] + c[4:5] for c in corrections] == [r[:4] for r in readings]


def test_a_bad_config_stops_the_installed_firmware_naming_the_key(
        upy: str, installed: Path, tmp_path: Path) -> None:
    board = tmp_path / "bad"
    shutil.copytree(installed, board)
    (board / "config.json").write_text(json.dumps(_config(board="pico", epsilon="-1")))
    # A serial board says the line it stops on until its gateway answers it (docs/protocol.md
    # 2.3): answered here as a gateway does, it stops at once.
    from dpsense.protocol.framing import crc16
    p = subprocess.Popen([upy, "main.py", "config.json"], cwd=board, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdin is not None
        line = p.stdout.readline().rstrip(b"\r\n")
        p.stdin.write(b"!=%04x\n" % crc16(line))
        p.stdin.flush()
        rest, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2, line + rest + err
    assert line.startswith(b"config error: epsilon: "), line


def test_mpremote_mip_installs_from_the_checkout_onto_a_board(upy: str, tmp_path: Path) -> None:
    mpremote = shutil.which("mpremote") or shutil.which(
        "mpremote", path=str(Path(sys.executable).parent))
    if mpremote is None:
        pytest.skip("mpremote is not installed (pip install mpremote; it is in the test extra)")
    from dpsense.tools import flash
    from dpsense.tools.ptyboard import PtyBoard
    folder = tmp_path / "board"
    folder.mkdir()
    with PtyBoard(folder, upy) as board:
        r = subprocess.run([mpremote, "connect", str(board.pty), "mip", "install", "--target",
                            ".", "firmware/package.json"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "Done" in r.stdout, r.stdout + r.stderr
        assert _tree(folder) == {t for t, _ in PACKAGE["urls"]}
        # What deploy would have written to a Pico is what mip wrote, file for file.
        assert flash.main(["verify", "--board", "pico", "--port", str(board.pty),
                           "--no-mpy"]) == 0
        r = subprocess.run([mpremote, "connect", str(board.pty), "exec",
                            "import app, shared_protocol; print(shared_protocol.__version__)"],
                           capture_output=True, text=True, timeout=30)
        assert r.stdout.strip() == __version__, r.stdout + r.stderr
