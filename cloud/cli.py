"""The ``dpsense`` command: a table of subcommands, each ``do_<name>(args) -> int``."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import threading

    from cloud.config import Settings
    from cloud.ingest.service import Connection

from cloud import __version__


def parser_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=100_000, help="readings (default 100000)")
    p.add_argument("--devices", type=int, default=10, help="simulated devices (default 10)")
    p.add_argument("--separation", type=float, default=220.0,
                   help="gap between normal readings and outliers, paper 1 (default 220)")
    p.add_argument("--shape", choices=("scale", "shift"), default="scale",
                   help="how outliers are pushed out (SPEC 1.7; default scale)")
    p.add_argument("--epsilon", default="0.5", help="epsilon per column, a decimal (default 0.5)")
    p.add_argument("--seed", type=int, default=1, help="seed for data and noise (default 1)")
    p.add_argument("--out", default="out/demo", help="report and data folder (default out/demo)")
    p.add_argument("--no-sweep", action="store_true", help="skip the accuracy-vs-epsilon sweep")


def do_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cloud.broker import BrokerError
    from cloud.pipeline import DemoError, DemoOptions, run_pipeline_demo
    try:
        opts = DemoOptions(n=args.n, devices=args.devices, separation=args.separation, shape=args.shape,
                           epsilon=args.epsilon, seed=args.seed, out=Path(args.out), sweep=not args.no_sweep)
        return run_pipeline_demo(opts)
    except (ValueError, DemoError, BrokerError) as e:
        print("dpsense demo: %s" % e, file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1


def parser_perturb(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=100_000, help="readings in the window (default 100000)")
    p.add_argument("--separation", type=float, default=220.0,
                   help="gap between normal readings and outliers, paper 1 (default 220)")
    p.add_argument("--shape", choices=("scale", "shift"), default="scale",
                   help="how outliers are pushed out (SPEC 1.7; default scale)")
    p.add_argument("--epsilon", default="0.5", help="epsilon per column, a decimal (default 0.5)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed for data and noise; 0 draws noise from the OS CSPRNG (default 1)")


def do_perturb(args: argparse.Namespace) -> int:
    from cloud.perturb_summary import SummaryOptions, run_summary
    try:
        opts = SummaryOptions(n=args.n, separation=args.separation, shape=args.shape,
                              epsilon=args.epsilon, seed=args.seed)
        return run_summary(opts)
    except ValueError as e:
        print("dpsense perturb: %s" % e, file=sys.stderr)
        return 2


def parser_version(p: argparse.ArgumentParser) -> None:
    pass


def do_version(args: argparse.Namespace) -> int:
    from shared_protocol import PROTOCOL_VERSION
    print("dpsense %s (wire protocol v%d)" % (__version__, PROTOCOL_VERSION))
    return 0


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
    from cloud.config import Settings
    return Settings.resolve(data_dir=args.data_dir, broker_host=args.broker_host,
                            broker_port=args.broker_port, analyst_db=args.analyst_db,
                            correction_db=args.correction_db)


def parser_broker(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="write the configuration and run Mosquitto until interrupted")
    add_common(run)
    acc = sub.add_parser("add-account", help="create or reset a role account and print its password")
    acc.add_argument("name", help="account name, e.g. analyst")
    acc.add_argument("--role", choices=("analyst", "correction", "curator"),
                     help="role (default: the name)")
    add_common(acc)
    dev = sub.add_parser("add-device", help="create or reset device account d<ID> and print its password")
    dev.add_argument("device_id", type=int)
    add_common(dev)
    ls = sub.add_parser("accounts", help="list accounts and roles")
    add_common(ls)


def do_broker(args: argparse.Namespace) -> int:
    import signal
    import threading

    from cloud.broker import Broker, BrokerError
    st = settings_from(args)
    b = Broker(st.data_dir, port=st.broker_port, host=st.broker_host)
    try:
        if args.action == "add-account":
            print(b.add_account(args.name, args.role))
        elif args.action == "add-device":
            name, pw = b.add_device(args.device_id)
            print("%s %s" % (name, pw))
        elif args.action == "accounts":
            for name, role in sorted(b.accounts().items()):
                print("%-16s %s" % (name, role))
        else:
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *a: stop.set())
            with b.running():
                print("broker: mosquitto on %s:%d, files in %s (log %s); Ctrl-C stops it"
                      % (b.host, b.port, b.dir, b.log_path), file=sys.stderr, flush=True)
                try:
                    while not stop.wait(0.5) and b.pid is not None:
                        pass
                except KeyboardInterrupt:
                    pass
    except BrokerError as e:
        print("dpsense broker: %s" % e, file=sys.stderr)
        return 1
    return 0


def parser_simulate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--devices", type=int, default=10, help="virtual devices (default 10)")
    p.add_argument("--n", type=int, default=100_000, help="readings in all (default 100000)")
    p.add_argument("--csv", help="publish this CSV (numeric columns, header row) instead of synthetic data; "
                                 "an optional column named 'outlier' (0/1) is ground truth")
    p.add_argument("--separation", type=float, default=220.0, help="paper-1 generator (default 220)")
    p.add_argument("--shape", choices=("scale", "shift"), default="scale")
    p.add_argument("--epsilon", default="0.5", help="epsilon per column (default 0.5)")
    p.add_argument("--quantum", type=float, default=0.01, help="units per quantum (default 0.01)")
    p.add_argument("--seed", type=int, default=1, help="data and noise seed; 0 = OS randomness")
    add_common(p)


def do_simulate(args: argparse.Namespace) -> int:
    from cloud.simulate import FleetError, run_simulation
    try:
        run_simulation(settings_from(args), args)
    except (FleetError, ValueError) as e:
        print("dpsense simulate: %s" % e, file=sys.stderr)
        return 1
    return 0


def _floats(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers, for argparse."""
    try:
        vals = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated numbers, got %r" % text) from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one number")
    return vals


def parser_experiment(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="experiment", metavar="NAME", required=True)
    e = sub.add_parser("paper1", help="paper 1, Fig. 3: accuracy and subset size of the correction protocol",
                       description="Reproduce paper 1, Fig. 3 (SPEC 1.7) with the baselines; writes "
                                   "results.md, runs.csv and paper1.png.")
    e.add_argument("--separations", type=_floats, default=(50.0, 120.0, 220.0, 400.0),
                   help="comma-separated separations (default 50,120,220,400)")
    e.add_argument("--epsilons", type=_floats, default=(0.1, 0.5, 1.0),
                   help="comma-separated epsilons per column (default 0.1,0.5,1)")
    e.add_argument("--runs", type=int, default=5, help="noise runs per setting (default 5)")
    e.add_argument("--n", type=int, default=100_000, help="points per data set (default 100000)")
    e.add_argument("--shape", choices=("scale", "shift"), default="scale",
                   help="outlier generator, SPEC 1.7 (default scale)")
    e.add_argument("--split", choices=("otsu", "trimmed_gap", "gap"), default="otsu",
                   help="FP/TP split of line 3 (default otsu)")
    e.add_argument("--no-guard", dest="guard", action="store_false",
                   help="accept every FP/TP split (default: only clearly bimodal ones)")
    e.add_argument("--kappa-sep", type=float, default=3.0,
                   help="guard: class means at least this many pooled sds apart (default 3; 0 = off)")
    e.add_argument("--kappa-gap", type=float, default=0.0,
                   help="guard: gap at the threshold above this many median spacings (default 0 = off)")
    e.add_argument("--bound", choices=("R1", "R2", "R3"), default="R1",
                   help="upper bound of FN_L3, SPEC 1.5 (default R1)")
    e.add_argument("--dbscan-eps", type=float, default=12.0, help="DBSCAN eps in data units (default 12)")
    e.add_argument("--dbscan-min-samples", type=int, default=60, help="DBSCAN min_samples (default 60)")
    e.add_argument("--out", default="out/paper1", help="output directory (default out/paper1)")
    e.add_argument("--seed", type=int, default=1, help="seed of data and noise (default 1)")


def do_experiment(args: argparse.Namespace) -> int:
    from cloud.experiments.paper1 import Paper1Config, main
    try:
        cfg = Paper1Config(separations=args.separations, epsilons=args.epsilons, runs=args.runs, n=args.n,
                           shape=args.shape, split=args.split, bound=args.bound, guard=args.guard,
                           kappa_sep=args.kappa_sep, kappa_gap=args.kappa_gap, dbscan_eps=args.dbscan_eps,
                           dbscan_min_samples=args.dbscan_min_samples, seed=args.seed)
    except (TypeError, ValueError) as e:
        print("dpsense experiment: %s" % e, file=sys.stderr)
        return 2
    return main(cfg, args.out)


def connection_for(st: "Settings", user: str, client_id: str) -> "Connection":
    """Broker connection for a role account; the password comes from the broker's files
    (or DPSENSE_BROKER_PASSWORD when the broker runs elsewhere)."""
    import os

    from cloud.broker import Broker
    from cloud.ingest.service import Connection
    pw = os.environ.get("DPSENSE_BROKER_PASSWORD") or Broker(st.data_dir).password(user)
    return Connection(st.broker_host, st.broker_port, user, pw, client_id)


def parser_ingest(p: argparse.ArgumentParser) -> None:
    p.add_argument("--role", choices=("analyst", "correction"), required=True,
                   help="analyst: store reading records; correction: store correction records")
    p.add_argument("--user", help="broker account (default: the role name)")
    p.add_argument("--batch-size", type=int, default=500, help="messages per commit (default 500)")
    p.add_argument("--idle-exit", type=float, help="stop after this many seconds without a message")
    add_common(p)


def do_ingest(args: argparse.Namespace) -> int:
    import signal
    import threading

    from cloud.broker import BrokerError
    from cloud.ingest.service import IngestService
    from cloud.storage import open_analyst_store, open_correction_store
    from cloud.storage.repository import AnalystStore, CorrectionStore, StorageError
    st = settings_from(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    try:
        conn = connection_for(st, args.user or args.role, "dpsense-ingest-" + args.role)
        store: AnalystStore | CorrectionStore
        if args.role == "analyst":
            store = open_analyst_store(st.analyst_db)
            svc = IngestService.for_analyst(conn, store, batch_size=args.batch_size)
        else:
            store = open_correction_store(st.correction_db)
            svc = IngestService.for_correction(conn, store, batch_size=args.batch_size)
        print("ingest: %s records from %s:%d into %s" % (args.role, st.broker_host, st.broker_port,
              st.analyst_db if args.role == "analyst" else st.correction_db), file=sys.stderr, flush=True)
        try:
            svc.run(stop, idle_exit=args.idle_exit)
        except KeyboardInterrupt:
            pass
        finally:
            store.close()
    except (BrokerError, StorageError, ConnectionError, OSError) as e:
        print("dpsense ingest: %s" % e, file=sys.stderr)
        return 1
    return 0


def parser_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dead", type=int, default=5, help="show this many recent dead letters (default 5)")
    add_common(p)


def do_status(args: argparse.Namespace) -> int:
    from cloud.storage import open_analyst_store, open_correction_store
    from cloud.storage.repository import StorageError
    st = settings_from(args)
    try:
        with open_analyst_store(st.analyst_db) as a:
            gaps = a.gaps()
            print("analyst     %d readings, %d dead letters, %d device boots, %d missing sequence numbers"
                  % (a.count(), a.dead_letter_count(), len(gaps), sum(g.missing for g in gaps)))
            for d in a.dead_letters(args.dead):
                print("  dead: %-28s %-50s %d bytes" % (d.topic, d.reason[:50], len(d.payload)))
            results = a.window_results()
            if results:
                print("windows     %d processed" % len(results))
        with open_correction_store(st.correction_db) as c:
            print("correction  %d records, %d dead letters" % (c.count(), c.dead_letter_count()))
    except StorageError as e:
        print("dpsense status: %s" % e, file=sys.stderr)
        return 1
    return 0


def _profile_default(args: argparse.Namespace, st: "Settings", name: str, fallback: float) -> float:
    from cloud.simulate import load_profile
    v = getattr(args, name)
    if v is not None:
        return float(v)
    prof = load_profile(st.data_dir)
    return float(getattr(prof, name)) if prof is not None else fallback


def parser_analyst(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dbscan-eps", type=float, help="DBSCAN radius in data units (default: profile.json, else 12)")
    p.add_argument("--dbscan-min-samples", type=int, help="DBSCAN min_samples (default: profile.json, else 60)")
    p.add_argument("--quantum", type=float, help="units per quantum (default: profile.json, else 0.01)")
    p.add_argument("--window", type=int, default=100_000, help="readings per detection window (default 100000)")
    p.add_argument("--flush-idle", type=float,
                   help="also process a partial window once nothing arrived for this many seconds")
    p.add_argument("--exit-when-done", action="store_true",
                   help="exit once every stored reading is in a processed window (needs --flush-idle)")
    p.add_argument("--no-ingest", action="store_true", help="only detect; another process runs `dpsense ingest`")
    add_common(p)


class _Ingest:
    """The ingest loop of a service, in a thread; if it dies, it stops the whole service."""

    def __init__(self, conn: "Connection", open_store: "Callable[[], object]", role: str,
                 stop: "threading.Event") -> None:
        import threading
        self.error: BaseException | None = None
        self._conn, self._open, self._role, self._stop = conn, open_store, role, stop
        self.thread = threading.Thread(target=self._run, name="ingest-" + role, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from cloud.ingest.service import IngestService
        try:
            with self._open() as store:  # type: ignore[attr-defined]
                make = IngestService.for_analyst if self._role == "analyst" else IngestService.for_correction
                make(self._conn, store).run(self._stop)
        except BaseException as e:  # noqa: BLE001 - reported by the service's exit status
            self.error = e
            print("dpsense %s: ingest stopped: %s: %s" % (self._role, type(e).__name__, e),
                  file=sys.stderr, flush=True)
            self._stop.set()

    def join(self) -> None:
        self.thread.join(15)


def do_analyst(args: argparse.Namespace) -> int:
    import signal
    import threading

    from cloud.analyst import Analyst, AnalystParams
    from cloud.broker import BrokerError
    from cloud.storage import open_analyst_store
    from cloud.storage.repository import StorageError
    st = settings_from(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    try:
        quantum = _profile_default(args, st, "quantum", 0.01)
        params = AnalystParams(eps_q=_profile_default(args, st, "dbscan_eps", 12.0) / quantum,
                               min_samples=int(_profile_default(args, st, "dbscan_min_samples", 60)),
                               window=args.window)
        opener = lambda: open_analyst_store(st.analyst_db)  # noqa: E731
        opener().close()            # create the database once, before two threads open it
        ingest = None
        if not args.no_ingest:
            ingest = _Ingest(connection_for(st, "analyst", "dpsense-ingest-analyst"), opener, "analyst", stop)
        analyst = Analyst(connection_for(st, "analyst", "dpsense-analyst"), opener, params)
        try:
            analyst.run(stop, flush_when_idle=args.flush_idle, exit_when_done=args.exit_when_done)
        except KeyboardInterrupt:
            pass
        stop.set()
        if ingest is not None:
            ingest.join()
            if ingest.error is not None:
                return 1
    except (BrokerError, StorageError, ConnectionError, OSError, ValueError) as e:
        print("dpsense analyst: %s" % e, file=sys.stderr)
        return 1
    return 0


def parser_correction(p: argparse.ArgumentParser) -> None:
    p.add_argument("--w-o", type=float, help="outlier-layer width in quanta (default: profile.json)")
    p.add_argument("--split", choices=("otsu", "trimmed_gap", "gap"), default="otsu",
                   help="FP/TP split rule (SPEC 1.5; default otsu)")
    p.add_argument("--bound", choices=("R1", "R2", "R3"), default="R1", help="FN_L3 upper bound (default R1)")
    p.add_argument("--no-guard", action="store_true", help="accept every split (paper-literal; not advised)")
    p.add_argument("--no-ingest", action="store_true", help="only answer rounds; another process ingests")
    add_common(p)


def do_correction(args: argparse.Namespace) -> int:
    import signal
    import threading

    from cloud.broker import BrokerError
    from cloud.correction.rules import CorrectionParams
    from cloud.correction.server import CorrectionServer
    from cloud.simulate import load_profile
    from cloud.storage import open_correction_store
    from cloud.storage.repository import StorageError
    st = settings_from(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    try:
        w_o = args.w_o
        if w_o is None:
            prof = load_profile(st.data_dir)
            if prof is None:
                raise ValueError("give --w-o (outlier-layer width in quanta) or run `dpsense simulate` "
                                 "first, which writes profile.json")
            w_o = prof.w_o_q
        params = CorrectionParams(w_o=float(w_o), split=args.split, bound=args.bound, guard=not args.no_guard)
        opener = lambda: open_correction_store(st.correction_db)  # noqa: E731
        opener().close()            # create the database once, before two threads open it
        ingest = None
        if not args.no_ingest:
            ingest = _Ingest(connection_for(st, "correction", "dpsense-ingest-correction"), opener,
                             "correction", stop)
        server = CorrectionServer(connection_for(st, "correction", "dpsense-correction"), params, opener)
        try:
            server.run(stop)
        except KeyboardInterrupt:
            pass
        stop.set()
        if ingest is not None:
            ingest.join()
            if ingest.error is not None:
                return 1
    except (BrokerError, StorageError, ConnectionError, OSError, ValueError) as e:
        print("dpsense correction-server: %s" % e, file=sys.stderr)
        return 1
    return 0


def parser_curator(p: argparse.ArgumentParser) -> None:
    from decimal import Decimal, InvalidOperation

    def exact(text: str) -> Decimal:
        try:
            d = Decimal(text.strip())
        except InvalidOperation:
            raise argparse.ArgumentTypeError("expected a decimal number, got %r" % text) from None
        if not d.is_finite():
            raise argparse.ArgumentTypeError("expected a finite number, got %r" % text)
        return d

    sub = p.add_subparsers(dest="area", metavar="AREA", required=True)
    budget = sub.add_parser("budget", help="privacy budgets per data set",
                            description="Show, set or reset the (epsilon, delta) budget of a data set.")
    actions = budget.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("show", "budget, releases and what remains (all data sets without --dataset)"),
                       ("set", "create or change a budget; releases so far still count"),
                       ("reset", "stop counting the releases so far (they stay in the log)")):
        a = actions.add_parser(name, help=text, description=text)
        a.add_argument("--dataset", required=name != "show", help="data set name")
        if name == "set":
            a.add_argument("--epsilon", type=exact, required=True, help="total epsilon, >= 0")
            a.add_argument("--delta", type=exact, default=None, help="total delta in [0, 1) (default 0)")
        a.add_argument("--db", help="budget database (default <data dir>/budget.db, env DPSENSE_DATA_DIR)")


def do_curator(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cloud.config import Settings
    from cloud.privacy.accountant import BudgetAccountant, BudgetError
    try:
        db = Path(args.db) if args.db else Settings.resolve().data_dir / "budget.db"
        acct = BudgetAccountant(db, create=args.action == "set")
        if args.action == "set":
            acct.set_budget(args.dataset, args.epsilon, 0 if args.delta is None else args.delta)
            print(acct.summary(args.dataset))
        elif args.action == "reset":
            cost = acct.reset(args.dataset)
            print("data set %s: reset; the %s spent before are no longer counted" % (args.dataset, cost))
        else:
            names = [args.dataset] if args.dataset else acct.datasets()
            if not names:
                print("no budgets in %s" % db)
            print("\n\n".join(acct.summary(n) for n in names))
    except (BudgetError, FileNotFoundError, OSError) as e:
        print("dpsense curator: %s" % e, file=sys.stderr)
        return 1
    except (TypeError, ValueError) as e:
        print("dpsense curator: %s" % e, file=sys.stderr)
        return 2
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None], str]] = {
    "demo": (do_demo, parser_demo, "the whole system on this machine: broker, analyst, correction server, "
                                   "a simulated fleet, and a report"),
    "perturb": (do_perturb, parser_perturb, "perturb a synthetic window with the board code and summarise it"),
    "broker": (do_broker, parser_broker, "run Mosquitto for dpsense and manage its accounts"),
    "ingest": (do_ingest, parser_ingest, "store records from the broker (QoS 1, acknowledged after commit)"),
    "analyst": (do_analyst, parser_analyst, "ingest readings and detect outliers per window, with correction rounds"),
    "correction-server": (do_correction, parser_correction,
                          "ingest correction records and answer correction rounds (sees no values)"),
    "status": (do_status, parser_status, "counts, sequence gaps and dead letters of both stores"),
    "simulate": (do_simulate, parser_simulate, "publish a data set as N virtual devices through the broker"),
    "experiment": (do_experiment, parser_experiment, "reproduce a paper's experiment (paper1: Fig. 3)"),
    "curator": (do_curator, parser_curator, "privacy budgets of the curated data sets (curator budget ...)"),
    "version": (do_version, parser_version, "print versions"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpsense",
        description="Privacy-preserving outlier detection for sensor fleets.",
        epilog="example: dpsense demo --n 20000 --epsilon 0.1   (see `dpsense COMMAND --help`)",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, add_args, help_text) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not args.command:
        p.print_help()
        return 2
    return COMMANDS[args.command][0](args)


if __name__ == "__main__":
    sys.exit(main())
