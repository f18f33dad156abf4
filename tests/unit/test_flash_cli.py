"""tools/flash.py firmware|provision|verify|all: argument handling, error messages, and the
unix-port path end to end (no hardware here: the board subcommands must fail clearly)."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpsense.tools import flash
from dpsense.tools import provision as pv
from dpsense.tools.deploy import micropython_binary
from dpsense.tools.rawrepl import ReplError


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = flash.main(list(argv))
    except SystemExit as e:          # argparse errors and missing --port
        rc = e.code if isinstance(e.code, int) else 1
        if isinstance(e.code, str):
            print(e.code, file=__import__("sys").stderr)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture()
def image(tmp_path: Path):
    def make(name: str) -> Path:
        p = tmp_path / name
        p.write_bytes(b"\x00" * 64)
        return p
    return make


# -- --help ------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["firmware", "provision", "verify", "all"])
def test_help_shows_an_example_per_board(cmd: str, capsys) -> None:
    with pytest.raises(SystemExit):
        flash.main([cmd, "--help"])
    text = capsys.readouterr().out
    for board in ("esp32", "pico ", "pico_w", "microbit", "qemu-microbit"):
        assert "tools/flash.py %s --board %s" % (cmd, board.strip()) in text, board


def test_all_help_names_the_qemu_flow_and_a_real_esp32(capsys) -> None:
    with pytest.raises(SystemExit):
        flash.main(["all", "--help"])
    text = capsys.readouterr().out
    assert "python tools/flash.py all --board qemu-microbit --device-id 7" in text
    assert "dpsense gateway --port /dev/pts/N --device-id 7" in text
    assert "all --board esp32 --port /dev/ttyUSB0 --image ESP32_GENERIC-" in text


def test_main_help_still_lists_qemu_deploy_exec(capsys) -> None:
    with pytest.raises(SystemExit):
        flash.main(["--help"])
    text = capsys.readouterr().out
    for cmd in ("flash.py qemu", "deploy --board", "exec --port", "all --board qemu-microbit"):
        assert cmd in text


# -- firmware ----------------------------------------------------------------------------

def test_esp32_without_esptool_names_pip_install(capsys, image, monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "esptool" else real(name, *a))
    rc, _, err = run(capsys, "firmware", "--board", "esp32", "--port", "/dev/ttyUSB0",
                     "--image", str(image("ESP32_GENERIC-x.bin")))
    assert rc == 1 and "pip install esptool" in err


def test_esp32_runs_esptool_write_flash_at_0x1000(image, monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    calls = []
    img = image("ESP32_GENERIC-x.bin")
    pv.flash_image("esp32", str(img), "/dev/ttyUSB0", log=lambda s: None,
                   run=lambda cmd: calls.append(cmd) or SimpleNamespace(returncode=0))
    assert calls[0][1:] == ["-m", "esptool", "--port", "/dev/ttyUSB0", "write_flash", "-z",
                            "0x1000", str(img)]
    with pytest.raises(ReplError, match="esptool failed"):
        pv.flash_image("esp32", str(img), "/dev/ttyUSB0", log=lambda s: None,
                       run=lambda cmd: SimpleNamespace(returncode=2))


@pytest.mark.parametrize("argv, message", [
    (["--board", "esp32", "--port", "/dev/ttyUSB0"], "needs --image"),
    (["--board", "esp32", "--port", "/dev/ttyUSB0", "--image", "/nonexistent.bin"], "no such image"),
    (["--board", "unix", "--image", "x"], "no firmware to flash"),
])
def test_firmware_argument_errors(argv, message, capsys) -> None:
    rc, _, err = run(capsys, "firmware", *argv)
    assert rc == 1 and message in err


def test_firmware_wrong_image_kind_and_missing_port(capsys, image) -> None:
    rc, _, err = run(capsys, "firmware", "--board", "pico", "--image", str(image("fw.bin")))
    assert rc == 1 and ".uf2" in err
    rc, _, err = run(capsys, "firmware", "--board", "esp32", "--image", str(image("fw.bin")))
    assert rc == 1 and "needs --port" in err


def test_uf2_and_hex_need_their_drive(capsys, image, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(pv, "find_mount", lambda label, *a: None)
    rc, _, err = run(capsys, "firmware", "--board", "pico_w", "--image", str(image("fw.uf2")))
    assert rc == 1 and "RPI-RP2" in err and "BOOTSEL" in err
    rc, _, err = run(capsys, "firmware", "--board", "microbit", "--image", str(image("fw.hex")))
    assert rc == 1 and "MICROBIT" in err
    drive = tmp_path / "RPI-RP2"
    drive.mkdir()
    rc, out, _ = run(capsys, "firmware", "--board", "pico", "--image", str(image("fw.uf2")),
                     "--mount", str(drive))
    assert rc == 0 and (drive / "fw.uf2").is_file()


def test_find_mount_looks_under_user_folders(tmp_path) -> None:
    (tmp_path / "me" / "MICROBIT").mkdir(parents=True)
    assert pv.find_mount("MICROBIT", (str(tmp_path),)) == tmp_path / "me" / "MICROBIT"
    assert pv.find_mount("RPI-RP2", (str(tmp_path),)) is None


def test_qemu_microbit_firmware_is_debians(capsys) -> None:
    rc, out, _ = run(capsys, "firmware", "--board", "qemu-microbit")
    assert rc == 0 and "firmware.hex" in out and "emulator loads" in out


def test_board_commands_need_a_port(capsys) -> None:
    for cmd in (["provision", "--device-id", "7"], ["verify"], ["all", "--device-id", "7"]):
        rc, _, err = run(capsys, cmd[0], "--board", "esp32", *cmd[1:])
        assert rc == 1 and "needs --port" in err, cmd


# -- provision: the config -------------------------------------------------------------------

def test_mqtt_board_config_gets_identity_and_password() -> None:
    base = dict(pv.DEMO_CONFIG, wifi_ssid="lab", wifi_password="pw")
    cfg = pv.build_config("esp32", base, 7, "secret", "192.168.1.20", 8883, tls_ca=True)
    assert cfg["device_id"] == 7 and cfg["broker_user"] == "d7"
    assert cfg["broker_password"] == "secret" and cfg["broker_host"] == "192.168.1.20"


@pytest.mark.parametrize("board, base, key", [
    ("esp32", dict(pv.DEMO_CONFIG), "wifi_ssid"),
    ("esp32", dict(pv.DEMO_CONFIG, wifi_ssid="x", wifi_password=""), None),
    ("pico", dict(pv.DEMO_CONFIG, epsilon=0.5), "epsilon"),
    ("pico", dict(pv.DEMO_CONFIG, colour=1), "colour"),
    ("unix", dict(pv.DEMO_CONFIG), "stimulus"),
    ("microbit", dict(pv.DEMO_CONFIG, centre=[0]), "centre"),
])
def test_config_errors_name_the_key(board, base, key) -> None:
    if key is None:
        pv.build_config(board, base, 7, "pw", "10.0.0.2", 8883, tls_ca=True)
        return
    with pytest.raises(pv.ProvisionError, match=r"\b%s\b" % key):
        pv.build_config(board, base, 7, "pw", "10.0.0.2", 8883, tls_ca=True)


def test_networked_board_refuses_a_loopback_broker() -> None:
    base = dict(pv.DEMO_CONFIG, wifi_ssid="x", wifi_password="y")
    with pytest.raises(pv.ProvisionError, match="broker_host: 127.0.0.1"):
        pv.build_config("pico_w", base, 7, "pw", "127.0.0.1")


def test_microbit_config_is_mbnodes_subset_without_secrets() -> None:
    cfg = pv.build_config("qemu-microbit", dict(pv.DEMO_CONFIG, broker_password="x"), 9, "pw")
    assert set(cfg) == set(pv.MICROBIT_KEYS) | {"period_ms"}
    assert pv.node_call(cfg).startswith("mbnode.run(9,1,[(1, 1, 0, -5000, 5000, 25), ")
    base = dict(pv.DEMO_CONFIG, window_seconds=60)
    del base["window_records"]
    with pytest.raises(pv.ProvisionError, match="window_seconds"):
        pv.build_config("microbit", base, 9, "pw")


def test_from_profile_may_wrap_the_config(tmp_path) -> None:
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"name": "lab", "config": {"epsilon": "1"}}))
    assert pv.load_base(None, str(p)) == {"epsilon": "1"}
    p.write_text("[1]")
    with pytest.raises(pv.ProvisionError, match="JSON object"):
        pv.load_base(str(p), None)


def test_compare_lists_mismatches() -> None:
    exp = {"a.py": b"x", "b.py": b"y", "c.py": b"z"}
    got = {"a.py": pv.host_digest(b"x", "adler32"), "b.py": "1:00000000"}
    bad = pv.compare(exp, "adler32", got)
    assert bad[0].startswith("b.py: board adler32") and bad[1] == "c.py: missing on the board"


# -- the unix port, end to end -------------------------------------------------------------

needs_tools = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                 reason="Debian package 'mosquitto' is not installed")


@needs_tools
def test_all_on_the_unix_port_then_verify_finds_a_changed_file(tmp_path, capsys) -> None:
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    conf = tmp_path / "unix.json"
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt")))
    board = tmp_path / "board"
    data = tmp_path / "data"
    rc, out, err = run(capsys, "all", "--board", "unix", "--port", str(board), "--device-id", "7",
                       "--config-json", str(conf), "--data-dir", str(data), "--broker-port", "18830")
    assert rc == 0, err
    for step in ("== firmware", "skipped (no --image)", "== deploy", "== provision", "== verify"):
        assert step in out
    assert "MISMATCH" not in out and "config.json" in out and "sha256 matches" in out
    cfg = json.loads((board / "config.json").read_text())
    # The password is in the board's config only (0600): the broker keeps no copy in clear.
    assert len(cfg["broker_password"]) >= 20 and not (data / "broker" / "credentials").exists()
    assert (board / "config.json").stat().st_mode & 0o077 == 0
    assert not [p for p in data.rglob("*") if p.is_file() and cfg["broker_password"].encode() in p.read_bytes()]
    # the unix port imports mpy-cross's output: modules as .mpy, main.py a source
    assert (board / "boards" / "unix.mpy").is_file() and (board / "main.py").is_file()
    rc, out, err = run(capsys, "verify", "--board", "unix", "--port", str(board),
                       "--config", str(board / "config.json"))
    assert rc == 0, err
    (board / "shared_protocol" / "noise.mpy").write_bytes(b"M\x06changed")
    (board / "node.mpy").unlink()
    rc, out, err = run(capsys, "verify", "--board", "unix", "--port", str(board))
    assert rc == 1
    assert "shared_protocol/noise.mpy: board sha256" in out and "node.mpy: missing" in out
    assert "2 file(s) differ" in err


@needs_tools
def test_provisioning_keeps_the_brokers_listener(tmp_path) -> None:
    from dpsense.cloud.deploy.broker import Broker
    from dpsense.cloud.deploy.tls import ServerFiles
    Broker(tmp_path, port=18884, host="0.0.0.0", tls=ServerFiles(tmp_path / "s.pem", tmp_path / "s.key")).write_config()
    pw = pv.add_device_account(tmp_path, 12)
    conf = (tmp_path / "broker" / "mosquitto.conf").read_text()
    assert "listener 18884 0.0.0.0" in conf and "certfile %s" % (tmp_path / "s.pem") in conf
    assert "d12:$7$" in (tmp_path / "broker" / "passwd").read_text() and pw not in conf


@needs_tools
def test_provision_puts_the_brokers_ca_on_an_mqtt_board_as_der(tmp_path, capsys) -> None:
    """--broker-ca (PEM here) becomes ca.der on the board; the config speaks TLS to port 8883
    and names it; a broker off loopback without a CA is refused before anything is written."""
    from dpsense.cloud.deploy import tls
    ca = tls.make_ca(tmp_path / "pki")
    board = tmp_path / "board"
    conf = tmp_path / "unix.json"
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt")))
    rc, out, err = run(capsys, "provision", "--board", "unix", "--port", str(board), "--device-id", "7",
                       "--config-json", str(conf), "--data-dir", str(tmp_path / "data"),
                       "--broker-ca", str(ca.pem), "--broker-host", "localhost")
    assert rc == 0, err
    cfg = json.loads((board / "config.json").read_text())
    assert (cfg["broker_tls"], cfg["broker_ca"], cfg["broker_port"]) == (True, "ca.der", 8883)
    assert (board / "ca.der").read_bytes() == ca.der.read_bytes()
    with pytest.raises(pv.ProvisionError, match="broker_host: 192.168.1.20 is off loopback"):
        pv.build_config("esp32", dict(pv.DEMO_CONFIG, wifi_ssid="x", wifi_password=""), 7, "pw",
                        "192.168.1.20", 1883)


@needs_tools
def test_provision_gives_the_board_and_the_correction_server_the_same_new_keys(tmp_path, capsys) -> None:
    """Keys go to the board (seal.key, 0600, with a fresh ledger) and to the correction server's
    key store, new ones each time; a plain board is provisioned only by name."""
    from dpsense.cloud.correction.sealed import KeyStore
    from dpsense.protocol.ledgerfile import fresh
    board = tmp_path / "board"
    data = tmp_path / "data"
    conf = tmp_path / "unix.json"
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt")))
    args = ["provision", "--board", "unix", "--port", str(board), "--device-id", "7",
            "--config-json", str(conf), "--data-dir", str(data)]
    assert run(capsys, *args)[0] == 0
    first = (board / "seal.key").read_bytes()
    keys = KeyStore.for_data_dir(data)
    assert keys.keys_of(7).to_bytes() == first and len(first) == 48      # type: ignore[union-attr]
    assert (board / "seal.key").stat().st_mode & 0o077 == 0 and keys.path.stat().st_mode & 0o077 == 0
    assert (board / "ledger.bin").read_bytes() == fresh()
    (board / "ledger.bin").write_bytes(b"spent")
    assert run(capsys, *args)[0] == 0
    assert (board / "seal.key").read_bytes() == keys.keys_of(7, fresh=True).to_bytes() != first  # type: ignore[union-attr]
    assert (board / "ledger.bin").read_bytes() == fresh()
    # corrections "plaintext": refused unless named, then the server's switch, and no keys.
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt", corrections="plaintext")))
    (board / "seal.key").unlink()
    rc, out, err = run(capsys, *args)
    assert rc != 0 and "--plaintext-corrections" in err + out
    assert run(capsys, *args, "--plaintext-corrections")[0] == 0
    assert keys.keys_of(7, fresh=True) is None and keys.is_plaintext(7) and not (board / "seal.key").exists()
    # The correction server on a data dir of its own: its key store only, not the broker's dir.
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt")))
    cs = tmp_path / "cs-data"
    assert run(capsys, *args, "--correction-data-dir", str(cs))[0] == 0
    assert KeyStore.for_data_dir(cs).keys_of(7).to_bytes() == (board / "seal.key").read_bytes()  # type: ignore[union-attr]
    assert keys.is_plaintext(7) and keys.keys_of(7, fresh=True) is None


@needs_tools
def test_retire_removes_the_account_and_the_keys_and_refuses_an_unknown_device(tmp_path, capsys) -> None:
    from dpsense.cloud.deploy.broker import Broker
    from dpsense.cloud.correction.sealed import KeyStore
    conf = tmp_path / "unix.json"
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt")))
    data, cs = tmp_path / "a", tmp_path / "cs"
    for d in (7, 8):
        assert run(capsys, "provision", "--board", "unix", "--port", str(tmp_path / ("b%d" % d)),
                   "--device-id", str(d), "--config-json", str(conf), "--data-dir", str(data),
                   "--correction-data-dir", str(cs))[0] == 0
    rc, out, err = run(capsys, "retire", "--device-id", "7", "--data-dir", str(data),
                       "--correction-data-dir", str(cs))
    assert rc == 0, err
    assert "broker account d7 removed; correction-record keys removed" in out
    assert set(Broker(data).accounts()) == {"d8"}
    assert not any(line.startswith("d7:") for line in (data / "broker" / "passwd").read_text().splitlines())
    assert "d8:" in (data / "broker" / "passwd").read_text()
    keys = KeyStore.for_data_dir(cs)
    assert keys.devices() == ([8], []) and keys.path.stat().st_mode & 0o077 == 0
    rc, out, err = run(capsys, "retire", "--device-id", "7", "--data-dir", str(data),
                       "--correction-data-dir", str(cs))
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "device 7 has no broker account" in err


def test_a_board_without_private_noise_needs_no_privacy(tmp_path, capsys) -> None:
    """The micro:bit's noise is a PRNG's (prng_no_dp): provisioning refuses it unless --no-privacy
    says so, and then leaves out epsilon_cs, which its node has not; a board with os.urandom
    refuses the flag."""
    import argparse

    for board in ("microbit", "qemu-microbit"):
        with pytest.raises(SystemExit, match="--no-privacy"):
            flash._no_privacy(argparse.Namespace(board=board, no_privacy=False), dict(pv.DEMO_CONFIG))
        base = flash._no_privacy(argparse.Namespace(board=board, no_privacy=True), dict(pv.DEMO_CONFIG))
        assert "epsilon_cs" not in base and "epsilon_cs" in pv.DEMO_CONFIG
        assert "epsilon_cs" not in pv.microbit_config_text(pv.build_config(board, base, 7, None))
    conf = tmp_path / "unix.json"
    conf.write_text(json.dumps(dict(pv.DEMO_CONFIG, stimulus="readings.txt")))
    rc, out, err = run(capsys, "provision", "--board", "unix", "--port", str(tmp_path / "b"), "--device-id", "7",
                       "--config-json", str(conf), "--data-dir", str(tmp_path / "d"), "--no-privacy")
    assert rc != 0 and "--no-privacy is for a board without a hardware entropy source" in err + out
