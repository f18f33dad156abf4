"""The real micro:bit MicroPython (1.9.2, float32, ~9.5 KB heap) under QEMU draws the
same noise and scales the same readings as CPython, sample for sample.

The modules reach the board through ``tools/flash.py``'s own ``plan``/``deploy`` (flat
names, shrunk sources, every file verified on the board), so this also tests the
upload path people use. One emulator serves the whole module (~10 s in all).
"""

from __future__ import annotations

import ast
import struct
from types import SimpleNamespace
from typing import Iterator

import pytest

from dpsense.protocol.fixedpoint import Affine
from dpsense.protocol.ledgerfile import microbit_fresh
from dpsense.protocol.noise import DiscreteLaplace
from dpsense.protocol.rng import XorShift32
from dpsense.tools.deploy import BOARDS, check_imports, deploy, plan, resolve_sources
from dpsense.tools.qemu import QemuMicrobit, missing_reason
from dpsense.cloud.transport.serialport import Transport
from dpsense.tools.rawrepl import RawRepl, RawReplError, ReplTimeout

_MISSING = missing_reason()
# xdist_group "timing": one worker runs these and tests/statistical/test_release_timing.py in turn
# (the emulated board and the timed firmware loop each want a core of their own).
pytestmark = [pytest.mark.qemu, pytest.mark.xdist_group("timing"),
              pytest.mark.skipif(_MISSING is not None, reason="QEMU micro:bit: %s" % _MISSING)]

MODULES = ("rng", "noise", "fixedpoint")
SEED = 20240611
N_SAMPLES = 40
SCALES = ((73, 10), (1, 2), (1000, 1), (100000, 1))
MIN_FREE_HEAP = 2000
# The node's heap once running with three columns, as its #boot event reports it, with a
# boot id past 2**30 (a long int; 32 bytes more free below): 1392 bytes before its modules
# took the shared source as code, 1440 after, 1552 since mbutil.emit writes the ledger (a
# CRC-framed line) and the ledger function, one global fewer in two modules, is gone; wire
# v2's 28-byte correction record then ran out of heap framing the third record (a fresh
# 62-byte block per line), so the node frames into two buffers made once (no allocation
# per line): 1120 free with both (measured after merging the two), and the 40 records below
# run through.
MIN_FREE_RUNNING = 1100

# Raw values cover clamping at both ends, rounding ties, and products beyond the
# board's 31-bit small ints (2**30 and up are long ints there).
AFFINES = (
    (3300, 65535, 0, 0, 65535),
    (1, 1, 0, -5000, 5000),
    (-7, 3, 100, -1000, 1000),
    (1000003, 7, -40000, -2 ** 20, 2 ** 20),
    (5, 2 ** 31 - 1, -3, -2 ** 40, 2 ** 40),
)
RAWS = (-2 ** 41, -2 ** 20 - 1, -65536, -5001, -1000, -3, -1, 0, 1, 2, 3, 7, 999, 1000,
        1001, 4999, 5000, 5001, 32767, 32768, 65534, 65535, 65536, 2 ** 20, 2 ** 20 + 1,
        2 ** 31, 2 ** 41)


@pytest.fixture(scope="module")
def board() -> Iterator[SimpleNamespace]:
    profile = BOARDS["qemu-microbit"]
    uploads = plan(profile, resolve_sources(MODULES))
    with QemuMicrobit() as qemu:
        repl = qemu.repl(profile.chunk_size, profile.pause)
        repl.enter()
        log: list[str] = []
        deploy(repl, profile, uploads, log=log.append)
        free = check_imports(repl, [u.module for u in uploads], log=log.append)
        yield SimpleNamespace(qemu=qemu, repl=repl, uploads=uploads, mem_free=free, log=log)


def _run_fresh(repl: RawRepl, code: str, timeout: float = 60.0) -> list[object]:
    """Soft-reset, run ``code``, and parse each stdout line as a Python literal.

    The reset gives every test the whole heap again: after the three imports only
    ~3.8 KB are left, and a test that fails half-way would otherwise leave its
    globals behind and starve the ones after it. Results are printed one per line,
    never collected in a list on the board, for the same reason.
    """
    repl.soft_reset()
    out = repl.exec(code, timeout)
    return [ast.literal_eval(line) for line in out.splitlines() if line.strip()]


def test_modules_are_flat_shrunk_and_verified(board: SimpleNamespace) -> None:
    names = board.repl.listdir()
    for u in board.uploads:
        assert "/" not in u.target and u.target in names
        assert len(u.data) < u.source.stat().st_size
        size, _, _ = board.repl.file_checksum(u.target)
        assert size == len(u.data)


def test_heap_after_import(board: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    (depth,) = _run_fresh(board.repl, "n=[0]\ndef f():\n n[0]+=1\n f()\ntry:\n f()\n"
                          "except RuntimeError:\n print(n[0])")
    with capsys.disabled():
        print("\n  micro:bit (QEMU) gc.mem_free() after import %s: %d bytes; "
              "Python calls possible below top level: %d" % (", ".join(MODULES), board.mem_free, depth))
    assert board.mem_free > MIN_FREE_HEAP


def test_xorshift_stream_matches_cpython(board: SimpleNamespace) -> None:
    device = _run_fresh(board.repl, "from rng import XorShift32\nr=XorShift32(%d)\n"
                        "for _ in range(20):\n print(r.next32())" % SEED)
    host = XorShift32(SEED)
    assert device == [host.next32() for _ in range(20)]


@pytest.mark.parametrize("num,den", SCALES, ids=["%d/%d" % s for s in SCALES])
def test_discrete_laplace_matches_cpython(board: SimpleNamespace, num: int, den: int) -> None:
    seed = SEED + num + den
    device = _run_fresh(
        board.repl,
        "from rng import XorShift32\nfrom noise import DiscreteLaplace\n"
        "d=DiscreteLaplace(%d,%d,XorShift32(%d))\nfor _ in range(%d):\n print(d.sample())"
        % (num, den, seed, N_SAMPLES))
    lap = DiscreteLaplace(num, den, XorShift32(seed))
    host = [lap.sample() for _ in range(N_SAMPLES)]
    assert device == host
    assert len(set(host)) > 1


@pytest.mark.parametrize("params", AFFINES, ids=[str(i) for i in range(len(AFFINES))])
def test_affine_matches_cpython(board: SimpleNamespace, params: tuple[int, ...]) -> None:
    device = _run_fresh(
        board.repl,
        "from fixedpoint import Affine\nf=Affine%r\nfor r in %r:\n print(f.apply(r))"
        % (params, list(RAWS)))
    f = Affine(*params)
    assert device == [f.apply(r) for r in RAWS]


def test_device_traceback_is_raised_and_session_survives(board: SimpleNamespace) -> None:
    with pytest.raises(RawReplError) as info:
        board.repl.exec("print('before')\n1//0")
    assert info.value.exception_line.startswith("ZeroDivisionError")
    assert info.value.stdout.strip() == "before"
    assert board.repl.exec("print(6*7)").strip() == "42"


def test_timeout_says_what_it_waited_for_and_recovers(board: SimpleNamespace) -> None:
    with pytest.raises(ReplTimeout) as info:
        board.repl.exec("while 1:\n pass", timeout=0.5)
    assert "stdout" in str(info.value) and "last received" in str(info.value)
    assert board.repl.exec("print(6*7)").strip() == "42"


class _DropOnce:
    """Loses the first ``z`` byte written, as a busy UART loses bytes: the payload
    alone contains ``z``, so the loss lands inside a ``_dps_w(b'...')`` literal,
    where the code still runs and only the read-back checksum can notice."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.dropped = False

    def write(self, data: bytes) -> None:
        i = data.find(b"z")
        if not self.dropped and i >= 0:
            data = data[:i] + data[i + 1:]
            self.dropped = True
        self.inner.write(data)

    def read_some(self, timeout: float) -> bytes:
        return self.inner.read_some(timeout)

    def close(self) -> None:
        self.inner.close()


def test_write_file_rewrites_a_file_corrupted_in_transit(
        board: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    lossy = _DropOnce(board.qemu.transport)
    repl = RawRepl(lossy, board.repl.chunk_size, board.repl.pause, raw_paste=False)
    attempts: list[tuple[str, int, float]] = []
    write_once = repl._write_once
    monkeypatch.setattr(repl, "_write_once", lambda *a: attempts.append((a[0], repl.chunk_size, repl.pause))
                        or write_once(*a))
    payload = b"abc" * 20 + b"z" + b"xyz" * 20
    pace = (repl.chunk_size, repl.pause)
    repl.write_file("lossy.txt", payload)
    # the rewrite goes at half the pace; the next write at the usual one again
    assert lossy.dropped and [a[0] for a in attempts] == ["lossy.txt", "lossy.txt"]
    assert attempts[0][1:] == pace and attempts[1][1] == pace[0] // 2 and attempts[1][2] > pace[1]
    assert (repl.chunk_size, repl.pause) == pace
    assert repl.file_checksum("lossy.txt")[0] == len(payload)
    repl.remove("lossy.txt")


def test_microbit_node_writes_what_node_py_writes(board: SimpleNamespace) -> None:
    """firmware/mbnode.py on the real interpreter, fed over the UART, with xorshift32 as its
    random source: its framed lines equal Node + serial_sender + Ledger's on CPython (with
    rng.XorShift32), byte for byte. The call chain (run -> sample -> _bexp -> getrandbits)
    is one deeper than with the micro:bit's native random.getrandbits."""

    from dpsense.protocol.rng import fmix32
    from tests.portable.test_mbnode import _frames, _reference
    from dpsense.tools.deploy import MICROBIT_FILES, MICROBIT_IMPORTS
    profile = BOARDS["qemu-microbit"]
    extra = [m for m in MICROBIT_FILES if m not in MODULES]
    deploy(board.repl, profile, plan(profile, resolve_sources(extra)), log=board.log.append)
    board.repl.soft_reset()
    board.repl.exec(MICROBIT_IMPORTS, 30)
    # rng.py does not fit next to the node: the same xorshift32 steps, on the fmix32'd seed
    board.repl.exec("class X:\n def __init__(s,x):\n  s.x=x\n def getrandbits(s,k):\n  x=s.x\n"
                    "  x^=(x<<13)&0xFFFFFFFF\n  x^=x>>17\n  x^=(x<<5)&0xFFFFFFFF\n  s.x=x\n"
                    "  return x>>(32-k)\ngc.collect()")
    # the second column's values are long ints on the board (beyond 2**30, or computed from them)
    cols = [(3300, 65535, 0, 0, 65535, 40), (2, 3, -1000, -10 ** 9, 10 ** 9, 10 ** 6)]
    rows = [[(i * 7919) % 70000, (-1) ** i * i * 66666667] for i in range(30)]
    seed, win, cap = 20240611, 10, (5, 2)
    out = bytearray(board.repl.exec_start(
        "mbnode.run(7,3,%r,(1,2),[1650,0],%d,%r,(0,0),(0,0,0,2,2,5),X(%d))"      # fresh ledger,
        % (cols, win, cap, fmix32(seed))))           # unit 1/2: a record 2, the cap 5
    out = _drive(board.qemu.transport, out, rows)
    board.repl.enter()
    text = bytes(out)
    assert b"Traceback" not in text, text.decode("latin-1")
    _, want = _reference(seed, cols, (1, 2), [1650, 0], rows, 7, 3, win, cap)
    assert _frames(text.replace(b"\r\n", b"\n")) == want
    console = _expanded(text)
    # epsilon 1 per record, cap 5/2 per window of 10 readings: 2 released per window
    assert "eps_record=1 pending=0 " in console
    assert "ledger: window 2 cap 5/2 reached (spent 2)" in console
    assert "stimulus done: 30 readings, 6 released" in console
    assert "idle: all 6 records acknowledged (0 resent)" in console


def test_slim_int32_and_norm_match_the_shared_code_on_the_board(board: SimpleNamespace) -> None:
    """mbutil's put32 and norm on the micro:bit's own interpreter (31-bit small ints, long
    ints above, its struct) for tests/portable/test_mbslim.py's classes: every int32 class
    against node.py's clamp and wire's "<i", every rounding boundary and column count
    against distance.distance_q."""
    from tests.portable import test_mbslim as slim
    profile = BOARDS["qemu-microbit"]
    deploy(board.repl, profile, plan(profile, resolve_sources(["mbutil"])), log=board.log.append)

    def run(code: str) -> list[object]:
        # mbutil first, on its own: compiling it next to the test's code does not fit
        board.repl.soft_reset()
        board.repl.exec("import mbutil", 30)
        return [ast.literal_eval(ln) for ln in board.repl.exec(code, 60).splitlines() if ln.strip()]

    # the classes are built on the board from their roots: a literal of them does not compile there
    assert slim.INT32_CLASSES == [x for b in slim.INT32_BITS
                                  for v in (2 ** b - 1, 2 ** b, 2 ** b + 1) for x in (v, -v)]
    device = run("b=bytearray(4)\nfor e in %r:\n for v in (2**e-1,2**e,2**e+1):\n"
                 "  for x in (v,-v):\n   mbutil.put32(b,0,x)\n   print(bytes(b))"
                 % (slim.INT32_BITS,))
    assert device == [struct.pack("<i", slim._clamp_i32(v)) for v in slim.INT32_CLASSES]
    centre = [(-1) ** i * (i * 1000003) for i in range(16)]
    cases = slim._norm_cases()
    small = cases[:len(cases) - 3 * len(slim.NORM_ROOTS)]
    device = run(
        "C=%r\ndef t(o):\n for m in range(len(o),17):\n  d=[0]*m\n"
        "  for i in range(len(o)):\n   d[(0,m-1,m//2)[i]]=o[i]*(-1)**(i+m)\n"
        "  print(mbutil.norm([C[i]+d[i] for i in range(m)],C[:m]))\n"
        "for o in %r:\n t(o)\nfor j in %r:\n t([j*j])\n t([j*j,j])\n t([j*j-1,j])"
        % (centre, [o for o, _ in small], list(slim.NORM_ROOTS)))
    assert device == [w for o, w in cases for m in range(len(o), 17)]


def _drive(tr: Transport, out: bytearray, rows: list[list[int]], timeout: float = 60.0) -> bytearray:
    """Be the node's host until its run ends: each ``?`` gets the next row (``.`` when
    done); as the gateway, each record is acknowledged (as if both its messages were
    stored) when the board polls (``!``), two at most per poll, then ``!``."""
    import time
    sent = 0
    polls = 0
    acks: list[bytes] = []
    seen = 0
    deadline = time.monotonic() + timeout
    while not out.endswith(b"\x04>"):
        assert time.monotonic() < deadline, "no end of run; got %r" % bytes(out[-300:])
        out += tr.read_some(0.2)
        lines = bytes(out).split(b"\n")[:-1]
        corrections = [ln for ln in lines if ln.startswith(b"~0202")]
        acks += [b"!" + ln[33:49] + b"\n" for ln in corrections[seen:]]
        seen = len(corrections)
        for _ in range(lines.count(b"!") - polls):
            tr.write(b"".join(acks[:2]) + b"!\n")
            del acks[:2]
            polls += 1
        while out.count(b"?\n") > sent:
            tr.write((",".join(str(v) for v in rows[sent]) + "\n").encode()
                     if sent < len(rows) else b".\n")
            sent += 1
    return out


def test_microbit_node_runs_three_columns_from_a_checked_config(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The micro:bit's widest config (3 columns, one with long ints) through the real boot
    sequence: provisioning's check on the board (mbcfg, then removed), the ledger read
    back (mbstate), the node; every record released and acknowledged, no MemoryError."""
    from dpsense.tools import microbit as mb
    from dpsense.tools.deploy import default_uploads
    from dpsense.tools.provision import microbit_config_text
    profile = BOARDS["qemu-microbit"]
    col = lambda lo, hi: {"num": 1, "den": 1, "offset": 0, "raw_min": lo, "raw_max": hi,  # noqa: E731
                          "delta_q": 25}
    cfg = {"device_id": 7, "config_id": 0, "epsilon": "0.5", "centre": [0, 0, 0],
           "columns": [col(-10 ** 9, 10 ** 9), col(0, 65535), col(-5000, 5000)],
           "window_records": 600, "window_cap": "600"}
    with QemuMicrobit() as q:
        repl = q.repl(profile.chunk_size, profile.pause)
        repl.enter()
        deploy(repl, profile, default_uploads(profile), log=lambda s: None)
        repl.write_file("config.txt", microbit_config_text(cfg).encode())
        for name in ("la", "lb"):                       # a fresh ledger, as provisioning writes it
            repl.write_file(name, microbit_fresh())
        mb.check_microbit_config(repl)
        assert "mbcfg.py" not in repl.exec("import os\nprint(os.listdir())")
        out = _drive(q.transport, bytearray(mb.boot_microbit_node(repl)),
                     [[i * 66666667, i * 999, i - 3000] for i in range(40)])
    text = bytes(out)
    assert b"Traceback" not in text, text.decode("latin-1")
    console = _expanded(text)
    assert "stimulus done: 40 readings, 40 released" in console
    assert "idle: all 40 records acknowledged (0 resent)" in console
    assert text.count(b"\n~0201") == 40
    # the boot event carries the project's version, and the heap left with three columns
    from dpsense.cloud.transport.gateway.events import parse_event
    from dpsense.protocol import __version__
    boot = parse_event([ln for ln in text.replace(b"\r\n", b"\n").split(b"\n")
                        if ln.startswith(b"#boot")][0])
    assert boot["version"] == __version__
    assert " mem_free=%d version=%s" % (boot["mem_free"], __version__) in console
    with capsys.disabled():
        print("\n  micro:bit (QEMU) node running 3 columns: gc.mem_free() %d bytes at #boot"
              % boot["mem_free"])
    assert boot["mem_free"] >= MIN_FREE_RUNNING


def test_microbit_ledger_fails_closed_on_the_board(capsys: pytest.CaptureFixture[str]) -> None:
    """firmware/mbstate.py on the real 1.9.2 firmware: a window's spend survives a reset in
    the CRC-framed ledger files; one damaged file is replaced by the other plus a record;
    both damaged, or both missing, and the node releases nothing ("ledger: releases stopped")
    until the board is provisioned again."""
    from dpsense.tools import microbit as mb
    from dpsense.tools.deploy import default_uploads
    from dpsense.tools.provision import microbit_config_text
    profile = BOARDS["qemu-microbit"]
    cfg = {"device_id": 7, "config_id": 0, "epsilon": "1", "centre": [0],
           "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -5000, "raw_max": 5000, "delta_q": 25}],
           "window_records": 1000, "window_cap": "4"}          # 4 records per window of 1000 readings

    def boot(n: int) -> tuple[str, dict[str, object]]:
        text = bytes(_drive(q.transport, bytearray(mb.boot_microbit_node(repl)), [[i] for i in range(n)]))
        assert b"Traceback" not in text, text.decode("latin-1")
        from dpsense.cloud.transport.gateway.events import parse_event
        ev = parse_event([ln for ln in text.replace(b"\r\n", b"\n").split(b"\n") if ln.startswith(b"#boot")][0])
        return _expanded(text), ev

    def damage(name: str, at: int) -> None:
        repl.exec("f=open(%r)\nt=f.read()\nf.close()\nf=open(%r,'w')\nf.write(t[:%d]+('0' if t[%d]!='0' else '1')"
                  "+t[%d:])\nf.close()" % (name, name, at, at, at + 1), 30)

    with QemuMicrobit() as q:
        repl = q.repl(profile.chunk_size, profile.pause)
        repl.enter()
        deploy(repl, profile, default_uploads(profile), log=lambda s: None)
        repl.write_file("config.txt", microbit_config_text(cfg).encode())
        for name in ("la", "lb"):
            repl.write_file(name, microbit_fresh())
        mb.check_microbit_config(repl)
        console, ev = boot(2)                             # counters 1 (la) and 2 (lb)
        assert "stimulus done: 2 readings, 2 released" in console and ev["cap"] == 4
        free = ev["mem_free"]
        console, ev = boot(1)                             # a reset: the window goes on, counter 3 (la)
        assert "stimulus done: 1 readings, 1 released" in console
        damage("lb", 3)                                   # one file: la plus a record, the window full
        console, ev = boot(6)
        assert "stimulus done: 6 readings, 0 released" in console and "releases stopped" not in console
        assert "ledger: window 0 cap 4 reached (spent 4)" in console
        damage("la", 5)                                   # both damaged
        console, ev = boot(6)
        assert ev["cap"] == -1 and "ledger: releases stopped: damaged or missing ledger" in console
        assert "stimulus done: 6 readings, 0 released" in console
        repl.exec("import os\nos.remove('la')\nos.remove('lb')", 30)   # both missing
        console, ev = boot(6)
        assert ev["cap"] == -1 and "stimulus done: 6 readings, 0 released" in console
        for name in ("la", "lb"):                         # provisioned again: a new budget
            repl.write_file(name, microbit_fresh())
        console, ev = boot(6)
        assert "stimulus done: 6 readings, 4 released" in console
    with capsys.disabled():
        print("\n  micro:bit (QEMU) node, one column, CRC ledger: gc.mem_free() %d bytes at #boot" % free)


def _expanded(text: bytes) -> str:
    """The node's event lines in the words the gateway logs them with."""
    from dpsense.cloud.transport.gateway.events import expand_event, parse_event
    out, boot = [], None
    for ln in text.replace(b"\r\n", b"\n").split(b"\n"):
        if ln.startswith(b"#"):
            ev = parse_event(ln)
            boot = ev if ev["event"] == "boot" else boot
            out += expand_event(ev, boot)[0]
    return "\n".join(out)


RNG_BYTES = 8192
RNG_ALPHA = 1e-4


def _rng_pvalues(data: bytes) -> tuple[float, float]:
    """Chi-square p-values of the byte values (256 cells) and of consecutive pairs of
    nibbles, high nibble of one byte with the high nibble of the next (256 cells): a
    biased byte fails the first, a byte that depends on the one before (a stale VALUE
    read again) the second."""
    from scipy.stats import chisquare
    counts = [0] * 256
    for b in data:
        counts[b] += 1
    pairs = [0] * 256
    for a, b in zip(data, data[1:]):
        pairs[(a >> 4) * 16 + (b >> 4)] += 1
    return float(chisquare(counts).pvalue), float(chisquare(pairs).pvalue)


def _board_bytes(repl: RawRepl, draw: str) -> bytes:
    out = repl.exec("import mbrng\nprint(mbrng.selftest())\nfor _ in range(%d):\n"
                    " print(''.join(['%%02x' %% (%s) for _ in range(64)]))"
                    % (RNG_BYTES // 64, draw), 300)
    lines = out.split()
    assert lines[0] == "True", out[:200]
    return bytes.fromhex("".join(lines[1:]))


def test_hardware_rng_bytes_on_the_board_are_uniform(board: SimpleNamespace) -> None:
    """firmware/mbrng.py on the emulated micro:bit: its start-up test passes, and 8192 bytes
    pass both chi-square tests at 1e-4 each (false-failure rate 2e-4 for a uniform source).
    Power: the same statistic on the same board fails reading VALUE without waiting for
    VALRDY (stale bytes), and on the host for a byte source with bit 0 set 60% of the time."""
    profile = BOARDS["qemu-microbit"]
    deploy(board.repl, profile, plan(profile, resolve_sources(["mbrng"])), log=board.log.append)
    board.repl.soft_reset()
    good = _board_bytes(board.repl, "mbrng.getrandbits(8)")
    assert len(good) == RNG_BYTES
    p_bytes, p_pairs = _rng_pvalues(good)
    assert p_bytes > RNG_ALPHA and p_pairs > RNG_ALPHA, (p_bytes, p_pairs)
    board.repl.soft_reset()
    stale = _board_bytes(board.repl, "mbrng.HW[0][0x4000D508]")
    assert min(_rng_pvalues(stale)) < RNG_ALPHA
    import random
    gen = random.Random(3)
    biased = bytes((gen.getrandbits(8) & 0xFE) | (gen.random() < 0.6) for _ in range(RNG_BYTES))
    assert _rng_pvalues(biased)[0] < RNG_ALPHA
