"""A small MicroPython raw-REPL client for real boards and the QEMU micro:bit.

    with RawRepl.open("/dev/ttyACM0") as repl:
        repl.exec("print(1 + 1)")              # "2\\r\\n"
        repl.write_file("rng.py", source)      # written, then checked on the device

Why not mpremote: it needs a recent firmware and a real serial port, while the boards
here include the micro:bit's MicroPython 1.9.2 (no raw-paste mode, no ``os.stat``, no
``binascii``) reached through a QEMU pseudo-terminal. Everything the device runs here
is plain 1.9.2 syntax.

Why chunked writes and verified files: the micro:bit's UART drops bytes when a large
block arrives while the interpreter is busy. A dropped byte in program text is a
SyntaxError, but one dropped inside a bytes literal silently corrupts a file. So code
goes out in small paced chunks (or raw-paste mode, which is flow-controlled, where the
firmware has it) and every written file is read back on the device and compared with
the host's Adler-32 before it counts as written.

Protocol (MicroPython ``pyexec.c``): Ctrl-A enters the raw REPL, which answers
``raw REPL; CTRL-B to exit\\r\\n>``. Code is sent, then Ctrl-D; the board replies
``OK``, the program's stdout, ``\\x04``, its stderr (a traceback), ``\\x04`` and the
``>`` prompt. Ctrl-D on an empty buffer soft-resets; Ctrl-B returns to the friendly REPL.
"""

from __future__ import annotations

import ast
import time
import zlib

from dpsense.cloud.transport.serialport import Transport, open_transport

RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
CTRL_A, CTRL_B, CTRL_C, CTRL_D, CTRL_E = b"\x01", b"\x02", b"\x03", b"\x04", b"\x05"


class ReplError(Exception):
    """Anything that went wrong talking to a board."""


class RawReplError(ReplError):
    """The code raised on the device; ``traceback`` is the device's stderr."""

    def __init__(self, traceback: str, stdout: str = "") -> None:
        shown = stdout if len(stdout) <= 500 else "..." + stdout[-500:]
        super().__init__("device raised:\n" + traceback.rstrip()
                         + ("\n(its stdout before that: %r)" % shown if stdout else ""))
        self.traceback = traceback
        self.stdout = stdout

    @property
    def exception_line(self) -> str:
        """Last traceback line, e.g. ``MemoryError: memory allocation failed``."""
        lines = [ln for ln in self.traceback.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else ""


class ReplTimeout(ReplError, TimeoutError):
    """The board did not send what the protocol expects in time."""

    def __init__(self, waiting_for: str, timeout: float, received: bytes) -> None:
        tail = received[-200:]
        super().__init__("timed out after %.1f s waiting for %s; last received (%d bytes): %r"
                         % (timeout, waiting_for, len(received), tail))
        self.waiting_for = waiting_for
        self.received = received


class VerifyError(ReplError):
    """A file read back from the device differs from what was sent."""


# Run on the device after a write: size and Adler-32 of a file, read 64 bytes at a
# time so it needs almost no heap. Pure Python, because the micro:bit has no zlib.
_CHECKSUM_FN = (
    "def _dps_ck(n):\n"
    " a=1;b=0;s=0\n"
    " f=open(n,'rb')\n"
    " while 1:\n"
    "  d=f.read(64)\n"
    "  if not d:break\n"
    "  s+=len(d)\n"
    "  for c in d:\n"
    "   a=(a+c)%65521;b=(b+a)%65521\n"
    " f.close()\n"
    " print(s,a,b)\n"
)


def adler32_parts(data: bytes) -> tuple[int, int, int]:
    """``(size, a, b)`` exactly as the device-side checksum prints them."""
    v = zlib.adler32(data)
    return len(data), v & 0xFFFF, v >> 16


class RawRepl:
    """Raw-REPL session over a ``Transport`` (a pty or serial port, cloud/transport/serialport.py).

    ``chunk_size``/``pause`` pace plain raw-REPL writes (0 sends at once).
    ``raw_paste``: True/False forces raw-paste mode on or off; None probes once and
    falls back to paced writes on firmware without it (such as the micro:bit's).
    """

    def __init__(self, transport: Transport, chunk_size: int = 32, pause: float = 0.01,
                 raw_paste: bool | None = None) -> None:
        self.transport = transport
        self.chunk_size = chunk_size
        self.pause = pause
        self.raw_paste = raw_paste
        self._in_raw = False
        self._pending = b""

    @classmethod
    def open(cls, port: str, baud: int = 115200, chunk_size: int = 32, pause: float = 0.01,
             raw_paste: bool | None = None) -> RawRepl:
        """Session on a serial device path, a pty, or a pyserial URL."""
        return cls(open_transport(port, baud), chunk_size, pause, raw_paste)

    def __enter__(self) -> RawRepl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Leave the raw REPL if possible and close the transport."""
        try:
            if self._in_raw:
                self.exit()
        except (OSError, ReplError):
            pass
        finally:
            self.transport.close()

    # -- low level --------------------------------------------------------------------

    def _read_until(self, marker: bytes, timeout: float, what: str = "") -> bytes:
        """Bytes up to and including ``marker``; the rest stays buffered for later reads."""
        deadline = time.monotonic() + timeout
        buf = self._pending
        self._pending = b""
        polled = False
        while True:
            i = buf.find(marker)
            if i >= 0:
                end = i + len(marker)
                self._pending = buf[end:]
                return buf[:end]
            left = deadline - time.monotonic()
            if left <= 0 and polled:
                self._in_raw = False
                raise ReplTimeout(what or repr(marker), timeout, buf)
            buf += self.transport.read_some(min(max(left, 0.0), 0.2))
            polled = True

    def _drain(self, quiet: float = 0.1, limit: float = 2.0) -> bytes:
        """Discard input until the line has been quiet for ``quiet`` seconds."""
        got = self._pending
        self._pending = b""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            data = self.transport.read_some(quiet)
            if not data:
                break
            got += data
        return got

    def _send(self, data: bytes) -> None:
        step = self.chunk_size if self.chunk_size > 0 else len(data) or 1
        for i in range(0, len(data), step):
            self.transport.write(data[i:i + step])
            if self.pause and i + step < len(data):
                time.sleep(self.pause)

    # -- modes ------------------------------------------------------------------------

    def enter(self, timeout: float = 5.0) -> None:
        """Interrupt whatever runs and enter the raw REPL.

        Ctrl-A is resent every half second: a board still booting, or a QEMU pty that
        was just reopened (QEMU polls for a reader about once a second), loses it.
        Late duplicate banners are drained so they cannot be mistaken for a reply.
        """
        self.transport.write(b"\r" + CTRL_C + CTRL_C)
        time.sleep(0.05)
        self._drain(quiet=0.05, limit=1.0)
        deadline = time.monotonic() + timeout
        while True:
            self.transport.write(b"\r" + CTRL_A)
            try:
                self._read_until(RAW_BANNER, min(0.5, max(_left(deadline), 0.05)))
                break
            except ReplTimeout as e:
                if time.monotonic() >= deadline:
                    raise ReplTimeout("the raw REPL banner %r" % RAW_BANNER, timeout,
                                      e.received) from None
                self.transport.write(CTRL_C)
        self._drain(quiet=0.1)
        self._in_raw = True

    def exit(self) -> None:
        """Back to the friendly REPL (``>>>``)."""
        self.transport.write(b"\r" + CTRL_B)
        self._in_raw = False
        self._drain(quiet=0.1)

    def soft_reset(self, timeout: float = 10.0) -> None:
        """Soft-reset the interpreter (fresh heap, modules unloaded) and re-enter raw mode.

        Boards run ``main.py`` again after a soft reset; ``enter`` interrupts it.
        """
        if not self._in_raw:
            self.enter()
        self.transport.write(CTRL_D)
        self._read_until(b"soft reboot", timeout, "'soft reboot' after Ctrl-D")
        self._in_raw = False
        time.sleep(0.1)
        self.enter(timeout)

    # -- running code -----------------------------------------------------------------

    def exec_raw(self, code: str | bytes, timeout: float = 10.0) -> tuple[bytes, bytes]:
        """Run ``code``; return ``(stdout, stderr)`` as bytes, whatever the outcome.

        ``timeout`` bounds the whole exchange, from sending the code to the prompt.
        """
        data = code.encode("utf-8") if isinstance(code, str) else bytes(code)
        if b"\x04" in data:
            raise ValueError("code must not contain \\x04 (it ends the raw-REPL input)")
        if not data.strip():
            raise ValueError("empty code would soft-reset the board; use soft_reset()")
        if not self._in_raw:
            self.enter()
        deadline = time.monotonic() + timeout
        if not (self.raw_paste is not False and self._try_raw_paste(data, deadline)):
            self._send(data)
            self.transport.write(CTRL_D)
            head = self._read_until(b"OK", _left(deadline), "'OK' after the code was sent")
            noise = head[:-2].replace(RAW_BANNER, b"").strip(b"\r\n>")
            if noise:
                self._in_raw = False
                raise ReplError("unexpected bytes before 'OK': %r" % head[-200:])
        out = self._read_until(CTRL_D, _left(deadline), "the end of stdout (\\x04)")[:-1]
        err = self._read_until(CTRL_D, _left(deadline), "the end of stderr (\\x04)")[:-1]
        self._read_until(b">", _left(deadline), "the raw REPL prompt '>'")
        return out, err

    def _try_raw_paste(self, data: bytes, deadline: float) -> bool:
        """Send ``data`` in raw-paste mode (flow-controlled) if the firmware has it.

        Returns False, with the board back at the raw prompt, where it has not.
        """
        self.transport.write(CTRL_E + b"A" + CTRL_A)
        reply = self._read_n(2, 1.0)
        if reply == b"R\x01":
            self.raw_paste = True
            window = int.from_bytes(self._read_n(2, 1.0), "little")
            remain = window
            i = 0
            while i < len(data):
                while remain == 0 or self._pending:
                    b = self._read_n(1, _left(deadline))
                    if b == CTRL_A:
                        remain += window
                    elif b == CTRL_D:
                        self.transport.write(CTRL_D)
                        return True
                    else:
                        self._in_raw = False
                        raise ReplError("unexpected byte during raw paste: %r" % b)
                block = data[i:i + remain]
                self.transport.write(block)
                remain -= len(block)
                i += len(block)
                self._pending += self.transport.read_some(0)
            self.transport.write(CTRL_D)
            self._read_until(CTRL_D, _left(deadline), "the raw-paste end acknowledgement")
            return True
        self.raw_paste = False
        if reply != b"R\x00":
            # Firmware without raw-paste took the probe as text; its Ctrl-A reset the
            # line and re-announced raw mode.
            self._pending = reply + self._pending
            self._read_until(RAW_BANNER, 2.0, "the raw REPL banner after the raw-paste probe")
        return False

    def _read_n(self, n: int, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        buf = self._pending
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                self._pending = b""
                self._in_raw = False
                raise ReplTimeout("%d byte(s)" % n, timeout, buf)
            buf += self.transport.read_some(min(left, 0.2))
        self._pending = buf[n:]
        return buf[:n]

    def exec_start(self, code: str | bytes, timeout: float = 10.0) -> bytes:
        """Start ``code`` and return as soon as the board accepted it (``OK``).

        The program's output is then the caller's to read from ``transport``; what
        already arrived after ``OK`` is returned. Call ``enter()`` to interrupt it (or
        after it ended) before using the session again. Paced writes only (no raw-paste).
        """
        data = code.encode("utf-8") if isinstance(code, str) else bytes(code)
        if b"\x04" in data or not data.strip():
            raise ValueError("code must be non-empty and must not contain \\x04")
        if not self._in_raw:
            self.enter()
        self._send(data)
        self.transport.write(CTRL_D)
        head = self._read_until(b"OK", timeout, "'OK' after the code was sent")
        if head[:-2].replace(RAW_BANNER, b"").strip(b"\r\n>"):
            self._in_raw = False
            raise ReplError("unexpected bytes before 'OK': %r" % head[-200:])
        self._in_raw = False
        rest, self._pending = self._pending, b""
        return rest

    def exec(self, code: str | bytes, timeout: float = 10.0) -> str:
        """Run ``code`` and return its stdout; raise ``RawReplError`` if it raised."""
        out, err = self.exec_raw(code, timeout)
        stdout = out.decode("utf-8", "replace")
        if err:
            raise RawReplError(err.decode("utf-8", "replace"), stdout)
        return stdout

    def eval(self, expr: str, timeout: float = 10.0) -> object:
        """Value of a Python literal expression evaluated on the device."""
        return ast.literal_eval(self.exec("print(repr(%s))" % expr, timeout).strip())

    # -- files ------------------------------------------------------------------------

    def file_checksum(self, name: str, timeout: float = 30.0) -> tuple[int, int, int]:
        """``(size, a, b)`` of the device file ``name`` (Adler-32 halves), computed there."""
        out = self.exec(_CHECKSUM_FN + "_dps_ck(%r)\ndel _dps_ck\n" % name, timeout)
        parts = out.split()
        if len(parts) != 3:
            raise ReplError("bad checksum reply for %s: %r" % (name, out))
        return int(parts[0]), int(parts[1]), int(parts[2])

    def listdir(self, path: str = "") -> list[str]:
        """Names in ``path`` (the micro:bit's ``os.listdir`` takes no argument)."""
        arg = repr(path) if path else ""
        names = self.eval("__import__('os').listdir(%s)" % arg)
        if not isinstance(names, list):
            raise ReplError("listdir returned %r" % (names,))
        return names

    def mkdir(self, path: str) -> None:
        """Create a folder; an existing one is fine (errno 17, EEXIST)."""
        self.exec("import os\ntry:\n os.mkdir(%r)\nexcept OSError as e:\n"
                  " if e.args[0]!=17:raise" % path)

    def remove(self, name: str) -> None:
        self.exec("import os\nos.remove(%r)" % name)

    def write_file(self, name: str, data: bytes, *, literal_size: int = 48,
                   exec_size: int = 320, retries: int = 3, timeout: float = 20.0) -> None:
        """Write ``data`` to device file ``name`` and verify it by size and Adler-32.

        The content travels as ``w(b'...')`` lines of at most ``literal_size`` source
        bytes each, grouped into raw-REPL executions of about ``exec_size`` bytes so
        the board never has to hold or compile a big block (the micro:bit has ~9 KB).
        A lost byte shows up as a device error (SyntaxError, NameError...), a
        timeout or a checksum mismatch; each rewrites the whole file, up to
        ``retries`` times. An OSError (file system full) is raised at once.
        """
        want = adler32_parts(data)
        last: Exception | None = None
        pace = (self.chunk_size, self.pause)
        try:
            for attempt in range(max(1, retries)):
                if attempt and self.chunk_size > 0:
                    # Bytes were lost: the board fell behind (a loaded host slows an emulated
                    # one too). Each rewrite goes at half the pace of the one before.
                    self.chunk_size = max(8, self.chunk_size // 2)
                    self.pause = max(self.pause, 0.005) * 2
                got = self._write_attempt(name, data, literal_size, exec_size, timeout)
                if isinstance(got, Exception):
                    last = got
                    continue
                if got == want:
                    return
                last = VerifyError("%s on the device: size %d, adler (%d, %d); sent: size %d, "
                                   "adler (%d, %d)" % ((name,) + got + want))
        finally:
            self.chunk_size, self.pause = pace
        raise VerifyError("could not write %s after %d attempt(s): %s" % (name, retries, last))

    def _write_attempt(self, name: str, data: bytes, literal_size: int, exec_size: int,
                       timeout: float) -> tuple[int, int, int] | ReplError:
        """One whole write and its checksum read back, or the error that says the device
        lost bytes on the way (its exception, or a timeout), after closing its file."""
        try:
            self._write_once(name, data, literal_size, exec_size, timeout)
            return self.file_checksum(name, timeout)
        except RawReplError as e:
            self._close_device_file()
            if e.exception_line.startswith("OSError"):
                raise
            return e
        except ReplTimeout as e:
            self.enter()
            self._close_device_file()
            return e

    def _write_once(self, name: str, data: bytes, literal_size: int, exec_size: int,
                    timeout: float) -> None:
        self.exec("_dps_f=open(%r,'wb')\n_dps_w=_dps_f.write" % name, timeout)
        batch: list[str] = []
        size = 0
        for piece in _literal_pieces(data, literal_size):
            line = "_dps_w(%s)" % piece
            if batch and size + len(line) + 1 > exec_size:
                self.exec("\n".join(batch), timeout)
                batch, size = [], 0
            batch.append(line)
            size += len(line) + 1
        if batch:
            self.exec("\n".join(batch), timeout)
        self.exec("_dps_f.close()\ndel _dps_f,_dps_w", timeout)

    def _close_device_file(self) -> None:
        try:
            self.exec("try:\n _dps_f.close()\n del _dps_f,_dps_w\nexcept NameError:\n pass")
        except ReplError:
            pass


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _literal_pieces(data: bytes, size: int) -> list[str]:
    """``data`` as bytes literals of at most about ``size`` source characters each.

    Python's ``repr`` of bytes is valid MicroPython 1.9 syntax (``\\x..``, ``\\n``,
    ``\\\\``, ``\\'``); splitting on raw bytes never cuts an escape in half.
    """
    pieces: list[str] = []
    start = 0
    while start < len(data):
        end = start
        cost = 3
        while end < len(data):
            c = len(repr(data[end:end + 1])) - 3
            if cost + c > size and end > start:
                break
            cost += c
            end += 1
        pieces.append(repr(data[start:end]))
        start = end
    return pieces
