"""Options and helpers shared by the ``dpsense`` subcommands."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import threading

    from dpsense.cloud.config import Settings
    from dpsense.cloud.ingest.service import Connection


def add_common(p: argparse.ArgumentParser) -> None:
    """Options every service shares; explicit value > DPSENSE_* environment > default."""
    g = p.add_argument_group("deployment")
    g.add_argument("--data-dir", help="broker files and default databases (default ./dpsense-data, env DPSENSE_DATA_DIR)")
    g.add_argument("--broker-host", help="broker address (default 127.0.0.1)")
    g.add_argument("--broker-port", type=int, help="broker port (default 1883)")
    g.add_argument("--analyst-db", help="analyst storage URL: sqlite:///file.db or postgresql://... "
                                        "(default sqlite in the data dir)")
    g.add_argument("--correction-db", help="correction-server storage URL (never the analyst's)")


def settings_from(args: argparse.Namespace) -> "Settings":
    """The service settings of ``args``; a bad value ends the command with status 2 and
    one line naming it (no traceback)."""
    from dpsense.cloud.config import Settings
    try:
        return Settings.resolve(data_dir=args.data_dir, broker_host=args.broker_host,
                                broker_port=args.broker_port, analyst_db=args.analyst_db,
                                correction_db=args.correction_db)
    except ValueError as e:
        print("dpsense %s: %s" % (args.command, e), file=sys.stderr)
        raise SystemExit(2) from None


def connection_for(st: "Settings", user: str, client_id: str) -> "Connection":
    """Broker connection for a role account; the password comes from the broker's files
    (or DPSENSE_BROKER_PASSWORD when the broker runs elsewhere)."""
    import os

    from dpsense.cloud.broker import Broker
    from dpsense.cloud.ingest.service import Connection
    pw = os.environ.get("DPSENSE_BROKER_PASSWORD") or Broker(st.data_dir).password(user)
    return Connection(st.broker_host, st.broker_port, user, pw, client_id)


def parse_floats(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers, for argparse."""
    try:
        vals = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated numbers, got %r" % text) from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one number")
    return vals


def parse_ints(name: str, values: tuple[float, ...]) -> tuple[int, ...]:
    if any(v != int(v) for v in values):
        raise ValueError("%s must be integers" % name)
    return tuple(int(v) for v in values)


def profile_default(args: argparse.Namespace, st: "Settings", name: str, fallback: float) -> float:
    from dpsense.cloud.simulate import load_profile
    v = getattr(args, name)
    if v is not None:
        return float(v)
    prof = load_profile(st.data_dir)
    return float(getattr(prof, name)) if prof is not None else fallback


class IngestThread:
    """The ingest loop of a service, in a thread; if it dies, it stops the whole service."""

    def __init__(self, conn: "Connection", open_store: "Callable[[], object]", role: str,
                 stop: "threading.Event") -> None:
        import threading
        self.error: BaseException | None = None
        self._conn, self._open, self._role, self._stop = conn, open_store, role, stop
        self.thread = threading.Thread(target=self._run, name="ingest-" + role, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from dpsense.cloud.devices import status_ingest
        from dpsense.cloud.ingest.service import IngestService
        try:
            with self._open() as store:  # type: ignore[attr-defined]
                make = {"analyst": IngestService.for_analyst, "correction": IngestService.for_correction,
                        "status": status_ingest}[self._role]
                make(self._conn, store).run(self._stop)
        except BaseException as e:  # noqa: BLE001 - reported by the service's exit status
            self.error = e
            print("dpsense %s: ingest stopped: %s: %s" % (self._role, type(e).__name__, e),
                  file=sys.stderr, flush=True)
            self._stop.set()

    def join(self) -> None:
        self.thread.join(15)


def stop_on_sigterm() -> "threading.Event":
    """An event that SIGTERM sets, so a service stops cleanly (flushing its batch) on `kill`."""
    import signal
    import threading
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    return stop
