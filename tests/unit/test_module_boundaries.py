"""Which product modules may import which: read from the sources (ast), every import,
also those inside functions.

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

ROOT = Path(__file__).resolve().parents[2]
CLOUD = ROOT / "cloud"


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
