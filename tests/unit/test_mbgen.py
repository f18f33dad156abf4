"""tools/mbgen.py: the micro:bit's copies of its modules carry what they import from the shared
source, and nothing else changes; the real copies import only what the board has, and run."""
from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dpsense.tools.deploy import (BOARDS, MICROBIT_BOOT_FILES, MICROBIT_CHECKER, MICROBIT_FILES,
                                  MICROBIT_ONLY, micropython_binary, plan, resolve_sources)
from dpsense.tools.mbgen import GenerateError, generate

ROOT = Path(__file__).resolve().parents[2]
ON_BOARD = MICROBIT_FILES + MICROBIT_BOOT_FILES + (MICROBIT_CHECKER,)

WIRE = '''"""A shared module."""
import struct

try:
    from .rng import bit_length
except ImportError:
    from rng import bit_length

SMALL = 7
BIG = 1 << 40
FMT = "<BBH"
TWICE = b"0123456789abcdef"
DERIVED = 2 + 2 * SMALL
SIZE = struct.calcsize(FMT)
NOT_CONST = [1, 2]


class Thing:
    pass


def helper(x):
    """Uses constants, another function and a sibling's function."""
    return _inner(x) + SMALL + bit_length(BIG) + len(TWICE)


def _inner(x):
    return x * DERIVED + SIZE
'''
RNG = '''def bit_length(n):
    return len(bin(n)) - 2
'''
SERIALLINK = '''QUIET = 8
POLL_MS = 300
'''
TARGET = '''import struct
from shared_protocol.wire import SMALL, BIG, FMT, TWICE, helper
from shared_protocol import __version__
from seriallink import POLL_MS as POLL
try:
    from shared_protocol.noise import sample
except ImportError:
    from noise import sample
from mbother import thing


def f(x, key=SMALL):
    return (x.SMALL, dict(SMALL=1), key, SMALL + POLL, BIG, BIG, FMT, TWICE, TWICE,
            __version__, helper(2), sample(), thing)
'''


@pytest.fixture()
def dirs(tmp_path):
    shared = tmp_path / "shared_protocol"
    fw = tmp_path / "firmware"
    shared.mkdir()
    fw.mkdir()
    (shared / "__init__.py").write_text('__version__ = "9.8.7"\n')
    (shared / "wire.py").write_text(WIRE)
    (shared / "rng.py").write_text(RNG)
    (shared / "noise.py").write_text("def sample():\n    return 0\n")
    (fw / "seriallink.py").write_text(SERIALLINK)
    (fw / "mbother.py").write_text("thing = 1\n")
    return shared, fw


def _gen(text, dirs):
    return generate(text, dirs[0], dirs[1], ("mbother", "noise", "mbtarget"))


def test_constants_and_functions_come_along_and_nothing_else_changes(dirs):
    out = _gen(TARGET, dirs)
    tree = ast.parse(out)
    froms = sorted(n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert froms == ["mbother", "noise", "shared_protocol.noise"]     # the board's own files
    top = {n.targets[0].id: eval(ast.unparse(n.value)) for n in tree.body
           if isinstance(n, ast.Assign)}
    # values read more than once (but small ints) are bound once; the rest is written in
    assert top == {"BIG": 1 << 40, "TWICE": b"0123456789abcdef"}
    assert "BIG = 1 << 40\n" in out                    # its source text, not 1099511627776
    assert {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} == \
        {"f", "helper", "_inner", "bit_length"}
    assert "x.SMALL" in out and "dict(SMALL=1)" in out and "key=7" in out
    assert "return x * 16 + 4" in out                  # DERIVED = 2 + 2 * SMALL, SIZE: written in
    assert "bit_length(1099511627776)" in out          # BIG, read once in helper
    g = {}
    sys.modules["mbother"] = types.SimpleNamespace(thing="T")
    sys.modules["noise"] = types.SimpleNamespace(sample=lambda: "S")
    try:
        exec(compile(out, "mbtarget.py", "exec"), g)
    finally:
        del sys.modules["mbother"], sys.modules["noise"]
    x = types.SimpleNamespace(SMALL="attr")
    assert g["f"](x) == ("attr", {"SMALL": 1}, 7, 307, 1 << 40, 1 << 40, "<BBH",
                         b"0123456789abcdef", b"0123456789abcdef", "9.8.7",
                         2 * 16 + 4 + 7 + 41 + 16, "S", "T")


def test_a_module_that_takes_nothing_is_unchanged(dirs):
    text = "import struct\nfrom mbother import thing\nX = 1\n"
    assert _gen(text, dirs) == text


@pytest.mark.parametrize("text,why", [
    ("from shared_protocol.wire import Thing\n", "not a constant or a function"),
    ("from shared_protocol.wire import NOT_CONST\n", "not a constant or a function"),
    ("from shared_protocol.wire import MISSING\n", "not a constant or a function"),
    ("from shared_protocol.wire import SMALL\nSMALL = 3\n", "assigned here"),
    ("from shared_protocol.wire import SMALL\ndef f(SMALL):\n    return SMALL\n", "assigned here"),
    ("from shared_protocol.wire import helper\ndef _inner():\n    pass\n", "assigned here"),
    ("import shared_protocol.wire\n", "carries names, not modules"),
    ("from shared_protocol.noise import sample\n", "flat fallback"),
    ("from shared_protocol.wire import helper as h\n", "cannot be renamed"),
    ("from shared_protocol.wire import SMALL as QUIET\nfrom seriallink import QUIET\n",
     "means both"),
    ("from shared_protocol.wire import *\n", "names nothing"),
], ids=range(11))
def test_what_cannot_be_carried_is_refused_by_name(dirs, text, why):
    with pytest.raises(GenerateError, match=why):
        _gen(text, dirs)


def test_the_same_name_from_two_places_with_the_same_value_is_one(dirs):
    (dirs[1] / "seriallink.py").write_text("SMALL = 7\nBIG = 1 << 40\n")
    text = ("from shared_protocol.wire import SMALL, BIG\nfrom seriallink import SMALL, BIG\n"
            "def f():\n    return SMALL, BIG, BIG\n")
    out = _gen(text, dirs)
    assert out.count("BIG = ") == 1 and "return 7, BIG, BIG" in out


# -- the micro:bit's real modules ----------------------------------------------------------

def _copies():
    ups = plan(BOARDS["microbit"], resolve_sources(list(MICROBIT_ONLY)))
    return {u.target[:-3]: u.data.decode() for u in ups}


def test_the_copies_import_only_what_the_board_has():
    copies = _copies()
    assert sorted(copies) == sorted(MICROBIT_ONLY)
    board = set(ON_BOARD) | {"gc", "os", "time", "struct", "random", "microbit", "micropython"}
    for name, text in copies.items():
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                assert node.module in board, (name, node.module)
            elif isinstance(node, ast.Try):
                # the flat fallback: the second form is a file on the board
                mods = [n.module for h in node.handlers for n in h.body
                        if isinstance(n, ast.ImportFrom)]
                assert all(m in board for m in mods), (name, mods)
        assert "shared_protocol" not in text.replace("from shared_protocol.noise import", ""), name


def test_what_one_copy_imports_from_another_is_there():
    """A constant written into its uses leaves no global behind: another module of the
    board must not import it (mbnode takes DRAIN from seriallink, not from mbio)."""
    copies = _copies()
    copies["noise"] = plan(BOARDS["microbit"], resolve_sources(["noise"]))[0].data.decode()
    for name, text in copies.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module in copies:
                other = ast.parse(copies[node.module])
                top = {n.name for n in other.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
                top |= {t.id for n in other.body if isinstance(n, ast.Assign)
                        for t in n.targets if isinstance(t, ast.Name)}
                for a in node.names:
                    assert a.name in top, "%s imports %s from %s" % (name, a.name, node.module)


_RUN = '''
import mbutil, mbio, noise, mbnode
from rng import XorShift32


class Uart:
    """The host on the other side: a row for each ?, acknowledgements for each !."""

    def __init__(self, rows):
        self.rows = rows
        self.out = bytearray()
        self.inq = bytearray()
        self.at = 0
        self.line = bytearray()
        self.acks = []

    def write(self, data):
        self.out += data
        for c in bytes(data):
            if c != 10:
                self.line.append(c)
                continue
            ln = bytes(self.line)
            self.line = bytearray()
            if ln == b"?":
                self.inq += (self.rows.pop(0) if self.rows else b".") + b"\\n"
            elif ln == b"!":
                for a in self.acks[:2]:
                    self.inq += a
                self.acks = self.acks[2:]
                self.inq += b"!\\n"
            elif ln[:1] == b"~" and len(ln) == 61:
                self.acks.append(b"!" + ln[33:49] + b"\\n")

    def readinto(self, buf):
        if self.at >= len(self.inq):
            return None
        buf[0] = self.inq[self.at]
        self.at += 1
        return 1


u = Uart(ROWS)
mbnode.run(7, 3, COLS, (1, 2), CENTRE, WIN, CAP, (0, 0), (0, 0, 0, 2, 2, 5), XorShift32(SEED), u)
f = open("out.bin", "wb")
f.write(u.out)
f.close()
'''


def test_the_copies_run_under_micropython_as_the_full_firmware_writes(tmp_path):
    """The generated node (not its host form) under the unix port: its framed lines are
    Node + serial_sender + Ledger's on CPython, byte for byte, and its #boot carries the
    version."""
    try:
        upy = micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    from dpsense.protocol import __version__
    from tests.portable.test_mbnode import _frames, _reference
    for u in plan(BOARDS["microbit"], resolve_sources(list(MICROBIT_FILES) + ["rng"])):
        (tmp_path / u.target).write_bytes(u.data)
    cols = [(3300, 65535, 0, 0, 65535, 40), (2, 3, -1000, -10 ** 9, 10 ** 9, 10 ** 6)]
    rows = [[(i * 7919) % 70000, (-1) ** i * i * 66666667] for i in range(30)]
    seed, win, cap = 20240611, 10, (5, 2)
    code = (_RUN.replace("ROWS", repr([",".join(map(str, r)).encode() for r in rows]))
            .replace("COLS", repr(cols)).replace("CENTRE", "[1650, 0]")
            .replace("WIN", str(win)).replace("CAP", repr(cap)).replace("SEED", str(seed)))
    r = subprocess.run([upy, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = (tmp_path / "out.bin").read_bytes()
    _, want = _reference(seed, cols, (1, 2), [1650, 0], rows, 7, 3, win, cap)
    assert _frames(out) == want
    boot = out.split(b"\n")[0].split()
    assert boot[0] == b"#boot" and boot[-1] == __version__.encode()
    assert b"\n#idle 6 0 0\n" in out
