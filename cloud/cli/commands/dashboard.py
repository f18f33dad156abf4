"""``dpsense dashboard``: serve the read-only live view of the analyst's store."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import unquote, urlsplit

from dpsense.cloud.cli.commands.common import examples, settings_from, stop_on_sigterm

if TYPE_CHECKING:
    from dpsense.cloud.ops.dashboard.server import DashboardServer
    from dpsense.cloud.storage.repository import AnalystStore

# The page is then at http://127.0.0.1:8765/ and the Prometheus text metrics at /metrics.
EXAMPLE = examples("dpsense dashboard",
                   "dpsense dashboard --data-dir /var/lib/dpsense --port 9000")


def parser_dashboard(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; the page has no authentication, "
                        "so another address is reachable by anyone who can reach it)")
    p.add_argument("--port", default="8765", metavar="PORT", help="TCP port, 0 for any free one (default 8765)")
    p.add_argument("--refresh", default="2", metavar="SECONDS",
                   help="how often the page refreshes itself (default 2)")
    g = p.add_argument_group("deployment")
    g.add_argument("--data-dir", help="where the analyst's store is (default ./dpsense-data, env DPSENSE_DATA_DIR)")
    g.add_argument("--analyst-db", help="the analyst's storage URL: sqlite:///file.db or postgresql://... "
                                        "(default sqlite in the data dir)")
    # The dashboard reads only the analyst's store; the other deployment settings keep their defaults.
    p.set_defaults(broker_host=None, broker_port=None, correction_db=None)


def do_dashboard(args: argparse.Namespace) -> int:
    from dpsense.cloud.ops.dashboard.data import StoreSource
    from dpsense.cloud.ops.dashboard.server import DashboardServer, is_loopback
    st = settings_from(args)
    try:
        port = int(_number(args.port, "--port", int, 0, 65535))
        refresh = _number(args.refresh, "--refresh", float, 0.5, 3600)
        sqlite_path = _sqlite_path(st.analyst_db)
    except ValueError as e:
        return _bad(str(e))
    if not is_loopback(args.host):
        print("dpsense dashboard: warning: listening on %s: the page has no authentication, anyone who can "
              "reach this address can read it" % args.host, file=sys.stderr, flush=True)
    source = StoreSource(_opener(st.analyst_db, sqlite_path))
    try:
        server = DashboardServer((args.host, port), source, store_label=st.analyst_db, refresh_s=refresh)
    except OSError as e:
        return _bad("cannot listen on %s port %d: %s" % (args.host, port, e.strerror or e))
    if sqlite_path is not None and not Path(sqlite_path).exists():
        print("dashboard: no analyst store at %s yet; the page says so until the analyst creates it"
              % sqlite_path, file=sys.stderr, flush=True)
    print("dashboard: %s (read-only; metrics at %smetrics), store %s; Ctrl-C stops it"
          % (server.url, server.url, st.analyst_db), file=sys.stderr, flush=True)
    return _serve(server)


def _serve(server: "DashboardServer") -> int:
    import threading
    stop = stop_on_sigterm()
    thread = threading.Thread(target=server.serve_forever, name="dashboard-http", daemon=True)
    thread.start()
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    server.shutdown()
    server.server_close()
    thread.join(5)
    return 0


def _opener(url: str, sqlite_path: str | None) -> "Callable[[], AnalystStore]":
    """Opens the analyst's store for one refresh; never creates an SQLite file that is not there."""
    from dpsense.cloud.storage import open_analyst_store
    from dpsense.cloud.storage.repository import StorageError

    def open_store() -> "AnalystStore":
        if sqlite_path is not None and not Path(sqlite_path).exists():
            raise StorageError("no analyst store at %s yet (the analyst creates it when it starts)" % sqlite_path)
        return open_analyst_store(url)
    return open_store


def _sqlite_path(url: str) -> str | None:
    """The file an SQLite storage URL names (the rules of ``dpsense.cloud.storage``); None for PostgreSQL."""
    if "://" not in url:
        return url
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return None
    if scheme != "sqlite":
        raise ValueError("unsupported storage URL scheme %r (use sqlite:// or postgresql://)" % scheme)
    rest = unquote(url[len("sqlite://"):])
    if rest == "":
        raise ValueError("an in-memory store (%s) has nothing to show; give the analyst's database" % url)
    if not rest.startswith("/") or rest == "/":
        raise ValueError("an SQLite URL is sqlite:///relative/path or sqlite:////absolute/path, got %r" % url)
    return rest[1:]


def _number(text: str, name: str, kind: type[int] | type[float], lo: float, hi: float) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise ValueError("%s must be a number, got %r" % (name, text)) from None
    if not lo <= value <= hi:
        raise ValueError("%s must be in %g..%g, got %s" % (name, lo, hi, text))
    return value


def _bad(message: str) -> int:
    print("dpsense dashboard: %s" % message, file=sys.stderr)
    return 2

