"""``dpsense broker|ingest|analyst|correction-server|gateway|status|simulate``: the running system."""
from __future__ import annotations

import argparse
import sys

from dpsense.cloud.commands.common import (
    IngestThread,
    add_common,
    connection_for,
    profile_default,
    settings_from,
    stop_on_sigterm,
)


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

    from dpsense.cloud.broker import Broker, BrokerError
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
            stop = stop_on_sigterm()
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


def parser_ingest(p: argparse.ArgumentParser) -> None:
    p.add_argument("--role", choices=("analyst", "correction"), required=True,
                   help="analyst: store reading records; correction: store correction records")
    p.add_argument("--user", help="broker account (default: the role name)")
    p.add_argument("--batch-size", type=int, default=500, help="messages per commit (default 500)")
    p.add_argument("--idle-exit", type=float, help="stop after this many seconds without a message")
    add_common(p)


def do_ingest(args: argparse.Namespace) -> int:

    from dpsense.cloud.broker import BrokerError
    from dpsense.cloud.ingest.service import IngestService
    from dpsense.cloud.storage import open_analyst_store, open_correction_store
    from dpsense.cloud.storage.repository import AnalystStore, CorrectionStore, StorageError
    st = settings_from(args)
    stop = stop_on_sigterm()
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
    from dpsense.cloud.storage import open_analyst_store, open_correction_store
    from dpsense.cloud.storage.repository import StorageError
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


def parser_analyst(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dbscan-eps", type=float, help="DBSCAN radius in data units (default: profile.json, else 12)")
    p.add_argument("--dbscan-min-samples", type=int, help="DBSCAN min_samples (default: profile.json, else 60)")
    p.add_argument("--quantum", type=float, help="units per quantum (default: profile.json, else 0.01)")
    p.add_argument("--window", type=int, default=100_000, help="readings per detection window (default 100000)")
    p.add_argument("--detector", choices=("dbscan", "kr", "beta_r"), default="dbscan",
                   help="outlier notion per window: DBSCAN noise (default), (k, r) outliers with "
                        "k = min-samples and r = dbscan-eps, or (beta, r) anomalies with beta = min-samples")
    p.add_argument("--flush-idle", type=float,
                   help="also process a partial window once nothing arrived for this many seconds")
    p.add_argument("--exit-when-done", action="store_true",
                   help="exit once every stored reading is in a processed window (needs --flush-idle)")
    p.add_argument("--no-ingest", action="store_true", help="only detect; another process runs `dpsense ingest`")
    p.add_argument("--correction-mode", choices=("paper", "bands"), default="bands",
                   help="correction round: paper (SPEC 1.5 messages) or bands (radial index sets; "
                        "default); the correction server must run the same mode")
    p.add_argument("--band-width", type=float,
                   help="mode bands: band width in data units (default: profile.json)")
    p.add_argument("--skip-margin", type=float, default=0.05,
                   help="mode paper: no round when |O'| is within this share of the expected outlier count "
                        "(default 0.05; negative: always run the round)")
    add_common(p)


def do_analyst(args: argparse.Namespace) -> int:

    from dpsense.cloud.analyst import Analyst, AnalystParams
    from dpsense.cloud.broker import BrokerError
    from dpsense.cloud.simulate import load_profile
    from dpsense.cloud.storage import open_analyst_store
    from dpsense.cloud.storage.repository import StorageError
    st = settings_from(args)
    stop = stop_on_sigterm()
    try:
        quantum = profile_default(args, st, "quantum", 0.01)
        prof = load_profile(st.data_dir)
        band_q = args.band_width / quantum if args.band_width is not None else (
            prof.band_width_q if prof is not None else 0.0)
        if args.correction_mode == "bands" and not band_q > 0:
            raise ValueError("mode bands needs --band-width (data units) or a profile.json with a band width")
        params = AnalystParams(eps_q=profile_default(args, st, "dbscan_eps", 12.0) / quantum,
                               min_samples=int(profile_default(args, st, "dbscan_min_samples", 60)),
                               window=args.window, detector=args.detector, mode=args.correction_mode,
                               band_width_q=band_q, centre_q=prof.centre_q if prof is not None else None,
                               skip_margin=args.skip_margin)
        opener = lambda: open_analyst_store(st.analyst_db)  # noqa: E731
        opener().close()            # create the database once, before two threads open it
        ingest = None
        if not args.no_ingest:
            ingest = IngestThread(connection_for(st, "analyst", "dpsense-ingest-analyst"), opener, "analyst", stop)
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
    p.add_argument("--correction-mode", choices=("paper", "bands"), default="bands",
                   help="the one round mode this server answers (default bands); others get an error reply")
    p.add_argument("--split", choices=("noise", "otsu", "trimmed_gap", "gap"), default="noise",
                   help="mode paper: FP/TP split rule; noise (default) is the never-worse rule with the "
                        "provable FN layers, otsu/trimmed_gap/gap the 2017 reconstruction (SPEC 1.5)")
    p.add_argument("--alpha", type=float, default=0.005,
                   help="split noise: bound on P(d_diff > tau) for any row (default 0.005)")
    p.add_argument("--bound", choices=("R1", "R2", "R3"), default="R1", help="FN_L3 upper bound (default R1)")
    p.add_argument("--no-guard", action="store_true", help="accept every split (paper-literal; not advised)")
    p.add_argument("--no-ingest", action="store_true", help="only answer rounds; another process ingests")
    add_common(p)


def do_correction(args: argparse.Namespace) -> int:

    from dpsense.cloud.broker import BrokerError
    from dpsense.cloud.correction.rules import CorrectionParams
    from dpsense.cloud.correction.server import CorrectionServer, check_mode
    from dpsense.cloud.simulate import load_profile
    from dpsense.cloud.storage import open_correction_store
    from dpsense.cloud.storage.repository import StorageError
    st = settings_from(args)
    stop = stop_on_sigterm()
    try:
        prof = load_profile(st.data_dir)
        w_o = args.w_o
        if w_o is None:
            if prof is None:
                raise ValueError("give --w-o (outlier-layer width in quanta) or run `dpsense simulate` "
                                 "first, which writes profile.json")
            w_o = prof.w_o_q
        if prof is None and (args.correction_mode == "bands" or args.split == "noise"):
            raise ValueError("mode bands and split noise need profile.json (relaxed sensitivities and epsilon); "
                             "--correction-mode paper --split otsu runs the 2017 rules without it")
        noise = args.split == "noise"
        params = CorrectionParams(w_o=float(w_o), split=args.split, bound=args.bound, guard=not args.no_guard,
                                  layers="provable" if noise else "paper", alpha=args.alpha,
                                  noise_scale=prof.noise_scale_q() if prof is not None else 0.0,
                                  columns=len(prof.delta_q) if prof is not None else 2,
                                  normal_radius=prof.normal_radius_q() if prof is not None else 0.0)
        check_mode(args.correction_mode, params)
        opener = lambda: open_correction_store(st.correction_db)  # noqa: E731
        opener().close()            # create the database once, before two threads open it
        ingest = None
        if not args.no_ingest:
            ingest = IngestThread(connection_for(st, "correction", "dpsense-ingest-correction"), opener,
                             "correction", stop)
        server = CorrectionServer(connection_for(st, "correction", "dpsense-correction"), params, opener,
                                  mode=args.correction_mode)
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


def parser_gateway(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", required=True, help="the board's serial port or pty (/dev/ttyACM0, /dev/pts/3)")
    p.add_argument("--device-id", type=int, required=True,
                   help="publish as device account d<ID> (password from the data dir or DPSENSE_BROKER_PASSWORD)")
    p.add_argument("--baud", type=int, default=115200, help="serial speed (default 115200)")
    p.add_argument("--idle-exit", type=float, help="stop after this many seconds without a byte")
    p.add_argument("--keepalive", type=int, default=60,
                   help="MQTT keepalive in seconds: a broker that stops answering is noticed "
                        "within about that long, then the gateway reconnects and resends "
                        "(default 60)")
    add_common(p)


def do_gateway(args: argparse.Namespace) -> int:

    from dpsense.cloud.broker import BrokerError
    from dpsense.cloud.gateway import run
    st = settings_from(args)
    stop = stop_on_sigterm()
    try:
        conn = connection_for(st, "d%d" % args.device_id, "unused")
        run(args.port, args.device_id, st.broker_host, st.broker_port, conn.password, baud=args.baud,
            stop=stop, idle_exit=args.idle_exit, keepalive=args.keepalive)
    except KeyboardInterrupt:
        pass
    except (BrokerError, ConnectionError, OSError, ValueError) as e:
        print("dpsense gateway: %s" % e, file=sys.stderr)
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
    from dpsense.cloud.simulate import FleetError, run_simulation
    try:
        run_simulation(settings_from(args), args)
    except (FleetError, ValueError) as e:
        print("dpsense simulate: %s" % e, file=sys.stderr)
        return 1
    return 0
