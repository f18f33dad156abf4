"""End-to-end ingest throughput: simulated devices -> Mosquitto (QoS 1) -> SQLite.

    .venv/bin/python bench/ingest.py [--n 50000] [--devices 10]

Three rows from one run, same broker, same pre-encoded payloads:
* publisher: readings/s the fleet publisher reaches when nobody subscribes;
* count-only subscriber: a paho client that acknowledges and counts (the baseline);
* dpsense ingest: IngestService, acknowledging each batch only after its SQLite commit.
A reading is counted when it is stored (ingest) or received (baseline); the correction
record published with each reading goes to its own topic and is not counted.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsense.cloud import topics  # noqa: E402
from dpsense.cloud.broker import Broker, free_port  # noqa: E402
from dpsense.cloud.config import Settings  # noqa: E402
from dpsense.cloud.datasets import paper1_synthetic  # noqa: E402
from dpsense.cloud.ingest.service import Connection, IngestService  # noqa: E402
from dpsense.cloud.profile import calibrate  # noqa: E402
from dpsense.cloud.simulate import FleetPublisher, encode_fleet  # noqa: E402
from dpsense.cloud.storage import open_analyst_store  # noqa: E402


def _wait(pred, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark stalled")
        time.sleep(0.005)


def publish(settings: Settings, passwords: dict[str, str], enc, devices: int, done) -> tuple[float, float]:
    """Seconds until the last PUBACK and until ``done()`` holds, both from the first publish."""
    pub = FleetPublisher(settings, passwords, devices)
    pub.connect()
    t0 = time.perf_counter()
    try:
        t_pub = pub.publish(enc)
    finally:
        pub.close()
    _wait(done)
    return t_pub, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000, help="readings per row (default 50000)")
    ap.add_argument("--devices", type=int, default=10)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpsense-bench-"))
    settings = Settings(data_dir=tmp, broker_port=free_port())
    broker = Broker(tmp, port=settings.broker_port)
    analyst_pw = broker.add_account("analyst")
    passwords = broker.add_devices(list(range(1, args.devices + 1)))
    data = paper1_synthetic(args.n, 220, seed=1)
    enc = encode_fleet(data.x, calibrate(data.x, "0.5", 0.01), args.devices, seed=1)
    rows = []
    with broker.running():
        t_pub, _ = publish(settings, passwords, enc, args.devices, lambda: True)
        rows.append(("publisher alone (no subscriber)", t_pub, t_pub))

        count = [0]
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="analyst", protocol=mqtt.MQTTv311)
        c.username_pw_set("analyst", analyst_pw)
        c.on_message = lambda cl, u, m: count.__setitem__(0, count[0] + 1)
        subscribed = threading.Event()
        c.on_subscribe = lambda *a: subscribed.set()
        c.connect(broker.host, broker.port)
        c.loop_start()
        c.subscribe(topics.READINGS_ALL, qos=1)
        subscribed.wait(5)
        t_pub, t_done = publish(settings, passwords, enc, args.devices, lambda: count[0] >= args.n)
        c.disconnect()
        c.loop_stop()
        rows.append(("count-only subscriber (baseline)", t_pub, t_done))

        db = tmp / "bench.db"
        conn = Connection(broker.host, broker.port, "analyst-ingest", analyst_pw, "analyst-ingest")
        svc = IngestService.for_analyst(conn, None, log=lambda s: None)
        stop = threading.Event()

        def run() -> None:
            with open_analyst_store("sqlite:///%s" % db) as store:
                svc.store = store
                svc.run(stop)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        _wait(lambda: svc.session.up.is_set(), 10)
        time.sleep(0.3)
        t_pub, t_done = publish(settings, passwords, enc, args.devices, lambda: svc.stats.stored >= args.n)
        stop.set()
        t.join(10)
        rows.append(("dpsense ingest -> SQLite (ack after commit)", t_pub, t_done))

    base = args.n / rows[1][2]
    print("\nEnd-to-end ingest, %d readings (+%d correction records) from %d devices, QoS 1\n"
          % (args.n, args.n, args.devices))
    print("| path | publish+PUBACK s | all counted/stored s | readings/s | vs baseline |")
    print("|---|---:|---:|---:|---:|")
    for name, tp, td in rows:
        rate = args.n / td
        print("| %s | %.2f | %.2f | %.0f | %s |" % (name, tp, td, rate,
              "%.0f%%" % (100 * rate / base) if "alone" not in name else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
