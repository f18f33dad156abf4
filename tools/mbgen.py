"""The micro:bit's copies of its own modules (firmware/mb*.py), generated from the shared source.

    text = generate(Path("firmware/mbutil.py").read_text(), SHARED_DIR, FIRMWARE_DIR,
                    on_board=("mbutil", "mbio", "noise", "mbnode", "mbstate", "mbcfg"))

The micro:bit (MicroPython 1.9.2, flat file system, ~9.5 KB heap) cannot import the
shared_protocol modules its node takes from: it compiles every module itself, and wire.py
alone does not compile there. So a micro:bit module names what it takes with a plain
top-level import, which runs as it is on the host (its tests) and on boards with folders,

    from shared_protocol.layout import INT32_MAX, CORRECTION
    from shared_protocol.framing import frame
    from seriallink import QUIET

and ``generate`` replaces each such import, for the micro:bit, with what it names:

* a constant (a module-level name bound to an int, str, bytes or a tuple of them, computed
  from literals, earlier constants and ``struct``): an int the board holds as a small int
  (``|v| < 2**30``) is written into every use, where the board's compiler folds it and no
  global costs heap; any other value is bound once, under the imported name;
* a function: its source, as written, with the constants and functions it reads from its
  own module (or from the sibling modules that module imports) brought along the same way.

Left alone: imports inside ``try`` (``try: from shared_protocol.noise import ...`` /
``except ImportError: from noise import ...``: the board has that module as a file),
imports of the modules named ``on_board``, and modules that are not ours (``struct``).
The result is proved to parse to the input's syntax tree with the imports replaced by
those definitions and each substituted name by its value, so nothing else changes; a
name the generator cannot carry (a class, a value that is not constant, a clash of two
names) is a ``GenerateError`` naming it.
"""
from __future__ import annotations

import ast
import builtins
import copy
import io
import struct
import tokenize
from pathlib import Path
from typing import Any, Iterable

PACKAGE = "shared_protocol"
# what a constant may be computed with besides literals and earlier constants
# (``CORRECTION_SIZE = struct.calcsize(CORRECTION)``)
_CONSTANT_MODULES = {"struct": struct}
SMALL_INT = 1 << 30          # the micro:bit's small ints; larger ones are objects on its heap


class GenerateError(ValueError):
    """A module the generator cannot turn into its micro:bit copy; the text says why."""


def _is_constant(v: Any) -> bool:
    if isinstance(v, tuple):
        return all(_is_constant(x) for x in v)
    return type(v) in (int, str, bytes)


def _is_small(v: Any) -> bool:
    return type(v) is int and -SMALL_INT <= v < SMALL_INT


class _Module:
    """One source file: its constants, top-level functions and the names it imports."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key                                     # "shared:wire", "firmware:seriallink"
        self.text = path.read_text()
        self.tree = ast.parse(self.text)
        self.consts: dict[str, tuple[Any, ast.expr]] = {}
        self.funcs: dict[str, ast.FunctionDef] = {}
        self.imports: dict[str, tuple[str, int, str]] = {}    # name -> (module, level, name)
        self.stdlib: dict[str, Any] = {}      # modules a constant may be computed with
        for node in self.tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in _CONSTANT_MODULES and a.asname is None:
                        self.stdlib[a.name] = _CONSTANT_MODULES[a.name]
            if isinstance(node, ast.FunctionDef):
                self.funcs[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                self._assign(node)
            elif isinstance(node, ast.ImportFrom):
                self._import(node)
            elif isinstance(node, ast.Try):
                # the relative import of a shared module, with its flat fallback
                for n in node.body:
                    if isinstance(n, ast.ImportFrom):
                        self._import(n)

    def _assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name) or node.value is None:
            return
        name = targets[0].id
        value = node.value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id == "const" and len(value.args) == 1):
            value = value.args[0]
        self.consts.pop(name, None)
        used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        if not used <= set(self.consts) | set(self.stdlib):
            return
        env = {k: self.consts[k][0] if k in self.consts else self.stdlib[k] for k in used}
        try:
            v = eval(compile(ast.fix_missing_locations(ast.Expression(body=copy.deepcopy(value))),
                             str(self.path), "eval"), {"__builtins__": {}}, env)
        except Exception:  # noqa: BLE001 - not a constant expression: not a constant
            return
        if _is_constant(v):
            self.consts[name] = (v, value)

    def _import(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            self.imports.setdefault(a.asname or a.name, (node.module or "", node.level, a.name))


class _Generation:
    def __init__(self, shared_dir: Path, firmware_dir: Path, on_board: Iterable[str]) -> None:
        self.shared_dir = Path(shared_dir)
        self.firmware_dir = Path(firmware_dir)
        self.on_board = set(on_board)
        self._modules: dict[str, _Module] = {}
        # one namespace for what the generated module gains: name -> (value or None for a
        # function, where it comes from, source text of a constant's value)
        self.names: dict[str, tuple[Any, str, str]] = {}
        self.functions: list[tuple[str, ast.FunctionDef]] = []     # (its module's text, def)

    def module(self, name: str, level: int, importer: str) -> _Module | None:
        """The module ``from <name> import`` means in ``importer`` ("shared" or "firmware"),
        or None when it is not one of ours, or a micro:bit module (a file on the board)."""
        if level > 1 or (level == 1 and importer != "shared"):
            raise GenerateError("relative import '%s%s' outside shared_protocol"
                                % ("." * level, name))
        if level == 1:
            sub = name
        elif name == PACKAGE or name.startswith(PACKAGE + "."):
            sub = name[len(PACKAGE) + 1:]
        elif importer == "shared" and (self.shared_dir / (name + ".py")).is_file():
            sub = name
        elif (self.firmware_dir / (name + ".py")).is_file() and name not in self.on_board:
            return self._load(self.firmware_dir / (name + ".py"), "firmware:" + name)
        else:
            return None
        if importer == "firmware" and sub in self.on_board:
            raise GenerateError("%s is a file on the micro:bit: import it with the flat "
                                "fallback (try: from %s.%s import ... except ImportError: "
                                "from %s import ...)" % (sub, PACKAGE, sub, sub))
        path = self.shared_dir / (sub + ".py" if sub else "__init__.py")
        return self._load(path, "shared:" + sub)

    def _load(self, path: Path, key: str) -> _Module:
        if not path.is_file():
            raise GenerateError("no module %s (looked for %s)" % (key.split(":", 1)[1], path))
        if key not in self._modules:
            self._modules[key] = _Module(path, key)
        return self._modules[key]

    def carry(self, mod: _Module, name: str, alias: str) -> None:
        """Bring ``mod``'s ``name`` into the generated module as ``alias``."""
        origin = "%s.%s" % (mod.key.split(":", 1)[1] or PACKAGE, name)
        if name in mod.consts:
            value, expr = mod.consts[name]
            # its literal source text where it reads no names (``1 << 62``), else its value
            has_names = any(isinstance(n, ast.Name) for n in ast.walk(expr))
            text = repr(value) if has_names else ast.get_source_segment(mod.text, expr)
            self._claim(alias, value, origin, text or repr(value))
            return
        if name in mod.funcs:
            if alias != name:
                raise GenerateError("function %s cannot be renamed to %s" % (origin, alias))
            if self._claim(name, None, origin, ""):
                fn = mod.funcs[name]
                if fn.decorator_list:
                    raise GenerateError("%s has decorators" % origin)
                self.functions.append((mod.text, fn))
                for g in _free_names(fn):
                    if g in mod.consts or g in mod.funcs or g in mod.imports:
                        self.carry(mod, g, g)
                    elif not hasattr(builtins, g):
                        raise GenerateError("%s reads %s, which %s does not define"
                                            % (origin, g, mod.path.name))
            return
        if name in mod.imports:
            src, level, orig = mod.imports[name]
            other = self.module(src, level, mod.key.split(":", 1)[0])
            if other is not None:
                self.carry(other, orig, alias)
                return
        raise GenerateError("%s is not a constant or a function; the micro:bit copy cannot "
                            "carry it" % origin)

    def _claim(self, name: str, value: Any, origin: str, text: str) -> bool:
        """Reserve ``name``; False if it is already there with the same meaning."""
        old = self.names.get(name)
        if old is None:
            self.names[name] = (value, origin, text)
            return True
        if value is None and old[0] is None and old[1] == origin:
            return False
        if value is not None and type(old[0]) is type(value) and old[0] == value:
            return False
        raise GenerateError("%s means both %s and %s" % (name, old[1], origin))

    def written_in(self, reads: dict[str, int]) -> dict[str, Any]:
        """Of the constants a piece of code reads (name -> times), those written into it:
        small ints, and any value read only once there."""
        out = {}
        for k, n in reads.items():
            value = self.names[k][0] if k in self.names else None
            if value is not None and (_is_small(value) or n == 1):
                out[k] = value
        return out


def _free_names(fn: ast.FunctionDef) -> list[str]:
    """The global names ``fn`` reads, in order of first use."""
    local = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.arg):
            local.add(n.arg)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            local.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not fn:
            local.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            local.add(n.name)
        elif isinstance(n, ast.alias):
            local.add((n.asname or n.name).split(".")[0])
    out: list[str] = []
    for n in ast.walk(fn):
        if (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local
                and n.id not in out):
            out.append(n.id)
    return out


def _literal(value: Any) -> str:
    return "(%r)" % value if type(value) is int and value < 0 else repr(value)


def _substitute(text: str, values: dict[str, Any], skip: Iterable[tuple[int, int]] = ()) -> str:
    """``text`` with every read of a name in ``values`` written as its value (names after
    ``.`` and keyword names are not reads); lines in the ``skip`` ranges are left alone."""
    if not values:
        return text
    skip = list(skip)
    kinds = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENCODING, tokenize.ENDMARKER)
    toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in kinds]
    lines = text.splitlines(keepends=True)
    edits = []
    for i, t in enumerate(toks):
        if t.type != tokenize.NAME or t.string not in values:
            continue
        if any(a <= t.start[0] <= b for a, b in skip):
            continue
        before = toks[i - 1].string if i else ""
        after = toks[i + 1].string if i + 1 < len(toks) else ""
        if before == "." or after == "=":
            continue
        edits.append((t.start, t.end, _literal(values[t.string])))
    for (r, c0), (_, c1), new in reversed(edits):
        ln = lines[r - 1]
        lines[r - 1] = ln[:c0] + new + ln[c1:]
    return "".join(lines)


class _Valued(ast.NodeTransformer):
    """Reads of the given names replaced by their values (the proof's expected tree)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.parse(_literal(self.values[node.id]), mode="eval").body
        return node


def _ours(node: ast.stmt, gen: _Generation) -> _Module | None:
    """The module a top-level import of the firmware module takes names from, if ours."""
    if isinstance(node, ast.Import):
        for a in node.names:
            if gen.module(a.name, 0, "firmware") is not None:
                raise GenerateError("line %d: write 'from %s import <name>': the micro:bit copy "
                                    "carries names, not modules" % (node.lineno, a.name))
        return None
    if isinstance(node, ast.ImportFrom):
        return gen.module(node.module or "", node.level, "firmware")
    return None


def _reads(nodes: Iterable[ast.AST], names: Iterable[str]) -> dict[str, int]:
    """How often ``nodes`` read each of ``names``."""
    names = set(names)
    out: dict[str, int] = {}
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names:
                out[n.id] = out.get(n.id, 0) + 1
    return out


def generate(text: str, shared_dir: Path, firmware_dir: Path, on_board: Iterable[str]) -> str:
    """The micro:bit copy of the firmware module ``text`` (see the module docstring)."""
    tree = ast.parse(text)
    gen = _Generation(shared_dir, firmware_dir, on_board)
    imports: list[ast.ImportFrom] = []
    for stmt in tree.body:
        if _ours(stmt, gen) is not None:
            assert isinstance(stmt, ast.ImportFrom)   # _ours refuses a plain import of ours
            imports.append(stmt)
    if not imports:
        return text
    aliases = {a.asname or a.name for n in imports for a in n.names}
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.alias) and not any(node in n.names for n in imports):
            defined.add(node.asname or node.name)
    for node in imports:
        mod = _ours(node, gen)
        assert mod is not None
        for a in node.names:
            if a.name == "*":
                raise GenerateError("line %d: 'import *' names nothing to carry" % node.lineno)
            gen.carry(mod, a.name, a.asname or a.name)
    clash = defined & set(gen.names)
    if clash:
        raise GenerateError("%s: assigned here and brought in from the shared source"
                            % ", ".join(sorted(clash)))
    rest = [n for n in tree.body if not any(n is i for i in imports)]
    # each piece of code with the constants written into it: the module, then each function
    pieces: list[tuple[dict[str, int], dict[str, Any]]] = []
    reads = _reads(rest, aliases)
    mine = gen.written_in(reads)
    pieces.append((reads, mine))
    functions = []
    for source, fn in gen.functions:
        reads = _reads([fn], set(_free_names(fn)) & set(gen.names))
        values = gen.written_in(reads)
        pieces.append((reads, values))
        segment = ast.get_source_segment(source, fn)
        assert segment is not None
        functions.append((segment, values))
    # a constant is bound once where some piece reads it without having it written in
    bindings = ["%s = %s\n" % (k, v[2]) for k, v in gen.names.items()
                if v[0] is not None and any(k in r and k not in w for r, w in pieces)]
    spans = [(n.lineno, n.end_lineno or n.lineno) for n in imports]
    body = _substitute(text, mine, spans)
    block = "".join(bindings) + "".join("\n\n" + _substitute(f, v) + "\n" for f, v in functions)
    lines = body.splitlines(keepends=True)
    for first, last in reversed(spans):
        lines[first - 1:last] = [block + "\n"] if first == spans[0][0] else []
    result = "".join(lines)
    # the proof: the same tree as the source with the imports replaced and the names valued
    want: list[ast.stmt] = []
    for node in tree.body:
        if node is imports[0]:
            want += [ast.parse(b).body[0] for b in bindings]
            want += [_Valued(v).visit(ast.parse(f).body[0]) for f, v in functions]
        elif not any(node is i for i in imports):
            want.append(_Valued(mine).visit(copy.deepcopy(node)))
    if ast.dump(ast.parse(result)) != ast.dump(ast.Module(body=want, type_ignores=[])):
        raise GenerateError("the generated module differs from its source beyond the carried "
                            "names; deploy cannot trust it")
    return result
