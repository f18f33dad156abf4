"""Every record stored exactly once while the deployment is hit by faults (issue 24, item 3).

    .venv/bin/python bench/faults.py --readings 30000 --runs 10
    .venv/bin/python bench/faults.py --readings 3000 --runs 1 --faults broker,postgres

Each run is a fresh installation on one Mosquitto and a temporary PostgreSQL server (tests/pgserver.py),
every part its own process as in production: `dpsense ingest --role analyst`, `dpsense ingest --role
correction`, `dpsense analyst --no-ingest`, `dpsense correction-server --no-ingest`, and `dpsense
simulate --rate R --duration N/R` publishing N readings (N correction records) from 10 devices. While
the stream runs, at fixed shares of the readings stored, the faults of ``--faults`` strike in order:

* ``broker``: kill -9 of Mosquitto while it holds messages it acknowledged (both ingests are stopped
  with SIGSTOP for half a second first, so the last second of them is not in its store yet), then
  Mosquitto again on the same port and persistence; ``--faults`` names it twice for two kills;
* ``ingest``: kill -9 of the analyst's ingest, started again on the same session;
* ``analyst``: the correction ingest is stopped (SIGSTOP) until the analyst holds a window for its
  missing correction records, then kill -9 of the analyst, which is started again, and the
  correction ingest resumes;
* ``postgres``: a fast restart of PostgreSQL on the same port (every connection is cut).

Then the run waits for `dpsense simulate` to exit (0 only when the cloud acknowledged every record
as committed) and for the stores to settle, and counts: readings stored and distinct by (device,
boot, seq), correction records stored and distinct by token, missing = N - distinct, duplicates =
rows - distinct, both for readings and corrections (the table shows the worse of the two), and the
windows still held. A run passes with every fault struck while the stream ran, 0 missing,
0 duplicates, 0 dead letters and simulate's rc 0. Prints a
markdown table and exits 1 when any run failed. tests/integration/test_faults.py runs a reduced
size of the same harness.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dpsense.cloud.deploy.broker import Broker, free_port  # noqa: E402
from tests.integration.procs import wait_for as _wait  # noqa: E402

FAULTS = ("broker", "ingest", "analyst", "postgres")
DEFAULT_FAULTS = "broker,ingest,analyst,postgres,broker"
DEVICES = 10


@dataclass
class Result:
    run: int
    readings: int
    planned: int = 0
    stored: int = 0
    duplicates: int = 0
    missing: int = 0
    corrections: int = 0
    held: int = 0
    dead: int = 0
    simulate_rc: int | None = None
    seconds: float = 0.0
    done: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return (self.simulate_rc == 0 and self.missing == 0 and self.duplicates == 0 and self.dead == 0
                and len(self.done) == self.planned)


class Installation:
    """Broker, databases and services of one run, each service its own process."""

    def __init__(self, work: Path, server: object, name: str, window: int) -> None:
        from tests.pgserver import create_database
        self.work = work
        self.server = server
        self.window = window
        url = server.url  # type: ignore[attr-defined]
        self.analyst_db = create_database(url, name + "_a")
        self.correction_db = create_database(url, name + "_c")
        self.dir = work / "data"
        self.broker = Broker(self.dir, port=free_port())
        self.common = ["--data-dir", str(self.dir), "--broker-port", str(self.broker.port),
                       "--analyst-db", self.analyst_db, "--correction-db", self.correction_db]
        self.passwords = {role: self.broker.add_account(role) for role in ("analyst", "correction")}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.broker.start()

    def log(self, name: str) -> str:
        p = self.work / ("%s.log" % name)
        return p.read_text(errors="replace") if p.exists() else ""

    def tail(self, *names: str) -> str:
        return "\n".join("--- %s\n%s" % (n, self.log(n)[-2000:]) for n in names)

    def _spawn(self, name: str, role: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_BROKER_PASSWORD=self.passwords[role])
        with open(self.work / ("%s.log" % name), "ab") as log:
            p = subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", *args, *self.common], env=env,
                                 stdout=log, stderr=log, cwd=ROOT)
        self.procs[name] = p
        return p

    def _ready(self, name: str, role: str, args: Sequence[str], line: str, wait: bool = True,
               timeout: float = 180) -> Callable[[], None]:
        """Start a service; return the wait for its log's ``line`` (already waited for with ``wait``)."""
        before = self.log(name).count(line)
        self._spawn(name, role, args)

        def ready() -> None:
            if not _wait(lambda: self.log(name).count(line) > before, timeout):
                raise RuntimeError("%s did not start: %s" % (name, self.tail(name)))
        if wait:
            ready()
        return ready

    def ingest(self, role: str, wait: bool = True) -> Callable[[], None]:
        return self._ready("%s-ingest" % role, role, ["ingest", "--role", role, "--batch-size", "200"],
                           "ingest: subscribed", wait)

    def analyst(self, wait: bool = True) -> Callable[[], None]:
        return self._ready("analyst", "analyst", ["analyst", "--no-ingest", "--window", str(self.window),
                                                  "--dbscan-min-samples", "10", "--round-timeout", "5",
                                                  "--flush-idle", "3"], "analyst: windows of", wait)

    def correction_server(self, wait: bool = True) -> Callable[[], None]:
        return self._ready("correction", "correction", ["correction-server", "--no-ingest"],
                           "correction server: subscribed", wait)

    def start(self) -> None:
        # Side by side: each is its own process and account; the fleet starts once all are up.
        for ready in [self.correction_server(False), self.ingest("analyst", False),
                      self.ingest("correction", False), self.analyst(False)]:
            ready()

    def simulate(self, readings: int, rate: float, seed: int) -> subprocess.Popen[bytes]:
        return self._spawn("simulate", "analyst", [
            "simulate", "--devices", str(DEVICES), "--rate", str(rate), "--duration", str(readings / rate),
            "--n", "4000", "--epsilon", "2", "--seed", str(seed), "--commit-timeout", "300"])

    def signal(self, name: str, sig: int) -> None:
        self.procs[name].send_signal(sig)

    def kill(self, name: str) -> None:
        p = self.procs[name]
        p.kill()
        p.wait()

    def sql(self, url: str, query: str) -> tuple:
        import psycopg
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(query).fetchone()
        assert row is not None
        return tuple(row)

    def stored(self) -> int:
        try:
            return int(self.sql(self.analyst_db, "SELECT count(*) FROM readings")[0])
        except Exception:  # noqa: BLE001 - the server may be restarting; the caller polls again
            return -1

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.broker.stop()

    # -- the faults ----------------------------------------------------------------------------
    def kill_broker(self) -> str:
        for role in ("analyst", "correction"):
            self.signal("%s-ingest" % role, signal.SIGSTOP)
        time.sleep(0.5)                 # not an assertion: the broker queues what arrives meanwhile
        self.broker.kill()
        for role in ("analyst", "correction"):
            self.signal("%s-ingest" % role, signal.SIGCONT)
        self.broker.start()
        return "broker"

    def kill_ingest(self) -> str:
        self.kill("analyst-ingest")
        self.ingest("analyst")
        return "ingest"

    def kill_analyst_holding(self) -> str:
        held = "held after"
        before = self.log("analyst").count(held)
        self.signal("correction-ingest", signal.SIGSTOP)
        try:
            was_held = _wait(lambda: self.log("analyst").count(held) > before, 60)
            self.kill("analyst")
        finally:
            self.signal("correction-ingest", signal.SIGCONT)
        self.analyst()
        return "analyst" if was_held else "analyst (no window held within 60 s)"

    def restart_postgres(self) -> str:
        self.server.restart()  # type: ignore[attr-defined]
        return "postgres"


def run_once(run: int, work: Path, server: object, readings: int, rate: float, faults: Sequence[str],
             seed: int, window: int, settle: float = 120.0, windows: bool = True) -> Result:
    """One installation, ``readings`` records through ``faults``; the counts of what was stored
    (``windows``: wait up to ``settle`` seconds for the held windows to complete too)."""
    res = Result(run, readings, len(faults))
    inst = Installation(work, server, "faults%d" % run, window)
    t0 = time.monotonic()
    try:
        inst.start()
        sim = inst.simulate(readings, rate, seed)
        act = {"broker": inst.kill_broker, "ingest": inst.kill_ingest, "analyst": inst.kill_analyst_holding,
               "postgres": inst.restart_postgres}
        for k, name in enumerate(faults):
            # Spread over the stream, with room at its end for the slower faults (a held window
            # takes a round timeout): fault k at (k + 1) / (len + 2) of the readings stored.
            at = readings * (k + 1) // (len(faults) + 2)
            if not _wait(lambda: inst.stored() >= at or sim.poll() is not None, 600):
                raise RuntimeError("stalled below %d readings: %s" % (at, inst.tail("simulate", "analyst-ingest")))
            if sim.poll() is not None:
                res.note = "the stream ended before fault %d" % (k + 1)
                break
            res.done.append(act[name]())
        try:
            res.simulate_rc = sim.wait(600)
        except subprocess.TimeoutExpired:
            sim.kill()
            res.simulate_rc = sim.wait()

        def settled() -> bool:
            a = inst.sql(inst.analyst_db, "SELECT count(*) FROM readings")[0]
            c = inst.sql(inst.correction_db, "SELECT count(*) FROM corrections")[0]
            held = inst.sql(inst.analyst_db, "SELECT count(*) FROM windows WHERE state IN ('closed', 'held')")[0]
            return a >= readings and c >= readings and (held == 0 or not windows)
        _wait(settled, settle, 0.5)
        res.seconds = time.monotonic() - t0
        rows, distinct = inst.sql(inst.analyst_db,
                                  "SELECT count(*), count(DISTINCT (device_id, boot_id, seq)) FROM readings")
        crows, cdistinct = inst.sql(inst.correction_db, "SELECT count(*), count(DISTINCT token) FROM corrections")
        res.stored, res.corrections = int(distinct), int(cdistinct)
        res.missing = max(readings - int(distinct), readings - int(cdistinct))
        res.duplicates = max(int(rows) - int(distinct), int(crows) - int(cdistinct))
        res.held = int(inst.sql(inst.analyst_db,
                                "SELECT count(*) FROM windows WHERE state IN ('closed', 'held')")[0])
        res.dead = int(inst.sql(inst.analyst_db, "SELECT count(*) FROM dead_letters")[0]) + int(
            inst.sql(inst.correction_db, "SELECT count(*) FROM dead_letters")[0])
        if res.simulate_rc != 0 and not res.note:
            res.note = (inst.log("simulate").strip().splitlines() or ["no output"])[-1][:160]
    finally:
        inst.close()
    return res


def _faults(text: str) -> list[str]:
    names = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in names if f not in FAULTS]
    if bad:
        raise argparse.ArgumentTypeError("unknown fault %s (known: %s)" % (", ".join(bad), ", ".join(FAULTS)))
    return names


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--readings", type=int, default=30_000, help="readings per run (default 30000)")
    ap.add_argument("--runs", type=int, default=10, help="runs (default 10)")
    ap.add_argument("--rate", type=float, default=500.0, help="readings per second (default 500)")
    ap.add_argument("--faults", type=_faults, default=_faults(DEFAULT_FAULTS),
                    help="comma-separated, in order (default %s)" % DEFAULT_FAULTS)
    ap.add_argument("--window", type=int, default=2000, help="readings per count window (default 2000)")
    ap.add_argument("--seed", type=int, default=101, help="seed of the first run's data (default 101)")
    args = ap.parse_args(argv)
    if args.readings < 100 or args.runs < 1 or not args.rate > 0:
        print("faults: need --readings >= 100, --runs >= 1, --rate > 0", file=sys.stderr)
        return 2
    from tests.pgserver import temporary_server
    print("| run | stored | corrections | duplicates | missing | dead letters | held windows | simulate rc "
          "| time (s) | faults |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    failed = 0
    with temporary_server() as server, tempfile.TemporaryDirectory(prefix="dpsense-faults-") as tmp:
        for run in range(1, args.runs + 1):
            work = Path(tmp) / ("run%d" % run)
            work.mkdir()
            try:
                r = run_once(run, work, server, args.readings, args.rate, args.faults, args.seed + run,
                             args.window)
            except Exception as e:  # noqa: BLE001 - one broken run is a row of the table, not the end
                r = Result(run, args.readings, note="%s: %s" % (type(e).__name__, str(e)[:300]))
                r.missing = args.readings
            failed += not r.ok
            print("| %d | %d / %d | %d | %d | %d | %d | %d | %s | %.1f | %s%s |"
                  % (r.run, r.stored, r.readings, r.corrections, r.duplicates, r.missing, r.dead, r.held,
                     r.simulate_rc, r.seconds, ", ".join(r.done), "; " + r.note if r.note else ""), flush=True)
    print("\n%d of %d runs stored every record exactly once" % (args.runs - failed, args.runs))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
