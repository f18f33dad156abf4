"""tools/ptyboard.py: the unix port on a pty behaves like a MicroPython board's USB serial.

Each test talks to the stand-in only through its pty, with the same ``RawRepl`` and
``tools/flash.py`` the serial rig uses on a real ESP32 or Pico, so what passes here
is the host side of those boards' protocol: raw REPL and raw-paste mode, soft reset
(RAM lost, files kept), Ctrl-C, ``machine.reset()`` and a power cut (``main.py``
runs again), and deploy/verify over ``--port``.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from dpsense.cloud.transport.serialport import Transport
from dpsense.tools.deploy import micropython_binary
from dpsense.tools.ptyboard import PtyBoard
from dpsense.tools.rawrepl import RawRepl, RawReplError

ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    try:
        micropython_binary()
    except RuntimeError as e:
        return str(e)
    return None


_MISSING = _missing()
pytestmark = pytest.mark.skipif(_MISSING is not None,
                                reason="MicroPython unix port: %s" % _MISSING)

MAIN_PY = ("import machine\n"
           "booted = machine.reset_cause()\n"
           "f = open('boots.txt', 'a')\n"
           "f.write('boot\\n')\n"
           "f.close()\n"
           "print('main.py: boot, cause %d' % booted)\n")


def read_until(transport: Transport, marker: bytes, timeout: float = 5.0) -> bytes:
    """What the board sends, up to and including ``marker``."""
    deadline = time.monotonic() + timeout
    got = b""
    while marker not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no %r within %.1f s; got %r" % (marker, timeout, got[-300:]))
        got += transport.read_some(min(left, 0.2))
    return got


@pytest.fixture()
def board(tmp_path: Path) -> Iterator[PtyBoard]:
    folder = tmp_path / "board"
    folder.mkdir()
    with PtyBoard(folder) as b:
        yield b


@pytest.fixture()
def repl(board: PtyBoard) -> Iterator[RawRepl]:
    with RawRepl.open(board.pty) as r:
        r.enter()
        yield r


def test_exec_in_raw_repl_and_raw_paste(board: PtyBoard, repl: RawRepl) -> None:
    assert board.pty is not None and board.pty.startswith("/dev/pts/")
    assert repl.exec("print(1 + 1)") == "2\r\n"
    assert repl.raw_paste is True           # the unix port answers the probe with R\x01
    with pytest.raises(RawReplError) as e:
        repl.exec("1 / 0")
    assert e.value.exception_line.startswith("ZeroDivisionError")
    assert "\r\n" in e.value.traceback      # a board's line ends


def test_write_file_then_read_back(board: PtyBoard, repl: RawRepl) -> None:
    data = bytes(range(256)) * 3 + b"\r\n\n\x04\x03 end"
    repl.mkdir("lib")
    repl.write_file("lib/blob.bin", data)
    back = repl.eval("open('lib/blob.bin', 'rb').read()")
    assert back == data
    assert (board.folder / "lib" / "blob.bin").read_bytes() == data
    assert "blob.bin" in repl.listdir("lib")


def test_soft_reset_loses_ram_and_keeps_files(board: PtyBoard, repl: RawRepl) -> None:
    repl.exec("x = 41\nf = open('kept.txt', 'w')\nf.write('kept')\nf.close()")
    assert repl.eval("x + 1") == 42
    repl.soft_reset()
    with pytest.raises(RawReplError, match="NameError"):
        repl.exec("print(x)")
    assert repl.eval("open('kept.txt').read()") == "kept"
    assert repl.eval("__import__('machine').reset_cause()") == 5      # SOFT_RESET
    assert board.last_reset == "soft" and board.boots == 2


def test_sys_exit_in_raw_repl_is_a_soft_reset(board: PtyBoard, repl: RawRepl) -> None:
    repl.exec("y = 1")
    # The unix port ends with "OK\x04\x04" and exits; the stand-in adds what a board
    # sends then, "MPY: soft reboot" and the raw REPL prompt.
    assert repl.exec_raw("import sys\nsys.exit(2)") == (b"", b"")
    with pytest.raises(RawReplError, match="NameError"):
        repl.exec("print(y)")
    assert board.last_reset == "soft" and "status 2" in board.events[0]


@pytest.mark.parametrize("code", ["while True:\n pass",
                                  "import time\ntime.sleep(100)",
                                  "import sys\nsys.stdin.read(1)"])
def test_ctrl_c_interrupts_running_code(board: PtyBoard, repl: RawRepl, code: str) -> None:
    repl.exec("z = 7")
    repl.exec_start(code)
    time.sleep(0.2)
    repl.transport.write(b"\x03")
    got = read_until(repl.transport, b"\x04>")
    assert b"KeyboardInterrupt" in got
    repl.enter()
    assert repl.eval("z") == 7                     # interrupted, not reset
    assert board.boots == 1


def test_repeated_ctrl_c_never_kills_the_interpreter(board: PtyBoard, repl: RawRepl) -> None:
    repl.exec("w = 3")
    for i in range(8):
        repl.exec_start("while True:\n pass" if i % 2 else "import time\ntime.sleep(100)")
        repl.transport.write(b"\x03\x03\x03")      # right after OK, and three at once
        repl.enter()
    assert repl.eval("w") == 3 and board.boots == 1


def test_machine_reset_reboots_and_runs_main(board: PtyBoard) -> None:
    (board.folder / "main.py").write_text(MAIN_PY)
    with RawRepl.open(board.pty) as repl:
        repl.enter()
        repl.exec("v = 1")
        repl.exec_start("import machine\nmachine.reset()")
        read_until(repl.transport, b"main.py: boot, cause 2")           # HARD_RESET
        repl.enter()
        assert repl.eval("booted") == 2                # main.py ran in the REPL's globals
        with pytest.raises(RawReplError, match="NameError"):
            repl.exec("print(v)")
    assert board.last_reset == "hard"


def test_friendly_ctrl_d_soft_resets_and_runs_main(board: PtyBoard) -> None:
    (board.folder / "main.py").write_text(MAIN_PY)
    with RawRepl.open(board.pty) as repl:
        repl.enter()
        repl.exit()
        repl.transport.write(b"\x04")
        got = read_until(repl.transport, b">>> ")
        assert b"MPY: soft reboot\r\n" in got
        assert b"main.py: boot, cause 5" in got
    # From the raw REPL a soft reset does not run main.py (ports only do so friendly).
    with RawRepl.open(board.pty) as repl:
        repl.enter()
        repl.soft_reset()
        assert repl.eval("'booted' in globals()") is False
    # main.py appeared after power-on: only the friendly Ctrl-D ran it.
    assert (board.folder / "boots.txt").read_text() == "boot\n"


def test_power_cut_mid_write_keeps_the_files_and_boots(board: PtyBoard) -> None:
    (board.folder / "main.py").write_text(MAIN_PY)
    with RawRepl.open(board.pty) as repl:
        repl.enter()
        repl.exec_start("f = open('log.txt', 'w')\nwhile True:\n f.write('record\\n')\n f.flush()")
        time.sleep(0.3)
        board.power_cut()
        read_until(repl.transport, b"main.py: boot, cause 1")           # PWRON_RESET
        repl.enter()
        assert repl.eval("booted") == 1
        written = repl.eval("open('log.txt').read()")
    assert isinstance(written, str) and written.startswith("record\n")
    assert set(written.split("\n")[:-1]) == {"record"}
    assert board.last_reset == "power" and board.boots == 2


def test_network_shim_lets_wifilink_connect(board: PtyBoard, repl: RawRepl) -> None:
    (board.folder / "net.py").write_bytes((ROOT / "firmware" / "net.py").read_bytes())
    out = repl.exec("from net import WifiLink\nWifiLink('home', 'secret', 500)()\n"
                    "import network\nw = network.WLAN(network.STA_IF)\n"
                    "print(w.isconnected(), w.active(), w.status() == network.STAT_GOT_IP,"
                    " w.ifconfig()[0])")
    assert out == "True True True 127.0.0.1\r\n"


def test_board_files_win_over_the_shims(board: PtyBoard, repl: RawRepl) -> None:
    (board.folder / "network.py").write_text("OWN = True\n")
    assert repl.eval("__import__('network').OWN") is True


def test_output_with_no_reader_does_not_stall_the_board(board: PtyBoard) -> None:
    (board.folder / "main.py").write_text(
        "n = 0\nwhile n < 30000:\n print('no one reads line', n)\n n += 1\n"
        "open('done.txt', 'w').close()\n")
    board.reset()
    deadline = time.monotonic() + 20
    while not (board.folder / "done.txt").exists():
        assert time.monotonic() < deadline, "main.py stalled with no one reading the pty"
        time.sleep(0.1)
    assert board.dropped > 0
    with RawRepl.open(board.pty) as repl:
        repl.enter()
        assert repl.eval("n") == 30000


def _flash(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "tools/flash.py", *argv], cwd=ROOT, text=True,
                          capture_output=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_flash_deploy_check_then_verify_over_the_pty(board: PtyBoard) -> None:
    assert board.pty is not None
    r = _flash("deploy", "--board", "pico", "--port", board.pty, "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "heap free" in r.stdout and "verified" in r.stdout
    # the unix port imports mpy-cross's .mpy files: modules compiled, main.py a source
    assert "compiled" in r.stdout and "with mpy-cross" in r.stdout
    assert (board.folder / "shared_protocol" / "noise.mpy").is_file()
    assert (board.folder / "main.py").is_file() and not (board.folder / "app.py").exists()
    r = _flash("verify", "--board", "pico", "--port", board.pty)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"all \d+ file\(s\) match", r.stdout)
    r = _flash("deploy", "--board", "pico", "--port", board.pty, "--no-mpy", "--files", "noise")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (board.folder / "shared_protocol" / "noise.py").is_file()
    assert not (board.folder / "shared_protocol" / "noise.mpy").exists()     # would be shadowed


def test_cli_prints_the_pty_and_stops_on_sigterm(tmp_path: Path) -> None:
    folder = tmp_path / "pico"
    proc = subprocess.Popen([sys.executable, "tools/ptyboard.py", "--dir", str(folder)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(r"stand-in board \(MicroPython unix port\) on (/dev/pts/\d+), files in (.+)$",
                     line.strip())
        assert m and m.group(2) == str(folder), line
        with RawRepl.open(m.group(1)) as repl:
            assert repl.exec("print('up')") == "up\r\n"
        assert "deploy --board pico" in proc.stdout.readline()
        assert proc.stdout.readline().strip() == "kill -USR1 %d presses its reset button" % proc.pid
        proc.send_signal(signal.SIGUSR1)          # RESET: main.py (here none) and the REPL again
        assert proc.stdout.readline().strip() == "stand-in board: reset"
        with RawRepl.open(m.group(1)) as repl:
            assert repl.exec("print('again')") == "again\r\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
