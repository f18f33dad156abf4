"""Scale-out on one Mosquitto and one PostgreSQL (docs/scale-out.md): three ingest workers share the
readings and two the correction records through MQTT shared subscriptions, two analysts claim the
device groups' windows through the database, two correction servers share the rounds (mode bands):
each gets every round's chunks and answers the rounds it claims in the correction database, where
their one round ledger is.
One worker of each kind (reading ingest, correction ingest, analyst, correction server) is killed
with SIGKILL mid-stream and started again: every reading and every correction record is stored
once, and every window is scored once."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, BrokerError, free_port
from dpsense.cloud.cli import main
from dpsense.cloud.storage import open_analyst_store, open_correction_store
from tests.integration import procs
from tests.integration.procs import stop

pytestmark = [pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                 reason="Debian package 'mosquitto' is not installed"),
              pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[2]
RATE = 150                  # readings per second across the fleet
DURATION = 16               # seconds: 2400 readings, 600 per group
DEVICES = 8                 # two per group
GROUPS = ("hall-a", "hall-b", "hall-c", "hall-d")
WINDOW = 150                # readings per count window: 4 per group
LEASE = 3.0


def _wait(pred, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


class Fleet:
    """The broker, the databases and the services of a scaled-out installation, each its own process."""

    def __init__(self, tmp: Path, pg_url: str) -> None:
        from tests.pgserver import create_database
        self.dir = tmp / "data"
        self.logs = tmp
        self.analyst_db = create_database(pg_url, "scale_analyst")
        self.correction_db = create_database(pg_url, "scale_correction")
        self.broker = Broker(self.dir, port=free_port())
        self.common = ["--data-dir", str(self.dir), "--broker-port", str(self.broker.port),
                       "--analyst-db", self.analyst_db, "--correction-db", self.correction_db]
        self.passwords = {role: self.broker.add_account(role, workers=3) for role in ("analyst", "correction")}
        for d in range(1, DEVICES + 1):
            assert main(["broker", "add-device", str(d), "--group", GROUPS[(d - 1) % len(GROUPS)],
                         *self.common]) == 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.broker.start()

    def service(self, name: str, role: str, *args: str) -> subprocess.Popen[bytes]:
        p = procs.service(self.logs, name, [*args, *self.common], self.passwords.get(role))
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        path = self.logs / ("%s.log" % name)
        return path.read_text() if path.exists() else ""

    def logs_of(self, *names: str) -> str:
        return "\n".join("--- %s\n%s" % (n, self.log(n)[-3000:]) for n in names)

    def ingest(self, role: str, k: int) -> None:
        name = "%s-ingest-%d" % (role, k)
        # Restarted workers append to their log: count the subscriptions, not the lines' presence.
        before = self.log(name).count("ingest: subscribed to $share/%s-ingest/" % role)
        self.service(name, role, "ingest", "--role", role, "--worker", str(k), "--batch-size", "100")
        assert _wait(lambda: self.log(name).count("ingest: subscribed to $share/%s-ingest/" % role) > before, 40), \
            self.log(name)

    def correction_server(self, k: int) -> None:
        name = "correction-%d" % k
        # Not a shared subscription: every server gets every chunk and answers the rounds it claims.
        ready = "correction server: subscribed to dpsense/round/to-cs (worker correction-%d" % k
        before = self.log(name).count(ready)
        self.service(name, "correction", "correction-server", "--worker", str(k), "--no-ingest")
        assert _wait(lambda: self.log(name).count(ready) > before, 40), self.log(name)

    def analyst(self, k: int) -> None:
        self.service("analyst-%d" % k, "analyst", "analyst", "--worker", str(k), "--no-ingest", "--lease",
                     str(LEASE), "--window", str(WINDOW), "--flush-idle", "3", "--dbscan-min-samples", "10",
                     "--round-timeout", "5")

    def sql(self, query: str) -> list[tuple]:
        with psycopg.connect(self.analyst_db, autocommit=True) as conn:
            return conn.execute(query).fetchall()

    def close(self) -> None:
        for p in self.procs.values():
            stop(p)
        self.broker.stop()


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str) -> Iterator[Fleet]:
    f = Fleet(tmp_path, postgres_url)
    try:
        yield f
    finally:
        f.close()


def test_three_ingest_workers_and_two_analysts_survive_a_kill_of_one_of_each(fleet: Fleet) -> None:
    total = RATE * DURATION
    for k in (1, 2):
        fleet.correction_server(k)
    for k in (1, 2, 3):
        fleet.ingest("analyst", k)
    for k in (1, 2):
        fleet.ingest("correction", k)
    fleet.analyst(1)
    fleet.analyst(2)
    assert _wait(lambda: "now scores" in fleet.log("analyst-1") and "now scores" in fleet.log("analyst-2"), 40), \
        fleet.logs_of("analyst-1", "analyst-2")
    sim = fleet.service("simulate", "analyst", "simulate", "--devices", str(DEVICES), "--rate", str(RATE),
                        "--duration", str(DURATION), "--n", "4000", "--epsilon", "2", "--seed", "3")

    # Mid-stream: SIGKILL, no chance to flush a batch or release a claim.
    with open_analyst_store(fleet.analyst_db) as store:
        assert _wait(lambda: store.count() >= total // 4, 40), fleet.logs_of("simulate", "analyst-ingest-1")
    every = "now scores groups default, hall-a, hall-b, hall-c, hall-d"
    before = fleet.log("analyst-1").count(every)      # once, when it started alone
    for name in ("analyst-ingest-2", "correction-ingest-1", "analyst-2", "correction-2"):
        fleet.procs[name].kill()
        fleet.procs[name].wait()
    killed_at = time.monotonic()
    # analyst-1 takes over every group once analyst-2's lease has run out ...
    assert _wait(lambda: fleet.log("analyst-1").count(every) > before, 4 * LEASE), fleet.logs_of("analyst-1")
    assert time.monotonic() - killed_at >= LEASE * 0.5
    # ... and the restarted workers rejoin: the ingest sessions are resumed, analyst-2 claims its share again.
    fleet.ingest("analyst", 2)
    fleet.ingest("correction", 1)
    fleet.analyst(2)
    fleet.correction_server(2)
    assert sim.wait(90) == 0, fleet.log("simulate")

    def settled() -> bool:
        with open_analyst_store(fleet.analyst_db) as a, open_correction_store(fleet.correction_db) as c:
            counts = a.window_counts()
            pending = a.pending_by_group(0, a.max_row_id())
            return (a.count() == total and c.count() == total and counts["closed"] + counts["held"] == 0
                    and all(p.count < 20 for p in pending.values()))
    assert _wait(settled, 60), fleet.logs_of("analyst-1", "analyst-2", "correction-1", "analyst-ingest-2")

    with open_analyst_store(fleet.analyst_db) as a, open_correction_store(fleet.correction_db) as c:
        windows = a.windows()
        results = dict(a.window_results())
        # Every reading once: the stored rows are the published ones, each (device, boot, seq) once.
        assert a.count() == total and len(set(a.token_array().tolist())) == total
        assert c.count() == total and set(c.token_array().tolist()) == set(a.token_array().tolist())
        gaps = a.gaps()
        assert len(gaps) == DEVICES and sum(g.missing for g in gaps) == 0
        pending = a.pending_by_group(0, a.max_row_id())
    # Every window scored once, by one of the analysts, with its readings in no other window.
    done = [w for w in windows if w.state == "done"]
    assert {w.group for w in done} == set(GROUPS)
    assert len(done) >= len(GROUPS) * (total // len(GROUPS) // WINDOW - 1)
    assert sorted(results) == sorted(w.id for w in done)
    scored = fleet.sql("SELECT window_id, owner FROM dpsense_scored ORDER BY window_id")
    assert [wid for wid, _ in scored] == sorted(w.id for w in done)
    assert {owner for _, owner in scored} == {"analyst-1", "analyst-2"}
    assert sum(w.n for w in windows if w.state != "carried") + sum(p.count for p in pending.values()) == total
    assert fleet.sql("SELECT count(*), count(DISTINCT win) FROM readings WHERE win IS NOT NULL")[0][1] == \
        len([w for w in windows if w.state != "carried"])
    for g in GROUPS:                                            # a group's windows in order, none twice
        seqs = [w.seq for w in windows if w.group == g]
        assert seqs == sorted(set(seqs))
    # The restarted analyst holds a share again; the claims cover every group once; `dpsense status` says so.
    claims = dict(fleet.sql("SELECT grp, owner FROM dpsense_claims"))
    assert set(claims) == set(GROUPS) | {"default"} and set(claims.values()) <= {"analyst-1", "analyst-2"}
    status = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "status", *fleet.common], capture_output=True,
                            text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if x.startswith("partitions"))
    for owner in set(claims.values()):
        assert "%s: %s" % (owner, ", ".join(sorted(g for g, o in claims.items() if o == owner))) in line
    # One round ledger for both correction servers: windows answered, rounds claimed by the servers
    # only, and no honest analyst's window refused as a repeat or an overlap across the two.
    with psycopg.connect(fleet.correction_db, autocommit=True) as conn:
        answered = conn.execute("SELECT count(*) FROM dpsense_round_windows").fetchone()[0]
        owners = {o for (o,) in conn.execute("SELECT DISTINCT owner FROM dpsense_round_claims")}
        refused = dict(conn.execute("SELECT code, n FROM dpsense_round_refusals").fetchall())
    assert answered >= 1 and owners and owners <= {"correction-1", "correction-2"}, (answered, owners)
    assert not set(refused) & {"overlap", "subset", "repeated"}, refused
    assert "rounds      %d windows answered" % answered in status.stdout


def _client(broker: Broker, user: str, password: str, got: list[tuple[str, bytes]] | None = None) -> mqtt.Client:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv311)
    c.username_pw_set(user, password)
    if got is not None:
        c.on_message = lambda cl, u, m: got.append((m.topic, bytes(m.payload)))
    c.connect(broker.host, broker.port)
    c.loop_start()
    assert _wait(c.is_connected, 5, 0.02)
    return c


def test_worker_accounts_share_a_stream_with_their_role_s_acl(tmp_path: Path) -> None:
    """Two ingest workers in one shared subscription get each reading once between them, and the
    worker accounts are bound by the ACL of the account they copy: no correction record reaches
    an analyst worker, whichever filter it subscribes to."""
    broker = Broker(tmp_path, port=free_port())
    pw = broker.add_account("analyst", workers=2)
    dev, dev_pw = broker.add_device(7)
    assert {"analyst-1", "analyst-2", "analyst-ingest-1", "analyst-ingest-2", "analyst-status-2"} <= set(
        broker.accounts())
    with pytest.raises(BrokerError):
        broker.add_account("analyst-ingest-3", "analyst")         # a worker name is not a role account
    with broker.running():
        got: list[list[tuple[str, bytes]]] = [[], []]
        workers = [_client(broker, "analyst-ingest-%d" % k, pw, got[k - 1]) for k in (1, 2)]
        for w in workers:
            for topic in (topics.READINGS_ALL, topics.CORRECTIONS):
                w.subscribe("$share/analyst-ingest/" + topic, qos=1)
        time.sleep(0.5)
        board = _client(broker, dev, dev_pw)
        sent = [b"r%d" % i for i in range(40)]
        for payload in sent:
            board.publish(topics.READINGS % dev, payload, qos=1).wait_for_publish(5)
        board.publish(topics.CORRECTIONS, b"secret", qos=1).wait_for_publish(5)
        assert _wait(lambda: len(got[0]) + len(got[1]) >= len(sent), 10)
        time.sleep(0.5)
        for c in [*workers, board]:
            c.disconnect()
            c.loop_stop()
    assert sorted(p for g in got for _, p in g) == sorted(sent)     # each once, no correction record
    assert got[0] and got[1]                                        # and split between the workers


def test_a_retired_worker_stores_its_queued_share_and_gets_no_more(tmp_path: Path) -> None:
    """Mosquitto keeps giving an offline member of a shared group its share; `dpsense ingest --worker 2
    --retire` leaves the group and stores what the session held: nothing is lost, later readings go
    to the others."""
    from dpsense.protocol.wire import encode_reading
    broker = Broker(tmp_path, port=free_port())
    pw = broker.add_account("analyst", workers=2)
    dev, dev_pw = broker.add_device(7)
    db = "sqlite:///%s" % (tmp_path / "analyst.db")
    shared = "$share/analyst-ingest/" + topics.READINGS_ALL
    with broker.running():
        away = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="analyst-ingest-2", clean_session=False,
                           protocol=mqtt.MQTTv311)
        away.username_pw_set("analyst-ingest-2", pw)
        away.connect(broker.host, broker.port)
        away.loop_start()
        assert _wait(away.is_connected, 5, 0.02)
        away.subscribe(shared, qos=1)
        time.sleep(0.3)
        away.disconnect()                                       # worker 2 is gone; its session stays
        away.loop_stop()
        got: list[tuple[str, bytes]] = []
        one = _client(broker, "analyst-ingest-1", pw, got)
        one.subscribe(shared, qos=1)
        time.sleep(0.3)
        board = _client(broker, dev, dev_pw)

        def send(seqs: range) -> None:
            for s in seqs:
                board.publish(topics.READINGS % dev, encode_reading(7, 1, s, bytes([s]) * 8, 1, (s, -s)),
                              qos=1).wait_for_publish(5)
        send(range(20))
        assert _wait(lambda: len(got) >= 10, 10)
        args = ["ingest", "--role", "analyst", "--worker", "2", "--retire", "--idle-exit", "2",
                "--data-dir", str(tmp_path), "--broker-port", str(broker.port), "--analyst-db", db]
        res = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", *args], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_BROKER_PASSWORD=pw), timeout=60)
        assert res.returncode == 0 and "retiring session analyst-ingest-2" in res.stderr, res.stderr
        send(range(20, 30))
        assert _wait(lambda: len(got) >= 20, 10)
        time.sleep(0.3)
        for c in (one, board):
            c.disconnect()
            c.loop_stop()
    with open_analyst_store(db) as store:
        stored = {r.seq for _, r in store.readings_after(0, 100)}
    taken = {s for s in range(30) if any(p == encode_reading(7, 1, s, bytes([s]) * 8, 1, (s, -s)) for _, p in got)}
    assert len(got) == len(taken) == 20 and taken >= set(range(20, 30))  # all later readings went to worker 1
    assert stored == set(range(20)) - taken and len(stored) == 10        # worker 2's queued share, stored once


# -- docs/scale-out.md's command lines for 20,000 readings/s, at a reduced rate ------------------

SCALE_DOC = ROOT / "docs" / "scale-out.md"
BLOCK_MARK = "<!-- the command lines tests/integration/test_scaleout.py runs at a reduced rate -->"
#: What the reduced run changes in the documented lines, and only this: the rate, the length of
#: the run, the fleet, the windows and the lease. Every other option runs as documented.
REDUCED = {"--rate": "240", "--duration": "8", "--devices": "16", "--window": "4s", "--lease": "3"}


def scale_out_commands() -> list[list[str]]:
    """The documented lines, as argument lists (without the leading ``dpsense``), in order."""
    text = SCALE_DOC.read_text()
    assert text.count(BLOCK_MARK) == 1, "docs/scale-out.md lost its marked block of command lines"
    block = text.split(BLOCK_MARK, 1)[1].split("```", 2)[1]
    cmds = []
    for line in block.splitlines()[1:]:
        line = line.split("#", 1)[0].strip()
        if line:
            args = shlex.split(line)
            assert args[0] == "dpsense", line
            cmds.append(args[1:])
    return cmds


def reduced(args: list[str]) -> list[str]:
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a in REDUCED:
            out[i + 1] = REDUCED[a]
    return out


def test_the_documented_lines_are_the_20k_installation() -> None:
    """What the guide promises of its lines: 20,000 readings/s, several workers of each role on PostgreSQL."""
    cmds = scale_out_commands()
    sim = [c for c in cmds if c[0] == "simulate"]
    assert len(sim) == 1 and sim[0][sim[0].index("--rate") + 1] == "20000"
    count = {k: sum(1 for c in cmds if c[:3] == ["ingest", "--role", k]) for k in ("analyst", "correction")}
    assert count["analyst"] >= 2 and count["correction"] >= 2, count
    assert sum(c[0] == "analyst" for c in cmds) >= 2 and sum(c[0] == "correction-server" for c in cmds) >= 2
    for c in cmds:
        if c[0] in ("ingest", "analyst", "correction-server"):
            assert "--worker" in c and "--password-file" in c, c
        if c[0] in ("analyst", "correction-server"):
            assert "--no-ingest" in c, c
    # The workers' numbers fit the accounts the add-account lines make.
    made = {c[2]: int(c[c.index("--workers") + 1]) for c in cmds if c[:2] == ["broker", "add-account"]}
    for c in cmds:
        if "--worker" in c:
            role = "correction" if c[0] == "correction-server" or "correction" in c else "analyst"
            assert int(c[c.index("--worker") + 1]) <= made[role], c


def test_the_documented_20k_lines_run_at_a_reduced_rate(tmp_path: Path, postgres_url: str) -> None:
    from tests.pgserver import create_database
    cmds = [reduced(c) for c in scale_out_commands()]
    data = tmp_path / "data"
    broker = Broker(data, port=free_port())
    env = dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_DATA_DIR=str(data), DPSENSE_BROKER_PORT=str(broker.port),
               DPSENSE_ANALYST_DB=create_database(postgres_url, "doc_analyst"),
               DPSENSE_CORRECTION_DB=create_database(postgres_url, "doc_correction"))
    env.pop("DPSENSE_BROKER_PASSWORD", None)

    def cli(args: list[str], name: str) -> subprocess.Popen[bytes]:
        with open(tmp_path / ("%s.log" % name), "ab") as log:
            return subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", *args], cwd=tmp_path, env=env,
                                    stdout=log, stderr=log)

    def log(name: str) -> str:
        return (tmp_path / ("%s.log" % name)).read_text()

    for k, c in enumerate(c for c in cmds if c[0] == "broker"):
        assert cli(c, "setup-%d" % k).wait(60) == 0, log("setup-%d" % k)
    devices = int(REDUCED["--devices"])
    for d in range(1, devices + 1):                 # as the guide's provisioning loop
        assert main(["broker", "add-device", str(d), "--group", "hall-%d" % (d % 4), "--data-dir", str(data)]) == 0
    services: dict[str, subprocess.Popen[bytes]] = {}
    try:
        broker.start()
        # An analyst claims its groups once their readings arrive; before that it says its windows.
        ready = {"analyst": "analyst: windows of"}
        kinds: set[str] = set()
        for c in cmds:
            if c[0] in ("ingest", "analyst", "correction-server"):
                role = [x for x in c[:3] if not x.startswith("-") and not x.isdigit()]
                name = "%s-%s" % ("-".join(role), c[c.index("--worker") + 1])
                services[name] = cli(c, name)
                if name.rsplit("-", 1)[0] not in kinds:     # the first of its kind makes its tables
                    kinds.add(name.rsplit("-", 1)[0])
                    assert _wait(lambda: ready.get(c[0], "subscribed to") in log(name), 60), log(name)
        assert _wait(lambda: all(p.poll() is None and ready.get(n.split("-")[0], "subscribed to") in log(n)
                                 for n, p in services.items()), 60), \
            {n: log(n)[-400:] for n, p in services.items() if p.poll() is not None}
        sim = cli(next(c for c in cmds if c[0] == "simulate"), "simulate")
        assert sim.wait(120) == 0, log("simulate")
        total = int(float(REDUCED["--rate"]) * float(REDUCED["--duration"]))
        url_a, url_c = env["DPSENSE_ANALYST_DB"], env["DPSENSE_CORRECTION_DB"]

        def settled() -> bool:
            with open_analyst_store(url_a) as a:
                counts = a.window_counts()
                return a.count() == total and counts["closed"] + counts["held"] == 0 and counts["done"] >= 1
        assert _wait(settled, 60), {n: log(n)[-400:] for n in services if not n.startswith("ingest-")}
        with open_analyst_store(url_a) as a, open_correction_store(url_c) as c:
            assert len(set(a.token_array().tolist())) == total and c.count() == total
            assert sum(g.missing for g in a.gaps()) == 0
        assert all(p.poll() is None for p in services.values()), "a documented service exited"
    finally:
        for p in services.values():
            stop(p)
        broker.stop()
