"""Options and helpers shared by the ``dpsense`` subcommands."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable

from dpsense.cloud.errors import DpsenseError, ServiceError, UsageError

if TYPE_CHECKING:
    import threading
    from pathlib import Path

    from dpsense.cloud.deploy.config import Settings
    from dpsense.cloud.transport.session import Connection


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and epilogs; wraps a long line of prose, never
    an indented one (an example command stays whole, to be copied)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap
        return "\n".join(indent + line if line[:1].isspace() or len(indent + line) <= width
                         else textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent)
                         for line in text.splitlines())


def examples(*commands: str) -> str:
    """An epilog of example command lines."""
    return "example%s:\n%s" % ("s" if len(commands) > 1 else "", "\n".join("  " + c for c in commands))


def add_common(p: argparse.ArgumentParser) -> None:
    """Options every service shares; explicit value > DPSENSE_* environment > default."""
    g = p.add_argument_group("deployment")
    g.add_argument("--data-dir", help="broker files and default databases (default ./dpsense-data, env DPSENSE_DATA_DIR)")
    g.add_argument("--broker-host", help="broker address (default 127.0.0.1)")
    g.add_argument("--broker-port", type=port, help="broker port (default 1883)")
    g.add_argument("--analyst-db", help="analyst storage URL: sqlite:///file.db or postgresql://... "
                                        "(default sqlite in the data dir)")
    g.add_argument("--correction-db", help="correction-server storage URL (never the analyst's; default sqlite "
                                           "in the correction data dir)")
    g.add_argument("--correction-data-dir", metavar="DIR",
                   help="the correction server's folder: its key store, database and profile, a trust zone of "
                        "its own (default: --data-dir; env DPSENSE_CORRECTION_DIR). With another folder than "
                        "--data-dir, the data dir must hold no correction keys (docs/operating.md)")
    g.add_argument("--tls-ca", help="speak MQTT over TLS and check the broker's certificate against "
                                    "this CA (PEM, e.g. dpsense-data/broker/tls/ca.pem; env "
                                    "DPSENSE_TLS_CA); required for a broker off loopback")


def add_password(p: argparse.ArgumentParser) -> None:
    """The service's own broker secret: --password-file > DPSENSE_BROKER_PASSWORD."""
    p.add_argument("--password-file", metavar="PATH",
                   help="file (mode 0600) holding this service's broker password, as written by "
                        "`dpsense broker add-account NAME --password-file PATH` "
                        "(default: env DPSENSE_BROKER_PASSWORD)")


def settings_from(args: argparse.Namespace) -> "Settings":
    """The service settings of ``args`` (UsageError names a bad one)."""
    from dpsense.cloud.deploy.config import Settings
    return Settings.resolve(data_dir=args.data_dir, broker_host=args.broker_host,
                            broker_port=args.broker_port, analyst_db=args.analyst_db,
                            correction_db=args.correction_db, tls_ca=getattr(args, "tls_ca", None),
                            correction_dir=getattr(args, "correction_data_dir", None))


def misplaced_keys(st: "Settings") -> "Path | None":
    """The correction server's key store (or its folder) in the analyst's data dir when the
    correction server has a folder of its own: None if there is none."""
    from pathlib import Path

    from dpsense.cloud.correction.sealed import KEY_DIR, KEY_FILE
    if not st.two_zones:
        return None
    folder = Path(st.data_dir) / KEY_DIR
    return folder / KEY_FILE if (folder / KEY_FILE).exists() else folder if folder.exists() else None


def check_analyst_zone(st: "Settings") -> None:
    """Two trust zones: the analyst's side refuses a data dir holding correction keys (they let
    whoever reads the folder open every correction record), naming the file."""
    where = misplaced_keys(st)
    if where is not None:
        raise UsageError("%s: correction keys in the analyst's data dir, which must hold none; they belong in "
                         "the correction data dir %s (provision with --correction-data-dir %s), then remove "
                         "this copy" % (where, st.cs_dir, st.cs_dir))


def existing_analyst_db(st: "Settings") -> str:
    """The analyst's database URL for a command that only reads it (results, status): an SQLite
    file that is not there means a wrong folder, said in one line, never an empty new database."""
    import os

    from dpsense.cloud.storage import sqlite_file
    path = sqlite_file(st.analyst_db)
    if path is not None and not os.path.exists(path):
        raise UsageError("no analyst database at %s: give the analyst's folder (--data-dir) or --analyst-db; "
                         "`dpsense analyst` creates it" % path)
    return st.analyst_db


def broker_password(args: argparse.Namespace, account: str) -> str:
    """The service's broker password: ``--password-file`` (0600) or DPSENSE_BROKER_PASSWORD.
    The broker keeps no copy in clear (cloud/deploy/broker.py), so there is no other place to look."""
    import os

    from dpsense.cloud.deploy.files import read_secret
    path = getattr(args, "password_file", None)
    if path:
        return read_secret(path)
    pw = os.environ.get("DPSENSE_BROKER_PASSWORD")
    if pw:
        return pw
    raise UsageError("no broker password for account %s: give --password-file PATH (written by "
                     "`%s`) or set DPSENSE_BROKER_PASSWORD" % (account, account_command(account)))


def account_command(account: str) -> str:
    """The command that makes ``account`` and writes its password: a device's d<N> is made by
    add-device, a service's own connections (NAME-ingest, NAME-status, workers NAME-N) by
    add-account of their role."""
    import re
    m = re.fullmatch(r"d([0-9]+)", account)
    if m:
        return "dpsense broker add-device %s --password-file PATH" % m.group(1)
    m = re.fullmatch(r"(.+?)(?:-ingest|-status)?(?:-([0-9]+))?", account)
    name, worker = (m.group(1), m.group(2)) if m else (account, None)
    return "dpsense broker add-account %s%s --password-file PATH" % (
        name, " --workers %s" % worker if worker else "")


def check_transport(st: "Settings") -> None:
    """A password goes in clear only over loopback: a remote broker needs TLS (``--tls-ca``)."""
    from dpsense.cloud.deploy.broker import is_loopback
    if not st.tls_ca and not is_loopback(st.broker_host):
        raise UsageError("the broker at %s is not on loopback: give --tls-ca (the broker's CA) so "
                         "that the password does not cross the network in clear" % st.broker_host)


def connection_for(st: "Settings", user: str, password: str) -> "Connection":
    """Broker connection for an account; its client id is the account name (the broker
    enforces that: cloud/deploy/broker.py)."""
    from dpsense.cloud.transport.session import Connection
    check_transport(st)
    return Connection(st.broker_host, st.broker_port, user, password, user, tls_ca=st.tls_ca or None)


def _int_in(text: str, lo: int, hi: int | None) -> int:
    try:
        v = int(text)
    except ValueError:
        v = None
    if v is None or v < lo or (hi is not None and v > hi):
        want = "an integer >= %d" % lo if hi is None else "an integer in %d..%d" % (lo, hi)
        raise argparse.ArgumentTypeError("expected %s, got %r" % (want, text))
    return v


def count(lo: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``lo``."""
    return lambda text: _int_in(text, lo, None)


def seed(text: str) -> int:
    """An argparse type: a seed for data and noise, 0..4000000 (XorShift32 seeds per device stay
    below 2**32)."""
    return _int_in(text, 0, 4_000_000)


def port(text: str) -> int:
    """An argparse type: a TCP port."""
    return _int_in(text, 1, 65535)


def device_id(text: str) -> int:
    """An argparse type: a device id, 1..2**32-1 (its broker account is d<ID>)."""
    return _int_in(text, 1, 0xFFFFFFFF)


def seconds(text: str) -> float:
    """An argparse type: a duration in seconds, > 0."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError("expected a number of seconds > 0, got %r" % text)
    return v


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
        raise UsageError("%s must be integers" % name)
    return tuple(int(v) for v in values)


def profile_default(args: argparse.Namespace, st: "Settings", name: str, fallback: float) -> float:
    from dpsense.cloud.deploy.profile import load_profile
    v = getattr(args, name)
    if v is not None:
        return float(v)
    prof = load_profile(st.data_dir)
    return float(getattr(prof, name)) if prof is not None else fallback


class IngestThread:
    """The ingest loop of a service, in a thread; if it dies, it stops the whole service,
    whose command then reports why (``check``)."""

    def __init__(self, conn: "Connection", open_store: "Callable[[], object]", role: str,
                 stop: "threading.Event", share: str | None = None,
                 data_dir: "Path | None" = None) -> None:
        import threading
        self.error: BaseException | None = None
        self._conn, self._open, self._role, self._stop = conn, open_store, role, stop
        self._share = share         # an MQTT shared subscription group (docs/scale-out.md), or None
        self._data_dir = data_dir   # the correction role's key store lives there
        self.thread = threading.Thread(target=self._run, name="ingest-" + role, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from dpsense.cloud.correction.sealed import sealed_ingest
        from dpsense.cloud.analyst.devices import status_ingest
        from dpsense.cloud.ingest.service import IngestService
        try:
            with self._open() as store:  # type: ignore[attr-defined]
                if self._role == "correction":
                    # Sealed records only (and plain ones from devices configured plaintext).
                    assert self._data_dir is not None, "the correction ingest needs its data dir"
                    sealed_ingest(self._conn, store, self._data_dir, share=self._share).run(self._stop)
                    return
                make = {"analyst": IngestService.for_analyst, "status": status_ingest}[self._role]
                make(self._conn, store, share=self._share).run(self._stop)
        except BaseException as e:  # noqa: BLE001 - raised again in the command's thread by check()
            self.error = e
            self._stop.set()

    def join(self) -> None:
        self.thread.join(15)

    def check(self) -> None:
        """Raise, in the caller's thread, what stopped the ingest (one line: ServiceError)."""
        e = self.error
        if e is None:
            return
        if isinstance(e, ServiceError):         # its text already says the ingest stopped
            raise e
        what = str(e) if isinstance(e, DpsenseError) else "%s: %s" % (type(e).__name__, e)
        raise ServiceError("ingest stopped: %s" % what) from e


def stop_on_sigterm() -> "threading.Event":
    """An event that SIGTERM sets, so a service stops cleanly (flushing its batch) on `kill`."""
    import signal
    import threading
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    return stop
