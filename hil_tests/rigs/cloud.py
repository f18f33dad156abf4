"""The host side every rig shares: Mosquitto (cloud.deploy.broker), both ingest services, a relay.

    cloud = CloudSide(tmp_path / "cloud")
    cloud.start()                              # broker, `dpsense ingest` x2, status listener
    user, password = cloud.add_device(7)
    cloud.wait_readings(100, 30)               # rows in the analyst's SQLite database

Ingest runs as the real `dpsense ingest` command (one process per role, each with its
own account and database), so records travel device -> relay -> Mosquitto -> ingest ->
SQLite exactly as in production.
"""
from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from dpsense.cloud.storage.repository import Gap, Reading

from .relay import TcpRelay

ROOT = Path(__file__).resolve().parents[2]


class CloudSide:
    def __init__(self, workdir: Path, bind: str = "127.0.0.1", analyst_url: str | None = None,
                 correction_url: str | None = None) -> None:
        self.dir = Path(workdir)
        self.bind = bind          # where the relays listen for devices
        self.dir.mkdir(parents=True, exist_ok=True)
        self.broker = Broker(self.dir, port=free_port())
        self.analyst_db = self.dir / "analyst.db"
        self.correction_db = self.dir / "correction.db"
        # SQLite files by default; a test may give PostgreSQL URLs (tests/pgserver.py).
        self.analyst_url = analyst_url or "sqlite:///%s" % self.analyst_db
        self.correction_url = correction_url or "sqlite:///%s" % self.correction_db
        self.relay = TcpRelay(self.broker.host, self.broker.port, self.dir / "relay", bind=bind)
        self.tls_relays: list[TcpRelay] = []
        self.passwords: dict[str, str] = {}
        self.status: list[dict] = []
        self._status_lock = threading.Lock()
        self._ingest: dict[str, subprocess.Popen[bytes]] = {}
        self._listener: mqtt.Client | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        # The broker keeps no password in clear: the rig holds them and hands each on.
        self.passwords = {role: self.broker.add_account(role) for role in ("analyst", "correction")}
        self.broker.start()
        for role in ("analyst", "correction"):
            self._start_ingest(role)
        self._listen_status()
        self.relay.start()

    def _start_ingest(self, role: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_BROKER_PASSWORD=self.passwords[role])
        log = open(self.dir / ("ingest-%s.log" % role), "ab")
        with log:
            self._ingest[role] = subprocess.Popen(
                [sys.executable, "-m", "dpsense.cloud.cli", "ingest", "--role", role,
                 "--data-dir", str(self.dir), "--broker-port", str(self.broker.port),
                 "--analyst-db", self.analyst_url,
                 "--correction-db", self.correction_url, "--batch-size", "200"],
                env=env, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT)
        # The subscription must exist before the device publishes, or the broker drops
        # what arrives first: wait for the acknowledged SUBSCRIBE.
        log_path = self.dir / ("ingest-%s.log" % role)
        self.wait(lambda: b"ingest: subscribed" in log_path.read_bytes(), 30,
                  "ingest %s subscribed" % role, log_path)

    def _listen_status(self) -> None:
        # The analyst's own account (no analyst process runs here; its ingest has its own).
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="analyst", protocol=mqtt.MQTTv311)
        c.username_pw_set("analyst", self.passwords["analyst"])
        subscribed = threading.Event()

        def on_connect(client, userdata, flags, reason, props):
            client.subscribe(topics.STATUS_ALL, qos=1)

        def on_message(client, userdata, msg):
            try:
                doc = json.loads(msg.payload.decode())
            except ValueError:
                doc = {"unparsed": msg.payload.decode(errors="replace")}
            doc["_topic"] = msg.topic
            with self._status_lock:
                self.status.append(doc)

        c.on_connect = on_connect
        c.on_subscribe = lambda *a: subscribed.set()
        c.on_message = on_message
        c.connect(self.broker.host, self.broker.port)
        c.loop_start()
        self._listener = c
        if not subscribed.wait(10):
            raise RuntimeError("status listener did not subscribe (log: %s)" % self.broker.log_path)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.disconnect()
            self._listener.loop_stop()
        for p in self._ingest.values():
            p.terminate()
        for p in self._ingest.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.relay.close()
        for r in self.tls_relays:
            r.close()
        self.broker.stop()

    def tls_relay(self, certfile: Path, keyfile: Path) -> TcpRelay:
        """A second relay that terminates TLS with this certificate, in front of the same broker."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(certfile), str(keyfile))
        r = TcpRelay(self.broker.host, self.broker.port, self.dir / ("relay-tls-%d" % len(self.tls_relays)),
                     ctx, self.bind)
        self.tls_relays.append(r)
        r.start()
        return r

    # -- broker outage -------------------------------------------------------------------------
    def stop_broker(self) -> None:
        self.broker.stop()

    def start_broker(self) -> None:
        self.broker.start()

    def kill_broker(self) -> None:
        """kill -9 of Mosquitto (what it had not yet saved is gone), then start it again on the
        same port and store."""
        self.broker.kill()
        self.broker.start()

    def pause_ingest(self, role: str, paused: bool) -> None:
        """SIGSTOP (or SIGCONT) one ingest: the broker queues what arrives meanwhile."""
        os.kill(self._ingest[role].pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def kill_ingest(self, role: str) -> None:
        """kill -9 of one ingest, then start it again on the same store and session."""
        p = self._ingest[role]
        p.kill()
        p.wait()
        self._start_ingest(role)

    def broker_log(self) -> str:
        p = self.broker.log_path
        return p.read_text(errors="replace") if p.exists() else ""

    # -- accounts and data ---------------------------------------------------------------------
    def seal_keys(self, device_id: int) -> bytes:
        """New keys for ``device_id`` in the correction server's key store (as `tools/flash.py
        provision` makes them); the board's key file."""
        from dpsense.cloud.correction.sealed import KeyStore
        return KeyStore.for_data_dir(self.dir).add_device(device_id).to_bytes()

    def plaintext_device(self, device_id: int) -> None:
        """The correction server's plaintext switch for a board without AES (the micro:bit)."""
        from dpsense.cloud.correction.sealed import KeyStore
        KeyStore.for_data_dir(self.dir).set_plaintext(device_id)

    def add_device(self, device_id: int) -> tuple[str, str]:
        # Letters only: the raw-value scan looks for decimal digits in everything sent.
        return self.broker.add_device(device_id, password="hilDevicePassword")

    def readings(self) -> list[Reading]:
        if self.analyst_url.startswith("sqlite") and not self.analyst_db.exists():
            return []
        with open_analyst_store(self.analyst_url) as s:
            return [r for _, r in s.readings_after(0, 10 ** 7)]

    def reading_count(self) -> int:
        if self.analyst_url.startswith("sqlite") and not self.analyst_db.exists():
            return 0
        with open_analyst_store(self.analyst_url) as s:
            return s.count()

    def gaps(self) -> list[Gap]:
        with open_analyst_store(self.analyst_url) as s:
            return s.gaps()

    def dead_letters(self) -> int:
        with open_analyst_store(self.analyst_url) as s:
            return s.dead_letter_count()

    def correction_dead_letters(self) -> list[str]:
        """The correction server's dead letters' reasons."""
        if not self.correction_db.exists():
            return []
        with open_correction_store("sqlite:///%s" % self.correction_db) as s:
            return [d.reason for d in s.dead_letters()]

    def corrections(self, tokens: list[bytes]) -> dict[bytes, int]:
        if self.correction_url.startswith("sqlite") and not self.correction_db.exists():
            return {}
        with open_correction_store(self.correction_url) as s:
            return s.lookup(tokens)

    def correction_count(self) -> int:
        if self.correction_url.startswith("sqlite") and not self.correction_db.exists():
            return 0
        with open_correction_store(self.correction_url) as s:
            return s.count()

    def status_events(self, event: str) -> list[dict]:
        with self._status_lock:
            return [d for d in self.status if d.get("event") == event]

    def wait_readings(self, n: int, timeout: float) -> None:
        """Until ``n`` readings are stored. ``timeout`` bounds a stall, not the whole wait: while
        readings keep arriving the deadline moves (a busy machine, several rigs side by side,
        slows a serial board's stream without stopping it), up to four times ``timeout`` in all."""
        start = last_move = time.monotonic()
        seen = -1

        def done() -> bool:
            nonlocal seen, last_move
            have = self.reading_count()
            if have != seen:
                seen, last_move = have, time.monotonic()
            if have >= n:
                return True
            now = time.monotonic()
            if now - last_move > timeout or now - start > 4 * timeout:
                raise TimeoutError("timed out waiting for %d readings in %s (have %d; %s) (log: %s)"
                                   % (n, self.analyst_db, have, "none new for %.0f s" % (now - last_move)
                                      if now - last_move > timeout else "%.0f s in all" % (now - start),
                                      self.dir / "ingest-analyst.log"))
            return False
        self.wait(done, 5 * timeout, lambda: "%d readings in %s" % (n, self.analyst_db),
                  self.dir / "ingest-analyst.log")

    @staticmethod
    def wait(pred: Callable[[], bool], timeout: float, what: str | Callable[[], str],
             log: Path | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                text = what() if callable(what) else what
                raise TimeoutError("timed out after %.0f s waiting for %s%s"
                                   % (timeout, text, " (log: %s)" % log if log else ""))
            time.sleep(0.05)
