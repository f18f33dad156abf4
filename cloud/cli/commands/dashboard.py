"""``dpsense dashboard``: serve the read-only live view of the analyst's store."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import unquote, urlsplit

from dpsense.cloud.cli.commands.common import examples, settings_from, stop_on_sigterm

if TYPE_CHECKING:
    from dpsense.cloud.ops.dashboard.data import Aggregates, Aggregator, Histogram, Histogrammer
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
    source = StoreSource(_opener(st.analyst_db, sqlite_path), aggregator=mean_bands(Path(st.data_dir)),
                         histogrammer=latest_histogram(Path(st.data_dir)))
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


def mean_bands(data_dir: Path) -> "Aggregator":
    """The page's aggregates: each group's mean of a column per window, with its 95% interval,
    from ``dpsense aggregate``'s estimators and the profile in ``data_dir`` (read at each call,
    so a new calibration shows at the next refresh). Spends no privacy budget."""
    from dpsense.cloud.deploy.profile import load_profile
    from dpsense.cloud.ops.dashboard.data import Aggregates, Band
    from dpsense.cloud.privacy.stream_aggregates import NO_BUDGET, Stat, aggregate
    from dpsense.cloud.storage import DEFAULT_GROUP

    def bands(store: "AnalystStore", column: int, window_s: float, since: float, until: float) -> "Aggregates | None":
        profile = load_profile(data_dir)
        if profile is None:
            return None
        m = len(profile.delta_q)
        if not 0 <= column < m:
            raise ValueError("column must be in 0..%d (the profile has %d columns)" % (m - 1, m))
        groups: dict[str, list[Band]] = {}
        for g in sorted(set(store.device_groups().values()) | {DEFAULT_GROUP}):
            ws = aggregate(store, profile, group=g, window_s=window_s, since=since, until=until, column=column,
                           stat=Stat("mean"))
            if ws:
                groups[g] = [Band(w.start, w.end, w.n, w.rows[0].value, w.rows[0].lo, w.rows[0].hi) for w in ws]
        return Aggregates(column, m, window_s, 0.95, groups, NO_BUDGET)
    return bands


def latest_histogram(data_dir: Path) -> "Histogrammer":
    """The page's histogram: a group's latest window with readings, the profile's default bins
    of a column, released counts beside the deconvolved estimates. Spends no privacy budget."""
    from dpsense.cloud.deploy.profile import load_profile
    from dpsense.cloud.ops.dashboard.data import Histogram
    from dpsense.cloud.privacy.stream_aggregates import NO_BUDGET, Stat, aggregate

    def latest(store: "AnalystStore", group: str, column: int, window_s: float, since: float,
               until: float) -> "Histogram | None":
        profile = load_profile(data_dir)
        if profile is None:
            return None
        ws = aggregate(store, profile, group=group, window_s=window_s, since=since, until=until, column=column,
                       stat=Stat("histogram"))
        if not ws:
            return None
        w = ws[-1]
        return Histogram(group, column, w.start, w.end, w.n, [r.label for r in w.rows], list(w.released),
                         [r.value for r in w.rows], [r.lo for r in w.rows], [r.hi for r in w.rows], NO_BUDGET)
    return latest


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

