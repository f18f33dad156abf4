"""`tools/flash.py all --board pico` then `dpsense gateway` on the same port: readings reach
the database, on the stand-in board (tools/ptyboard.py) in a Pico's place.

The two commands of a real Pico (README.md, `flash.py all --help`):

    python tools/flash.py all --board pico --port PTY --device-id 9 --config-json pico.json \\
        --data-dir D --broker-port P        # deploy, provision, verify, soft reset: main.py runs
    dpsense gateway --port PTY --device-id 9 --password-file d9.pw --data-dir D --broker-port P

The gateway opens the port after the board started, as a person would: what the board
wrote before that is gone (a Pico's USB serial drops it too), and its ring resends those
records when their acknowledgements do not come.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.procs import stop
from dpsense.tools.deploy import micropython_binary

ROOT = Path(__file__).resolve().parents[2]
N = 40

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")


def test_flash_all_pico_then_gateway_on_its_port(tmp_path: Path) -> None:
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    from hil_tests.rigs.cloud import CloudSide
    from dpsense.tools.ptyboard import PtyBoard

    conf = tmp_path / "pico.json"
    conf.write_text(json.dumps({
        "board": "pico",                 # the stand-in is the unix port: name the profile
        "config_id": 4, "epsilon": "0.5", "centre": [0, 1650], "window_records": 1000,
        "window_cap": "1000", "period_ms": 20,
        "columns": [{"num": 1, "den": 1, "offset": 0, "raw_min": -5000, "raw_max": 5000, "delta_q": 25},
                    {"num": 3300, "den": 65535, "offset": 0, "raw_min": 0, "raw_max": 65535,
                     "delta_q": 40}],
        "stimulus": [[i * 10 - 200, 30000 + i] for i in range(N)]}))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cloud = CloudSide(tmp_path / "cloud")
    folder = tmp_path / "pico"
    folder.mkdir()
    procs: list[subprocess.Popen] = []
    with PtyBoard(folder) as board:
        try:
            cloud.start()
            r = subprocess.run(
                [sys.executable, "tools/flash.py", "all", "--board", "pico", "--port", board.pty,
                 "--device-id", "9", "--config-json", str(conf), "--data-dir", str(cloud.dir),
                 "--broker-port", str(cloud.broker.port), "--password-file", str(tmp_path / "d9.pw")],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
            for step in ("== deploy", "== provision", "== verify", "board soft-reset"):
                assert step in r.stdout
            assert "compiled" in r.stdout and "MISMATCH" not in r.stdout
            assert "broker_password" not in (folder / "config.json").read_text()
            gw_log = tmp_path / "gateway.log"
            with open(gw_log, "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "dpsense.cloud.cli", "gateway", "--port", board.pty,
                     "--device-id", "9", "--password-file", str(tmp_path / "d9.pw"),
                     "--data-dir", str(cloud.dir),
                     "--broker-port", str(cloud.broker.port)],
                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
            cloud.wait_readings(N, 40)
            cloud.wait(lambda: "console: idle: all %d records acknowledged" % N in gw_log.read_text(),
                       30, "the board's idle line", gw_log)
            rows = cloud.readings()
            assert len(rows) == N
            assert {r.device_id for r in rows} == {9} and {r.config_id for r in rows} == {4}
            assert sorted(r.seq for r in rows) == list(range(N))
            assert len({r.boot_id for r in rows}) == 1
            idle = [ln for ln in gw_log.read_text().splitlines() if "console: idle:" in ln]
            print("pico on the stand-in: %s" % idle[-1])
            # Started before its gateway, the board is heard all the same: it says its boot status
            # until the gateway answers (docs/protocol.md 2.3), and its last seq once its stimulus ends.
            cloud.wait(lambda: bool(cloud.status_events("boot") and cloud.status_events("done")), 30,
                       "the boot and done statuses of a board started before its gateway", gw_log)
            boot = cloud.status_events("boot")[0]
            assert (boot["device"], boot["entropy"], boot["eps_record"], boot["cap"]) == (9, "os.urandom", "1", "1000")
            assert cloud.status_events("done")[-1]["last_seq"] == N - 1
        finally:
            for p in procs:
                stop(p)
            cloud.close()


def test_a_pico_stopped_on_a_config_error_before_its_gateway_is_heard(tmp_path: Path, capsys) -> None:
    """The stand-in Pico powers on with a bad config while no gateway holds its port: it writes
    ``config error: ...`` again with backoff until a gateway answers; the gateway attached later
    logs it and publishes it as the device's status, which ``dpsense status`` shows."""
    try:
        micropython_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    import time

    from dpsense.cloud import cli
    from dpsense.cloud.analyst.devices import classify_status
    from dpsense.cloud.storage import open_analyst_store
    from dpsense.cloud.transport.gateway.relay import Gateway
    from dpsense.cloud.transport.serialport import PtyTransport
    from dpsense.tools.deploy import BOARDS, board_uploads, default_uploads, deploy_folder
    from dpsense.tools.ptyboard import PtyBoard

    folder = tmp_path / "pico"
    folder.mkdir()
    pico = BOARDS["pico"]
    deploy_folder(folder, board_uploads(pico, default_uploads(pico), False, folder=folder), log=lambda s: None)
    (folder / "config.json").write_text(json.dumps({"board": "pico", "device_id": 3}))
    pubs: list[tuple[str, bytes]] = []
    logs: list[str] = []
    with PtyBoard(folder) as board:            # power-on: main.py runs, nobody listens
        time.sleep(2.0)                        # its first lines are lost, as on a Pico's USB serial
        assert board.pty is not None
        port = PtyTransport(board.pty)
        try:
            gw = Gateway(3, lambda t, p: pubs.append((t, p)), logs.append)
            deadline = time.monotonic() + 30
            # Until the board has exited (main.py ended: the REPL's banner) or the deadline.
            while time.monotonic() < deadline and not any('Type "help()"' in ln for ln in logs):
                gw.feed(port.read_some(0.05))
                reply = gw.take_replies()
                if reply:
                    port.write(reply)
        finally:
            port.close()
    said = [ln for ln in logs if ln.startswith("console: config error: ")]
    assert said and said[0] == "console: config error: columns: required", logs
    # Answered, the board stopped saying it and exited (the REPL's banner came next).
    assert len(said) == 1 and 'Type "help()"' in logs[-1], logs
    assert "gateway: d3 stopped: config error: columns: required" in logs
    assert pubs == [("dpsense/status/d3", b'{"event":"stopped","device":3,"error":"config error: columns: required"}')]
    data = tmp_path / "a"
    data.mkdir()
    with open_analyst_store("sqlite:///%s" % (data / "analyst.db")) as store:
        store.add_statuses([classify_status(pubs[0][0], pubs[0][1], time.time())], [])
    assert cli.main(["status", "--data-dir", str(data), "--correction-data-dir", str(tmp_path / "cs")]) == 0
    assert "boards      device 3 stopped: config error: columns: required" in capsys.readouterr().out
