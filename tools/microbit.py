"""The micro:bit's boots, and the bridge between its UART and `dpsense gateway`.

    name, data = config_file("microbit", cfg)     # tools/provision.py: config.txt
    repl.write_file(name, data)
    check_microbit_config(repl)          # the board checks config.txt itself (mbcfg)
    with NodeBridge(repl, rows, 0.0) as bridge:   # starts the node (boot_microbit_node)
        bridge.pty                       # give this to `dpsense gateway --port`

Nothing of the node, its checker and its ledger reader fits in one ~9.8 KB heap, so
each runs in a boot of its own, driven over the raw REPL: the check when the board is
provisioned (mbcfg, written for it and removed after it: its flash is the node's), which
leaves ``mbnode.run``'s arguments in ``mbargs.txt``, to which the host adds the
whole-domain epsilon of a record, worked out from those arguments by the full firmware's
mechanism; and before every start of the node, its ledger read back (mbstate) into
``mbled.txt``, which the node's boot removes once read.
"""
from __future__ import annotations

import ast
import os
import select
import threading
import time
import tty
from typing import Any, Iterable, Sequence

from dpsense.tools.deploy import MICROBIT_IMPORTS
from dpsense.tools.provision import Log, ProvisionError
from dpsense.tools.rawrepl import RawRepl, RawReplError, ReplError

# The micro:bit's boots, each in a fresh heap. One raw-REPL exec per step: a step's
# compiled code stays on the heap while it runs, and compiling mbcfg needs nearly all of it.
# The check (provisioning): config.txt through mbcfg, mbnode.run's arguments to mbargs.txt
# (removed first, so a bad config leaves the node nothing to run with).
MICROBIT_CHECK = (
    "import gc,os\ntry:\n os.remove('mbargs.txt')\nexcept OSError:\n pass\ngc.collect()",
    "import mbcfg\ngc.collect()",
    "a=mbcfg.load('config.txt')\nif a:\n f=open('mbargs.txt','w')\n f.write(repr(a))\n"
    " f.close()\n print('config ok')",
)
# mbnode.run's arguments, read back into ``a``.
_ARGS = "f=open('mbargs.txt')\na=eval(f.read())\nf.close()\n"
# The arguments as the check left them, for the host to add the whole-domain epsilon to.
MICROBIT_READ_ARGS = "f=open('mbargs.txt')\nprint(f.read())\nf.close()"
# Before every start of the node: the ledger as the last release left it, to mbled.txt.
MICROBIT_LEDGER = ("import mbstate\n" + _ARGS +
                   "f=open('mbled.txt','w')\n"
                   "f.write(repr(mbstate.ledger('',len(a[2]),a[3],a[6],a[5])))\nf.close()")
# The node's boot, after tools/deploy.MICROBIT_IMPORTS. mbled.txt is removed once read: a
# node started without a fresh reading of its ledger has nothing to run with.
MICROBIT_RUN = ("import os\ngc.collect()\n" + _ARGS +
                "f=open('mbled.txt')\nb=eval(f.read())\nf.close()\ndel f\nos.remove('mbled.txt')\n"
                "gc.collect()\nmbnode.run(*(a+(b,)))")


class BoardConfigError(ProvisionError):
    """The board refused its config; the text is its ``config error: <key>: ...`` line."""


def worst_epsilon(args: Sequence[Any]) -> tuple[int, int]:
    """The epsilon of a record whose values lie anywhere in the clamped domains, reduced
    ``(num, den)``, for ``mbnode.run``'s first arguments as the board read them:
    ``RecordMechanism.epsilon_row_worst`` of those columns (the host computes it, so the
    board carries no copy of the affine map and the mechanism's sums for it)."""
    from dpsense.protocol.fixedpoint import Affine
    from dpsense.protocol.mechanism import Column, RecordMechanism
    eps = tuple(args[3])
    cols = [Column(Affine(c[0], c[1], c[2], c[3], c[4]), c[5], eps) for c in args[2]]
    return RecordMechanism(cols, list(args[4]), None).epsilon_row_worst()


def check_microbit_config(repl: RawRepl) -> str:
    """Let the micro:bit check its config.txt: write the checker (mbcfg), run MICROBIT_CHECK
    in a fresh heap, remove the checker, then add the whole-domain epsilon (``worst_epsilon``)
    to the arguments the board wrote. The board's output and a line ``worst <num>/<den>``;
    BoardConfigError carries the board's ``config error: <key>: ...`` line."""
    from dpsense.tools.deploy import BOARDS, MICROBIT_CHECKER, plan, resolve_sources
    checker = plan(BOARDS["microbit"], resolve_sources([MICROBIT_CHECKER]))[0]
    repl.soft_reset()
    repl.write_file(checker.target, checker.data)
    try:
        repl.soft_reset()
        try:
            out = "".join(repl.exec(step, 30) for step in MICROBIT_CHECK)
        except RawReplError as e:
            raise ProvisionError("the config check failed on the board: %s"
                                 % e.exception_line) from e
    finally:
        repl.soft_reset()        # mbcfg holds most of the heap until then
        repl.remove(checker.target)
    for line in out.splitlines():
        if line.startswith("config error:"):
            raise BoardConfigError(line.strip())
    if "config ok" not in out:
        raise ProvisionError("the config check printed neither 'config ok' nor an error: %r" % out)
    try:
        text = repl.exec(MICROBIT_READ_ARGS, 30).strip()
        args = ast.literal_eval(text)
    except (RawReplError, ValueError, SyntaxError) as e:
        raise ProvisionError("cannot read back the arguments the check wrote (mbargs.txt): %s"
                             % getattr(e, "exception_line", e)) from e
    worst = worst_epsilon(args)
    repl.write_file("mbargs.txt", repr(tuple(args) + (worst,)).encode())
    repl.soft_reset()
    return out + "worst %d/%d\n" % worst


def boot_microbit_node(repl: RawRepl) -> bytes:
    """Start the node as every boot does: the ledger read back (MICROBIT_LEDGER, a fresh
    heap), then the node's imports and ``mbnode.run`` with mbargs.txt and mbled.txt
    (MICROBIT_RUN). Returns what the board sent right after the run began (exec_start)."""
    repl.soft_reset()
    try:
        repl.exec(MICROBIT_LEDGER, 30)
    except RawReplError as e:
        raise ProvisionError("reading the ledger failed on the board (provisioned? %s)"
                             % e.exception_line) from e
    repl.soft_reset()
    # Imports first, on their own: compiling mbnode next to the run's code does not fit.
    repl.exec(MICROBIT_IMPORTS, 30)
    return repl.exec_start(MICROBIT_RUN)


class NodeBridge:
    """Start ``mbnode`` on a provisioned micro:bit (``boot_microbit_node``) and hand its
    serial output to a gateway on a new pty.

    The board's UART carries both directions: the node writes ``?`` and reads one
    stimulus row. This bridge holds the board's line, answers each ``?`` with the next
    row (``.`` when there are no more), and copies every other line the board sends to the
    master side of a fresh pseudo-terminal; ``dpsense gateway --port <pty>`` reads the
    other side, and the gateway's acknowledgement lines come back to the board (whole
    lines, never in the middle of a stimulus row). While no process holds that side (the master then polls POLLHUP), the
    bridge sends no rows and holds what the board sent, so nothing is lost before the
    gateway attaches or while it restarts; it waits ``settle_s`` after one attaches,
    because opening a serial line raw (``tty.setraw``, TCSAFLUSH) discards its input.
    """

    def __init__(self, repl: RawRepl, rows: Iterable[Sequence[int]],
                 period_s: float = 0.0, log: Log = print, settle_s: float = 0.5) -> None:
        self.repl = repl
        self.rows = iter(rows)
        self.period_s = period_s
        self.log = log
        self.settle_s = settle_s
        self.master, slave = os.openpty()
        tty.setraw(slave)
        self.pty = os.ttyname(slave)
        os.close(slave)
        os.set_blocking(self.master, False)
        self._poll = select.poll()
        self._poll.register(self.master, select.POLLOUT)
        self.attached = False
        self.sent_rows = 0
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> NodeBridge:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        first = boot_microbit_node(self.repl)
        self._thread = threading.Thread(target=self._pump, args=(first,), daemon=True)
        self._thread.start()

    def _pump(self, first: bytes) -> None:
        tr = self.repl.transport
        pending = bytearray()
        line = bytearray()
        asked = 0
        back = bytearray()
        next_at = time.monotonic()
        data = first
        while not self._stop.is_set():
            try:
                back += os.read(self.master, 4096)
            except OSError:         # nothing written (EAGAIN), or nobody holds the other side
                pass
            cut = back.rfind(b"\n") + 1
            if cut:
                tr.write(bytes(back[:cut]))
                del back[:cut]
            for b in data:
                line.append(b)
                if b == 10:
                    text = line.rstrip(b"\r\n")
                    if text == b"?":
                        asked += 1          # the host's request, not for the gateway
                    else:
                        if text.startswith(b"#done"):
                            self.done.set()
                        pending += line
                    line = bytearray()
            data = b""
            if self._reader():
                if pending:
                    try:
                        n = os.write(self.master, pending)
                        del pending[:n]
                    except (BlockingIOError, InterruptedError):
                        pass
                if asked and not pending and time.monotonic() >= next_at:
                    row = next(self.rows, None)
                    tr.write(b".\n" if row is None
                             else (",".join(str(int(v)) for v in row) + "\n").encode())
                    asked -= 1
                    if row is not None:
                        self.sent_rows += 1
                    next_at = time.monotonic() + self.period_s
            try:
                data = tr.read_some(0.01 if pending or asked else 0.02)
            except OSError:
                break

    def _reader(self) -> bool:
        """Does a process hold the pty's other side (and has it settled)?"""
        held = not any(ev & select.POLLHUP for _, ev in self._poll.poll(0))
        if held and not self.attached:
            time.sleep(self.settle_s)
            held = not any(ev & select.POLLHUP for _, ev in self._poll.poll(0))
        self.attached = held
        return held

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        try:
            self.repl.enter()
        except (ReplError, OSError):
            pass
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
