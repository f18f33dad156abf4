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
    e3 = sub.add_parser("paper3", help="paper 3 on Adult: DP-PCA error vs LAP/EXP, DP-LDA accuracy and AUC",
                        description="Reproduce paper 3 (SPEC 3.7) on UCI Adult; writes results.md, runs.csv and "
                                    "paper3.png. The defaults take about a minute; --full uses the paper's sizes.")
    e3.add_argument("--epsilons", type=_floats, default=(0.1, 0.25, 0.5, 1.0, 1.25, 1.5),
                    help="comma-separated epsilons (default 0.1,0.25,0.5,1,1.25,1.5)")
    e3.add_argument("--ks", type=_floats, default=tuple(range(1, 11)), help="comma-separated k (default 1..10)")
    e3.add_argument("--trials", type=int, default=3, help="trials averaged (default 3)")
    e3.add_argument("--n", type=int, default=None, help="use a random subset of this many Adult rows (default all)")
    e3.add_argument("--lda-synthetic", type=int, default=5000,
                    help="synthetic records per DP-LDA run (default 5000; 0 = as many as training rows)")
    e3.add_argument("--full", action="store_true",
                    help="paper sizes: 10 trials and as many synthetic records as training rows")
    e3.add_argument("--out", default="out/paper3", help="output directory (default out/paper3)")
    e3.add_argument("--seed", type=int, default=1, help="seed of splits and noise (default 1)")
    e4 = sub.add_parser("paper4", help="paper 4, Figs. 3-7: DP outlier counts (1) and top-h subspaces (2)",
                        description="Reproduce paper 4 (SPEC 4.9): --scenario 1 (noise std-dev of the count, "
                                    "smooth vs global) or 2 (precision/recall of the top-h subspaces); writes "
                                    "scenarioN.md and scenarioN.png. Paper-mode columns are labelled NOT DP.")
    e4.add_argument("--scenario", type=int, choices=(1, 2), required=True, help="1 or 2")
    e4.add_argument("--epsilons", type=_floats, default=None,
                    help="comma-separated epsilons (default 0.1..0.9 for 1, 0.2,0.4,0.8,1.6,3.2 for 2)")
    e4.add_argument("--hs", type=_floats, default=(1, 2, 3, 4, 5), help="scenario 2: values of h (default 1..5)")
    e4.add_argument("--draws", type=int, default=3, help="data draws averaged (default 3)")
    e4.add_argument("--runs", type=int, default=1000, help="scenario 2: selections per cell and draw (default 1000)")
    e4.add_argument("--full", action="store_true", help="paper-size averaging: 20 draws (overrides --draws)")
    e4.add_argument("--adult-positive", choices=(">50K", "<=50K"), default=">50K",
                    help="Adult label taken as inliers (default >50K, SPEC 4.9)")
    e4.add_argument("--out", default="out/paper4", help="output directory (default out/paper4)")
    e4.add_argument("--seed", type=int, default=1, help="seed of data and selections (default 1)")
    e2 = sub.add_parser("paper2", help="paper 2: DP vs sensitively private (beta, r)-anomaly identification",
                        description="Accuracy of the DP and (epsilon, k)-SP anomaly identification queries on "
                                    "anomalies and normal records (SPEC 2.7); writes results.md, rows.csv and "
                                    "paper2.png.")
    e2.add_argument("--datasets", default="synthetic,ionosphere",
                    help="comma-separated: synthetic, ionosphere (default both)")
    e2.add_argument("--epsilons", type=_floats, default=(0.01, 0.1, 0.5, 1.0, 2.0),
                    help="comma-separated epsilons (default 0.01,0.1,0.5,1,2)")
    e2.add_argument("--ks", type=_floats, default=(1, 3), help="comma-separated k of the SP mechanism (default 1,3)")
    e2.add_argument("--beta", type=int, default=5, help="anomaly threshold beta (default 5)")
    e2.add_argument("--anomaly-share", type=float, default=0.05,
                    help="r is set so that about this share of records are anomalies (default 0.05)")
    e2.add_argument("--n", type=int, default=2000, help="synthetic records (default 2000)")
    e2.add_argument("--out", default="out/paper2", help="output directory (default out/paper2)")
    e2.add_argument("--seed", type=int, default=1, help="seed of data and answers (default 1)")
    ev = sub.add_parser("verify", help="paper 1 + 2: verify the corrected candidate set with SP anomaly queries",
                        description="Run the paper-1 correction protocol on one window, then answer an "
                                    "(epsilon, k)-SP (beta, r)-anomaly query per candidate; writes results.md.")
    ev.add_argument("--n", type=int, default=20_000, help="points in the window (default 20000)")
    ev.add_argument("--separation", type=float, default=220.0, help="paper-1 separation (default 220)")
    ev.add_argument("--epsilon-ldp", type=float, default=0.5, help="local epsilon per column (default 0.5)")
    ev.add_argument("--dbscan-eps", type=float, default=12.0, help="DBSCAN eps = r (default 12)")
    ev.add_argument("--dbscan-min-samples", type=int, default=12,
                    help="DBSCAN min_samples; beta = min_samples - 1 (default 12, for n = 20000)")
    ev.add_argument("--epsilons", type=_floats, default=(0.1, 0.5, 1.0),
                    help="comma-separated epsilons of the anomaly queries (default 0.1,0.5,1)")
    ev.add_argument("--ks", type=_floats, default=(1, 5), help="comma-separated k (default 1,5)")
    ev.add_argument("--out", default="out/verify", help="output directory (default out/verify)")
    ev.add_argument("--seed", type=int, default=1, help="seed of data, noise and answers (default 1)")


def _ints(name: str, values: tuple[float, ...]) -> tuple[int, ...]:
    if any(v != int(v) for v in values):
        raise ValueError("%s must be integers" % name)
    return tuple(int(v) for v in values)


def _do_paper2(args: argparse.Namespace) -> int:
    from cloud.experiments.paper2 import Paper2Config, main
    try:
        cfg = Paper2Config(datasets=tuple(d.strip() for d in args.datasets.split(",") if d.strip()),
                           epsilons=args.epsilons, ks=_ints("--ks", args.ks), beta=args.beta,
                           anomaly_share=args.anomaly_share, n_synthetic=args.n, seed=args.seed)
    except (TypeError, ValueError) as e:
        print("dpsense experiment: %s" % e, file=sys.stderr)
        return 2
    return main(cfg, args.out)


def _do_verify(args: argparse.Namespace) -> int:
    from cloud.experiments.verify import VerifyConfig, main
    try:
        cfg = VerifyConfig(n=args.n, separation=args.separation, epsilon_ldp=args.epsilon_ldp,
                           dbscan_eps=args.dbscan_eps, dbscan_min_samples=args.dbscan_min_samples,
                           epsilons=args.epsilons, ks=_ints("--ks", args.ks), seed=args.seed)
    except (TypeError, ValueError) as e:
        print("dpsense experiment: %s" % e, file=sys.stderr)
        return 2
    return main(cfg, args.out)


def _do_paper3(args: argparse.Namespace) -> int:
    from cloud.experiments.paper3 import Paper3Config, main
    try:
        synth = None if args.full or args.lda_synthetic == 0 else args.lda_synthetic
        cfg = Paper3Config(epsilons=args.epsilons, ks=_ints("--ks", args.ks), trials=10 if args.full else args.trials,
                           n=args.n, lda_synthetic=synth, seed=args.seed)
    except (TypeError, ValueError) as e:
        print("dpsense experiment: %s" % e, file=sys.stderr)
        return 2
    return main(cfg, args.out)


def _do_paper4(args: argparse.Namespace) -> int:
    from cloud.experiments.paper4 import Paper4Config, main
    try:
        if any(h != int(h) for h in args.hs):
            raise ValueError("--hs must be integers")
        cfg = Paper4Config(scenario=args.scenario, epsilons=args.epsilons or (), hs=tuple(int(h) for h in args.hs),
                           draws=20 if args.full else args.draws, runs=args.runs,
                           adult_positive=args.adult_positive, seed=args.seed)
    except (TypeError, ValueError) as e:
        print("dpsense experiment: %s" % e, file=sys.stderr)
        return 2
    return main(cfg, args.out)


def do_experiment(args: argparse.Namespace) -> int:
    if args.experiment == "paper4":
        return _do_paper4(args)
    if args.experiment == "paper2":
        return _do_paper2(args)
    if args.experiment == "verify":
        return _do_verify(args)
    if args.experiment == "paper3":
        return _do_paper3(args)
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
    cal = sub.add_parser("calibrate", help="DP calibration of the device profile from raw calibration data",
                         description="Relaxed sensitivity (DP quantiles), centre (DP mean) and w_O (DP radius "
                                     "quantiles) from a CSV, charged to the data set's budget; writes a "
                                     "profile.json that `dpsense simulate`/`analyst`/`correction-server` and the "
                                     "firmware provisioning read.")
    cal.add_argument("--csv", required=True, help="numeric CSV with a header row; a column 'outlier' is ignored")
    cal.add_argument("--epsilon", type=exact, required=True, help="curator epsilon for the whole calibration")
    cal.add_argument("--bounds", type=_floats, required=True,
                     help="LOWER,UPPER: public range of every column (values are clipped to it)")
    cal.add_argument("--device-epsilon", default="0.5", help="epsilon per column on the devices (default 0.5)")
    cal.add_argument("--quantum", type=float, default=0.01, help="units per quantum (default 0.01)")
    cal.add_argument("--outlier-percent", type=float, default=10.0, help="p_o of SPEC 1.3 (default 10)")
    cal.add_argument("--grid", type=int, default=10001, help="candidates per DP quantile (default 10001)")
    cal.add_argument("--dbscan-eps", type=float, default=12.0, help="copied into the profile (default 12)")
    cal.add_argument("--dbscan-min-samples", type=int, default=60, help="copied into the profile (default 60)")
    cal.add_argument("--dataset", required=True, help="data set whose budget is charged")
    cal.add_argument("--db", help="budget database (default <data dir>/budget.db, env DPSENSE_DATA_DIR)")
    cal.add_argument("--out", required=True, help="profile JSON to write (e.g. dpsense-data/profile.json)")
    cal.add_argument("--seed", type=int, default=None, help="seed the noise (testing only; default: OS randomness)")


def _do_calibrate(args: argparse.Namespace) -> int:
    import random
    from pathlib import Path

    from cloud.config import Settings
    from cloud.privacy.accountant import BudgetAccountant, BudgetError
    from cloud.privacy.calibration import dp_calibrate, load_csv
    try:
        if len(args.bounds) != 2:
            raise ValueError("--bounds must be LOWER,UPPER")
        db = Path(args.db) if args.db else Settings.resolve().data_dir / "budget.db"
        acct = BudgetAccountant(db, create=False)
        prof = dp_calibrate(lambda: load_csv(args.csv), bounds=(args.bounds[0], args.bounds[1]),
                            epsilon=args.epsilon, device_epsilon=args.device_epsilon, quantum=args.quantum,
                            outlier_percent=args.outlier_percent, grid=args.grid, dbscan_eps=args.dbscan_eps,
                            dbscan_min_samples=args.dbscan_min_samples,
                            rng=random.Random(args.seed) if args.seed is not None else None,
                            accountant=acct, dataset=args.dataset)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(prof.to_json())
        print(prof.to_json())
        print("dpsense curator: wrote %s; charged epsilon %s to %s" % (args.out, args.epsilon, args.dataset),
              file=sys.stderr)
    except (BudgetError, FileNotFoundError, OSError) as e:
        print("dpsense curator: %s" % e, file=sys.stderr)
        return 1
    except (TypeError, ValueError) as e:
        print("dpsense curator: %s" % e, file=sys.stderr)
        return 2
    return 0


def do_curator(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cloud.config import Settings
    from cloud.privacy.accountant import BudgetAccountant, BudgetError
    if args.area == "calibrate":
        return _do_calibrate(args)
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


def parser_query(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="query", metavar="QUERY", required=True)
    for name, text in (("count", "DP count of distance-based outliers, q_count(X, k, r, S) (paper 4, SPEC 4.1-4.6)"),
                       ("subspaces", "DP top-h outlier subspaces (exponential mechanism), then DP counts "
                                     "(paper 4, SPEC 4.7)")):
        q = sub.add_parser(name, help=text, description=text)
        q.add_argument("--csv", required=True, help="numeric CSV, one record per row (a header row is skipped)")
        q.add_argument("--k", type=int, default=3, help="outliers have fewer than k neighbours (default 3)")
        q.add_argument("--r", type=float, required=True, help="radius in the normalised subspace distance")
        q.add_argument("--delta", type=float, default=0.01, help="delta of the Gaussian count(s) (default 0.01)")
        q.add_argument("--method", choices=("smooth", "global"), default="smooth",
                       help="count mechanism: smooth (NRS) or global (Theorem 4 upper bound); default smooth")
        q.add_argument("--dataset", help="charge this data set's budget (see `dpsense curator budget`)")
        q.add_argument("--db", help="budget database (default <data dir>/budget.db, env DPSENSE_DATA_DIR)")
        q.add_argument("--seed", type=int, default=None, help="seed the noise (testing only; default: OS randomness)")
        if name == "count":
            q.add_argument("--epsilon", type=float, required=True, help="epsilon of the count")
            q.add_argument("--subspace", type=_floats, default=None, help="comma-separated column indices (0-based)")
            q.add_argument("--paper-mode", action="store_true",
                           help="the paper's smooth calibration: NOT differentially private, never charged")
        else:
            q.add_argument("--h", type=int, required=True, help="number of subspaces")
            q.add_argument("--epsilon-select", type=float, required=True, help="epsilon of the selection (total)")
            q.add_argument("--epsilon-count", type=float, default=None,
                           help="total epsilon of the h counts (default: no counts)")
            q.add_argument("--paper-mode", action="store_true",
                           help="selection as printed, exp((epsilon/h) u): 2*epsilon-DP, NOT epsilon-DP")
    _parser_identify(sub)


def _parser_identify(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    text = ("is this record a (beta, r)-anomaly of the data? DP or sensitively private answer "
            "(paper 2, SPEC 2.4-2.5); always charged to a data set's budget")
    q = sub.add_parser("identify", help=text, description=text,
                       epilog="example: dpsense query identify --csv data.csv --record 3.1,0.2 --beta 5 "
                              "--r 1.5 --epsilon 0.5 --sp-k 1 --dataset fleet")
    q.add_argument("--csv", required=True, help="numeric CSV, one record per row (a header row is skipped)")
    q.add_argument("--record", required=True, type=_floats, help="the queried record, comma-separated values")
    q.add_argument("--beta", type=int, required=True, help="anomaly: at most beta records within r (itself included)")
    q.add_argument("--r", type=float, required=True, help="ball radius (Euclidean)")
    q.add_argument("--epsilon", type=float, required=True, help="epsilon of the answer")
    q.add_argument("--sp-k", type=int, default=None,
                   help="sensitively private with this k (protects normal records at epsilon); "
                        "default: the epsilon-DP mechanism")
    q.add_argument("--dataset", required=True, help="charge this data set's budget (see `dpsense curator budget`)")
    q.add_argument("--db", help="budget database (default <data dir>/budget.db, env DPSENSE_DATA_DIR)")
    q.add_argument("--seed", type=int, default=None, help="seed the randomness (testing only)")


def _query_csv(path: str) -> "object":
    import numpy as np
    a = np.genfromtxt(path, delimiter=",", dtype=float)
    if a.ndim == 1:
        a = a[:, None] if a.size and not np.isnan(a).all() else a.reshape(1, -1)
    if a.shape[0] and np.isnan(a[0]).all():
        a = a[1:]
    if a.size == 0 or np.isnan(a).any():
        raise ValueError("%s: expected a numeric CSV without missing values" % path)
    return a


def do_query(args: argparse.Namespace) -> int:
    import random
    from pathlib import Path

    from cloud.config import Settings
    from cloud.privacy.accountant import BudgetAccountant, BudgetError
    try:
        x = _query_csv(args.csv)
        acct = None
        if args.dataset:
            db = Path(args.db) if args.db else Settings.resolve().data_dir / "budget.db"
            acct = BudgetAccountant(db, create=False)
        rng = random.Random(args.seed) if args.seed is not None else None
        if args.query == "identify":
            from cloud.privacy.identify import identify
            if acct is None:
                raise ValueError("--dataset is required")
            bit = identify(lambda: x, args.record, beta=args.beta, r=args.r, epsilon=args.epsilon,
                           accountant=acct, dataset=args.dataset, k=args.sp_k, rng=rng)
            print("anomaly: %s" % ("yes" if bit else "no"))
            print("guarantee: %s" % ("%g-DP (add/remove one record)" % args.epsilon if args.sp_k is None else
                                     "(%g, %d)-sensitively private" % (args.epsilon, args.sp_k)))
        elif args.query == "count":
            from cloud.privacy.outlier_count import dp_outlier_count
            cols = None
            if args.subspace is not None:
                if any(c != int(c) for c in args.subspace):
                    raise ValueError("--subspace must hold integer column indices")
                cols = [int(c) for c in args.subspace]
            rel = dp_outlier_count(x, k=args.k, r=args.r, epsilon=args.epsilon, delta=args.delta, subspace=cols,
                                   method=args.method, paper_mode=args.paper_mode, accountant=acct,
                                   dataset=args.dataset, rng=rng)
            print("outlier count (subspace %s): %s" % (",".join(map(str, rel.subspace)), rel.value))
            print("guarantee: %s" % rel.guarantee)
        else:
            from cloud.privacy.subspaces import subspaces_with_counts, top_h_subspaces
            if args.epsilon_count is None:
                sel = top_h_subspaces(x, k=args.k, r=args.r, h=args.h, epsilon=args.epsilon_select,
                                      paper_mode=args.paper_mode, accountant=acct, dataset=args.dataset, rng=rng)
                print("top-%d subspaces: %s" % (args.h, " ".join(",".join(map(str, s)) for s in sel.subspaces)))
                print("guarantee: %s" % sel.guarantee)
            else:
                if args.paper_mode:
                    raise ValueError("--paper-mode applies to the selection alone (omit --epsilon-count)")
                rel = subspaces_with_counts(x, k=args.k, r=args.r, h=args.h, epsilon_select=args.epsilon_select,
                                            epsilon_count=args.epsilon_count, delta=args.delta,
                                            count_method=args.method, accountant=acct, dataset=args.dataset,
                                            rng=rng)
                for s, c in zip(rel.subspaces, rel.counts):
                    print("subspace %s: outlier count %s" % (",".join(map(str, s)), c))
                print("guarantee: %s" % rel.guarantee)
        if acct is not None:
            print(acct.summary(args.dataset))
    except (BudgetError, FileNotFoundError, OSError) as e:
        print("dpsense query: %s" % e, file=sys.stderr)
        return 1
    except (TypeError, ValueError) as e:
        print("dpsense query: %s" % e, file=sys.stderr)
        return 2
    return 0


def parser_gateway(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", required=True, help="the board's serial port or pty (/dev/ttyACM0, /dev/pts/3)")
    p.add_argument("--device-id", type=int, required=True,
                   help="publish as device account d<ID> (password from the data dir or DPSENSE_BROKER_PASSWORD)")
    p.add_argument("--baud", type=int, default=115200, help="serial speed (default 115200)")
    p.add_argument("--idle-exit", type=float, help="stop after this many seconds without a byte")
    add_common(p)


def do_gateway(args: argparse.Namespace) -> int:
    import signal
    import threading

    from cloud.broker import BrokerError
    from cloud.gateway import run
    st = settings_from(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    try:
        conn = connection_for(st, "d%d" % args.device_id, "unused")
        run(args.port, args.device_id, st.broker_host, st.broker_port, conn.password, baud=args.baud,
            stop=stop, idle_exit=args.idle_exit)
    except KeyboardInterrupt:
        pass
    except (BrokerError, ConnectionError, OSError, ValueError) as e:
        print("dpsense gateway: %s" % e, file=sys.stderr)
        return 1
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None], str]] = {
    "demo": (do_demo, parser_demo, "the whole system on this machine: broker, analyst, correction server, "
                                   "a simulated fleet, and a report"),
    "perturb": (do_perturb, parser_perturb, "perturb a synthetic window with the board code and summarise it"),
    "broker": (do_broker, parser_broker, "run Mosquitto for dpsense and manage its accounts"),
    "ingest": (do_ingest, parser_ingest, "store records from the broker (QoS 1, acknowledged after commit)"),
    "gateway": (do_gateway, parser_gateway, "relay a serial board's framed records to the broker as its device account"),
    "analyst": (do_analyst, parser_analyst, "ingest readings and detect outliers per window, with correction rounds"),
    "correction-server": (do_correction, parser_correction,
                          "ingest correction records and answer correction rounds (sees no values)"),
    "status": (do_status, parser_status, "counts, sequence gaps and dead letters of both stores"),
    "simulate": (do_simulate, parser_simulate, "publish a data set as N virtual devices through the broker"),
    "experiment": (do_experiment, parser_experiment,
                   "reproduce a paper's experiment (paper1: Fig. 3; paper2; paper4: Figs. 3-7; verify: paper 1 + 2)"),
    "curator": (do_curator, parser_curator, "privacy budgets of the curated data sets (curator budget ...)"),
    "query": (do_query, parser_query, "private queries on a CSV data set (query count | query subspaces)"),
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
