"""deploy/systemd: the services' unit files are valid, hardened, and start real `dpsense` commands."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpsense.cloud import cli

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
INSTALLED = "/opt/dpsense/.venv/bin/dpsense"
SERVICES = ("dpsense-broker", "dpsense-analyst", "dpsense-correction-server", "dpsense-dashboard")


def _unit(name: str) -> dict[str, list[str]]:
    """``[Service]`` of a unit as key -> values (systemd keys may repeat)."""
    section: dict[str, list[str]] = {}
    current = None
    for line in (UNITS / (name + ".service")).read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            current = line
        elif current == "[Service]" and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            section.setdefault(key, []).append(value)
    return section


def _data_dir(service: dict[str, list[str]]) -> str:
    argv = shlex.split(service["ExecStart"][0])
    return argv[argv.index("--data-dir") + 1]


@pytest.mark.parametrize("name", SERVICES)
def test_unit_is_hardened(name: str) -> None:
    s = _unit(name)
    assert s["User"][0].startswith("dpsense") and s["Group"] == s["User"]
    assert s["ProtectSystem"] == ["strict"]
    assert s["NoNewPrivileges"] == ["yes"]
    assert s["Restart"] == ["on-failure"]
    assert s["ReadWritePaths"] == [_data_dir(s)]
    assert s["CapabilityBoundingSet"] == [""]


@pytest.mark.parametrize("name", SERVICES)
def test_unit_starts_a_dpsense_command_with_valid_options(name: str) -> None:
    argv = shlex.split(_unit(name)["ExecStart"][0])
    assert argv[0] == INSTALLED
    args = cli.build_parser().parse_args(argv[1:])
    assert args.command in cli.COMMANDS


@pytest.mark.parametrize("name", ["dpsense-analyst", "dpsense-correction-server"])
def test_a_broker_client_gets_its_password(name: str) -> None:
    """The services refuse to start without a broker password (the broker keeps none): the unit
    names a --password-file in its own data dir, or a required EnvironmentFile holds it."""
    s = _unit(name)
    args = cli.build_parser().parse_args(shlex.split(s["ExecStart"][0])[1:])
    if args.password_file is not None:
        assert Path(args.password_file).parent == Path(_data_dir(s))
    else:
        assert any(not f.startswith("-") for f in s["EnvironmentFile"])


def test_analyst_and_correction_server_are_separate_trust_zones() -> None:
    a, cs = _unit("dpsense-analyst"), _unit("dpsense-correction-server")
    assert a["User"] != cs["User"]
    assert _data_dir(a) != _data_dir(cs)
    assert a["InaccessiblePaths"] == ["-" + _data_dir(cs)]
    assert cs["InaccessiblePaths"] == ["-" + _data_dir(a)]
    assert any(not f.startswith("-") for f in cs["EnvironmentFile"])   # its broker password: required
    # The analyst knows the zones are split, so correction keys in its own folder stop it at start.
    args = cli.build_parser().parse_args(shlex.split(a["ExecStart"][0])[1:])
    assert args.correction_data_dir == _data_dir(cs)


def test_sysusers_creates_each_units_user() -> None:
    users = {line.split()[1] for line in (UNITS / "dpsense.sysusers.conf").read_text().splitlines()
             if line.startswith("u ")}
    assert users == {_unit(n)["User"][0] for n in SERVICES}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_and_security(tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this checkout's dpsense.
    here = str(Path(sys.executable).parent / "dpsense")
    files = []
    for name in SERVICES:
        unit = tmp_path / (name + ".service")
        unit.write_text((UNITS / unit.name).read_text().replace(INSTALLED, here))
        files.append(str(unit))
    # Unknown keys and bad values are only warnings to verify: any output is a failure here.
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", *files], capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
    for f in files:
        # Exposure 0 (locked down) .. 10 (unprotected); above 2.0 fails.
        r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--threshold=20", "--no-pager", f],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr
