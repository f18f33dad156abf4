"""Which product modules may import which: read from the sources (ast), every import,
also those inside functions.

* cloud/ is one folder per role (docs/architecture.md); ``ROLES`` is the table of the roles
  each may import, which has no circle, and neither have the imports themselves. Directly in
  cloud/ are only errors.py (the exception types every role shares) and __init__.py.
* Only the ``dpsense simulate`` command and the demo import the simulator
  (cloud/sim/simulate.py, whose connections are cloud/sim/fleetpub.py's); the services take the
  device profile from cloud/deploy/profile.py.
* cloud/ imports neither tools/ nor tests/ (the throw-away PostgreSQL server is a test
  fixture, tests/pgserver.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_imports import find_cycle

ROOT = Path(__file__).resolve().parents[2]
CLOUD = ROOT / "cloud"

# Role -> the roles it may import. cloud/errors.py and dpsense.protocol are open to every role;
# each role's __init__ says its row on its second line ("May import: ...").
ROLES: dict[str, set[str]] = {
    "transport": set(),
    "storage": set(),
    "deploy": {"transport"},
    "ingest": {"transport", "storage"},
    "ops": {"transport", "storage"},
    "correction": {"transport", "deploy", "storage", "ingest"},
    "privacy": {"deploy", "storage", "correction"},
    "analyst": {"transport", "deploy", "storage", "ingest", "correction", "privacy", "ops"},
    "sim": {"transport", "deploy", "storage", "ingest", "correction", "privacy", "ops", "analyst"},
    "cli": {"transport", "deploy", "storage", "ingest", "correction", "privacy", "ops", "analyst", "sim"},
}
SHARED = {"__init__.py", "errors.py"}


def imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from a import b`` gives a and a.b)."""
    package = "dpsense." + ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(base + "." + a.name for a in node.names)
    return out


def importers(module: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in CLOUD.rglob("*.py")
            if any(m == module or m.startswith(module + ".") for m in imports(p))}


def test_only_the_simulate_command_and_the_demo_import_the_simulator():
    assert importers("dpsense.cloud.sim.simulate") == {"cloud/cli/commands/simulate.py", "cloud/sim/demo.py"}


def test_only_the_simulator_uses_its_publisher():
    assert importers("dpsense.cloud.sim.fleetpub") <= {"cloud/sim/simulate.py", "cloud/cli/commands/simulate.py"}


def test_the_services_take_the_profile_from_cloud_profile():
    assert {"cloud/cli/commands/common.py", "cloud/cli/commands/services.py"} <= importers("dpsense.cloud.deploy.profile")


@pytest.mark.parametrize("module", ["dpsense.tools", "tests", "hil_tests", "bench"])
def test_cloud_imports_no_tools_and_no_test_code(module):
    assert importers(module) == set()


def test_the_import_reader_resolves_relative_imports():
    src = CLOUD / "storage" / "sqlite.py"
    assert "dpsense.cloud.storage.repository" in imports(src)


def role_of(module: str) -> str | None:
    """The role of a module name (``dpsense.cloud.analyst.service`` -> ``analyst``), or None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["dpsense", "cloud"] and len(parts) > 2 and parts[2] in ROLES else None


def role_imports() -> dict[tuple[str, str], set[str]]:
    """(importing role, imported role) -> the files that import across that edge."""
    edges: dict[tuple[str, str], set[str]] = {}
    for role in ROLES:
        for p in (CLOUD / role).rglob("*.py"):
            for m in imports(p):
                other = role_of(m)
                if other is not None and other != role:
                    edges.setdefault((role, other), set()).add(p.relative_to(ROOT).as_posix())
    return edges


def violations(edges: dict[tuple[str, str], set[str]], allowed: dict[str, set[str]]) -> list[str]:
    return ["%s -> %s: %s" % (a, b, ", ".join(sorted(files)))
            for (a, b), files in sorted(edges.items()) if b not in allowed[a]]


def loose_modules(folder: Path) -> list[str]:
    """Python modules directly in ``folder`` other than the shared ones."""
    return sorted(p.name for p in folder.glob("*.py") if p.name not in SHARED)


def test_the_roles_are_the_packages_of_cloud():
    packages = {p.parent.name for p in CLOUD.glob("*/__init__.py")}
    assert packages == set(ROLES)


def test_nothing_but_errors_py_is_loose_in_cloud():
    assert loose_modules(CLOUD) == []


def test_each_role_imports_only_the_roles_it_may():
    assert violations(role_imports(), ROLES) == []


def test_neither_the_table_nor_the_imports_have_a_circle_between_roles():
    assert find_cycle(ROLES) is None
    graph: dict[str, set[str]] = {r: set() for r in ROLES}
    for a, b in role_imports():
        graph[a].add(b)
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or ())


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_says_what_it_owns_and_may_import(role):
    doc = ast.get_docstring(ast.parse((CLOUD / role / "__init__.py").read_text(encoding="utf-8"))) or ""
    lines = doc.splitlines()
    assert len(lines) >= 2 and lines[0].strip(), "line 1: what %s owns" % role
    assert lines[1].startswith("May import: ") and lines[1].endswith("."), lines[1]
    said = lines[1][len("May import: "):-1]
    assert (set() if said == "no other role" else set(said.split(", "))) == ROLES[role]


def test_the_role_checks_fail_on_a_wrong_import_a_circle_and_a_loose_module(tmp_path):
    edges = {("transport", "analyst"): {"cloud/transport/topics.py"}}
    assert violations(edges, ROLES) == ["transport -> analyst: cloud/transport/topics.py"]
    assert find_cycle(dict(ROLES, transport={"cli"})) is not None
    for name in ("__init__.py", "errors.py", "helpers.py"):
        (tmp_path / name).write_text("")
    assert loose_modules(tmp_path) == ["helpers.py"]
