"""The library side of ``tools/flash.py firmware|provision|verify|all``.

    flash_image("esp32", "ESP32_GENERIC-20240602-v1.23.0.bin", "/dev/ttyUSB0")
    cfg = build_config("esp32", base, device_id=7, password=pw, broker_host="192.168.1.20")
    name, data = write_config(repl, cfg, board="esp32")   # config.json on the board
    bad = verify_files(repl, expected)            # {} when every file matches

Config rules are shared_protocol/config.py's own ``validate`` with the board's profile from
firmware/boards/, run on the host, so a provisioning error names its key before anything
is written. The micro:bit gets only what ``mbnode.run`` takes, as ``config.txt``
(firmware/mbcfg.py's format: its heap holds no JSON; ``microbit_config_text``), and no
broker password: the gateway logs in for it; tools/microbit.py has its boots (the board's
own check of that file, each start of the node) and the bridge that feeds it.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from dpsense.tools.rawrepl import RawRepl, RawReplError, ReplError
from dpsense.tools.windowcap import drop_charged

Log = Callable[[str], None]

# The config `provision` starts from when neither --config-json nor --from-profile is
# given: firmware/README.md's example (a ~1.6 V ADC input and a signed sensor), with a
# window cap that lets every reading of the window through (a demo, not a budget).
DEMO_CONFIG: dict[str, Any] = {
    "config_id": 1,
    "columns": [
        {"num": 1, "den": 1, "offset": 0, "raw_min": -5000, "raw_max": 5000, "delta_q": 25},
        {"num": 3300, "den": 65535, "offset": 0, "raw_min": 0, "raw_max": 65535, "delta_q": 40},
    ],
    "epsilon": "0.5",
    # The correction server's default --analyst-epsilon: each record is charged for what a
    # round gives the analyst too, so the caps bound its whole view (shared_protocol/config.py).
    "epsilon_a": "1",
    # Noise on d_diff towards the correction server: dpsense.cloud.deploy.profile.DEFAULT_EPSILON_CS,
    # which the correction server's rules account for (docs/privacy.md).
    "epsilon_cs": "2",
    "centre": [0, 1650],
    "window_records": 600,
    # The whole window (tools/windowcap.py): 600 records x (2 x 0.5 + epsilon_cs 2 + epsilon_a 1),
    # a demo that keeps releasing at 1 reading/s.
    "window_cap": "2400",
    "period_ms": 1000,
}

# Keys of a provisioning file that say nothing about the board's config: a
# profile.json may carry them for the host (the micro:bit's stimulus pacing). The micro:bit's
# node has no epsilon_a (no heap for it; its noise is not private anyway): the cloud's
# accounting adds a round's epsilon for it (cloud/ops/results.py).
MICROBIT_KEYS = ("device_id", "config_id", "columns", "epsilon", "centre", "window_records",
                 "window_cap")
BROKER_KEYS = ("broker_host", "broker_port", "broker_user", "broker_password")
# The broker's CA on an MQTT board, as its config's broker_ca names it.
CA_FILE = "ca.der"

class ProvisionError(ValueError):
    """A config that cannot go to this board; the text names the key."""


def profile_name(board: str) -> str:
    return "microbit" if board == "qemu-microbit" else board


def board_profile(board: str) -> dict[str, Any]:
    """``PROFILE`` of firmware/boards/<board>.py, read on the host from the file a deploy copies
    (the firmware is files for a board, not a package of this Python)."""
    from dpsense.tools.deploy import FIRMWARE_DIR
    path = FIRMWARE_DIR / "boards" / (profile_name(board) + ".py")
    spec = importlib.util.spec_from_file_location("_dpsense_board_" + profile_name(board), path)
    if spec is None or spec.loader is None:
        raise ProvisionError("no board profile at %s" % path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    profile: dict[str, Any] = mod.PROFILE
    return profile


def load_base(config_json: str | None, from_profile: str | None) -> dict[str, Any]:
    """The starting config: a JSON file (config or profile), or ``DEMO_CONFIG``."""
    path = config_json or from_profile
    if path is None:
        return json.loads(json.dumps(DEMO_CONFIG))
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ProvisionError("%s: %s" % (path, e)) from None
    if not isinstance(doc, dict):
        raise ProvisionError("%s: must be a JSON object" % path)
    # A profile may wrap the config as {"config": {...}, ...}.
    if from_profile and isinstance(doc.get("config"), dict):
        doc = doc["config"]
    return doc


def build_config(board: str, base: dict[str, Any], device_id: int, password: str | None,
                 broker_host: str = "127.0.0.1", broker_port: int = 1883,
                 tls_ca: bool = False) -> dict[str, Any]:
    """The config.json for ``board``: ``base`` plus the device's identity and account,
    checked with shared_protocol/config.py's ``validate`` (ProvisionError names the key).
    ``tls_ca``: the board gets the broker's CA as ``CA_FILE`` (``write_ca``) and speaks TLS."""
    from dpsense.protocol.config import ConfigError, validate
    from dpsense.protocol.topics import DEVICE_USER
    profile = board_profile(board)
    raw = dict(base)
    raw["device_id"] = device_id
    host_only = raw.pop("period_ms", None) if profile["name"] == "microbit" else None
    if profile["transport"] == "mqtt":
        if profile["name"] != "unix" and broker_host in ("127.0.0.1", "localhost", "::1"):
            raise ProvisionError("broker_host: %s is this machine's loopback; the %s board needs "
                                 "an address it can reach (give --broker-host, e.g. this "
                                 "machine's LAN address)" % (broker_host, profile["name"]))
        if not tls_ca and not _loopback(broker_host):
            raise ProvisionError("broker_host: %s is off loopback, where the broker speaks TLS only "
                                 "(dpsense broker run --tls): give --broker-ca, the broker's CA "
                                 "(dpsense broker make-ca)" % broker_host)
        raw.update(broker_host=broker_host, broker_port=broker_port,
                   broker_user=DEVICE_USER % device_id, broker_password=password)
        if tls_ca:
            raw.update(broker_tls=True, broker_ca=CA_FILE)
            raw.pop("broker_tls_insecure", None)
    else:
        for k in BROKER_KEYS:
            raw.pop(k, None)
    try:
        validate(raw, profile)
    except ConfigError as e:
        raise ProvisionError("config error for board %s: %s" % (profile["name"], e)) from None
    if profile["name"] == "microbit":
        if "window_seconds" in raw:
            raise ProvisionError("window_seconds: the micro:bit node has no clock for it; "
                                 "give window_records")
        raw = drop_charged(raw, ("epsilon_cs", "epsilon_a"))
        raw = {k: raw[k] for k in MICROBIT_KEYS if k in raw}
        if host_only is not None:
            raw["period_ms"] = host_only
    return raw


def config_bytes(cfg: dict[str, Any]) -> bytes:
    return json.dumps(cfg, separators=(",", ":"), sort_keys=True).encode()


def node_call(cfg: dict[str, Any]) -> str:
    """The ``mbnode.run(...)`` call for a micro:bit config (what firmware/README.md names)."""
    from dpsense.protocol.fixedpoint import parse_decimal
    cols = [(c["num"], c["den"], c.get("offset", 0), c["raw_min"], c["raw_max"], c["delta_q"])
            for c in cfg["columns"]]
    return "mbnode.run(%d,%d,%r,%r,%r,%d,%r)" % (
        cfg["device_id"], cfg.get("config_id", 0), cols, parse_decimal(cfg["epsilon"]),
        list(cfg["centre"]), cfg["window_records"], parse_decimal(cfg["window_cap"]))


def add_device_account(data_dir: str | Path, device_id: int) -> str:
    """Create or reset the broker account ``d<N>``; its password, which the broker keeps
    nowhere in clear: the caller puts it in the board's config or hands it to the gateway.
    A running broker re-reads its accounts; its mosquitto.conf (listener, TLS) is untouched.
    """
    from dpsense.cloud.deploy.broker import Broker
    _, password = Broker(data_dir).add_device(device_id)
    return password


def write_ca(repl: RawRepl | None, der: bytes, folder: Path | None = None) -> tuple[str, bytes]:
    """The broker's CA certificate (DER: MicroPython's mbedTLS loads no PEM) as ``CA_FILE``."""
    if folder is not None:
        (folder / CA_FILE).write_bytes(der)
    else:
        assert repl is not None
        repl.write_file(CA_FILE, der)
    return CA_FILE, der


def _loopback(host: str) -> bool:
    from dpsense.cloud.deploy.broker import is_loopback
    return is_loopback(host)


# -- firmware images -----------------------------------------------------------------------

def find_mount(label: str, roots: Sequence[str] = ("/media", "/run/media", "/mnt")) -> Path | None:
    """A mounted drive named ``label`` (RPI-RP2, MICROBIT) under the usual places."""
    for root in roots:
        r = Path(root)
        if not r.is_dir():
            continue
        for cand in [r / label] + [p / label for p in sorted(r.iterdir()) if p.is_dir()]:
            try:
                if cand.is_dir():
                    return cand
            except OSError:
                continue
    return None


def flash_image(board: str, image: str | None, port: str | None, mount: str | None = None,
                log: Log = print, run: Callable[..., Any] = subprocess.run) -> None:
    """Put a MicroPython image on ``board``; ReplError/ValueError say what is missing."""
    if board == "qemu-microbit":
        from dpsense.tools.qemu import FIRMWARE
        log("qemu-microbit: nothing to flash; the emulator loads Debian's %s itself "
            "(package firmware-microbit-micropython)" % FIRMWARE)
        return
    if board == "unix":
        raise ValueError("--board unix has no firmware to flash (the port is the "
                         "micropython binary; see scripts/setup.sh)")
    if not image:
        raise ValueError("firmware needs --image FILE (a MicroPython image for %s)" % board)
    img = Path(image)
    if not img.is_file():
        raise ValueError("no such image: %s" % image)
    if board == "esp32":
        if not port:
            raise ValueError("--board esp32 needs --port (e.g. --port /dev/ttyUSB0)")
        if img.suffix != ".bin":
            raise ValueError("%s: an ESP32 image is a .bin file (ESP32_GENERIC-*.bin)" % image)
        if importlib.util.find_spec("esptool") is None:
            raise ReplError("esptool is not installed: pip install esptool "
                            "(then run this command again)")
        cmd = [sys.executable, "-m", "esptool", "--port", port, "write_flash", "-z", "0x1000",
               str(img)]
        log("$ " + " ".join(cmd))
        r = run(cmd)
        if r.returncode:
            raise ReplError("esptool failed with exit status %d (is the board on %s? hold "
                            "BOOT while it connects)" % (r.returncode, port))
        return
    if board in ("pico", "pico_w"):
        suffix, label, how = ".uf2", "RPI-RP2", "hold BOOTSEL while plugging the Pico in"
    elif board == "microbit":
        suffix, label, how = ".hex", "MICROBIT", "plug the micro:bit in over USB"
    else:
        raise ValueError("unknown board %r" % board)
    if img.suffix.lower() != suffix:
        raise ValueError("%s: a %s image is a %s file" % (image, board, suffix))
    dest = Path(mount) if mount else find_mount(label)
    if dest is None or not dest.is_dir():
        raise ReplError("no %s drive %s: %s, or give --mount PATH"
                        % (label, "at %s" % mount if mount else "mounted under /media", how))
    log("copying %s to %s" % (img, dest))
    shutil.copyfile(img, dest / img.name)
    log("done: the board reboots into MicroPython when the copy is complete")


# -- writing and verifying files -----------------------------------------------------------

def config_name(board: str) -> str:
    """The config file a board reads: config.txt on the micro:bit, config.json elsewhere."""
    return "config.txt" if board_profile(board)["name"] == "microbit" else "config.json"


def config_file(board: str, cfg: dict[str, Any]) -> tuple[str, bytes]:
    """(file name, bytes) of ``cfg`` for ``board``."""
    if config_name(board) == "config.txt":
        return "config.txt", microbit_config_text(cfg).encode()
    return "config.json", config_bytes(cfg)


def microbit_config_text(cfg: dict[str, Any]) -> str:
    """The micro:bit's ``config.txt`` for a provisioning dict, in firmware/mbcfg.py's format.

    Written as given, without checking: the board's ``mbcfg.load`` validates it and names
    the key of an error (``config error: <key>: ...``), as config.py does for the other
    boards. Every key but those config.py knows and the micro:bit node has no use for (the
    broker password: the gateway logs in for the board; the host's ``period_ms`` and
    ``stimulus``; ring, TLS and Wi-Fi settings); values as JSON, so types stay apart (``0.5`` is
    a number, ``"0.5"`` a string), and ``columns`` key by key (``columns[0].num=1``). A
    key the format cannot hold as it is (``=``, spaces, ``columns[...]`` at the top) is
    written quoted, which the board refuses as an unknown key.
    """
    def key(k: Any, top: bool) -> str:
        s = str(k)
        if (not s or s[0] in "#\"" or (top and s.startswith("columns["))
                or any(c == "=" or not " " < c <= "~" for c in s)):
            s = json.dumps(s).replace("=", "\\u003d")
        return s

    def val(v: Any) -> str:
        if not isinstance(v, tuple):       # JSON has no tuples: json.dumps would make a list
            try:
                return json.dumps(v, separators=(",", ":"))
            except (TypeError, ValueError):
                pass
        return "<%s>" % type(v).__name__   # no JSON value: a type the board accepts nowhere

    from dpsense.protocol.config import KEYS as config_keys
    # Keys the micro:bit's node has no use for are left out; a key it cannot honour
    # (epsilon_cs: no noise on d_diff in its heap) is written so the board refuses it.
    unused = set(config_keys) - set(MICROBIT_KEYS) - {"window_seconds", "broker_host",
                                                     "broker_port", "broker_user", "epsilon_cs"}
    lines = []
    for k, v in cfg.items():
        if k in unused:
            continue
        if k == "columns" and isinstance(v, list) and v:
            for j, col in enumerate(v):
                if isinstance(col, dict) and col:
                    lines += ["columns[%d].%s=%s" % (j, key(ck, False), val(cv))
                              for ck, cv in col.items()]
                else:
                    lines.append("columns[%d]=%s" % (j, val(col)))
        else:
            lines.append("%s=%s" % (key(k, True), val(v)))
    return "".join(line + "\n" for line in lines)


def write_config(repl: RawRepl | None, cfg: dict[str, Any], folder: Path | None = None,
                 board: str = "unix", seal_key: bytes | None = None) -> tuple[str, bytes]:
    """Write ``cfg`` as the board's config file (in ``folder`` for the unix port), and on
    a board with a ledger file a fresh ledger (a new lifetime budget: the board refuses to
    release with a damaged or missing one until this is done again); ``seal_key`` (the
    board's correction-record keys) goes with that fresh ledger, whose counter is the seal's
    nonce: new keys and a counter from 0 always together. The config's name and bytes."""
    from dpsense.protocol.ledgerfile import fresh, microbit_fresh
    name, data = config_file(board, cfg)
    ledgers: dict[str, bytes] = {}
    if name == "config.json":
        path = cfg.get("ledger_path") or board_profile(board).get("ledger_path")
        if path:
            ledgers[path] = fresh()
    else:
        # The micro:bit node's two ledger files (firmware/mbstate.py), both fresh.
        ledgers = {"la": microbit_fresh(), "lb": microbit_fresh()}
    key_path = cfg.get("seal_key_path") if seal_key is not None else None
    if seal_key is not None and not (ledgers and key_path and name == "config.json"):
        raise ValueError("keys go to a board with a ledger and a seal_key_path")
    if folder is not None:
        (folder / name).write_bytes(data)
        os.chmod(folder / name, 0o600)
        if key_path:
            from dpsense.cloud.deploy.files import write_private
            write_private(folder / key_path, seal_key or b"")
        for path, content in ledgers.items():
            (folder / path).write_bytes(content)
    else:
        assert repl is not None
        repl.write_file(name, data)
        if key_path:
            repl.write_file(key_path, seal_key or b"")
        for path, content in ledgers.items():
            repl.write_file(path, content)
    return name, data


_SHA_FN = (
    "import hashlib,binascii\n"
    "def _dps_h(n):\n"
    " h=hashlib.sha256()\n"
    " try:\n"
    "  f=open(n,'rb')\n"
    " except OSError:\n"
    "  print(n,'-');return\n"
    " while 1:\n"
    "  d=f.read(256)\n"
    "  if not d:break\n"
    "  h.update(d)\n"
    " f.close()\n"
    " print(n,binascii.hexlify(h.digest()).decode())\n"
)


def host_digest(data: bytes, algo: str) -> str:
    if algo == "sha256":
        return hashlib.sha256(data).hexdigest()
    v = zlib.adler32(data)
    return "%d:%08x" % (len(data), v)


def board_digests(repl: RawRepl, names: Sequence[str], log: Log = print) -> tuple[str, dict[str, str | None]]:
    """``(algo, {name: digest or None if missing})`` computed on the board."""
    try:
        out = repl.exec(_SHA_FN + "".join("_dps_h(%r)\n" % n for n in names) + "del _dps_h", 60)
    except RawReplError as e:
        if "ImportError" not in e.exception_line:
            raise
        out = None
    if out is not None:
        got: dict[str, str | None] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                got[parts[0]] = None if parts[1] == "-" else parts[1]
        return "sha256", got
    log("  no hashlib on this board: Adler-32, computed in Python on the board")
    got = {}
    for n in names:
        try:
            size, a, b = repl.file_checksum(n)
            got[n] = "%d:%08x" % (size, (b << 16) | a)
        except RawReplError as e:
            if "OSError" not in e.exception_line:     # not "no such file": say what it was
                raise ReplError("checksum of %s failed on the board: %s"
                                % (n, e.exception_line)) from e
            got[n] = None
    return "adler32", got


def folder_digests(folder: Path, names: Sequence[str], micropython: str) -> tuple[str, dict[str, str | None]]:
    """The unix port's "board": the same sha256 code, run by micropython in the folder."""
    code = _SHA_FN + "".join("_dps_h(%r)\n" % n for n in names)
    r = subprocess.run([micropython, "-c", code], cwd=folder, capture_output=True, text=True,
                       timeout=60)
    if r.returncode:
        raise ReplError("hashing under the unix port failed:\n" + r.stderr)
    got: dict[str, str | None] = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            got[parts[0]] = None if parts[1] == "-" else parts[1]
    return "sha256", got


def compare(expected: dict[str, bytes], algo: str, got: dict[str, str | None]) -> list[str]:
    """Mismatches as text lines (empty when every file matches)."""
    bad = []
    for name, data in expected.items():
        want = host_digest(data, algo)
        have = got.get(name)
        if have is None:
            bad.append("%s: missing on the board" % name)
        elif have != want:
            bad.append("%s: board %s %s, host %s" % (name, algo, have, want))
    return bad


# -- the micro:bit node, started and fed from the host -------------------------------------

def synthetic_rows(cfg: dict[str, Any], count: int | None = None) -> Iterator[list[int]]:
    """Readings inside each column's raw range: a slow sine, one in 50 near the top."""
    cols = cfg["columns"]
    i = 0
    while count is None or i < count:
        row = []
        for j, c in enumerate(cols):
            lo, hi = c["raw_min"], c["raw_max"]
            mid, amp = (lo + hi) // 2, (hi - lo) // 8
            v = mid + int(amp * math.sin(i / 10.0 + j))
            if i % 50 == 49:
                v = hi - (hi - lo) // 20
            row.append(v)
        yield row
        i += 1


def read_rows(path: str) -> list[list[int]]:
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            rows.append([int(v) for v in line.split(",")])
        except ValueError:
            raise ValueError("%s:%d: a row is raw0,raw1,... (ints), got %r" % (path, n, line)) from None
    return rows
