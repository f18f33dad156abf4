"""Put dpsense's board code on a MicroPython board, an emulated micro:bit, or a folder.

Run from a checkout as ``python tools/flash.py --help``, or as ``dpsense-flash --help``
where dpsense is installed (the wheel carries the firmware files). The upload machinery
lives in ``tools/deploy.py``; this file is the command line over it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

try:
    import dpsense  # noqa: F401 - the installed project, which a bare `python3` from a checkout lacks
except ModuleNotFoundError:
    if __name__ == "__main__":
        print("flash: the dpsense package is not installed for %s: activate the project's environment "
              "(. .venv/bin/activate; `make setup` creates it) or run .venv/bin/python tools/flash.py"
              % sys.executable, file=sys.stderr)
        sys.exit(2)
    raise

from dpsense.tools.deploy import (
    BOARDS,
    GENERIC_SERIAL,
    MICROBIT_BOOT_FILES,
    MICROBIT_CHECKER,
    MICROBIT_FILES,
    MIP_PACKAGE_JSON,
    Board,
    Log,
    board_uploads,
    check_imports,
    check_imports_unix,
    default_uploads,
    deploy,
    deploy_folder,
    importable,
    micropython_binary,
    mip_package,
    mip_package_text,
    open_board,
)
from dpsense.tools.boardprofile import DEFAULT_PERIOD_MS, DEFAULT_WINDOW_RECORDS
from dpsense.tools.qemu import QemuMicrobit
from dpsense.tools.rawrepl import RawRepl, ReplError


def _prog() -> str:
    """The command as its user typed it: the console script, or the checkout's file."""
    checkout = (Path(__file__).resolve().parents[1] / "pyproject.toml").is_file()
    if Path(sys.argv[0]).name == "dpsense-flash" or not checkout:
        return "dpsense-flash"
    return "python tools/flash.py"


PROG = _prog()


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written, each example spelled as this command is run."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(text.replace("python tools/flash.py", PROG), width, indent)


def _examples(indent: str = "  ") -> str:
    lines = []
    few = "--files rng noise fixedpoint"
    for b in BOARDS.values():
        lines.append("%s# %s" % (indent, b.about))
        if b.name == "microbit":
            lines.append("%spython tools/flash.py deploy --board microbit --port %s %s --check"
                         % (indent, b.example_port, few))
        elif b.name == "qemu-microbit":
            lines.append("%spython tools/flash.py deploy --board qemu-microbit %s --check"
                         % (indent, few))
            lines.append("%spython tools/flash.py deploy --board qemu-microbit --port %s %s"
                         "   # pty from `flash.py qemu`" % (indent, b.example_port, few))
        elif b.name == "unix":
            lines.append("%spython tools/flash.py deploy --board unix --port %s --check"
                         % (indent, b.example_port))
            lines.append("%spython tools/flash.py exec --board unix --port %s "
                         "'import dpsense.protocol.noise'" % (indent, b.example_port))
        else:
            lines.append("%spython tools/flash.py deploy --board %s --port %s --check"
                         % (indent, b.name, b.example_port))
    return "\n".join(lines)


def _main_help() -> str:
    return ("examples, one per board:\n" + _examples() + "\n\n"
            "  # an emulated micro:bit to work against, until Ctrl-C:\n"
            "  python tools/flash.py qemu\n"
            "  # a stand-in ESP32/Pico (the unix port on a pty, files in out/pico), until Ctrl-C:\n"
            "  python tools/flash.py ptyboard --dir out/pico\n"
            "  python tools/flash.py deploy --board pico --port /dev/pts/N --check   # N as printed\n"
            "  # run code on a board:\n"
            "  python tools/flash.py exec --port /dev/ttyACM0 'import gc; print(gc.mem_free())'\n"
            "  python tools/flash.py exec --board qemu-microbit 'print(2 ** 100)'\n\n"
            "flash, deploy, provision and verify in one go (see `all --help`):\n"
            + _all_examples() + "\n")


ESP32_IMAGE = "ESP32_GENERIC-20240602-v1.23.0.bin"
PICO_IMAGE = "RPI_PICO-20240602-v1.23.0.uf2"
PICO_W_IMAGE = "RPI_PICO_W-20240602-v1.23.0.uf2"
MICROBIT_IMAGE = "micropython-microbit-v1.9.2.hex"


def _firmware_examples() -> str:
    return "\n".join([
        "  python tools/flash.py firmware --board esp32 --port /dev/ttyUSB0 --image " + ESP32_IMAGE,
        "      # runs python -m esptool --port /dev/ttyUSB0 write_flash -z 0x1000 IMAGE "
        "(pip install esptool)",
        "  python tools/flash.py firmware --board pico --image %s        # BOOTSEL drive RPI-RP2"
        % PICO_IMAGE,
        "  python tools/flash.py firmware --board pico_w --image %s --mount /media/me/RPI-RP2"
        % PICO_W_IMAGE,
        "  python tools/flash.py firmware --board microbit --image %s   # MICROBIT drive"
        % MICROBIT_IMAGE,
        "  python tools/flash.py firmware --board qemu-microbit   # nothing to do: QEMU loads "
        "Debian's firmware.hex",
    ])


def _provision_examples() -> str:
    return "\n".join([
        "  python tools/flash.py provision --board esp32 --port /dev/ttyUSB0 --device-id 7 "
        "--config-json esp32.json --broker-host 192.168.1.20",
        "  python tools/flash.py provision --board pico_w --port /dev/ttyACM0 --device-id 8 "
        "--from-profile profile.json --broker-host 192.168.1.20",
        "  python tools/flash.py provision --board pico --port /dev/ttyACM0 --device-id 9 "
        "--config-json pico.json",
        "  python tools/flash.py provision --board microbit --port /dev/ttyACM0 --device-id 10 "
        "--plaintext-corrections --no-privacy   # no AES, no hardware RNG in the node",
        "  python tools/flash.py provision --board qemu-microbit --port /dev/pts/3 --device-id 7 "
        "--plaintext-corrections --no-privacy"
        "   # pty from `flash.py qemu`",
        "  python tools/flash.py provision --board unix --port out/unix --device-id 7 "
        "--config-json unix.json",
        "",
        "  esp32.json: firmware/README.md's example keys plus wifi_ssid and wifi_password;",
        "  device_id, broker_host, broker_port, broker_user and broker_password are filled in.",
    ])


def _verify_examples() -> str:
    return "\n".join([
        "  python tools/flash.py verify --board esp32 --port /dev/ttyUSB0      # sha256 on the board",
        "  python tools/flash.py verify --board pico_w --port /dev/ttyACM0",
        "  python tools/flash.py verify --board pico --port /dev/ttyACM0",
        "  python tools/flash.py verify --board microbit --port /dev/ttyACM0   # Adler-32 (no hashlib)",
        "  python tools/flash.py verify --board qemu-microbit --port /dev/pts/3",
        "  python tools/flash.py verify --board unix --port out/unix --config out/unix/config.json",
    ])


def _all_examples() -> str:
    return "\n".join([
        "  # the emulated micro:bit: QEMU, node files, config, checks, then the node runs",
        "  python tools/flash.py all --board qemu-microbit --device-id 7 --plaintext-corrections --no-privacy "
        "--password-file d7.pw",
        "  dpsense gateway --port /dev/pts/N --device-id 7 --password-file d7.pw   # N as printed",
        "  # a real ESP32 (MicroPython image from micropython.org/download/ESP32_GENERIC)",
        "  python tools/flash.py all --board esp32 --port /dev/ttyUSB0 --image %s --device-id 7 "
        "--config-json esp32.json --broker-host broker.lan --broker-ca dpsense-data/broker/tls/ca.pem"
        % ESP32_IMAGE,
        "  # a Pico W (hold BOOTSEL while plugging it in, for the image)",
        "  python tools/flash.py all --board pico_w --port /dev/ttyACM0 --image %s --device-id 8 "
        "--config-json picow.json --broker-host broker.lan --broker-ca dpsense-data/broker/tls/ca.pem"
        % PICO_W_IMAGE,
        "  # a Pico (no radio): then `dpsense gateway --port /dev/ttyACM0 --device-id 9 --password-file d9.pw`",
        "  python tools/flash.py all --board pico --port /dev/ttyACM0 --image %s --device-id 9 "
        "--config-json pico.json --password-file d9.pw" % PICO_IMAGE,
        "  # a real micro:bit v1: then `dpsense gateway --port <printed pty> --device-id 10 --password-file d10.pw`",
        "  python tools/flash.py all --board microbit --port /dev/ttyACM0 --image %s "
        "--device-id 10 --plaintext-corrections --no-privacy --password-file d10.pw" % MICROBIT_IMAGE,
        "  # the unix port, into a folder",
        "  python tools/flash.py all --board unix --port out/unix --device-id 7 --config-json unix.json",
    ])


def build_parser() -> argparse.ArgumentParser:
    fmt = _Formatter
    p = argparse.ArgumentParser(
        prog=PROG.rsplit(" ", 1)[-1], formatter_class=fmt,
        description="Deploy dpsense board code to MicroPython boards and run code on them.",
        epilog=_main_help())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    q = sub.add_parser("qemu", formatter_class=fmt, help="run an emulated micro:bit until Ctrl-C",
                       description="Start the micro:bit MicroPython firmware under QEMU, print its "
                       "serial pty and keep it running until Ctrl-C.",
                       epilog="example:\n  python tools/flash.py qemu\n"
                       "  python tools/flash.py deploy --board qemu-microbit --port /dev/pts/3")
    q.add_argument("--firmware", default=None, help="firmware .hex (default: Debian's)")

    pb = sub.add_parser("ptyboard", formatter_class=fmt,
                        help="run a stand-in ESP32/Pico board until Ctrl-C",
                        description="Run the MicroPython unix port as a stand-in board on a "
                        "pseudo-terminal (tools/ptyboard.py), with --dir as its file system: "
                        "raw REPL, soft reset, Ctrl-C and machine.reset() as on a board's USB "
                        "serial. Prints the pty and keeps running until Ctrl-C.",
                        epilog="examples:\n  python tools/flash.py ptyboard --dir out/pico\n"
                        "  python tools/flash.py deploy --board pico --port /dev/pts/N --check\n"
                        "  python tools/flash.py verify --board pico --port /dev/pts/N\n"
                        "  python tools/flash.py exec --port /dev/pts/N 'import os; "
                        "print(os.listdir())'")
    from dpsense.tools.ptyboard import add_arguments as ptyboard_arguments
    ptyboard_arguments(pb)

    d = sub.add_parser("deploy", formatter_class=fmt, help="copy board code to a board",
                       description="Copy shared_protocol (and firmware/*.py if any) to a board, "
                       "verifying every file on the board. micro:bit boards get flat, shrunk "
                       "files; other boards a shared_protocol/ package folder, each module "
                       "compiled with mpy-cross (.mpy) when the board's MicroPython imports "
                       "that .mpy version (checked on the board; --no-mpy keeps sources).",
                       epilog="examples, one per board:\n" + _examples())
    d.add_argument("--board", required=True, choices=list(BOARDS))
    d.add_argument("--port", help="serial device or pty (a folder for --board unix); "
                   "optional for qemu-microbit, which then starts an emulator")
    d.add_argument("--files", nargs="+", metavar="FILE",
                   help="module names (noise) or paths; default: all of shared_protocol/ "
                   "and firmware/ (micro:bit boards: %s, the slim serial node)"
                   % " ".join(MICROBIT_FILES))
    d.add_argument("--shrink", action=argparse.BooleanOptionalAction, default=None,
                   help="strip docstrings and comments (default: on for micro:bit boards)")
    d.add_argument("--mpy", action=argparse.BooleanOptionalAction, default=None,
                   help="upload modules compiled with mpy-cross (.mpy; main.py stays a source); "
                   "default: when the board's MicroPython imports mpy-cross's .mpy version "
                   "(ESP32, Pico and the unix port on v1.19+; never the micro:bit's 1.9.2)")
    d.add_argument("--check", action="store_true",
                   help="afterwards soft-reset, import every module and print gc.mem_free()")
    d.add_argument("--baud", type=int, default=115200)

    e = sub.add_parser("exec", formatter_class=fmt, help="run Python code on a board",
                       description="Run CODE in the board's raw REPL and print its output; "
                       "a device traceback goes to stderr and exits 1.",
                       epilog="examples:\n"
                       "  python tools/flash.py exec --port /dev/ttyACM0 'import os; print(os.listdir())'\n"
                       "  python tools/flash.py exec --board qemu-microbit 'print(2 ** 100)'\n"
                       "  python tools/flash.py exec --board unix --port out/unix "
                       "'import dpsense.protocol.rng'\n"
                       "  echo 'print(1)' | python tools/flash.py exec --port /dev/ttyUSB0 -")
    e.add_argument("code", metavar="CODE", help="Python source, or - to read it from stdin")
    e.add_argument("--board", choices=list(BOARDS), default=None,
                   help="pacing and layout profile (default: generic serial board)")
    e.add_argument("--port", help="serial device or pty (a folder for --board unix)")
    e.add_argument("--timeout", type=float, default=30.0)
    e.add_argument("--baud", type=int, default=115200)

    pj = sub.add_parser("package-json", formatter_class=fmt,
                        help="print or check firmware/package.json, the firmware for mip",
                        description="The firmware as a MicroPython package for mip: every file "
                        "deploy writes by default to a board with folders (shared_protocol/, "
                        "the firmware modules, boards/), as [path on the board, url relative "
                        "to the package.json], and the project's version. Printed on stdout; "
                        "--write puts it in %s, --check exits 1 if that file differs."
                        % MIP_PACKAGE_JSON.name,
                        epilog="examples:\n"
                        "  python tools/flash.py package-json --check\n"
                        "  python tools/flash.py package-json --write\n"
                        "  mpremote mip install --target / firmware/package.json   # a board on USB\n"
                        "  # on a board with network: import mip; "
                        "mip.install('github:OWNER/REPO/firmware/package.json', target='/')")
    pj_mode = pj.add_mutually_exclusive_group()
    pj_mode.add_argument("--write", action="store_true",
                         help="write it next to the firmware (firmware/package.json)")
    pj_mode.add_argument("--check", action="store_true",
                         help="exit 1 when the firmware's package.json is missing or differs")

    def identity(sp: argparse.ArgumentParser, port_required: bool = False) -> None:
        sp.add_argument("--board", required=True, choices=list(BOARDS))
        sp.add_argument("--port", help="serial device or pty (a folder for --board unix); "
                        "optional for qemu-microbit, which then starts an emulator")
        sp.add_argument("--baud", type=int, default=115200)

    def provisioning(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--device-id", type=int, required=True, metavar="N",
                        help="the board's device id; its broker account d<N> is created or reset")
        sp.add_argument("--config-json", metavar="FILE",
                        help="config keys (firmware/README.md); device_id and broker keys are "
                        "filled in. With --from-profile: the board's own keys (stimulus, window, "
                        "columns' raw maps). Default: the two-column example of firmware/README.md")
        sp.add_argument("--from-profile", metavar="PROFILE_JSON",
                        help="a device profile (dpsense curator calibrate, <data dir>/profile.json): "
                        "its epsilon, centre, delta_q and config_id go to the board "
                        "(tools/boardprofile.py); or config keys, or {\"config\": {...}}")
        sp.add_argument("--raw-scale", metavar="S[,S...]", type=lambda t: t.split(","),
                        help="with --from-profile: the profile's units per raw count of the board, "
                        "one per column (default: the board reads quanta)")
        sp.add_argument("--window-records", type=int, metavar="N",
                        help="with --from-profile: readings per privacy window (default %d)"
                        % DEFAULT_WINDOW_RECORDS)
        sp.add_argument("--window-cap", metavar="EPSILON",
                        help="with --from-profile: epsilon per window (default: every reading "
                        "of the window, records x the ledger's charge per record: columns x epsilon "
                        "+ epsilon_cs (+ epsilon_a))")
        sp.add_argument("--period-ms", type=int, metavar="MS",
                        help="with --from-profile: ms between readings (default %d)" % DEFAULT_PERIOD_MS)
        sp.add_argument("--data-dir", default=os.environ.get("DPSENSE_DATA_DIR", "dpsense-data"),
                        help="the cloud's data directory, where the broker keeps its accounts "
                        "(default: $DPSENSE_DATA_DIR or dpsense-data)")
        sp.add_argument("--broker-host", default=os.environ.get("DPSENSE_BROKER_HOST", "127.0.0.1"),
                        help="the broker address written into the config of an MQTT board: "
                        "one the board can reach (default 127.0.0.1, fine for the unix port only)")
        sp.add_argument("--broker-port", type=int, default=None,
                        help="default: $DPSENSE_BROKER_PORT, else 8883 with --broker-ca, else 1883")
        sp.add_argument("--broker-ca", metavar="CA_CERT",
                        help="the broker's CA certificate (PEM or DER, e.g. "
                        "dpsense-data/broker/tls/ca.pem): an MQTT board gets it as ca.der and "
                        "speaks TLS (required for a broker off loopback)")
        sp.add_argument("--correction-data-dir", metavar="DIR",
                        default=os.environ.get("DPSENSE_CORRECTION_DIR") or None,
                        help="the correction server's data directory, whose key store "
                        "(correction-keys/keys.json) gets the board's correction-record keys "
                        "(default: $DPSENSE_CORRECTION_DIR, else --data-dir: one folder for "
                        "both zones). Two zones: the analyst refuses a data dir holding them")
        sp.add_argument("--owner", metavar="USER",
                        help="run as root: give the key store (0600, its folder 0700) to USER, the "
                        "correction server's user (default: the owner of the correction data dir)")
        sp.add_argument("--plaintext-corrections", action="store_true",
                        help="the board sends plain correction records (the micro:bit, which has no "
                        "AES, or a config with corrections \"plaintext\"): the correction server is "
                        "told to accept them from this device, and the broker and a gateway can read "
                        "them (docs/privacy.md). Without it, the board gets keys and seals them")
        sp.add_argument("--no-privacy", action="store_true",
                        help="provision a board whose noise comes from a PRNG (the micro:bit: "
                        "prng_no_dp), which gives no privacy (docs/privacy.md); without it such a board "
                        "is refused. Its config then has no epsilon_cs (its node has none)")
        sp.add_argument("--password-file", metavar="PATH",
                        help="also write the device account's password here (mode 0600), e.g. "
                        "for `dpsense gateway --password-file PATH`; the broker keeps no copy")

    f = sub.add_parser("firmware", formatter_class=fmt, help="flash a MicroPython image",
                       description="Put a MicroPython image on a board: esptool for the ESP32, "
                       "the UF2 drive (RPI-RP2) for a Pico, the MICROBIT drive for a micro:bit.",
                       epilog="examples, one per board:\n" + _firmware_examples())
    identity(f)
    f.add_argument("--image", help="the MicroPython image (.bin, .uf2 or .hex)")
    f.add_argument("--mount", help="the board's USB drive (default: found under /media)")

    pv = sub.add_parser("provision", formatter_class=fmt, help="write the board's config file",
                        description="Build the board's config (checked on the host with "
                        "firmware/config.py's rules and the board's profile; for the micro:bit "
                        "only what mbnode.run takes), create or reset the device's broker account "
                        "d<N>, put its password into the config of an MQTT board, and write "
                        "config.json to the board (a folder for --board unix). A micro:bit gets "
                        "config.txt and checks it itself (firmware/mbcfg.py): a bad key stops "
                        "provisioning with the board's 'config error: <key>: ...' line.",
                        epilog="examples, one per board:\n" + _provision_examples())
    identity(pv)
    provisioning(pv)

    v = sub.add_parser("verify", formatter_class=fmt, help="compare the board's files with the host's",
                       description="Hash every deployed file on the board (sha256 with hashlib; "
                       "Adler-32 in Python where there is no hashlib, as on the micro:bit) and "
                       "compare with the host's files (shrunk where deploy shrinks). Exits 1 "
                       "listing each mismatch.",
                       epilog="examples, one per board:\n" + _verify_examples())
    identity(v)
    v.add_argument("--files", nargs="+", metavar="FILE", help="as for deploy")
    v.add_argument("--shrink", action=argparse.BooleanOptionalAction, default=None)
    v.add_argument("--mpy", action=argparse.BooleanOptionalAction, default=None,
                   help="as for deploy: compare the .mpy files deploy wrote")
    v.add_argument("--config", metavar="FILE",
                   help="also compare config.json on the board with this file")

    a = sub.add_parser("all", formatter_class=fmt, help="firmware, deploy, provision, verify",
                       description="In order: firmware (skipped without --image), deploy, "
                       "provision, verify. On micro:bit boards it then starts the node "
                       "(mbnode.run with the provisioned values) and stays in the foreground: "
                       "it answers the node's '?' requests with stimulus rows (--stimulus, or "
                       "synthetic ones at the config's period_ms) and passes everything the "
                       "board sends to a new pty, printed as 'gateway port: /dev/pts/N', for "
                       "`dpsense gateway --port /dev/pts/N --device-id N`. Ctrl-C stops it "
                       "(and QEMU). Other boards are soft-reset at the end, so main.py starts "
                       "with the new config.",
                       epilog="examples, one per board:\n" + _all_examples())
    identity(a)
    provisioning(a)
    a.add_argument("--image", help="a MicroPython image to flash first (.bin, .uf2, .hex)")
    a.add_argument("--mount", help="the board's USB drive for --image (default: under /media)")
    a.add_argument("--stimulus", metavar="FILE",
                   help="micro:bit boards: rows raw0,raw1,... to feed the node (default: "
                   "synthetic rows, endless)")
    a.add_argument("--rows", type=int, default=None,
                   help="micro:bit boards: stop after this many synthetic rows")
    a.add_argument("--no-run", action="store_true",
                   help="micro:bit boards: do not start the node afterwards")

    r = sub.add_parser("retire", formatter_class=fmt, help="remove a device's account and keys",
                       description="Retire a device: delete its broker account d<N> (a running "
                       "broker re-reads its accounts) and its correction-record keys from the "
                       "correction server's key store. Stored readings and results stay.",
                       epilog="example:\n  %s retire --device-id 7 --data-dir /var/lib/dpsense "
                       "--correction-data-dir /var/lib/dpsense-cs" % _prog())
    r.add_argument("--device-id", type=int, required=True, metavar="N")
    r.add_argument("--data-dir", default=os.environ.get("DPSENSE_DATA_DIR", "dpsense-data"),
                   help="the analyst's data directory, where the broker keeps its accounts")
    r.add_argument("--correction-data-dir", metavar="DIR",
                   default=os.environ.get("DPSENSE_CORRECTION_DIR") or None,
                   help="the correction server's data directory (default: --data-dir)")
    return p


def cmd_retire(args: argparse.Namespace) -> int:
    from dpsense.cloud.deploy.broker import Broker
    from dpsense.cloud.correction.sealed import KeyStore
    account = Broker(args.data_dir).remove_device(args.device_id)
    keys = KeyStore.for_data_dir(args.correction_data_dir or args.data_dir)
    had_keys = keys.remove_device(args.device_id) if keys.path.exists() else False
    if not (account or had_keys):
        raise SystemExit("flash: device %d has no broker account in %s and no keys in %s"
                         % (args.device_id, Path(args.data_dir) / "broker", keys.path))
    print("device %d retired: broker account d%d %s; correction-record keys %s (%s)"
          % (args.device_id, args.device_id, "removed" if account else "was not there",
             "removed" if had_keys else "were not there", keys.path))
    return 0


def cmd_qemu(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    kwargs = {"firmware": args.firmware} if args.firmware else {}
    with QemuMicrobit(**kwargs) as qemu:
        print(qemu.banner.splitlines()[0] if qemu.banner else "MicroPython")
        print("emulated micro:bit on %s (QEMU pid %s); Ctrl-C stops it" % (qemu.pty, qemu.pid))
        print("  %s deploy --board qemu-microbit --port %s" % (PROG, qemu.pty))
        sys.stdout.flush()
        while qemu.running():
            time.sleep(0.5)
        print("QEMU exited", file=sys.stderr)
        return 1


def cmd_ptyboard(args: argparse.Namespace) -> int:
    from dpsense.tools.ptyboard import serve
    return serve(args.dir, args.micropython)


def cmd_deploy(args: argparse.Namespace) -> int:
    board = BOARDS[args.board]
    if not args.port and board.name != "qemu-microbit":
        raise SystemExit("flash: --board %s needs --port (e.g. --port %s)"
                         % (board.name, board.example_port))
    uploads = default_uploads(board, args.files, args.shrink)
    print("deploying %d file(s) to %s%s" % (len(uploads), board.name,
                                            " on %s" % args.port if args.port else ""))
    if board.name == "unix":
        folder = Path(args.port)
        folder.mkdir(parents=True, exist_ok=True)
        uploads = board_uploads(board, uploads, args.mpy, folder=folder)
        deploy_folder(folder, uploads)
        if args.check:
            check_imports_unix(folder, importable(uploads))
        return 0
    with open_board(board, args.port, args.baud) as repl:
        uploads = board_uploads(board, uploads, args.mpy, repl)
        deploy(repl, board, uploads)
        if args.check:
            check_imports(repl, importable(uploads))
            for m in [u.module for u in uploads
                      if u.module in MICROBIT_BOOT_FILES + (MICROBIT_CHECKER,)]:
                check_imports(repl, [m])          # alone, in a boot of its own
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    code = sys.stdin.read() if args.code == "-" else args.code
    board = BOARDS[args.board] if args.board else GENERIC_SERIAL
    if board.name == "unix":
        if not args.port:
            raise SystemExit("flash: --board unix needs --port FOLDER")
        r = subprocess.run([micropython_binary(), "-c", code], cwd=args.port, timeout=args.timeout)
        return r.returncode
    if args.port is None and board.name != "qemu-microbit":
        raise SystemExit("flash: exec needs --port (or --board qemu-microbit)")
    with open_board(board, args.port, args.baud, log=lambda s: print(s, file=sys.stderr)) as repl:
        out, err = repl.exec_raw(code, args.timeout)
    sys.stdout.write(out.decode("utf-8", "replace").replace("\r\n", "\n"))
    if err:
        sys.stderr.write(err.decode("utf-8", "replace").replace("\r\n", "\n"))
        return 1
    return 0


def cmd_package_json(args: argparse.Namespace) -> int:
    text = mip_package_text(mip_package())
    if args.write:
        MIP_PACKAGE_JSON.write_text(text)
        print("wrote %s" % MIP_PACKAGE_JSON)
    elif args.check:
        try:
            ok = MIP_PACKAGE_JSON.read_text() == text
        except FileNotFoundError:
            ok = False
        if not ok:
            print("flash: %s is missing or out of date; run `%s package-json --write`"
                  % (MIP_PACKAGE_JSON, PROG), file=sys.stderr)
            return 1
        print("%s is up to date" % MIP_PACKAGE_JSON)
    else:
        sys.stdout.write(text)
    return 0


def _need_port(board: Board, port: str | None, what: str) -> None:
    if not port and board.name != "qemu-microbit":
        raise SystemExit("flash: %s --board %s needs --port (e.g. --port %s)"
                         % (what, board.name, board.example_port))


def cmd_firmware(args: argparse.Namespace) -> int:
    from dpsense.tools.provision import flash_image
    flash_image(args.board, args.image, args.port, args.mount)
    return 0


def _provision(args: argparse.Namespace, repl: RawRepl | None,
               log: Log = print) -> tuple[str, bytes, dict]:
    """Config built and checked, account (re)made, config file written (and checked by a
    micro:bit itself); its name, bytes and keys."""
    from dpsense.protocol.topics import DEVICE_USER
    from dpsense.tools import provision as pv
    base = _no_privacy(args, _base(args))
    der = _ca_der(args)
    owner = _owner(args.owner)
    mqtt = der is not None and pv.board_profile(args.board)["transport"] == "mqtt"
    # Check the keys before touching the broker or the board.
    cfg = pv.build_config(args.board, base, args.device_id, "unset", args.broker_host,
                          _broker_port(args), mqtt)
    password = pv.add_device_account(args.data_dir, args.device_id)
    cfg = pv.build_config(args.board, base, args.device_id, password, args.broker_host,
                          _broker_port(args), mqtt)
    user = DEVICE_USER % args.device_id
    log("broker account %s created/reset in %s" % (user, Path(args.data_dir) / "broker"))
    if args.password_file:
        from dpsense.cloud.deploy.files import write_private
        write_private(args.password_file, password + "\n")
        log("  its password: %s (mode 0600; the broker keeps no copy)" % args.password_file)
    elif "broker_password" not in cfg:
        # A serial board's gateway logs in for it: the one place the password is shown.
        log("  its password, for `dpsense gateway` (shown once; the broker keeps no copy): %s"
            % password)
    folder = Path(args.port) if args.board == "unix" else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    if mqtt and der is not None:
        ca_name, _ = pv.write_ca(repl, der, folder)
        log("  %-30s %6d bytes  the broker's CA (DER), for broker_ca" % (ca_name, len(der)))
    from dpsense.cloud.correction.sealed import KeyStore
    keys = KeyStore.for_data_dir(args.correction_data_dir or args.data_dir, owner=owner)
    aes = pv.board_profile(args.board).get("aes", True)
    sealed = aes and cfg.get("corrections", "sealed") == "sealed"
    if not sealed and not args.plaintext_corrections:
        raise SystemExit("flash: board %s sends plain correction records (%s): say so with "
                         "--plaintext-corrections (the broker and a gateway can then read them)"
                         % (args.board, "corrections \"plaintext\"" if aes else "no AES"))
    if sealed and args.plaintext_corrections:
        raise SystemExit("flash: --plaintext-corrections with a config that seals (corrections \"sealed\")")
    # New keys for the board and the correction server's key store only, with a fresh ledger.
    seal_key = keys.add_device(args.device_id).to_bytes() if sealed else None
    if sealed:
        cfg.setdefault("seal_key_path", "seal.key")
    name, data = pv.write_config(repl, cfg, folder, args.board, seal_key)
    if sealed:
        log("  %-30s %6d bytes  correction-record keys; the correction server's copy: %s"
            % (cfg["seal_key_path"], len(seal_key or b""), keys.path))
    else:
        keys.set_plaintext(args.device_id)
        log("  correction records: plaintext, accepted from device %d by the correction server (%s)"
            % (args.device_id, keys.path))
    where = folder / name if folder is not None else "%s on the board" % name
    log("  %-30s %6d bytes  verified (%s)" % (where, len(data), ", ".join(sorted(cfg))))
    if name == "config.json":
        log("  a fresh privacy ledger: a new lifetime budget (%s)" % cfg.get("ledger_path", "ledger.bin"))
    if name == "config.txt":
        assert repl is not None
        from dpsense.tools.microbit import check_microbit_config
        check_microbit_config(repl)
        log("  config.txt checked by the board itself (mbcfg, written for the check and "
            "removed after it): ok; mbnode.run's arguments in mbargs.txt")
    return name, data, cfg


def _no_privacy(args: argparse.Namespace, base: dict) -> dict:
    """A board without private noise only with ``--no-privacy``, and then without epsilon_cs
    (a cap of the whole window follows its smaller charge)."""
    from dpsense.tools import provision as pv
    from dpsense.tools.windowcap import drop_charged
    entropy = pv.board_profile(args.board)["entropy"]
    if entropy != "urandom" and not getattr(args, "no_privacy", False):
        raise SystemExit("flash: board %s draws its noise from a PRNG (%s): its readings and d_diff are "
                         "not protected (docs/privacy.md); say so with --no-privacy" % (args.board, entropy))
    if entropy == "urandom" and getattr(args, "no_privacy", False):
        raise SystemExit("flash: --no-privacy is for a board without a hardware entropy source; board %s "
                         "draws from os.urandom" % args.board)
    if entropy != "urandom":
        base = drop_charged(base, ("epsilon_cs",))
    return base


def _base(args: argparse.Namespace) -> dict:
    """The config to provision: --from-profile (with --config-json for the board's keys),
    --config-json, or the example."""
    from dpsense.tools import provision as pv
    if args.from_profile:
        from dpsense.tools.boardprofile import load_board_base
        return load_board_base(args.from_profile, args.config_json, args.raw_scale,
                               args.window_records, args.window_cap, args.period_ms)
    if any(v is not None for v in (args.raw_scale, args.window_records, args.window_cap,
                                   args.period_ms)):
        raise pv.ProvisionError("--raw-scale, --window-records, --window-cap and --period-ms "
                                "go with --from-profile")
    return pv.load_base(args.config_json, None)


def _owner(user: str | None) -> tuple[int, int] | None:
    """``(uid, gid)`` of ``--owner USER``, which only root may give files to (another user)."""
    if user is None:
        return None
    import pwd
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise SystemExit("flash: --owner %s: no such user" % user) from None
    if os.geteuid() not in (0, pw.pw_uid):
        raise SystemExit("flash: --owner %s: only root can give the key store to another user" % user)
    return pw.pw_uid, pw.pw_gid


def _ca_der(args: argparse.Namespace) -> bytes | None:
    if not args.broker_ca:
        return None
    from dpsense.cloud.errors import UsageError
    from dpsense.cloud.deploy.tls import der_of
    try:
        return der_of(Path(args.broker_ca))
    except (OSError, UsageError) as e:
        raise SystemExit("flash: --broker-ca %s: %s" % (args.broker_ca, getattr(e, "strerror", None) or e))


def _broker_port(args: argparse.Namespace) -> int:
    """--broker-port, else DPSENSE_BROKER_PORT, else 8883 with TLS (--broker-ca) or 1883."""
    if args.broker_port is not None:
        return int(args.broker_port)
    env = os.environ.get("DPSENSE_BROKER_PORT")
    return int(env) if env else (8883 if args.broker_ca else 1883)


def cmd_provision(args: argparse.Namespace) -> int:
    board = BOARDS[args.board]
    _need_port(board, args.port, "provision")
    if board.name == "unix":
        _provision(args, None)
        return 0
    with open_board(board, args.port, args.baud) as repl:
        _provision(args, repl)
    return 0


def _verify(board: Board, port: str | None, repl: RawRepl | None, expected: dict[str, bytes],
            log: Log = print) -> list[str]:
    from dpsense.tools import provision as pv
    names = list(expected)
    if board.name == "unix":
        algo, got = pv.folder_digests(Path(port or "."), names, micropython_binary())
    else:
        assert repl is not None
        algo, got = pv.board_digests(repl, names, log)
    bad = pv.compare(expected, algo, got)
    for n in names:
        if not any(b.startswith(n + ":") for b in bad):
            log("  %-30s %s matches" % (n, algo))
    for b in bad:
        log("  MISMATCH " + b)
    return bad


def cmd_verify(args: argparse.Namespace) -> int:
    board = BOARDS[args.board]
    _need_port(board, args.port, "verify")
    uploads = default_uploads(board, args.files, args.shrink)
    config = {}
    if args.config:
        from dpsense.tools import provision as pv
        config[pv.config_name(args.board)] = Path(args.config).read_bytes()
    if board.name == "unix":
        uploads = board_uploads(board, uploads, args.mpy, folder=Path(args.port))
        expected = dict({u.target: u.data for u in uploads}, **config)
        print("verifying %d file(s) on %s" % (len(expected), board.name))
        bad = _verify(board, args.port, None, expected)
    else:
        with open_board(board, args.port, args.baud) as repl:
            uploads = board_uploads(board, uploads, args.mpy, repl)
            expected = dict({u.target: u.data for u in uploads}, **config)
            print("verifying %d file(s) on %s" % (len(expected), board.name))
            bad = _verify(board, args.port, repl, expected)
    if bad:
        print("flash: %d file(s) differ from the host's: %s"
              % (len(bad), ", ".join(b.split(":")[0] for b in bad)), file=sys.stderr)
        return 1
    print("all %d file(s) match" % len(expected))
    return 0


def cmd_all(args: argparse.Namespace) -> int:
    from dpsense.tools import provision as pv
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    board = BOARDS[args.board]
    _need_port(board, args.port, "all")
    t0 = time.monotonic()
    # Fail on a bad config before anything is flashed or written.
    base = _base(args)
    pv.build_config(args.board, base, args.device_id, "unset", args.broker_host, _broker_port(args),
                    args.broker_ca is not None and pv.board_profile(args.board)["transport"] == "mqtt")
    print("== firmware")
    if args.image or board.name == "qemu-microbit":
        pv.flash_image(args.board, args.image, args.port, args.mount)
        if args.image and board.name in ("pico", "pico_w", "microbit"):
            time.sleep(3.0)      # the board reboots and its serial port comes back
    else:
        print("  skipped (no --image): the board keeps the MicroPython it has")
    uploads = default_uploads(board)
    if board.name == "unix":
        folder = Path(args.port)
        folder.mkdir(parents=True, exist_ok=True)
        uploads = board_uploads(board, uploads, None, folder=folder)
        expected = {u.target: u.data for u in uploads}
        print("== deploy: %d file(s) to %s" % (len(uploads), folder))
        deploy_folder(folder, uploads)
        print("== provision")
        name, data, cfg = _provision(args, None)
        expected[name] = data
        print("== verify")
        bad = _verify(board, args.port, None, expected)
        if bad:
            raise ReplError("%d file(s) differ after writing" % len(bad))
        print("done in %.1f s: cd %s && micropython main.py config.json"
              % (time.monotonic() - t0, folder))
        return 0
    with open_board(board, args.port, args.baud) as repl:
        uploads = board_uploads(board, uploads, None, repl)
        expected = {u.target: u.data for u in uploads}
        print("== deploy: %d file(s) to %s" % (len(uploads), board.name))
        deploy(repl, board, uploads)
        print("== provision")
        name, data, cfg = _provision(args, repl)
        expected[name] = data
        print("== verify")
        bad = _verify(board, args.port, repl, expected)
        if bad:
            raise ReplError("%d file(s) differ after writing" % len(bad))
        print("done in %.1f s" % (time.monotonic() - t0))
        if not board.flat:
            repl.exit()
            repl.transport.write(b"\x04")      # soft reset: main.py starts with config.json
            print("board soft-reset: main.py runs with the new config.json%s"
                  % ("; now `dpsense gateway --port %s --device-id %d%s`"
                     % (args.port, args.device_id,
                        " --password-file %s" % args.password_file if args.password_file else "")
                     if board.name == "pico" else ""))
            return 0
        if args.no_run:
            return 0
        period = base.get("period_ms", 1000) / 1000.0
        rows = (pv.read_rows(args.stimulus) if args.stimulus
                else pv.synthetic_rows(cfg, args.rows))
        from dpsense.tools.microbit import NodeBridge
        with NodeBridge(repl, rows, period) as bridge:
            print("== run: mbnode.run(*<mbargs.txt>), arguments %s" % pv.node_call(cfg)[10:])
            print("gateway port: %s" % bridge.pty)
            print("  dpsense gateway --port %s --device-id %d --data-dir %s --broker-port %d%s"
                  % (bridge.pty, args.device_id, args.data_dir, _broker_port(args),
                     " --password-file %s" % args.password_file if args.password_file else ""))
            print("feeding %s every %.3f s; Ctrl-C stops the node%s"
                  % ("rows of %s" % args.stimulus if args.stimulus else "synthetic rows", period,
                     " and QEMU" if not args.port else ""))
            sys.stdout.flush()
            reported = False
            while True:
                time.sleep(0.2)
                if bridge.done.is_set() and not reported:
                    reported = True
                    print("node: stimulus done after %d rows; still relaying until Ctrl-C"
                          % bridge.sent_rows)
                    sys.stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"qemu": cmd_qemu, "ptyboard": cmd_ptyboard, "deploy": cmd_deploy,
               "exec": cmd_exec, "package-json": cmd_package_json, "firmware": cmd_firmware, "provision": cmd_provision,
               "verify": cmd_verify, "all": cmd_all, "retire": cmd_retire}[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except (ReplError, RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        # ValueError includes provision.ProvisionError (a config key) and bad arguments.
        print("flash: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
