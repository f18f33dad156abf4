"""Clear messages with exit status 2 for an operator's wrong turn (issue 24): a folder without
an analyst database, a device account's password, a checkout without its environment."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpsense.cloud import cli
from dpsense.cloud.cli.commands.common import account_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["results", "windows"], ["results", "devices"], ["status"]])
def test_reading_commands_refuse_a_folder_without_an_analyst_database_and_create_nothing(argv, tmp_path, capsys):
    wrong = tmp_path / "not-the-data-dir"
    wrong.mkdir()
    assert cli.main([*argv, "--data-dir", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no analyst database at %s" % (wrong / "analyst.db") in err, err
    assert list(wrong.iterdir()) == []


def test_status_without_a_correction_database_says_so_and_creates_none(tmp_path, capsys):
    from dpsense.cloud.storage import open_analyst_store
    open_analyst_store("sqlite:///%s" % (tmp_path / "analyst.db")).close()
    assert cli.main(["status", "--data-dir", str(tmp_path)]) == 0
    assert "correction  no database at %s" % (tmp_path / "correction.db") in capsys.readouterr().out
    assert not (tmp_path / "correction.db").exists()


@pytest.mark.parametrize("account, command", [
    ("d10", "dpsense broker add-device 10 --password-file PATH"),
    ("analyst", "dpsense broker add-account analyst --password-file PATH"),
    ("analyst-status", "dpsense broker add-account analyst --password-file PATH"),
    ("correction-ingest-2", "dpsense broker add-account correction --workers 2 --password-file PATH"),
    ("analyst-3", "dpsense broker add-account analyst --workers 3 --password-file PATH"),
])
def test_a_missing_password_names_the_command_that_makes_the_account(account, command):
    assert account_command(account) == command
    cli.build_parser().parse_args(command.split()[1:])          # a command that exists


def test_the_gateway_without_a_password_names_add_device(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DPSENSE_BROKER_PASSWORD", raising=False)
    assert cli.main(["gateway", "--port", str(tmp_path / "tty"), "--device-id", "10",
                     "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`dpsense broker add-device 10 --password-file PATH`" in err, err


def test_flash_outside_the_projects_environment_says_how_in_one_line():
    # -S: no site-packages, as a bare python3 that never had dpsense installed.
    r = subprocess.run([sys.executable, "-S", str(ROOT / "tools" / "flash.py"), "--help"], capture_output=True,
                       text=True, timeout=60, cwd=str(ROOT), env={k: v for k, v in os.environ.items()
                                                               if k != "PYTHONPATH"})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and ". .venv/bin/activate" in r.stderr
