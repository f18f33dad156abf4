"""Fleet simulator rate: readings/s published with QoS 1 until every PUBACK is in.

    .venv/bin/python bench/simulator.py [--n 60000] [--devices 10] [--processes 1 2 3]

One broker, the same pre-encoded records (a reading and its correction record each, so two
messages per reading), nobody subscribed. Rows:
* baseline: one paho client per device, each with its network thread (``loop_start``), all in
  one process: the shape of the fleet publisher before cloud/fleetpub.py;
* ``FleetPublisher`` (cloud/fleetpub.py) with 1, 2, ... worker processes, each driving its
  devices' connections from one thread.
The clock runs from the first publish to the last PUBACK; connecting is not timed.
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
from dpsense.cloud.profile import calibrate  # noqa: E402
from dpsense.cloud.simulate import Encoded, FleetPublisher, encode_fleet  # noqa: E402


def threaded_baseline(broker: Broker, passwords: dict[str, str], enc: Encoded, devices: int) -> float:
    acked = [0]
    lock = threading.Lock()

    def on_publish(*a) -> None:
        with lock:
            acked[0] += 1
    clients = []
    for d in range(1, devices + 1):
        name = topics.device_username(d)
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv311)
        c.username_pw_set(name, passwords[name])
        c.max_inflight_messages_set(1000)
        c.max_queued_messages_set(0)
        c.on_publish = on_publish
        c.connect(broker.host, broker.port)
        c.loop_start()
        clients.append(c)
    while not all(c.is_connected() for c in clients):
        time.sleep(0.01)
    n = len(enc.readings)
    t0 = time.perf_counter()
    for i in range(n):
        d = int(enc.device_ids[i])
        clients[d - 1].publish(topics.READINGS % topics.device_username(d), enc.readings[i], qos=1)
        clients[d - 1].publish(topics.CORRECTIONS, enc.corrections[i], qos=1)
    while acked[0] < 2 * n:
        time.sleep(0.002)
    t = time.perf_counter() - t0
    for c in clients:
        c.disconnect()
        c.loop_stop()
    return t


def fleet(settings: Settings, passwords: dict[str, str], enc: Encoded, devices: int, processes: int) -> float:
    pub = FleetPublisher(settings, passwords, devices, processes=processes)
    pub.connect()
    try:
        return pub.publish(enc)
    finally:
        pub.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60_000, help="readings per row (default 60000)")
    ap.add_argument("--devices", type=int, default=10)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpsense-bench-"))
    settings = Settings(data_dir=tmp, broker_port=free_port())
    broker = Broker(tmp, port=settings.broker_port)
    passwords = broker.add_devices(list(range(1, args.devices + 1)))
    data = paper1_synthetic(args.n, 220, seed=1)
    enc = encode_fleet(data.x, calibrate(data.x, "0.5", 0.01), args.devices, seed=None)
    rows = []
    with broker.running():
        rows.append(("baseline: %d paho clients with loop_start, one process" % args.devices,
                     threaded_baseline(broker, passwords, enc, args.devices)))
        for p in args.processes:
            rows.append(("FleetPublisher, %d worker process%s" % (p, "" if p == 1 else "es"),
                         fleet(settings, passwords, enc, args.devices, p)))
    n = args.n
    base = rows[0][1]
    print("\nFleet simulator: %d readings (+%d correction records) from %d devices, QoS 1, every PUBACK "
          "awaited, nobody subscribed\n" % (n, n, args.devices))
    print("| publisher | seconds | readings/s | messages/s | vs baseline |")
    print("|---|---:|---:|---:|---:|")
    for name, t in rows:
        print("| %s | %.2f | %.0f | %.0f | %.1fx |" % (name, t, n / t, 2 * n / t, base / t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
