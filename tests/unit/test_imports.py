"""The installed package's modules: every one imports, tools/ has no import cycle, and
neither tools/ nor cloud/ edits sys.path (one import root, dpsense, resolves everything)."""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import dpsense

ROOT = Path(__file__).resolve().parents[2]
# Importable on CPython; dpsense.firmware is board code carried as files (tools/deploy.py).
PACKAGES = ("dpsense.cloud", "dpsense.protocol", "dpsense.tools")


def _modules() -> list[str]:
    names = ["dpsense"]
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, pkg + ".")]
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_the_module_list_covers_every_source_file() -> None:
    # walk_packages only finds what the import system sees: a file it missed would go untested.
    on_disk = {p.stem for d in ("cloud", "shared_protocol", "tools") for p in (ROOT / d).rglob("*.py")
               if "ptyboard_shims" not in p.parts and p.stem != "__init__"}
    found = {n.rsplit(".", 1)[-1] for n in _modules()}
    assert on_disk <= found, sorted(on_disk - found)


def imports_of(path: Path, package: str) -> set[str]:
    """Modules of ``package`` that the file ``path`` (a module of ``package``) imports, at the
    top or inside functions, absolutely or relatively."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = parent + ("." + base if base else "")
            # ``from pkg import mod`` names a module; ``from pkg.mod import name`` does not
            names = [base] + [base + "." + a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n.startswith(package + "."))
    return found


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    mods = {package + "." + p.stem: p for p in folder.glob("*.py") if p.stem != "__init__"}
    return {m: imports_of(p, package) & set(mods) - {m} for m, p in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}            # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None        # a diamond
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y2"}, "y2": {"y"}}) == ["y", "y2", "y"]


def test_imports_of_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from dpsense.tools.deploy import BOARDS\n"
                 "def f():\n    from dpsense.tools import provision as pv\n"
                 "    from .qemu import QemuMicrobit\n    import dpsense.tools.rawrepl\n")
    assert imports_of(f, "dpsense.tools") >= {"dpsense.tools.deploy", "dpsense.tools.provision",
                                              "dpsense.tools.qemu", "dpsense.tools.rawrepl"}


def test_tools_have_no_import_cycle() -> None:
    graph = import_graph(ROOT / "tools", "dpsense.tools")
    assert "dpsense.tools.flash" in graph and graph["dpsense.tools.flash"]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or ())


def test_nothing_in_tools_or_cloud_edits_sys_path() -> None:
    offenders = []
    for d in ("tools", "cloud"):
        for p in sorted((ROOT / d).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if (isinstance(node, ast.Attribute) and node.attr == "path"
                        and isinstance(node.value, ast.Name) and node.value.id.endswith("sys")):
                    offenders.append("%s:%d" % (p.relative_to(ROOT), node.lineno))
    assert not offenders, offenders


def test_dpsense_is_one_root_over_the_project_folders() -> None:
    import dpsense.cloud
    import dpsense.protocol
    import dpsense.tools
    assert Path(dpsense.protocol.__file__).parent.name in ("shared_protocol", "protocol")
    assert dpsense.__version__ == dpsense.protocol.__version__
    for mod in (dpsense.cloud, dpsense.protocol, dpsense.tools):
        assert mod.__name__.startswith("dpsense.")
