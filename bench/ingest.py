"""Ingest capacity: a queue of readings at Mosquitto drained by dpsense ingest and by count-only clients.

    .venv/bin/python bench/ingest.py [--n 50000] [--devices 10] [--rounds 5] [--postgres URL | --no-postgres]

Rows from one run, same broker, same records (the fleet's pre-encoded readings):
* publisher: readings/s of the fleet simulator (cloud/sim/fleetpub.py, QoS 1, every PUBACK awaited)
  while the ingest's session is offline, so the broker queues what it accepts for it;
* drain, count-only on the ingest's own client (the baseline): cloud/transport/mqttio.py's
  ``BufferedClient`` and ``NetworkLoop``, the transport ``IngestService`` runs on, with an
  ``on_message`` that only counts; it reconnects to that persistent session and the clock runs
  from its connect to the n-th reading;
* drain, dpsense ingest: ``IngestService`` reconnects to the same session, stores into SQLite
  (WAL, synchronous=FULL), and into PostgreSQL when there is one, and acknowledges each batch
  only after its commit; the clock runs from its start to the n-th reading committed;
* drain, count-only paho subscriber on paho's stock transport (``loop_start``): what the bench
  compared against before, for reading older figures;
* physical limits: ``mosquitto_sub`` (Mosquitto's C client, QoS 1, the same session) draining the
  queue, and the bare driver inserting the same rows (decoded as the ingest decodes them) into a
  table without a key, one transaction per ingest batch (500): ``executemany`` for sqlite3 (WAL,
  synchronous=FULL), binary COPY for psycopg. No row of dpsense can beat these.
Every drain uses the same account (``analyst-ingest``, whose client id is its name), one after
the other, each after a fresh fill; ``--rounds`` rotates their order and the table shows each
one's median. The load average of the machine (``os.getloadavg``) is printed before and after.
The CPU column is the drain's CPU time (this process's threads; for ``mosquitto_sub`` the child's)
per reading: unlike the rates, it hardly moves with the load other jobs put on the machine.
PostgreSQL: ``--postgres URL`` (a server whose user may CREATE DATABASE), else a throw-away
server (tests/pgserver.py) when the Debian package is installed, else its rows are left out.
The correction records the fleet publishes go to a topic nobody subscribes here and are dropped.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsense.cloud.transport import topics  # noqa: E402
from dpsense.cloud.deploy.broker import Broker, free_port  # noqa: E402
from dpsense.cloud.deploy.config import Settings  # noqa: E402
from dpsense.cloud.sim.datasets import paper1_synthetic  # noqa: E402
from dpsense.cloud.ingest.classify import classify_reading  # noqa: E402
from dpsense.cloud.ingest.service import Connection, IngestService  # noqa: E402
from dpsense.cloud.transport.mqttio import BufferedClient, NetworkLoop  # noqa: E402
from dpsense.cloud.sim.calibration import calibrate  # noqa: E402
from dpsense.cloud.sim.simulate import Encoded, FleetPublisher, encode_fleet  # noqa: E402
from dpsense.cloud.storage import open_analyst_store  # noqa: E402
from dpsense.cloud.storage.repository import pack_values  # noqa: E402

ACCOUNT = "analyst-ingest"
BATCH = 500                 # IngestService's default batch size


def _wait(pred: Callable[[], bool], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark stalled")
        time.sleep(0.002)


def fill(settings: Settings, passwords: dict[str, str], enc: Encoded, devices: int) -> float:
    """Publish every record with QoS 1; seconds until the broker acknowledged each message
    (it then holds the readings for the offline session)."""
    pub = FleetPublisher(settings, passwords, devices, commit_timeout_s=3600.0)
    pub.connect()
    try:
        return pub.publish(enc, wait="broker")
    finally:
        pub.close()


def _paho(password: str, **kw) -> mqtt.Client:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=ACCOUNT, clean_session=False,
                    protocol=mqtt.MQTTv311, **kw)
    c.username_pw_set(ACCOUNT, password)
    return c


def open_session(broker: Broker, password: str) -> None:
    """Make the persistent session and its QoS 1 subscription, then leave it offline."""
    c = _paho(password)
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    c.on_connect = lambda cl, *a: cl.subscribe(topics.READINGS_ALL, qos=1)
    c.connect(broker.host, broker.port)
    c.loop_start()
    if not done.wait(10):
        raise TimeoutError("no SUBACK")
    c.disconnect()
    c.loop_stop()


def drain_count_only(broker: Broker, password: str, n: int) -> float:
    count = [0]
    c = _paho(password)

    def on_message(cl, u, m) -> None:
        count[0] += 1
    c.on_message = on_message
    t0 = time.perf_counter()
    c.connect(broker.host, broker.port)
    c.loop_start()
    _wait(lambda: count[0] >= n)
    t = time.perf_counter() - t0
    c.disconnect()
    c.loop_stop()
    return t


def drain_count_only_buffered(broker: Broker, password: str, n: int) -> float:
    count = [0]
    c = BufferedClient(CallbackAPIVersion.VERSION2, client_id=ACCOUNT, clean_session=False,
                       protocol=mqtt.MQTTv311, coalesce_writes=True)
    c.username_pw_set(ACCOUNT, password)
    c.max_inflight_messages_set(1000)

    def on_message(cl, u, m) -> None:
        count[0] += 1
    c.on_message = on_message
    net = NetworkLoop(c, "bench")
    t0 = time.perf_counter()
    c.connect(broker.host, broker.port)
    net.start()
    _wait(lambda: count[0] >= n)
    t = time.perf_counter() - t0
    net.stop()
    return t


def drain_mosquitto_sub(broker: Broker, password: str, n: int) -> float:
    """Mosquitto's own C client on the same persistent session; exits after the n-th message.
    The password is on its command line: a throw-away account of a broker on loopback."""
    t0 = time.perf_counter()
    subprocess.run(["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-i", ACCOUNT, "-c",
                    "-u", ACCOUNT, "-P", password, "-q", "1", "-t", topics.READINGS_ALL, "-C", str(n), "-N"],
                   stdout=subprocess.DEVNULL, check=True, timeout=600)
    return time.perf_counter() - t0


def drain_ingest(broker: Broker, password: str, n: int, db: str) -> float:
    conn = Connection(broker.host, broker.port, ACCOUNT, password, ACCOUNT)
    stop = threading.Event()
    ready = threading.Event()
    svc: list[IngestService] = []
    t0 = [0.0]

    def run() -> None:
        with open_analyst_store(db) as store:
            s = IngestService.for_analyst(conn, store, log=lambda s: None)
            svc.append(s)
            ready.set()
            t0[0] = time.perf_counter()
            s.run(stop)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    ready.wait(30)
    _wait(lambda: svc[0].stats.stored >= n)
    elapsed = time.perf_counter() - t0[0]
    stop.set()
    t.join(30)
    return elapsed


def rows_of(enc: Encoded) -> list[tuple[object, ...]]:
    """The rows the ingest stores for these readings, decoded as it decodes them."""
    now = time.time()
    out = []
    for d, payload in zip(enc.device_ids, enc.readings):
        r = classify_reading(topics.READINGS % topics.device_username(int(d)), payload, now)
        out.append((r.device_id, r.boot_id, r.seq, r.token, r.config_id, pack_values(r.values), r.topic,
                    r.received_at))
    return out


_PLAIN = ("device_id, boot_id, seq, token, config_id, vals, topic, received_at")


def bare_sqlite(path: Path, rows: list[tuple[object, ...]]) -> float:
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE plain (device_id INTEGER, boot_id INTEGER, seq INTEGER, token BLOB,"
                     " config_id INTEGER, vals BLOB, topic TEXT, received_at REAL)")
        t0 = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO plain VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows[i:i + BATCH])
            conn.execute("COMMIT")
        return time.perf_counter() - t0
    finally:
        conn.close()


def bare_postgres(url: str, rows: list[tuple[object, ...]]) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE plain (device_id bigint, boot_id bigint, seq bigint, token bytea,"
                     " config_id integer, vals bytea, topic text, received_at double precision)")
        t0 = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy("COPY plain (%s) FROM STDIN (FORMAT BINARY)" % _PLAIN) as copy:
                    copy.set_types(["int8", "int8", "int8", "bytea", "int4", "bytea", "text", "float8"])
                    for row in rows[i:i + BATCH]:
                        copy.write_row(row)
        return time.perf_counter() - t0


def _cpu() -> float:
    """CPU seconds of this process's threads and of its ended children (mosquitto_sub; the
    broker and the fleet's workers are waited for elsewhere, outside the timed drains)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


NAMES = {
    "buffered": "drain: count-only on the ingest's client (BufferedClient + NetworkLoop), baseline",
    "ingest": "drain: dpsense ingest -> SQLite, ack after commit",
    "ingest-pg": "drain: dpsense ingest -> PostgreSQL, ack after commit",
    "paho": "drain: count-only on paho's stock transport (loop_start)",
    "csub": "limit: mosquitto_sub (C client) drains the same session",
    "bare-sqlite": "limit: bare sqlite3 executemany of the same rows, no key (WAL, FULL)",
    "bare-pg": "limit: bare psycopg COPY of the same rows, no key",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000, help="readings per fill (default 50000)")
    ap.add_argument("--devices", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5, help="fills per drain (default 5; medians shown)")
    ap.add_argument("--postgres", metavar="URL", help="a server whose user may CREATE DATABASE "
                    "(default: a throw-away server, when PostgreSQL is installed)")
    ap.add_argument("--no-postgres", action="store_true", help="leave the PostgreSQL rows out")
    args = ap.parse_args()
    notes: list[str] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dpsense-bench-")))
        pg = None if args.no_postgres else args.postgres
        if pg is None and not args.no_postgres:
            from tests.pgserver import PostgresNotFound, temporary_postgres
            try:
                pg = stack.enter_context(temporary_postgres())
            except PostgresNotFound as err:
                notes.append("PostgreSQL rows left out: %s" % err)
        return run(args, tmp, pg, notes)


def run(args: argparse.Namespace, tmp: Path, pg: str | None, notes: list[str]) -> int:
    settings = Settings(data_dir=tmp, broker_port=free_port())
    broker = Broker(tmp, port=settings.broker_port)
    password = broker.add_account("analyst")
    passwords = broker.add_devices(list(range(1, args.devices + 1)))
    data = paper1_synthetic(args.n, 220, seed=1)
    enc = encode_fleet(data.x, calibrate(data.x, "0.5", 0.01), args.devices, seed=None)
    rows = rows_of(enc)
    order = ["buffered", "ingest", "paho"]
    if shutil.which("mosquitto_sub"):
        order.append("csub")
    else:
        notes.append("mosquitto_sub row left out: not on PATH (Debian package mosquitto-clients)")
    if pg is not None:
        from tests.pgserver import create_database
        order.append("ingest-pg")
        tag = "%d_%d" % (os.getpid(), int(time.time()))
        dbs = ("dpsense_bench_ingest_%s_%d" % (tag, i) for i in range(10 ** 6))
    pub_s: list[float] = []
    secs: dict[str, list[float]] = {k: [] for k in NAMES}
    cpu: dict[str, list[float]] = {k: [] for k in NAMES}
    load_before = os.getloadavg()
    with broker.running():
        open_session(broker, password)
        for r in range(args.rounds):
            k0 = r % len(order)
            for kind in order[k0:] + order[:k0]:
                pub_s.append(fill(settings, passwords, enc, args.devices))
                c0 = _cpu()
                if kind == "paho":
                    t = drain_count_only(broker, password, args.n)
                elif kind == "buffered":
                    t = drain_count_only_buffered(broker, password, args.n)
                elif kind == "csub":
                    t = drain_mosquitto_sub(broker, password, args.n)
                elif kind == "ingest":
                    # A fresh store per round: every reading is new to it.
                    t = drain_ingest(broker, password, args.n, "sqlite:///%s" % (tmp / ("bench-%d.db" % r)))
                else:
                    t = drain_ingest(broker, password, args.n, create_database(pg, next(dbs)))
                secs[kind].append(t)
                cpu[kind].append(_cpu() - c0)
            c0 = _cpu()
            secs["bare-sqlite"].append(bare_sqlite(tmp / ("bare-%d.db" % r), rows))
            cpu["bare-sqlite"].append(_cpu() - c0)
            if pg is not None:
                c0 = _cpu()
                secs["bare-pg"].append(bare_postgres(create_database(pg, next(dbs)), rows))
                cpu["bare-pg"].append(_cpu() - c0)
    load_after = os.getloadavg()

    n = args.n
    pub = statistics.median(pub_s)
    med = {k: statistics.median(v) for k, v in secs.items() if v}
    base = med["buffered"]
    print("\nIngest capacity: %d readings queued at Mosquitto for a persistent session, then drained "
          "(QoS 1, %d devices, median of %d)\n" % (n, args.devices, args.rounds))
    print("| path | seconds | readings/s | vs baseline | CPU µs/reading |")
    print("|---|---:|---:|---:|---:|")
    print("| publisher: fleet simulator, publish + every PUBACK (fills the queue) | %.2f | %.0f | - | - |"
          % (pub, n / pub))
    for k, name in NAMES.items():
        if k in med:
            print("| %s | %.2f | %.0f | %.0f%% | %.1f |"
                  % (name, med[k], n / med[k], 100 * base / med[k], 1e6 * statistics.median(cpu[k]) / n))
    print("\nall runs (s): %s" % "; ".join("%s %s" % (k, " ".join("%.2f" % t for t in v))
                                          for k, v in secs.items() if v))
    print("ingest / baseline per round: %s" % " ".join(
        "%.0f%%" % (100 * b / i) for b, i in zip(secs["buffered"], secs["ingest"])))
    print("load average (1, 5, 15 min): before %.1f %.1f %.1f; after %.1f %.1f %.1f"
          % (*load_before, *load_after))
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
