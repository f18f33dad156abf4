"""Fleet simulator rate: readings/s published with QoS 1 until every PUBACK is in.

    .venv/bin/python bench/simulator.py [--n 60000] [--devices 10] [--processes 1 2 3]

One broker, the same pre-encoded records (a reading and its correction record each, so two
messages per reading), nobody subscribed. Rows:
* baseline: one paho client per device, each with its network thread (``loop_start``), all in
  one process: the shape of the fleet publisher before cloud/sim/fleetpub.py;
* ``FleetPublisher`` (cloud/sim/fleetpub.py) with 1, 2, ... worker processes, each driving its
  devices' connections from one thread, publishing records encoded before the clock starts;
* the same with the work of ``dpsense simulate --rate``: its main process perturbs, tokenises,
  seals and encodes (``FleetEncoder`` with the devices' keys, cloud/sim/simulate.py) block by
  block, 1,000 readings a block, handing each block to the workers while they publish the last;
* encode only: ``FleetEncoder`` alone on the same data, no broker (what the rows above add).
The clock runs from the first publish to the last PUBACK; connecting is not timed.
``--rounds`` runs every row that many times, rotating their order, and the table shows medians;
the CPU column is the publisher's CPU time per message (this process, and the workers' once
they have ended), which hardly moves with the load of other jobs, unlike the rates. The load
average (``os.getloadavg``) is printed before and after.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsense.cloud.transport import topics  # noqa: E402
from dpsense.cloud.deploy.broker import Broker, free_port  # noqa: E402
from dpsense.cloud.deploy.config import Settings  # noqa: E402
from dpsense.cloud.sim.datasets import paper1_synthetic  # noqa: E402
from dpsense.cloud.sim.calibration import calibrate  # noqa: E402
from dpsense.cloud.correction.sealed import provision_keys  # noqa: E402
from dpsense.cloud.sim.simulate import Encoded, FleetEncoder, FleetPublisher, encode_fleet  # noqa: E402

BLOCK = 1000


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
    pub = FleetPublisher(settings, passwords, devices, processes=processes, commit_timeout_s=3600.0)
    pub.connect()
    try:
        return pub.publish(enc, wait="broker")
    finally:
        pub.close()


def new_encoder(x: np.ndarray, devices: int, keydir: Path) -> FleetEncoder:
    return FleetEncoder(calibrate(x, "0.5", 0.01), devices, None, 1,
                        keys=provision_keys(keydir, list(range(1, devices + 1))))


def fleet_encoding(settings: Settings, passwords: dict[str, str], x: np.ndarray, devices: int, processes: int,
                   keydir: Path) -> float:
    """As ``dpsense simulate --rate`` at full speed: encode a block, hand it out, encode the next."""
    enc = new_encoder(x, devices, keydir)
    pub = FleetPublisher(settings, passwords, devices, processes=processes, commit_timeout_s=3600.0)
    pub.connect()
    try:
        start = pub.acked
        t0 = time.perf_counter()
        for i in range(0, len(x), BLOCK):
            b = enc.encode(x[i:i + BLOCK])
            pub.stream_records([(int(d), r, c) for d, r, c in zip(b.device_ids, b.readings, b.corrections)])
        while pub.acked - start < 2 * len(x):
            time.sleep(0.002)
        return time.perf_counter() - t0
    finally:
        pub.close()


def encode_only(x: np.ndarray, devices: int, keydir: Path) -> float:
    enc = new_encoder(x, devices, keydir)
    t0 = time.perf_counter()
    for i in range(0, len(x), BLOCK):
        enc.encode(x[i:i + BLOCK])
    return time.perf_counter() - t0


def _cpu() -> float:
    """CPU seconds of this process and of its ended children (the fleet's workers; the broker
    is waited for only at the end of the run)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60_000, help="readings per row (default 60000)")
    ap.add_argument("--devices", type=int, default=10)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--rounds", type=int, default=3, help="runs of every row (default 3; medians shown)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpsense-bench-"))
    settings = Settings(data_dir=tmp, broker_port=free_port())
    broker = Broker(tmp, port=settings.broker_port)
    passwords = broker.add_devices(list(range(1, args.devices + 1)))
    data = paper1_synthetic(args.n, 220, seed=1)
    enc = encode_fleet(data.x, calibrate(data.x, "0.5", 0.01), args.devices, seed=None)
    procs = ["%d worker process%s" % (p, "" if p == 1 else "es") for p in args.processes]
    names = (["baseline: %d paho clients with loop_start, one process, pre-encoded" % args.devices]
             + ["FleetPublisher, %s, pre-encoded" % p for p in procs]
             + ["FleetPublisher, %s, perturb + seal + encode in the loop (simulate --rate)" % p for p in procs]
             + ["encode only: perturb + seal + encode, no broker"])
    k = len(args.processes)
    secs: list[list[float]] = [[] for _ in names]
    cpus: list[list[float]] = [[] for _ in names]
    load_before = os.getloadavg()
    with broker.running():
        for r in range(args.rounds):
            rows = list(range(len(names)))
            for i in rows[r % len(rows):] + rows[:r % len(rows)]:
                c0 = _cpu()
                if i == 0:
                    t = threaded_baseline(broker, passwords, enc, args.devices)
                elif i <= k:
                    t = fleet(settings, passwords, enc, args.devices, args.processes[i - 1])
                elif i <= 2 * k:
                    t = fleet_encoding(settings, passwords, data.x, args.devices, args.processes[i - 1 - k],
                                       tmp / ("keys-%d-%d" % (r, i)))
                else:
                    t = encode_only(data.x, args.devices, tmp / ("keys-%d-%d" % (r, i)))
                secs[i].append(t)
                cpus[i].append(_cpu() - c0)
    load_after = os.getloadavg()
    n = args.n
    med = [statistics.median(v) for v in secs]
    print("\nFleet simulator: %d readings (+%d correction records) from %d devices, QoS 1, every PUBACK "
          "awaited, nobody subscribed (median of %d)\n" % (n, n, args.devices, args.rounds))
    print("| publisher | seconds | readings/s | messages/s | vs baseline | vs pre-encoded, same workers "
          "| CPU µs/message |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for i, (name, t, c) in enumerate(zip(names, med, cpus)):
        same = "%.2fx" % (med[i - k] / t) if k < i <= 2 * k else "-"
        print("| %s | %.2f | %.0f | %.0f | %.2fx | %s | %.1f |"
              % (name, t, n / t, 2 * n / t, med[0] / t, same, 1e6 * statistics.median(c) / (2 * n)))
    print("\nall runs (readings/s): %s" % "; ".join(
        "row %d: %s" % (i + 1, " ".join("%.0f" % (n / t) for t in v)) for i, v in enumerate(secs)))
    print("load average (1, 5, 15 min): before %.1f %.1f %.1f; after %.1f %.1f %.1f"
          % (*load_before, *load_after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
