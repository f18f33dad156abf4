"""Two trust zones, two folders (docs/operating.md, "Two trust zones"): where the correction keys
go, who refuses a folder holding them in the wrong place, who may read them, and how the
failure shows in `dpsense status`."""
from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path

import pytest

from dpsense.cloud import cli
from dpsense.cloud.deploy.config import Settings
from dpsense.cloud.correction.sealed import KeyStore, provision_keys
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.cloud.storage.repository import DeadLetter, group_reasons

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
    from dpsense.cloud.deploy.broker import free_port
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


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_key_store_this_user_cannot_read_stops_the_correction_server_at_start(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DPSENSE_BROKER_PASSWORD", "x")
    store = KeyStore.for_data_dir(tmp_path)
    store.add_device(1)
    store.path.chmod(0)
    try:
        assert cli.main(["correction-server", "--data-dir", str(tmp_path), "--w-o", "5"]) == 2
    finally:
        store.path.chmod(0o600)
    err = _one_line(capsys)
    assert str(store.path) in err and "cannot read it" in err


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
def test_a_key_store_root_kept_is_refused_for_the_correction_servers_user():
    """What the issue found: provisioning as root left a root-owned 0600 key store that the
    correction server's user cannot read. Checked as that user (a child process that drops to
    nobody), the start-up check names the file and the way out."""
    import shutil
    import tempfile
    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(prefix="dpsense-zones-", dir="/tmp"))   # pytest's own tmp is root's 0700
    os.chmod(top, 0o755)
    cs = top / "cs"
    KeyStore(cs / "correction-keys").add_device(1)           # root's own, as before the fix
    for p in (cs, cs / "correction-keys"):
        os.chown(p, nobody.pw_uid, nobody.pw_gid)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child: the correction server's user
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            KeyStore.for_data_dir(cs).check_readable()
            os.write(w, b"ok")
        except BaseException as e:      # noqa: BLE001 - reported to the parent
            os.write(w, ("%s: %s" % (type(e).__name__, e)).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        said = f.read().decode()
    shutil.rmtree(top)
    path = cs / "correction-keys" / "keys.json"
    assert said.startswith("UsageError: key store %s: cannot read it" % path), said
    assert "it belongs to uid 0" in said and "--owner USER" in said


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
    from dpsense.cloud.deploy.broker import Broker
    a = tmp_path / "a"
    a.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(a, nobody.pw_uid, nobody.pw_gid)
    b = Broker(a, port=1883)
    b.add_devices([7])
    for name in ("passwd", "acl", "accounts.json"):
        assert (b.dir / name).stat().st_uid == nobody.pw_uid, name
    assert b.dir.stat().st_uid == nobody.pw_uid


@as_root
def test_flash_provision_as_root_gives_the_key_store_to_owner(tmp_path, capsys):
    """`tools/flash.py provision --owner USER` (the README's systemd layout): the correction
    server's user can read its keys, the analyst's folder gets none."""
    import shutil
    if shutil.which("mosquitto_passwd") is None:
        pytest.skip("Debian package 'mosquitto' is not installed")
    from dpsense.tools import flash
    from dpsense.tools import provision as pv
    conf = tmp_path / "unix.json"
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt")))
    a, cs = tmp_path / "a", tmp_path / "cs"
    nobody = pwd.getpwnam("nobody")
    rc = flash.main(["provision", "--board", "unix", "--port", str(tmp_path / "board"), "--device-id", "7",
                     "--config-json", str(conf), "--data-dir", str(a), "--correction-data-dir", str(cs),
                     "--owner", "nobody"])
    assert rc == 0, capsys.readouterr()
    keys = cs / "correction-keys" / "keys.json"
    for p, mode in ((keys.parent, 0o700), (keys, 0o600)):
        st = p.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (nobody.pw_uid, mode), p
    assert not (a / "correction-keys").exists()
    with pytest.raises(SystemExit, match="--owner no-such-user-x: no such user"):
        flash.main(["provision", "--board", "unix", "--port", str(tmp_path / "board"), "--device-id", "7",
                    "--config-json", str(conf), "--data-dir", str(a), "--owner", "no-such-user-x"])
