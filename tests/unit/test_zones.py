"""Two trust zones, two folders (docs/operating.md, "Two trust zones"): where the correction keys
go, who refuses a folder holding them in the wrong place, who may read them, and how the
failure shows in `dpsense status`."""
from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpsense.cloud import cli
from dpsense.cloud.config import Settings
from dpsense.cloud.correction.sealed import KeyStore, provision_keys
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.cloud.storage.repository import DeadLetter, group_reasons

ROOT = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_the_correction_folder_defaults_to_the_data_dir_and_is_a_zone_of_its_own_when_given(tmp_path, monkeypatch):
    monkeypatch.delenv("DPSENSE_CORRECTION_DIR", raising=False)
    one = Settings.resolve(data_dir=tmp_path / "a")
    assert one.cs_dir == tmp_path / "a" and not one.two_zones
    assert one.correction_db == "sqlite:///%s" % (tmp_path / "a" / "correction.db")
    monkeypatch.setenv("DPSENSE_CORRECTION_DIR", str(tmp_path / "cs"))
    two = Settings.resolve(data_dir=tmp_path / "a")
    assert two.cs_dir == tmp_path / "cs" and two.two_zones
    assert two.correction_db == "sqlite:///%s" % (tmp_path / "cs" / "correction.db")
    assert not Settings.resolve(data_dir=tmp_path / "a", correction_dir=tmp_path / "a" / ".").two_zones


@pytest.mark.parametrize("role", [["analyst"], ["ingest", "--role", "analyst"], ["ingest", "--role", "status"]])
def test_the_analysts_side_refuses_a_data_dir_holding_correction_keys_in_two_zones(role, tmp_path, capsys,
                                                                                  monkeypatch):
    monkeypatch.setenv("DPSENSE_BROKER_PASSWORD", "x")
    a = tmp_path / "a"
    provision_keys(a, [1])
    assert cli.main([*role, "--data-dir", str(a), "--correction-data-dir", str(tmp_path / "cs")]) == 2
    err = _one_line(capsys)
    assert str(a / "correction-keys" / "keys.json") in err and str(tmp_path / "cs") in err


def test_the_single_folder_layout_keeps_its_keys_with_the_analyst(tmp_path, capsys, monkeypatch):
    """One folder for both zones (the demo): the analyst starts and only then misses its broker."""
    monkeypatch.setenv("DPSENSE_BROKER_PASSWORD", "x")
    monkeypatch.delenv("DPSENSE_CORRECTION_DIR", raising=False)
    provision_keys(tmp_path, [1])
    from dpsense.cloud.broker import free_port
    assert cli.main(["analyst", "--data-dir", str(tmp_path), "--broker-port", str(free_port())]) == 2
    assert "correction keys" not in _one_line(capsys)


@pytest.mark.parametrize("damage", ["garbage", "mode"])
def test_the_correction_server_refuses_a_key_store_it_cannot_read_naming_the_file(damage, tmp_path, capsys,
                                                                                  monkeypatch):
    monkeypatch.setenv("DPSENSE_BROKER_PASSWORD", "x")
    store = KeyStore.for_data_dir(tmp_path)
    store.add_device(1)
    if damage == "garbage":
        store.path.write_text("{not json")
    else:
        store.path.chmod(0o640)
    assert cli.main(["correction-server", "--data-dir", str(tmp_path), "--w-o", "5"]) == 2
    assert str(store.path) in _one_line(capsys)


def test_the_correction_server_makes_an_empty_key_store_in_a_new_folder(tmp_path):
    sealed, plain = KeyStore.for_data_dir(tmp_path / "cs").check_readable()
    path = tmp_path / "cs" / "correction-keys" / "keys.json"
    assert (sealed, plain) == ([], []) and json.loads(path.read_text()) == {"keys": {}, "plaintext": []}
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700


@as_root
def test_keys_written_by_root_go_to_the_correction_folders_owner_0600_in_0700(tmp_path):
    cs = tmp_path / "cs"
    cs.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(cs, nobody.pw_uid, nobody.pw_gid)
    provision_keys(cs, [1, 2])
    for p, mode in ((cs / "correction-keys", 0o700), (cs / "correction-keys" / "keys.json", 0o600)):
        st = p.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (nobody.pw_uid, nobody.pw_gid, mode), p


@as_root
def test_a_key_store_root_kept_stops_the_correction_servers_user_at_start(tmp_path):
    """What the issue found: provisioning as root left a root-owned 0600 key store that the
    correction server's user cannot read. Now it says so at start, one line, rc 2."""
    nobody = pwd.getpwnam("nobody")
    cs = tmp_path / "cs"
    KeyStore(cs / "correction-keys").add_device(1)           # root's own, as before the fix
    os.chown(tmp_path, nobody.pw_uid, nobody.pw_gid)
    os.chown(cs, nobody.pw_uid, nobody.pw_gid)
    os.chown(cs / "correction-keys", nobody.pw_uid, nobody.pw_gid)
    if subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "pass"]).returncode != 0:
        pytest.skip("user nobody cannot run this checkout's Python")
    r = subprocess.run(["runuser", "-u", "nobody", "--", "env", "PYTHONPATH=%s" % ROOT, "DPSENSE_BROKER_PASSWORD=x",
                        sys.executable, "-m", "dpsense.cloud.cli", "correction-server", "--data-dir", str(cs),
                        "--w-o", "5"], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and str(cs / "correction-keys" / "keys.json") in r.stderr, r.stderr
    assert "--owner" in r.stderr


def test_status_counts_the_correction_servers_dead_letters_by_reason(tmp_path, capsys):
    a, cs = tmp_path / "a", tmp_path / "cs"
    a.mkdir()
    open_analyst_store("sqlite:///%s" % (a / "analyst.db")).close()
    KeyStore.for_data_dir(cs).check_readable()
    now = time.time()
    with open_correction_store("sqlite:///%s" % (cs / "correction.db")) as c:
        c.add_batch([], [DeadLetter("dpsense/corrections", bytes([1, 3, 0, 0, d]), "no key for device %d "
                                    "(tools/flash.py provision gives it one)" % d, now) for d in (1, 2, 3)]
                    + [DeadLetter("dpsense/corrections", b"\x07", "malformed: not a v1 message", now)])
    assert cli.main(["status", "--data-dir", str(a), "--correction-data-dir", str(cs)]) == 0
    out = capsys.readouterr().out
    assert "correction  0 records, 4 dead letters" in out, out
    assert "dead letters by reason: no key for device N: 3, malformed: not a vN message: 1" in out, out


def test_status_names_keys_left_in_the_analysts_folder(tmp_path, capsys):
    a, cs = tmp_path / "a", tmp_path / "cs"
    provision_keys(a, [1])
    open_analyst_store("sqlite:///%s" % (a / "analyst.db")).close()
    cs.mkdir()
    open_correction_store("sqlite:///%s" % (cs / "correction.db")).close()
    assert cli.main(["status", "--data-dir", str(a), "--correction-data-dir", str(cs)]) == 0
    assert "zones       %s" % (a / "correction-keys" / "keys.json") in capsys.readouterr().out


def test_reasons_group_by_kind_most_first():
    assert group_reasons([("no key for device 7 (hint)", 2), ("replayed nonce 3 of device 1 with different bytes", 1),
                          ("no key for device 9 (hint)", 4)]) == [
        ("no key for device N", 6), ("replayed nonce N of device N with different bytes", 1)]


@as_root
def test_device_accounts_made_by_root_stay_readable_by_the_brokers_user(tmp_path):
    from dpsense.cloud.broker import Broker
    a = tmp_path / "a"
    a.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(a, nobody.pw_uid, nobody.pw_gid)
    b = Broker(a, port=1883)
    b.add_devices([7])
    for name in ("passwd", "acl", "accounts.json"):
        assert (b.dir / name).stat().st_uid == nobody.pw_uid, name
    assert b.dir.stat().st_uid == nobody.pw_uid
