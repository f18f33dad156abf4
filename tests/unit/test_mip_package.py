"""firmware/package.json (the firmware for mip) is what `tools/flash.py deploy` writes to a
board with folders, at the project's one version, and the committed file is up to date."""
from __future__ import annotations

import json
import posixpath
from pathlib import Path

import pytest

from dpsense.protocol import __version__
from dpsense.tools import flash
from dpsense.tools.deploy import (BOARDS, MICROBIT_ONLY, MIP_PACKAGE_JSON, default_uploads,
                                  mip_package, mip_package_text)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_JSON = ROOT / "firmware" / "package.json"


def _committed() -> dict:
    return json.loads(PACKAGE_JSON.read_text())


def test_the_committed_package_json_is_the_generated_one() -> None:
    assert MIP_PACKAGE_JSON.resolve() == PACKAGE_JSON.resolve()
    assert PACKAGE_JSON.read_text() == mip_package_text(mip_package()), \
        "firmware/package.json is stale: python tools/flash.py package-json --write"


def test_its_version_is_the_projects() -> None:
    pkg = _committed()
    assert pkg["version"] == __version__
    assert pkg["deps"] == []
    assert set(pkg) == {"urls", "deps", "version"}


def test_it_installs_what_deploy_writes_to_every_board_with_folders() -> None:
    urls = dict(_committed()["urls"])
    union: set[str] = set()
    for board in BOARDS.values():
        if board.flat:
            continue
        targets = {u.target for u in default_uploads(board)}
        assert targets <= set(urls), (board.name, sorted(targets - set(urls)))
        union |= targets
    assert set(urls) == union


def test_the_file_list_by_hand() -> None:
    """Independent of deploy's code: the folders as a reader of the docs would list them."""
    want = {"shared_protocol/" + p.name for p in (ROOT / "shared_protocol").glob("*.py")}
    want |= {p.name for p in (ROOT / "firmware").glob("*.py") if p.stem not in MICROBIT_ONLY}
    want |= {"boards/" + p.name for p in (ROOT / "firmware" / "boards").glob("*.py")
             if p.stem != "microbit"}            # the micro:bit has no folders
    assert "shared_protocol/wire.py" in want and "app.py" in want and "mbnode.py" not in want
    assert set(dict(_committed()["urls"])) == want


def test_every_url_is_relative_and_names_the_file_it_installs() -> None:
    urls = _committed()["urls"]
    assert urls[-1] == ["main.py", "main.py"]         # the entry point only once all is there
    for target, url in urls:
        assert ":" not in url and not url.startswith("/") and "\\" not in url, url
        src = ROOT / "firmware" / url
        assert src.is_file(), url
        # the board path is the source's place in its package folder
        rel = src.resolve().relative_to(ROOT).as_posix()
        expect = {"shared_protocol": rel, "firmware": rel[len("firmware/"):]}[rel.split("/")[0]]
        assert target == expect, (target, url)
        assert posixpath.normpath(posixpath.join("firmware", url)) == rel


def test_package_json_check_and_print(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert flash.main(["package-json", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert flash.main(["package-json"]) == 0
    assert capsys.readouterr().out == PACKAGE_JSON.read_text()
    stale = tmp_path / "package.json"
    stale.write_text(PACKAGE_JSON.read_text().replace(__version__, "0.0.0"))
    monkeypatch.setattr(flash, "MIP_PACKAGE_JSON", stale)
    assert flash.main(["package-json", "--check"]) == 1
    assert "package-json --write" in capsys.readouterr().err
    assert flash.main(["package-json", "--write"]) == 0
    assert stale.read_text() == PACKAGE_JSON.read_text()
