"""An emulated BBC micro:bit running the real MicroPython firmware, for tests and demos.

    with QemuMicrobit() as board:
        repl = board.repl()                     # RawRepl over board.pty
        repl.exec("print(2 ** 100)")

QEMU's ``microbit`` machine (nRF51, 16 KB RAM) runs Debian's micro:bit MicroPython
v1.9.2 image unchanged, so the emulator has the real board's interpreter, float32,
~9.5 KB heap, 1800-byte stack limit (about six nested Python calls) and ~15 KB file
system; like the board, it can lose bytes of a large unpaced write. The serial line
is a pseudo-terminal whose path QEMU prints at start-up. It is opened at once and kept
open: while nobody holds it, QEMU treats the line as unplugged and output is lost.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from dpsense.cloud.transport.serialport import PtyTransport
from dpsense.tools.rawrepl import RawRepl, ReplTimeout

QEMU = "qemu-system-arm"
FIRMWARE = Path("/usr/share/firmware-microbit-micropython/firmware.hex")
DEBIAN_PACKAGES = ("qemu-system-arm", "firmware-microbit-micropython")
# The nRF51's code flash: 256 KB from address 0, in pages of 1 KB.
FLASH_SIZE = 0x40000
PAGE_SIZE = 0x400
_PTY_LINE = re.compile(rb"char device redirected to (/dev/pts/\d+)")
_PROMPT = b">>> "


def _die_with_parent() -> None:
    """In the child: ask Linux for SIGTERM when the parent dies, even by SIGKILL.

    QEMU runs in its own session (so a terminal Ctrl-C does not kill it before the
    parent can), which also means nothing else would stop it if the parent crashed.
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class QemuUnavailable(RuntimeError):
    """The emulator or the firmware image is not installed."""


def missing_reason(qemu: str = QEMU, firmware: str | Path = FIRMWARE) -> str | None:
    """Why the emulated micro:bit cannot run here, or None when it can."""
    missing = []
    if shutil.which(qemu) is None:
        missing.append("%s not found on PATH (Debian package qemu-system-arm)" % qemu)
    if not Path(firmware).is_file():
        missing.append("firmware %s not found (Debian package firmware-microbit-micropython)"
                       % firmware)
    if not missing:
        return None
    return ("; ".join(missing) + ". Install with: sudo apt-get install "
            + " ".join(DEBIAN_PACKAGES))


def left_out_pages(firmware: str | Path) -> list[int]:
    """The addresses of the code-flash pages the Intel HEX ``firmware`` leaves out entirely:
    after the chip erase that flashing a real micro:bit starts with, they hold 0xFF, and the
    file system lives there."""
    covered = bytearray(FLASH_SIZE // PAGE_SIZE)
    base = 0
    for line in Path(firmware).read_text().split():
        if not line.startswith(":") or len(line) < 11:
            raise ValueError("%s: not an Intel HEX line: %r" % (firmware, line[:40]))
        raw = bytes.fromhex(line[1:])
        if sum(raw) & 0xFF:
            raise ValueError("%s: bad checksum in %r" % (firmware, line[:40]))
        n, addr, kind = raw[0], int.from_bytes(raw[1:3], "big"), raw[3]
        if kind == 1:
            break
        if kind == 4:
            base = int.from_bytes(raw[4:6], "big") << 16
        elif kind == 2:
            base = int.from_bytes(raw[4:6], "big") << 4
        elif kind == 0 and n:
            for page in range((base + addr) // PAGE_SIZE, (base + addr + n - 1) // PAGE_SIZE + 1):
                if page < len(covered):
                    covered[page] = 1
    return [i * PAGE_SIZE for i, c in enumerate(covered) if not c]


# Erase those pages from the board itself, through the nRF51's flash controller (NVMC: READY
# at 0x4001E400, CONFIG at 0x504 with 2 = erase enabled, ERASEPAGE at 0x508).
_ERASE = ("import machine\nm=machine.mem32\nm[0x4001E504]=2\nfor a in %r:\n m[0x4001E508]=a\n"
          " while not m[0x4001E400]:\n  pass\nm[0x4001E504]=0\nprint('erased',len(%r))")


class QemuMicrobit:
    """Context manager: start QEMU, open its serial pty, wait for the ``>>>`` prompt.

    ``pty`` is the serial line's path and ``transport`` the open pty; ``repl()`` gives
    a ``RawRepl`` on it. QEMU runs in its own session so a Ctrl-C in the terminal
    reaches only this process, which then stops QEMU; it is also stopped when the
    ``with`` block raises.
    """

    def __init__(self, firmware: str | Path = FIRMWARE, qemu: str = QEMU,
                 boot_timeout: float = 20.0) -> None:
        self._monitor_dir: tempfile.TemporaryDirectory[str] | None = None
        self.firmware = Path(firmware)
        self.qemu = qemu
        self.boot_timeout = boot_timeout
        self.pty: str | None = None
        self.transport: PtyTransport | None = None
        self.banner = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> QemuMicrobit:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> QemuMicrobit:
        reason = missing_reason(self.qemu, self.firmware)
        if reason:
            raise QemuUnavailable(reason)
        self._log = tempfile.TemporaryFile()
        self._monitor_dir = tempfile.TemporaryDirectory(prefix="dpsense-qemu-")
        cmd = [self.qemu, "-M", "microbit",
               "-device", "loader,file=%s" % self.firmware,
               "-nographic", "-serial", "pty",
               "-monitor", "unix:%s,server,nowait" % self._monitor_path()]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=_die_with_parent)
        try:
            self.pty = self._wait_for_pty()
            self.transport = PtyTransport(self.pty)
            self.banner = self._wait_for_prompt()
            self._wait_for_echo()
            self._erase_file_system()
        except BaseException:
            self.close()
            raise
        return self

    def _erase_file_system(self) -> None:
        """Erase the flash the firmware leaves out, then reset, as flashing a real board does.

        QEMU's nRF51 starts with its flash all zeros, and zero is the micro:bit file
        system's mark of a freed, not erased, chunk: the file system then reclaims space
        through sweeps a fresh board never needs, and a large write can come back cut short
        (``OSError: 28`` with half the space unused). The erase is done by the board, not by
        loading 0xFF into QEMU, because QEMU loads its images again at every reset, which
        would wipe the files a reset must keep."""
        pages = left_out_pages(self.firmware)
        repl = self.repl()
        repl.enter()
        out = repl.exec(_ERASE % (pages, pages), 30)
        if "erased %d" % len(pages) not in out:
            raise RuntimeError("erasing the emulated board's file system failed: %r" % out)
        self.reset()
        self._wait_for_echo()

    def _monitor_path(self) -> str:
        assert self._monitor_dir is not None
        return str(Path(self._monitor_dir.name) / "monitor.sock")

    def reset(self) -> str:
        """Press the reset button: QEMU's ``system_reset`` restarts the chip with its RAM
        lost and its flash (MicroPython's file system) kept, as a power cut does. Returns
        once the board's ``>>>`` prompt is back (its boot banner)."""
        import socket
        if not self.running() or self.transport is None:
            raise RuntimeError("the emulator is not running")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mon:
            mon.settimeout(5.0)
            mon.connect(self._monitor_path())
            mon.sendall(b"system_reset\n")
            seen = b""
            while b"system_reset" not in seen:
                seen += mon.recv(4096)
        self.banner = self._wait_for_prompt()
        self._wait_for_echo()
        return self.banner

    def _qemu_output(self) -> bytes:
        assert self._log is not None
        self._log.seek(0)
        return self._log.read()

    def _wait_for_pty(self) -> str:
        assert self._proc is not None
        deadline = time.monotonic() + 10.0
        while True:
            out = self._qemu_output()
            m = _PTY_LINE.search(out)
            if m:
                return m.group(1).decode()
            if self._proc.poll() is not None:
                raise RuntimeError("QEMU exited with status %s before opening its serial pty: %s"
                                   % (self._proc.returncode, out.decode(errors="replace")))
            if time.monotonic() > deadline:
                raise RuntimeError("QEMU printed no 'char device redirected to /dev/pts/N' "
                                   "within 10 s; its output: %r" % out[-300:])
            time.sleep(0.005)

    def _wait_for_prompt(self) -> str:
        assert self.transport is not None and self._proc is not None
        deadline = time.monotonic() + self.boot_timeout
        seen = b""
        while not seen.endswith(_PROMPT):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplTimeout("the MicroPython '>>> ' prompt after boot",
                                  self.boot_timeout, seen)
            if self._proc.poll() is not None:
                raise RuntimeError("QEMU exited with status %s during boot; serial output: %r"
                                   % (self._proc.returncode, seen[-300:]))
            seen += self.transport.read_some(min(left, 0.2))
        return seen.replace(b"\x00", b"").decode(errors="replace").strip()

    def _wait_for_echo(self) -> None:
        """Return once a bare Enter is answered by a fresh prompt.

        QEMU notices a reader on the pty by polling about once a second and drops the
        board's output until then, even though the boot banner may already have come
        through; waiting here keeps that gap out of the first command.
        """
        assert self.transport is not None
        deadline = time.monotonic() + self.boot_timeout
        seen = b""
        while time.monotonic() < deadline:
            self.transport.write(b"\r")
            until = time.monotonic() + 0.3
            seen = b""
            while time.monotonic() < until:
                seen += self.transport.read_some(0.05)
                if seen.endswith(_PROMPT):
                    return
        raise ReplTimeout("a '>>> ' reply to Enter", self.boot_timeout, seen)

    def repl(self, chunk_size: int = 32, pause: float = 0.01) -> RawRepl:
        """A raw-REPL session sharing this board's open pty (raw-paste: not on 1.9.2)."""
        if self.transport is None:
            raise RuntimeError("the emulator is not running")
        return RawRepl(self.transport, chunk_size=chunk_size, pause=pause, raw_paste=False)

    def close(self) -> None:
        """Stop QEMU (SIGTERM, then SIGKILL after 3 s) and release the pty and log."""
        if self.transport is not None:
            self.transport.close()
            self.transport = None
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(3.0)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._monitor_dir is not None:
            self._monitor_dir.cleanup()
            self._monitor_dir = None
