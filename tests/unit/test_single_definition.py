"""Each protocol constant is defined once, in shared_protocol; a second spelling fails here.

The product code (firmware/, shared_protocol/, cloud/, tools/) is parsed and searched,
docstrings left out, for what spells a constant of shared_protocol/layout.py,
ringlayout.py or topics.py again: the int32 bound as a number, a topic as a string,
a record head as a struct format, a reading size as ``26 + 4 * n``, or an assignment
of a literal to one of their names. Code that needs them imports them. Tests, benches
and docs may spell the values: they are the independent oracle.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("firmware", "shared_protocol", "cloud", "tools")
LAYOUT = "shared_protocol/layout.py"
RING = "shared_protocol/ringlayout.py"
TOPICS = "shared_protocol/topics.py"

# Names whose literal value belongs to one module.
NAMES = {
    "TOKEN_SIZE": LAYOUT, "MAX_COLS": LAYOUT, "INT32_MIN": LAYOUT, "INT32_MAX": LAYOUT,
    "I32_MAX": LAYOUT, "READING_HEAD": LAYOUT, "READING_HEAD_SIZE": LAYOUT,
    "CORRECTION": LAYOUT, "CORRECTION_SIZE": LAYOUT, "DEVICE_ID_MAX": LAYOUT,
    "CONFIG_ID_MAX": LAYOUT, "SLOT_HEAD": RING, "SLOT_HEAD_SIZE": RING,
    "READINGS": TOPICS, "READINGS_ALL": TOPICS, "CORRECTIONS": TOPICS, "STATUS": TOPICS,
    "STATUS_ALL": TOPICS, "ROUND_TO_CS": TOPICS, "ROUND_TO_ANALYST": TOPICS,
    "DEVICE_USER": TOPICS,
}
FUNCTIONS = {"reading_size": LAYOUT, "slot_size": RING, "slot_count": RING}
_INT32_BOUNDS = {2 ** 31 - 1, 2 ** 31}
_STRUCT_FORMAT = re.compile(r"[<>!=@]?[0-9xcbB?hHiIlLqQnNefdspP]+")


def _documentation(tree: ast.AST) -> set[int]:
    """ids of the string constants that stand alone as statements (docstrings)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def _literal(node: ast.AST) -> bool:
    """A value spelt out: constants combined by operators, no names."""
    return all(isinstance(n, (ast.Constant, ast.UnaryOp, ast.BinOp, ast.unaryop, ast.operator,
                              ast.Tuple, ast.Load)) for n in ast.walk(node))


def findings(rel: str, source: str) -> list[str]:
    """Every second definition in ``source`` (the file ``rel``), as "file:line: what"."""
    tree = ast.parse(source)
    docs = _documentation(tree)
    out = []

    def add(node: ast.AST, what: str) -> None:
        out.append("%s:%d: %s" % (rel, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docs:
            v = node.value
            if isinstance(v, int) and not isinstance(v, bool) and v in _INT32_BOUNDS and rel != LAYOUT:
                add(node, "the int32 bound %d (layout.INT32_MAX / INT32_MIN)" % v)
            if isinstance(v, (str, bytes)):
                text = v if isinstance(v, str) else v.decode("latin-1")
                if "dpsense/" in text and rel != TOPICS:
                    add(node, "a topic name %r (shared_protocol/topics.py)" % text)
                if _STRUCT_FORMAT.fullmatch(text) and "8s" in text and rel != LAYOUT:
                    add(node, "a record head %r (layout.READING_HEAD / CORRECTION)" % text)
        elif isinstance(node, ast.BinOp) and rel != LAYOUT:
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value == 26 and isinstance(node.op, ast.Add):
                    add(node, "a reading size spelt 26 + ... (layout.reading_size)")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                name = t.id.lstrip("_") if isinstance(t, ast.Name) else None
                if name in NAMES and NAMES[name] != rel and _literal(node.value):
                    add(node, "%s defined again (%s)" % (t.id, NAMES[name]))
        elif isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS and FUNCTIONS[node.name] != rel:
            add(node, "%s() defined again (%s)" % (node.name, FUNCTIONS[node.name]))
    return out


def _scan() -> list[str]:
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found += findings(rel, path.read_text(encoding="utf-8"))
    return found


def test_no_protocol_constant_is_defined_twice():
    # The micro:bit node (firmware/mb*.py) included: tools/mbgen.py writes the shared values
    # into its copy at deploy, so its source names them like every other module.
    found = _scan()
    assert found == [], "import these from shared_protocol instead:\n" + "\n".join(found)



@pytest.mark.parametrize("source, what", [
    ("_LIMIT = 2147483647\n", "int32 bound"),
    ("def clamp(v):\n    return max(v, -0x7FFFFFFF)\n", "int32 bound"),
    ("TOPIC = b'dpsense/corrections'\n", "topic name"),
    ("t = 'dpsense/readings/%s' % user\n", "topic name"),
    ("HEAD = '<BBBBIII8sH'\n", "record head"),
    ("n = 26 + 4 * ncols\n", "reading size"),
    ("TOKEN_SIZE = 8\n", "TOKEN_SIZE defined again"),
    ("_CORRECTION_SIZE = 16\n", "CORRECTION_SIZE defined again"),
    ("def reading_size(n):\n    return n\n", "reading_size() defined again"),
])
def test_the_scan_finds_a_second_definition(source, what):
    found = findings("cloud/example.py", source)
    assert len(found) == 1 and what in found[0], found


@pytest.mark.parametrize("source", [
    '"""Readings go to dpsense/readings/d7; 2147483647 is INT32_MAX."""\n',
    "from dpsense.protocol.layout import TOKEN_SIZE\nACK_LINE = 1 + 2 * TOKEN_SIZE\n",
    "CORRECTIONS = topics.CORRECTIONS.encode()\n",
    "pins = (26, 27, 28)\n",
])
def test_the_scan_leaves_docstrings_imports_and_other_numbers_alone(source):
    assert findings("cloud/example.py", source) == []
