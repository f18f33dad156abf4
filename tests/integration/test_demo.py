"""`dpsense demo` end to end at a small size: every process it starts is gone afterwards."""
from __future__ import annotations

import io
import os
import shutil
import subprocess

import pytest

from dpsense.cloud.sim.demo import DemoOptions, run_pipeline_demo

pytestmark = pytest.mark.skipif(shutil.which("mosquitto") is None and shutil.which("/usr/sbin/mosquitto") is None,
                                reason="Debian package 'mosquitto' is not installed")


def _ours(out_dir) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    return [p for p in ps if str(out_dir) in p]


def test_demo_small(tmp_path):
    """Also run with umask 022, as a shell leaves it: afterwards no file or folder under the
    data directory is open to group or others (the databases, the ground truth of raw
    values, the broker's files), because every mode is set explicitly."""
    out = io.StringIO()
    opts = DemoOptions(n=4000, devices=4, separation=400, epsilon="1", out=tmp_path / "demo", sweep=False)
    old = os.umask(0o022)
    try:
        assert run_pipeline_demo(opts, out) == 0
    finally:
        os.umask(old)
    data = tmp_path / "demo" / "data"
    paths = [data, *data.rglob("*")]
    names = {p.name for p in paths}
    assert {"analyst.db", "correction.db", "groundtruth.npz", "passwd", "mosquitto.log"} <= names
    assert "credentials" not in names
    assert [p for p in paths if p.stat().st_mode & 0o077] == []
    text = out.getvalue()
    assert "4000 readings from 4 simulated devices" in text
    assert "relaxed + correction (this run)" in text
    assert "4000 readings and 4000 correction records stored, 0 dead letters, 0 missing" in text
    assert "noise     fresh entropy (secrets, the OS CSPRNG)" in text
    assert "not private" not in text.split("accuracy vs epsilon")[0]
    report = (tmp_path / "demo" / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 1
    assert _ours(tmp_path) == []
    found = [line for line in text.splitlines() if line.startswith("relaxed + correction")][0]
    share = float(found.split("(")[2].split("%")[0])
    assert share > 80.0, text
