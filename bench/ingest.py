"""Ingest capacity: a queue of readings at Mosquitto drained by dpsense ingest and by a bare paho client.

    .venv/bin/python bench/ingest.py [--n 50000] [--devices 10] [--rounds 3]

Rows from one run, same broker, same pre-encoded payloads:
* publisher: readings/s of the fleet simulator (cloud/sim/simulate.py, QoS 1, every PUBACK awaited)
  while the ingest's session is offline, so the broker queues what it accepts for it;
* drain, count-only paho subscriber (the baseline): it reconnects to that persistent session
  (auto-acknowledging QoS 1 client, an ``on_message`` that only counts) and the clock runs from
  its connect to the n-th reading;
* drain, dpsense ingest: ``IngestService`` reconnects to the same session, stores into SQLite
  (WAL, synchronous=FULL) and acknowledges each batch only after its commit; the clock runs from
  its start to the n-th reading committed;
* drain, count-only on the ingest's client (for reading the others, not a target): the
  baseline's counting ``on_message`` on cloud/transport/mqttio.py's ``BufferedClient`` and
  ``NetworkLoop``, the transport the ingest uses; it shows what the ingest's storing and
  acknowledging after commit cost on top of that transport.
Every drain uses the same account (``analyst-ingest``, whose client id is its name), one after
the other, each after a fresh fill; ``--rounds`` rotates their order and the table shows each
one's median. The load average of the machine (``os.getloadavg``) is printed before and after.
The CPU column is this process's CPU time during the drain (every thread; the broker and the
publisher are other processes) per reading: unlike the rates, it hardly moves with the load
other jobs put on the machine.
The correction records the fleet publishes go to a topic nobody subscribes here and are dropped.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsense.cloud.transport import topics  # noqa: E402
from dpsense.cloud.deploy.broker import Broker, free_port  # noqa: E402
from dpsense.cloud.deploy.config import Settings  # noqa: E402
from dpsense.cloud.sim.datasets import paper1_synthetic  # noqa: E402
from dpsense.cloud.ingest.service import Connection, IngestService  # noqa: E402
from dpsense.cloud.transport.mqttio import BufferedClient, NetworkLoop  # noqa: E402
from dpsense.cloud.sim.calibration import calibrate  # noqa: E402
from dpsense.cloud.sim.simulate import FleetPublisher, encode_fleet  # noqa: E402
from dpsense.cloud.storage import open_analyst_store  # noqa: E402

ACCOUNT = "analyst-ingest"


def _wait(pred, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark stalled")
        time.sleep(0.002)


def fill(settings: Settings, passwords: dict[str, str], enc, devices: int) -> float:
    """Publish every record with QoS 1; seconds until the last PUBACK (the broker then holds them)."""
    pub = FleetPublisher(settings, passwords, devices)
    pub.connect()
    try:
        return pub.publish(enc)
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


def drain_ingest(broker: Broker, password: str, n: int, db: Path) -> float:
    conn = Connection(broker.host, broker.port, ACCOUNT, password, ACCOUNT)
    stop = threading.Event()
    ready = threading.Event()
    svc: list[IngestService] = []
    t0 = [0.0]

    def run() -> None:
        with open_analyst_store("sqlite:///%s" % db) as store:
            s = IngestService.for_analyst(conn, store, log=lambda s: None)
            svc.append(s)
            ready.set()
            t0[0] = time.perf_counter()
            s.run(stop)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    ready.wait(10)
    _wait(lambda: svc[0].stats.stored >= n)
    elapsed = time.perf_counter() - t0[0]
    stop.set()
    t.join(30)
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000, help="readings per fill (default 50000)")
    ap.add_argument("--devices", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5, help="fills per drain (default 5; medians shown)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpsense-bench-"))
    settings = Settings(data_dir=tmp, broker_port=free_port())
    broker = Broker(tmp, port=settings.broker_port)
    password = broker.add_account("analyst")
    passwords = broker.add_devices(list(range(1, args.devices + 1)))
    data = paper1_synthetic(args.n, 220, seed=1)
    enc = encode_fleet(data.x, calibrate(data.x, "0.5", 0.01), args.devices, seed=None)
    pub_s: list[float] = []
    drains: dict[str, list[float]] = {"base": [], "ingest": [], "buffered": []}
    cpu: dict[str, list[float]] = {"base": [], "ingest": [], "buffered": []}
    order = ["base", "ingest", "buffered"]
    load_before = os.getloadavg()
    with broker.running():
        open_session(broker, password)
        for r in range(args.rounds):
            for kind in order[r % 3:] + order[:r % 3]:
                pub_s.append(fill(settings, passwords, enc, args.devices))
                c0 = time.process_time()
                if kind == "base":
                    t = drain_count_only(broker, password, args.n)
                elif kind == "buffered":
                    t = drain_count_only_buffered(broker, password, args.n)
                else:
                    # A fresh store per round: every reading is new to it.
                    t = drain_ingest(broker, password, args.n, tmp / ("bench-%d.db" % r))
                drains[kind].append(t)
                cpu[kind].append(time.process_time() - c0)
    load_after = os.getloadavg()

    n = args.n
    pub = statistics.median(pub_s)
    base, ing, buf = (statistics.median(drains[k]) for k in ("base", "ingest", "buffered"))
    us = {k: 1e6 * statistics.median(v) / n for k, v in cpu.items()}
    print("\nIngest capacity: %d readings queued at Mosquitto for a persistent session, then drained "
          "(QoS 1, %d devices, median of %d)\n" % (n, args.devices, args.rounds))
    print("| path | seconds | readings/s | vs baseline | CPU µs/reading |")
    print("|---|---:|---:|---:|---:|")
    print("| publisher: fleet simulator, publish + every PUBACK (fills the queue) | %.2f | %.0f | - | - |"
          % (pub, n / pub))
    print("| drain: count-only paho subscriber (baseline) | %.2f | %.0f | 100%% | %.1f |"
          % (base, n / base, us["base"]))
    print("| drain: dpsense ingest -> SQLite, ack after commit | %.2f | %.0f | %.0f%% | %.1f |"
          % (ing, n / ing, 100 * base / ing, us["ingest"]))
    print("| drain: count-only on the ingest's client (BufferedClient + NetworkLoop) | %.2f | %.0f | %.0f%% | %.1f |"
          % (buf, n / buf, 100 * base / buf, us["buffered"]))
    print("\nall drains (s): %s" % "; ".join("%s %s" % (k, " ".join("%.2f" % t for t in drains[k]))
                                            for k in ("base", "ingest", "buffered")))
    print("ingest / baseline per round: %s" % " ".join(
        "%.0f%%" % (100 * b / i) for b, i in zip(drains["base"], drains["ingest"])))
    print("load average (1, 5, 15 min): before %.1f %.1f %.1f; after %.1f %.1f %.1f"
          % (*load_before, *load_after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
