"""Every benchmark of bench/ still runs: bench/suite.py lists each script, and runs each at a tiny
size. The figures of a tiny run mean nothing; a benchmark that no longer runs against the code it
measures (a changed signature, a changed default) fails here instead of in `make bench`."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_suite():
    """bench/suite.py as a module, without bench/ on sys.path: bench/firmware.py would then
    stand for the firmware package in every later import of the same process."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("dpsense_bench_suite", ROOT / "bench" / "suite.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


suite = _load_suite()


def test_every_script_in_bench_is_in_the_suite_or_a_helper() -> None:
    listed = {b.script for b in suite.BENCHES}
    assert len(listed) == len(suite.BENCHES)
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")}
    assert scripts == listed | set(suite.HELPERS), "list it in bench/suite.py: %s" % (scripts - listed)
    # make bench is the suite, and the README names every benchmark it runs.
    assert "bench/suite.py" in (ROOT / "Makefile").read_text()
    readme = (ROOT / "bench" / "README.md").read_text()
    assert [s for s in sorted(listed) if "bench/%s" % s not in readme] == []


@pytest.mark.skipif(shutil.which("mosquitto_passwd") is None, reason="Debian package 'mosquitto' is not installed")
def test_every_benchmark_runs_at_a_tiny_size() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "suite.py"), "--tiny"], capture_output=True,
                       text=True, timeout=900)
    lines = [x for x in p.stdout.splitlines() if re.match(r"bench/\S+\.py: ", x)]
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    assert len(lines) == len(suite.BENCHES), p.stdout
