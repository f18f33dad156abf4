"""`dpsense demo` end to end at a small size: every process it starts is gone afterwards."""
from __future__ import annotations

import io
import shutil
import subprocess

import pytest

from dpsense.cloud.pipeline import DemoOptions, run_pipeline_demo

pytestmark = pytest.mark.skipif(shutil.which("mosquitto") is None and shutil.which("/usr/sbin/mosquitto") is None,
                                reason="Debian package 'mosquitto' is not installed")


def _ours(out_dir) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    return [p for p in ps if str(out_dir) in p]


def test_demo_small(tmp_path):
    out = io.StringIO()
    opts = DemoOptions(n=4000, devices=4, separation=400, epsilon="1", out=tmp_path / "demo", sweep=False)
    assert run_pipeline_demo(opts, out) == 0
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
