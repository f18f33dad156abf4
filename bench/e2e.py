"""End to end: window close to verdict at steady fleet rates, and the cloud's CPU per reading by role.

    .venv/bin/python bench/e2e.py [--rates 1000 3000 5000] [--duration 40] [--devices 100] [--window 5]

One Mosquitto (cloud/deploy/broker.py), one correction server and one analyst with its ingest
threads (SQLite stores, mode bands, tumbling time windows of ``--window`` seconds), each its own
process as `dpsense demo` starts them; then, for each rate, ``dpsense simulate --rate R
--duration D`` (perturb, seal and publish as a board does, wait until the cloud committed every
record). Per rate the table gives:
* latency: ``done_at - end_at`` of every window that ended within the run (after the first,
  which straddles the start), the time from a window's end on the clock to its stored verdicts;
  median, 95th percentile and largest;
* the baseline from the same windows: the analyst's own work on a window (detection + round,
  ``detect_s + round_s``, median), what the latency would be with no queue in front of it;
* CPU µs per reading of each process over the run (``/proc/<pid>/stat``; the simulated fleet,
  publisher and workers, from ``getrusage`` of its ended process tree); the cloud's sum
  (broker + analyst + correction server) gives the readings/s one core sustains, and each role's
  figure the readings/s per core of that role (the scale-out guide, docs/scale-out.md, quotes
  these);
* the physical limit, in the same run: Mosquitto alone relaying QoS 1 messages from
  ``mosquitto_pub`` to ``mosquitto_sub`` (its C clients), two messages per reading as the fleet
  sends them.
A window smaller than the analyst's floor (its minimum window size) is carried into the next, so
a tiny run may have windows that are not done. A rate the machine cannot hold shows as latency
growing from window to window and a simulate that exits non-zero (records not committed within
its timeout). The load average is printed: other jobs on the machine take their share of its
cores.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsense.cloud.deploy.broker import Broker, free_port  # noqa: E402
from dpsense.cloud.storage import open_analyst_store  # noqa: E402
from dpsense.cloud.transport import topics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) of a running process."""
    fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def children_cpu() -> float:
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ch.ru_utime + ch.ru_stime


def service(args: list[str], log: Path, password: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if password is not None:
        env["DPSENSE_BROKER_PASSWORD"] = password
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", *args], env=env, stdout=f, stderr=f)


def wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def c_client_limit(broker: Broker, sub_pw: str, dev: str, dev_pw: str, messages: int) -> tuple[float, int]:
    """Messages/s Mosquitto relays at QoS 1 from ``mosquitto_pub -l`` to ``mosquitto_sub``, and how
    many of ``messages`` arrived (a clean session whose queue outgrows the broker's limits loses
    some). The passwords are on the C clients' command lines: throw-away accounts on loopback."""
    payload = "x" * 39                  # a reading's size on the wire, give or take; 40 with the newline
    with tempfile.TemporaryFile() as out:
        sub = subprocess.Popen(["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-u", "analyst-ingest",
                                "-P", sub_pw, "-q", "1", "-t", topics.READINGS_ALL, "-C", str(messages)],
                               stdout=out, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)                 # subscribed before the first publish
            t0 = time.perf_counter()
            subprocess.run(["mosquitto_pub", "-h", broker.host, "-p", str(broker.port), "-u", dev, "-P", dev_pw,
                            "-q", "1", "-M", "1000", "-t", topics.READINGS % dev, "-l"],
                           input=("\n".join([payload] * messages) + "\n").encode(), check=True, timeout=300)
            last, size = time.perf_counter(), -1
            while sub.poll() is None and time.perf_counter() - last < 5:
                now = os.fstat(out.fileno()).st_size
                if now != size:                 # still arriving
                    size, last = now, time.perf_counter()
                time.sleep(0.05)
            got = os.fstat(out.fileno()).st_size // 40
            return got / (last - t0 if sub.returncode is None else time.perf_counter() - t0), got
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[1000, 3000, 5000], help="readings/s")
    ap.add_argument("--duration", type=float, default=40.0, help="seconds per rate (default 40)")
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--window", type=float, default=5.0, help="seconds per time window (default 5)")
    ap.add_argument("--limit-messages", type=int, default=20_000,
                    help="messages for the Mosquitto-to-C-client row (default 20000)")
    args = ap.parse_args()
    # A stopped benchmark stops what it started (the ExitStack and the finally below run).
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dpsense-bench-")))
        return run(args, tmp, stack)


def run(args: argparse.Namespace, tmp: Path, stack: ExitStack) -> int:
    data = tmp / "data"
    broker = Broker(data, port=free_port(), die_with_parent=True)
    common = ["--data-dir", str(data), "--broker-port", str(broker.port)]
    pw = {role: broker.add_account(role) for role in ("analyst", "correction")}
    limit_dev = args.devices + 1
    limit_pw = broker.add_devices([limit_dev])[topics.device_username(limit_dev)]
    stack.enter_context(broker.running())
    mosq = broker._proc.pid if broker._proc is not None else None
    # Before the services start: the C subscriber logs in as the analyst's ingest account.
    limit = (c_client_limit(broker, pw["analyst"], topics.device_username(limit_dev), limit_pw,
                            args.limit_messages) if shutil.which("mosquitto_sub") else None)
    cs = service(["correction-server", *common, "--correction-mode", "bands"], tmp / "cs.log", pw["correction"])
    an = service(["analyst", *common, "--correction-mode", "bands", "--window", "%gs" % args.window],
                 tmp / "analyst.log", pw["analyst"])
    procs = {"analyst (ingest + detection)": an, "correction server (ingest + rounds)": cs}
    rows: list[dict[str, object]] = []
    load_before = os.getloadavg()
    try:
        wait_for(lambda: (tmp / "analyst.log").read_text().count("ingest: subscribed to") >= 1
                 and "ingest: subscribed to" in (tmp / "cs.log").read_text(), 60, "services did not subscribe")
        for rate in args.rates:
            cpu0 = {k: proc_cpu(p.pid) for k, p in procs.items()}
            b0 = proc_cpu(mosq) if mosq else 0.0
            ch0 = children_cpu()
            t0 = time.time()
            sim = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "simulate", *common,
                                  "--devices", str(args.devices), "--rate", "%g" % rate,
                                  "--duration", "%g" % args.duration],
                                 env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
            t1 = time.time()
            n = int(round(rate * args.duration))
            # The last windows close on the clock; their verdicts follow their rounds.
            with open_analyst_store("sqlite:///%s" % (data / "analyst.db")) as store:
                def settled() -> bool:
                    return (time.time() > t1 + args.window + 1
                            and not any(w.state in ("closed", "held") for w in store.windows()))
                try:
                    wait_for(settled, 120 + 2 * args.window, "no verdict")
                except TimeoutError:
                    pass
                wins = [w for w in store.windows() if t0 + args.window <= w.end <= t1]
            cpu = {k: proc_cpu(p.pid) - cpu0[k] for k, p in procs.items()}
            cpu["broker (Mosquitto)"] = (proc_cpu(mosq) - b0) if mosq else float("nan")
            fleet = children_cpu() - ch0
            done = [w for w in wins if w.state == "done" and w.done_at is not None]
            lat = [w.done_at - w.end for w in done]
            work = [(w.detect_s or 0.0) + (w.round_s or 0.0) for w in done]
            rows.append(dict(rate=rate, n=n, ok=sim.returncode == 0, secs=t1 - t0, windows=len(wins),
                             done=len(done), carried=sum(w.state == "carried" for w in wins), lat=lat,
                             work=work, cpu=cpu, fleet=fleet,
                             err=sim.stderr.strip().splitlines()[-1:] if sim.returncode else []))
    finally:
        for p in (an, cs):
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    load_after = os.getloadavg()
    report(args, rows, limit, load_before, load_after)
    return 0 if all(r["ok"] for r in rows) else 1


def report(args: argparse.Namespace, rows: list[dict], limit: tuple[float, int] | None, load_before: tuple[float, ...],
           load_after: tuple[float, ...]) -> None:
    print("\nEnd to end: %d simulated devices (perturb + seal), Mosquitto, analyst and correction server "
          "(SQLite, mode bands), %g s time windows, %g s per rate\n" % (args.devices, args.window, args.duration))
    print("| offered readings/s | simulate | windows done / carried / all | latency median s | p95 s | max s "
          "| baseline: detection + round, median s |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        lat, work = r["lat"], r["work"]
        print("| %g | %s | %d / %d / %d | %s | %s | %s | %s |" % (
            r["rate"], "all committed" if r["ok"] else "FAILED", r["done"], r["carried"], r["windows"],
            *(("%.2f" % statistics.median(lat), "%.2f" % pct(lat, 0.95), "%.2f" % max(lat)) if lat else ("-",) * 3),
            "%.2f" % statistics.median(work) if work else "-"))
    roles = list(rows[0]["cpu"]) if rows else []
    print("\n| CPU µs per reading | %s |" % " | ".join("%g/s" % r["rate"] for r in rows))
    print("|---|" + "---:|" * len(rows))
    for role in roles:
        print("| %s | %s |" % (role, " | ".join("%.0f" % (1e6 * r["cpu"][role] / r["n"]) for r in rows)))
    cloud = [sum(r["cpu"].values()) / r["n"] for r in rows]
    print("| cloud (the three above) | %s |" % " | ".join("%.0f" % (1e6 * c) for c in cloud))
    print("| simulated fleet (not the cloud) | %s |" % " | ".join("%.0f" % (1e6 * r["fleet"] / r["n"]) for r in rows))
    print("| readings/s one core sustains (cloud) | %s |" % " | ".join("%.0f" % (1 / c) for c in cloud))
    kept = [r for r in rows if r["ok"]]
    if kept:
        # Only a rate the cloud kept up with: at the others not every offered reading was stored.
        best = kept[-1]
        print("\nper core by role, at %g/s (the highest rate every record was committed): %s" % (best["rate"], "; ".join(
            "%s %.0f readings/s" % (k.split(" (")[0], best["n"] / v) for k, v in best["cpu"].items() if v > 0)))
    else:
        print("\nper core by role: no rate had every record committed")
    if limit is not None:
        print("physical limit: Mosquitto relays %.0f QoS 1 messages/s from mosquitto_pub to mosquitto_sub "
              "(%.0f readings/s at two messages each; %d of %d messages arrived)"
              % (limit[0], limit[0] / 2, limit[1], args.limit_messages))
    for r in rows:
        if r["err"]:
            print("simulate at %g/s: %s" % (r["rate"], r["err"][0]))
    print("load average (1, 5, 15 min): before %.1f %.1f %.1f; after %.1f %.1f %.1f" % (*load_before, *load_after))


if __name__ == "__main__":
    sys.exit(main())
