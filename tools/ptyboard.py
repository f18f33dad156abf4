"""A stand-in MicroPython board: the unix port behind a pseudo-terminal.

    with PtyBoard("out/pico") as board:           # board.pty is e.g. /dev/pts/7
        with RawRepl.open(board.pty) as repl:
            repl.exec("print(1 + 1)")

    python tools/ptyboard.py --dir out/pico       # until Ctrl-C; prints the pty

Why: the serial rig and ``tools/flash.py`` talk to ESP32 and RP2040 boards over their
USB serial line, and CI has no such board. The stand-in behaves on its pty the way
MicroPython v1.2x does on a board's USB serial, so the same host code runs unchanged.

How: a thread relays the pty a rig opens (``pty``) to a second pty on which a
``micropython`` child runs in the board's folder (its file system). Its terminal
turns Ctrl-C into SIGINT, so running code gets ``KeyboardInterrupt`` (in
``time.sleep`` and ``sys.stdin`` reads too); a SIGINT the port has no handler for
yet, or a second one too soon, would kill it where a board just interrupts, so the
relay holds such a Ctrl-C back a moment (``PtyBoard._ctrl_c_safe``). Line ends
become ``\\r\\n``, as a board's are.

What a board does and how it is reproduced:

* Power-on, ``reset()``, ``power_cut()`` and ``machine.reset()``: a fresh child runs
  ``boot.py`` and ``main.py`` if present (an exception, ``KeyboardInterrupt`` or
  ``SystemExit`` there prints its traceback and ends in the REPL), then the friendly
  REPL. RAM is lost, files are kept.
* Soft reset (Ctrl-D at the ``>>>`` prompt or on an empty raw-REPL line,
  ``sys.exit()``, ``machine.soft_reset()``): the unix port exits instead, so the
  stand-in starts a new child and writes ``MPY: soft reboot\\r\\n`` as a board does.
  From the friendly REPL the new child runs ``main.py``; from the raw REPL it does not
  (ports only run ``main.py`` in friendly-REPL mode) and the line shows
  ``raw REPL; CTRL-B to exit\\r\\n>`` once the child is in its raw REPL.
* Raw REPL, raw exec and raw-paste mode are the unix port's own (window 128 bytes).
* ``machine`` is the unix port's module plus ``reset()``, ``reset_cause()``,
  ``unique_id()`` and ``freq()``; ``network.WLAN`` is connected as soon as
  ``connect()`` was called, since the host's network stands in for the access point.
  Both shims live in tools/ptyboard_shims/, after the board's folder on the module
  path, so the board's own files win.
* Output while no one reads the pty is buffered up to ``OUTPUT_LIMIT`` bytes (plus the
  kernel's pty buffer) and then dropped, so a board with no host attached never stalls.

Not reproduced: USB re-enumeration after a reset (the pty stays open and valid
throughout), Wi-Fi itself (association, signal, drop-outs), the ADC and other pins,
flash write timing and wear, 32-bit floats (the unix port has doubles), the board's
RAM and stack limits (``gc.mem_free()`` reports the unix heap), ``sys.platform``
(``linux``, so firmware/boards picks the unix profile), and binary output: a bare
``\\n`` byte written through ``sys.stdout.buffer`` also becomes ``\\r\\n``.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import select
import signal
import subprocess
import sys
import termios
import threading
import time
import tty
from pathlib import Path
from typing import Sequence

from dpsense.tools.rawrepl import RAW_BANNER

# machine.reset() ends the child with this signal; any other end of the child is a
# soft reset, since that is what a board does where the unix port exits.
RESET_SIGNAL = signal.SIGUSR1
SOFT_REBOOT = b"MPY: soft reboot\r\n"
# Least time between two Ctrl-C the child gets as signals (see _ctrl_c_safe).
SIGINT_GAP = 0.25
OUTPUT_LIMIT = 64 * 1024       # board output kept for a slow or absent reader
INPUT_LIMIT = 256 * 1024       # host input kept while the board boots
# MicroPython modules the children import before the board's own (machine, network) and
# the script each child runs (_ptyboard_boot.py).
SHIMS = Path(__file__).resolve().parent / "ptyboard_shims"
# Printed by the boot script once the interpreter handles Ctrl-C; never shown.
_READY = b"\x1b]ptyboard-ready\x07"
_FRIENDLY_MARK = b'Type "help()" for more information.'
_RAW_MARK = b"raw REPL; CTRL-B to exit"
_MAX_FAILED_BOOTS = 3

# Makes the child's pty its controlling terminal, so Ctrl-C becomes SIGINT for it, then
# becomes the unix port (``subprocess`` has no option for the controlling terminal).
_TRAMPOLINE = ("import fcntl, os, sys, termios\n"
               "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
               "os.execvp(sys.argv[1], sys.argv[1:])\n")

_BOOTING, _RAW_WAIT, _RUNNING, _DOWN = "booting", "raw-wait", "running", "down"


class BoardError(RuntimeError):
    """The stand-in could not boot the unix port."""


def _child_termios(fd: int) -> None:
    """Terminal settings of the child's pty while its code runs.

    Ctrl-C (and only Ctrl-C) raises a signal; input arrives byte by byte, unechoed and
    untranslated, as from a board's USB serial; Ctrl-S/Ctrl-Q are plain bytes; output
    is not translated here (the relay makes line ends ``\\r\\n``). The unix port saves
    these settings and restores them after each REPL input.
    """
    attrs = termios.tcgetattr(fd)
    attrs[0] &= ~(termios.BRKINT | termios.ICRNL | termios.INLCR | termios.IGNCR
                  | termios.ISTRIP | termios.IXON | termios.IXOFF)
    attrs[1] &= ~termios.OPOST
    attrs[3] &= ~(termios.ICANON | termios.ECHO | termios.ECHONL | termios.IEXTEN)
    attrs[3] |= termios.ISIG
    cc = attrs[6]
    for name in ("VQUIT", "VSUSP", "VDSUSP"):
        if hasattr(termios, name):
            cc[getattr(termios, name)] = b"\x00"
    cc[termios.VINTR] = b"\x03"
    cc[termios.VMIN] = 1
    cc[termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


def _set_nonblocking(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


class PtyBoard:
    """Context manager: the unix port in ``folder``, reachable as a board on ``pty``.

    ``start()`` creates the pty and boots the board (returning once the interpreter
    takes Ctrl-C); ``close()`` stops it. ``reset()`` presses the reset button and
    ``power_cut()`` cuts the power (the child is killed with SIGKILL, mid-write if it
    was writing); both boot again with ``main.py`` as ``machine.reset()`` does.

    Attributes: ``pty``, ``folder``, ``micropython``, ``boots``, ``last_reset``
    ("power", "hard", "soft"), ``raw_mode`` (as last seen on the line), ``dropped``
    (output bytes no one read), ``events`` (a line per boot, for test logs).
    """

    def __init__(self, folder: str | Path, micropython: str | None = None,
                 boot_timeout: float = 10.0) -> None:
        self.folder = Path(folder)
        self.micropython = micropython
        self.boot_timeout = boot_timeout
        self.pty: str | None = None
        self.boots = 0
        self.last_reset = "power"
        self.raw_mode = False
        self.dropped = 0
        self.events: list[str] = []
        self._outer = -1            # master of the pty the host opens
        self._outer_slave = -1      # held open so the pty stays valid between hosts
        self._inner = -1            # master of the child's pty
        self._inner_slave = -1      # its terminal settings tell the REPL's mode
        self._pidfd = -1            # readable once the child has ended
        self._sigint_at = 0.0       # when a Ctrl-C last went to the child as SIGINT
        self._proc: subprocess.Popen[bytes] | None = None
        self._state = _DOWN
        self._boot_raw = False
        self._seen = b""            # child output while booting
        self._tail = b""            # last output bytes, for the mode markers
        self._last_cr = False
        self._to_host = bytearray()
        self._to_child = bytearray()
        self._failed_boots = 0
        self._error: str | None = None
        self._lock = threading.Lock()
        self._commands: list[tuple[str, threading.Event]] = []
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._wake_r = self._wake_w = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PtyBoard:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> PtyBoard:
        """Create the pty, boot the board (power-on) and return once it is up."""
        if self._thread is not None:
            raise RuntimeError("the board is already running")
        if not self.folder.is_dir():
            raise BoardError("board folder %s does not exist" % self.folder)
        if self.micropython is None:
            from dpsense.tools.deploy import micropython_binary
            self.micropython = micropython_binary()
        try:
            self._outer, self._outer_slave = os.openpty()
            tty.setraw(self._outer_slave)
            self.pty = os.ttyname(self._outer_slave)
            _set_nonblocking(self._outer)
            self._wake_r, self._wake_w = os.pipe()
            self._boot(raw=False, cause="power")
            self._thread = threading.Thread(target=self._relay, name="ptyboard-relay",
                                            daemon=True)
            self._thread.start()
            self.wait_ready(self.boot_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop the relay and the child, and release the ptys and the shim folder."""
        self._stop.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        self._thread = None
        self._kill_child()
        for name in ("_outer", "_outer_slave", "_wake_r", "_wake_w"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        self._state = _DOWN

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._error is None

    @property
    def error(self) -> str | None:
        """Why the board stopped on its own (the unix port kept failing to boot), if it did."""
        return self._error

    def wait_ready(self, timeout: float | None = None) -> None:
        """Return once the current boot has an interpreter that takes Ctrl-C (before
        ``main.py``; in raw mode, once the raw REPL prompt is on the line)."""
        limit = self.boot_timeout if timeout is None else timeout
        if not self._ready.wait(limit):
            raise BoardError("the unix port did not come up within %.1f s (state %s)%s"
                             % (limit, self._state, ": " + self._error if self._error else ""))
        if self._error:
            raise BoardError(self._error)

    def reset(self, timeout: float | None = None) -> None:
        """Press the reset button: RAM lost, files kept, then ``main.py`` and the REPL."""
        self._command("hard", timeout)

    def power_cut(self, timeout: float | None = None) -> None:
        """Cut the power: SIGKILL the child wherever it is (a file write is left as far
        as it got), then boot as at power-on."""
        self._command("power", timeout)

    # -- the relay thread -------------------------------------------------------------

    def _wake(self) -> None:
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def _command(self, what: str, timeout: float | None) -> None:
        if not self.running():
            raise RuntimeError("the board is not running")
        done = threading.Event()
        with self._lock:
            self._commands.append((what, done))
        self._wake()
        limit = self.boot_timeout if timeout is None else timeout
        if not done.wait(limit):
            raise BoardError("the relay did not restart the board within %.1f s" % limit)
        self.wait_ready(limit)

    def _relay(self) -> None:
        try:
            while not self._stop.is_set():
                self._step()
        except Exception as e:          # keep the reason for wait_ready()/running()
            self._error = "relay stopped: %r" % e
            self._ready.set()

    def _step(self) -> None:
        with self._lock:
            commands, self._commands = self._commands, []
        for what, done in commands:
            self._kill_child()
            self._boot(raw=False, cause=what)
            done.set()
        reads = [self._wake_r, self._outer]
        writes = []
        timeout = 0.2
        if self._inner >= 0:
            reads.append(self._inner)
            if self._to_child and self._state == _RUNNING:
                if self._to_child[:1] == b"\x03" and not self._ctrl_c_safe():
                    timeout = 0.005         # held back a moment; see _ctrl_c_safe
                else:
                    writes.append(self._inner)
        if self._pidfd >= 0:
            reads.append(self._pidfd)
        if self._to_host:
            writes.append(self._outer)
        readable, writable, _ = select.select(reads, writes, [], timeout)
        if self._wake_r in readable:
            os.read(self._wake_r, 64)
        if self._outer in readable:
            self._from_host()
        if self._inner >= 0 and self._inner in readable:
            self._from_child()
        if self._inner >= 0 and self._inner in writable:
            self._to_child_now()
        if self._outer in writable:
            self._to_host_now()
        if self._proc is not None and self._proc.poll() is not None:
            # The child has gone; show what it wrote last before booting again.
            self._drain_child()
            self._child_ended()

    def _from_host(self) -> None:
        try:
            data = os.read(self._outer, 4096)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EIO):
                return
            raise
        room = INPUT_LIMIT - len(self._to_child)
        self._to_child += data[:max(room, 0)]

    def _child_takes_signals(self) -> bool:
        """Is the child running code (its pty turns Ctrl-C into SIGINT)?

        The unix port turns signals off while its REPL reads input, and back on
        (the settings of ``_child_termios``) while code runs.
        """
        try:
            return bool(termios.tcgetattr(self._inner_slave)[3] & termios.ISIG)
        except termios.error:
            return False

    def _ctrl_c_safe(self) -> bool:
        """May a Ctrl-C go to the child now?

        While the child runs code a Ctrl-C is a SIGINT, and the unix port dies of one
        where a board would just interrupt: in the moments around an execution (after
        ``OK``, after a program ends) SIGINT has its default action, and a second
        SIGINT before the first was raised ends the process. So a Ctrl-C waits while
        the port has no handler, and for ``SIGINT_GAP`` seconds after the previous
        one; if the REPL reads input again meanwhile it gets the Ctrl-C as a plain
        byte, as a board's REPL gets a second Ctrl-C.
        """
        if not self._child_takes_signals() or self._proc is None:
            return True
        if time.monotonic() - self._sigint_at < SIGINT_GAP:
            return False
        try:
            with open("/proc/%d/status" % self._proc.pid) as f:
                for line in f:
                    if line.startswith("SigCgt:"):
                        return bool(int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1)
        except (OSError, ValueError):
            pass
        return True

    def _to_child_now(self) -> None:
        if self._to_child[:1] == b"\x03":
            data = b"\x03"
            if self._child_takes_signals():
                self._sigint_at = time.monotonic()
        else:
            data = bytes(self._to_child[:4096])
            cut = data.find(b"\x03")
            if cut > 0:                 # a Ctrl-C gets its own check
                data = data[:cut]
        try:
            n = os.write(self._inner, data)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EIO):
                return
            raise
        del self._to_child[:n]

    def _to_host_now(self) -> None:
        try:
            n = os.write(self._outer, self._to_host[:4096])
        except OSError as e:
            if e.errno == errno.EAGAIN:
                return
            raise
        del self._to_host[:n]

    def _from_child(self) -> None:
        try:
            data = os.read(self._inner, 4096)
        except OSError as e:
            if e.errno == errno.EAGAIN:
                return
            if e.errno != errno.EIO:
                raise
            data = b""
        if data:
            self._child_output(data)

    def _drain_child(self) -> None:
        while self._inner >= 0 and select.select([self._inner], [], [], 0)[0]:
            try:
                data = os.read(self._inner, 4096)
            except OSError:
                break
            if not data:
                break
            self._child_output(data)

    def _child_output(self, data: bytes) -> None:
        if self._state == _BOOTING:
            self._seen += data
            i = self._seen.find(_READY)
            if i < 0:
                self._seen = self._seen[-4096:]
                return
            data, self._seen = self._seen[i + len(_READY):], b""
            self._failed_boots = 0
            if self._boot_raw:
                self._state = _RAW_WAIT
                os.write(self._inner, b"\x01")
            else:
                self._state = _RUNNING
                self._ready.set()
        if self._state == _RAW_WAIT:
            # The new child's own banner and friendly prompt are not shown: a board
            # soft-reset in raw mode goes straight back to its raw REPL.
            self._seen += data
            i = self._seen.find(RAW_BANNER)
            if i < 0:
                self._seen = self._seen[-4096:]
                return
            data, self._seen = self._seen[i:], b""
            self._state = _RUNNING
            self._ready.set()
        self._show(data)

    def _show(self, data: bytes) -> None:
        """Queue child output for the host: mode markers noted, line ends made CRLF."""
        if not data:
            return
        window = self._tail + data
        raw_at, friendly_at = window.rfind(_RAW_MARK), window.rfind(_FRIENDLY_MARK)
        if raw_at >= 0 or friendly_at >= 0:
            self.raw_mode = raw_at > friendly_at
        self._tail = window[-64:]
        out = bytearray()
        start = 0
        while True:
            i = data.find(b"\n", start)
            if i < 0:
                out += data[start:]
                break
            prev_cr = data[i - 1:i] == b"\r" if i > 0 else self._last_cr
            out += data[start:i] + (b"\n" if prev_cr else b"\r\n")
            start = i + 1
        self._last_cr = data.endswith(b"\r")
        self._host(bytes(out))

    def _host(self, data: bytes) -> None:
        room = OUTPUT_LIMIT - len(self._to_host)
        if len(data) > room:
            self.dropped += len(data) - max(room, 0)
            data = data[:max(room, 0)]
        self._to_host += data

    # -- children ---------------------------------------------------------------------

    def _boot(self, raw: bool, cause: str) -> None:
        """Start a child: ``raw`` boots into the raw REPL without ``main.py``."""
        assert self.micropython is not None
        self._ready.clear()
        self._close_inner()
        master, slave = os.openpty()
        try:
            _child_termios(slave)
            shims = str(SHIMS)
            env = dict(os.environ,
                       MICROPYPATH=os.pathsep.join(["", ".frozen", shims]),
                       PTYBOARD_RESET=cause, PTYBOARD_RUN_MAIN="0" if raw else "1",
                       PTYBOARD_RESET_SIGNAL=str(int(RESET_SIGNAL)))
            # -c, not the script's path: the port would put the script's folder first on
            # sys.path, where MICROPYPATH puts "" (the board's folder) as on a board.
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _TRAMPOLINE, self.micropython, "-i", "-c",
                 "execfile(%r)" % os.path.join(shims, "_ptyboard_boot.py")],
                stdin=slave, stdout=slave, stderr=slave, cwd=self.folder, env=env,
                start_new_session=True, close_fds=True)
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        _set_nonblocking(master)
        self._inner = master
        self._inner_slave = slave
        try:
            self._pidfd = os.pidfd_open(self._proc.pid)
        except (AttributeError, OSError):
            self._pidfd = -1
        self._state = _BOOTING
        self._boot_raw = raw
        self._seen = b""
        self._last_cr = False
        self.boots += 1
        self.last_reset = cause
        self.raw_mode = raw
        self.events.append("boot %d: %s%s" % (self.boots, cause, " (raw REPL)" if raw else ""))

    def _child_ended(self) -> None:
        assert self._proc is not None
        status = self._proc.wait()
        self._proc = None
        self._close_inner()
        if self._state in (_BOOTING, _RAW_WAIT):
            self._failed_boots += 1
            if self._failed_boots >= _MAX_FAILED_BOOTS:
                self._error = ("the unix port (%s) exited during boot %d times (status %s); "
                               "its output: %r" % (self.micropython, self._failed_boots,
                                                   status, self._seen[-300:]))
                self._state = _DOWN
                self._ready.set()
                self._stop.set()
                return
        if status in (-RESET_SIGNAL, 128 + RESET_SIGNAL):   # the latter via a shell wrapper
            self._boot(raw=False, cause="hard")
            return
        # Anything else is where a board soft-resets: Ctrl-D, sys.exit(), a crash.
        self.events[-1] += "; ended with status %s" % status
        self._host(SOFT_REBOOT)
        self._boot(raw=self.raw_mode, cause="soft")

    def _close_inner(self) -> None:
        for name in ("_inner", "_inner_slave", "_pidfd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def _kill_child(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.wait()
        self._close_inner()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The stand-in's options (this command's, and `tools/flash.py ptyboard`'s)."""
    p.add_argument("--dir", required=True, metavar="FOLDER",
                   help="the board's file system (created if missing)")
    p.add_argument("--micropython", metavar="PATH",
                   help="the unix port binary (default: on PATH or in .venv)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ptyboard.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the MicroPython unix port as a stand-in board on a pseudo-terminal, "
        "with FOLDER as its file system, until Ctrl-C.",
        epilog="examples:\n"
        "  python tools/ptyboard.py --dir out/pico\n"
        "  python tools/flash.py deploy --board pico --port /dev/pts/N --check   # N as printed\n"
        "  python -m pytest hil_tests --rig serial --board pico --port /dev/pts/N")
    add_arguments(p)
    return p


def serve(folder: str | Path, micropython: str | None = None) -> int:
    """Run a stand-in board until Ctrl-C or SIGTERM, reporting its pty on stdout; SIGUSR1
    presses its reset button (``main.py`` runs again, as a board's RESET or a re-plug does)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    presses: list[int] = []
    signal.signal(signal.SIGUSR1, lambda *_: presses.append(1))
    Path(folder).mkdir(parents=True, exist_ok=True)
    with PtyBoard(folder, micropython) as board:
        print("stand-in board (MicroPython unix port) on %s, files in %s" % (board.pty, folder))
        print("  python tools/flash.py deploy --board pico --port %s --check" % board.pty)
        print("  kill -USR1 %d presses its reset button" % os.getpid())
        sys.stdout.flush()
        while board.running():
            if presses:
                presses.clear()
                board.reset()
                print("stand-in board: reset")
                sys.stdout.flush()
            time.sleep(0.2)
        print("ptyboard: %s" % (board.error or "the relay stopped"), file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return serve(args.dir, args.micropython)
    except KeyboardInterrupt:
        return 130
    except (BoardError, RuntimeError, OSError) as e:
        print("ptyboard: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
