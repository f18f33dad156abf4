"""A throw-away PostgreSQL server on loopback, for the tests and the benchmarks (not shipped).

    with temporary_postgres() as url:                   # postgresql://dpsense:...@127.0.0.1:PORT/postgres
        store = open_analyst_store(create_database(url, "analyst"))

    python -m tests.pgserver                            # from the checkout: prints a URL, serves until Ctrl-C

It needs the server binaries of the Debian package ``postgresql`` (``initdb`` and ``pg_ctl`` in
``/usr/lib/postgresql/<version>/bin``). The cluster lives in a fresh temporary directory, listens
on 127.0.0.1 at a free port and on a unix socket in that directory, and is stopped and deleted
when the block ends. PostgreSQL refuses to run as root, so under root the binaries run as the
``postgres`` user (``nobody`` where there is none), which then owns the temporary directory.
TCP logins need the random password that is part of the URL.
"""
from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dpsense.cloud.storage.repository import StorageError

SEARCH_GLOB = "/usr/lib/postgresql/*/bin"
START_TIMEOUT_S = 60
_USER = "dpsense"
_PORT_ATTEMPTS = 3


class PostgresNotFound(StorageError):
    """The PostgreSQL server binaries are not installed."""


@dataclass(frozen=True)
class _RunAs:
    """Who runs the server binaries: the current user, or an unprivileged one under root."""

    name: str | None
    uid: int | None = None
    gid: int | None = None


def find_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``pg_ctl``."""
    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.parent.name)) or (0,)

    candidates = [Path(p) for p in Path("/").glob(SEARCH_GLOB.lstrip("/"))]
    usable = [p for p in candidates if (p / "initdb").is_file() and (p / "pg_ctl").is_file()]
    if usable:
        return max(usable, key=version)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    raise PostgresNotFound(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in %s or on PATH; install the Debian "
        "package `postgresql` (apt-get install postgresql, or run scripts/setup.sh)" % SEARCH_GLOB)


def _run_as() -> _RunAs:
    if os.geteuid() != 0:
        return _RunAs(None)
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return _RunAs(name, entry.pw_uid, entry.pw_gid)
    raise StorageError("running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Cluster:
    """The temporary data directory and the commands that act on it."""

    def __init__(self, bindir: Path, root: Path, run_as: _RunAs) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.socket_dir = root / "socket"
        self.log = root / "server.log"
        self.run_as = run_as

    def run(self, *args: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        return subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "LC_ALL": "C"}, check=False, user=self.run_as.uid,
                              group=self.run_as.gid, extra_groups=None if self.run_as.uid is None else [])

    def check(self, what: str, *args: str) -> None:
        done = self.run(*args)
        if done.returncode != 0:
            raise StorageError("%s failed (exit %d): %s%s" % (what, done.returncode, done.stdout, done.stderr)
                               + self.log_tail())

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n--- %s (last %d lines) ---\n%s" % (self.log, lines, "\n".join(text.splitlines()[-lines:]))

    def init(self, password: str, fsync: bool) -> None:
        self.socket_dir.mkdir()
        pwfile = self.root / "pwfile"
        pwfile.write_text(password + "\n")
        if self.run_as.uid is not None and self.run_as.gid is not None:
            for path in (self.root, self.socket_dir, pwfile):
                os.chown(path, self.run_as.uid, self.run_as.gid)
        self.check("initdb", "initdb", "-D", str(self.data), "-U", _USER, "--pwfile", str(pwfile),
                   "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C",
                   "--no-sync", "--no-instructions")
        pwfile.unlink()
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": "'%s'" % self.socket_dir,
            "fsync": "on" if fsync else "off",
            "synchronous_commit": "on" if fsync else "off",
            "full_page_writes": "on" if fsync else "off",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# dpsense temporary server\n")
            conf.writelines("%s = %s\n" % item for item in settings.items())

    def start(self) -> int:
        """Start on a free port and wait until it accepts connections; return the port."""
        for attempt in range(_PORT_ATTEMPTS):
            port = _free_port()
            done = self.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", "-p %d" % port,
                            "-w", "-t", str(START_TIMEOUT_S), "start", timeout=START_TIMEOUT_S + 10)
            if done.returncode == 0:
                return port
            if "already in use" not in self.log_tail() or attempt + 1 == _PORT_ATTEMPTS:
                raise StorageError("pg_ctl start failed (exit %d): %s%s" % (
                    done.returncode, done.stdout, done.stderr) + self.log_tail())
        raise AssertionError("unreachable")

    def restart(self) -> None:
        """A fast restart on the same port (pg_ctl keeps the options in postmaster.opts): every
        session is cut, committed transactions stay."""
        self.check("pg_ctl restart", "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w",
                   "-t", str(START_TIMEOUT_S), "restart")

    def stop(self) -> None:
        for mode in ("fast", "immediate"):
            done = self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", timeout=60)
            if done.returncode == 0 or not (self.data / "postmaster.pid").exists():
                return


@dataclass(frozen=True)
class Server:
    """A running temporary server: its URL, and a restart for fault tests."""

    url: str
    _cluster: _Cluster

    def restart(self) -> None:
        self._cluster.restart()


@contextmanager
def temporary_postgres(*, fsync: bool = True) -> Iterator[str]:
    """Run a private PostgreSQL server for the duration of the block; yield its URL.

    ``fsync=False`` turns off the server's flushes to disk: faster, and fine for tests that never
    outlive the server, but it voids the durability a benchmark should measure.
    """
    with temporary_server(fsync=fsync) as server:
        yield server.url


@contextmanager
def temporary_server(*, fsync: bool = True) -> Iterator[Server]:
    """``temporary_postgres``, yielding a ``Server`` that can also be restarted."""
    bindir = find_bindir()
    run_as = _run_as()
    root = Path(tempfile.mkdtemp(prefix="dpsense-pg-"))
    cluster = _Cluster(bindir, root, run_as)
    try:
        password = secrets.token_hex(16)
        cluster.init(password, fsync)
        port = cluster.start()
        yield Server("postgresql://%s:%s@127.0.0.1:%d/postgres" % (_USER, password, port), cluster)
    finally:
        try:
            if (cluster.data / "postmaster.pid").exists():
                cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


def create_database(url: str, name: str) -> str:
    """Create database ``name`` on the server at ``url``; return the URL that points to it."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as err:
        raise StorageError("cannot create database %r: %s" % (name, err)) from err
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def main() -> int:
    try:
        with temporary_postgres() as url:
            print(url, flush=True)
            print("serving until Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
    except StorageError as err:
        print("pgserver: %s" % err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
