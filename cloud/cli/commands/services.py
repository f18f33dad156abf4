"""``dpsense broker|ingest|analyst|correction-server|gateway|status|simulate``: the running system."""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from dpsense.cloud.deploy.broker import INGEST_SUFFIX, STATUS_SUFFIX, worker_account
from dpsense.cloud.errors import UsageError
from dpsense.cloud.cli.commands.common import (
    IngestThread,
    add_common,
    add_password,
    broker_password,
    check_analyst_zone,
    connection_for,
    count,
    device_id,
    examples,
    profile_default,
    seconds,
    seed,
    settings_from,
    stop_on_sigterm,
)

if TYPE_CHECKING:
    from dpsense.cloud.analyst.windows import WindowSpec


def parser_broker(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense broker run", "dpsense broker add-account analyst --password-file analyst.pw",
                        "dpsense broker add-device 7",
                        "dpsense broker make-ca", "dpsense broker make-cert --host broker.lan",
                        "dpsense broker run --tls --broker-host 0.0.0.0 --broker-port 8883")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    text = ("write the configuration and run Mosquitto until interrupted; exits non-zero, "
            "with one line, if Mosquitto dies")
    run = sub.add_parser("run", help=text, description=text,
                         epilog=examples("dpsense broker run --data-dir dpsense-data --broker-port 1883",
                                         "dpsense broker run --tls --broker-host 0.0.0.0 --broker-port 8883"))
    run.add_argument("--tls", action="store_true",
                     help="serve MQTT over TLS with the server certificate of `make-cert` (required "
                          "for any address but loopback)")
    run.add_argument("--tls-cert", help="server certificate, PEM (default: <data-dir>/broker/tls/server.pem)")
    run.add_argument("--tls-key", help="its private key, PEM (default: <data-dir>/broker/tls/server.key)")
    add_common(run)
    pw_help = ("write the password to this new file (mode 0600) instead of printing it; "
               "the broker keeps no copy in clear")
    text = "create or reset a role account and show its password once"
    acc = sub.add_parser("add-account", help=text, description=text + (
                         ". The analyst and correction roles also get NAME-ingest, the account of "
                         "their ingest connection, and the analyst NAME-status, the account that stores "
                         "the boards' status messages, with the same password."),
                         epilog=examples("dpsense broker add-account analyst --password-file analyst.pw",
                                         "dpsense broker add-account analyst --workers 3 --password-file a.pw",
                                         "dpsense broker add-account dashboard --role curator"))
    acc.add_argument("name", help="account name, e.g. analyst")
    acc.add_argument("--role", choices=("analyst", "correction", "curator", "alerts"),
                     help="role (default: the name); alerts: may only read the alert topics")
    acc.add_argument("--password-file", metavar="PATH", help=pw_help)
    acc.add_argument("--workers", type=count(0), default=0,
                     help="also make the accounts of workers 1..N of a scaled-out service, same password "
                          "(NAME-1, NAME-ingest-1, ...: docs/scale-out.md)")
    add_common(acc)
    text = "create or reset device account d<ID> and show its password once"
    dev = sub.add_parser("add-device", help=text, description=text,
                         epilog=examples("dpsense broker add-device 7",
                                         "dpsense broker add-device 8 --group hall-a --password-file d8.pw"))
    dev.add_argument("device_id", type=device_id, metavar="ID", help="device id, 1..4294967295")
    dev.add_argument("--group", help="the device's group: readings of one group share detection windows "
                                     "(kept in the analyst's store; default: the group it has, else 'default')")
    dev.add_argument("--password-file", metavar="PATH", help=pw_help)
    add_common(dev)
    text = "list accounts and roles"
    ls = sub.add_parser("accounts", help=text, description=text, epilog=examples("dpsense broker accounts"))
    add_common(ls)
    text = "make a lab certificate authority (RSA 2048): ca.pem, ca.der for boards, ca.key (0600)"
    ca = sub.add_parser("make-ca", help=text, description=text,
                        epilog=examples("dpsense broker make-ca", "dpsense broker make-ca --out pki --days 365"))
    ca.add_argument("--out", help="folder (default <data-dir>/broker/tls)")
    ca.add_argument("--days", type=count(1), default=3650, help="validity (default 3650)")
    add_common(ca)
    text = "make the broker's server certificate, signed by the lab CA: server.pem, server.key (0600)"
    cert = sub.add_parser("make-cert", help=text, description=text,
                          epilog=examples("dpsense broker make-cert --host broker.lan --host 192.168.1.20"))
    cert.add_argument("--host", action="append", required=True,
                      help="a name or address clients connect to (repeat for more; the first is the CN)")
    cert.add_argument("--ca", help="folder of the CA (default <data-dir>/broker/tls)")
    cert.add_argument("--out", help="folder (default <data-dir>/broker/tls)")
    cert.add_argument("--days", type=count(1), default=825, help="validity (default 825)")
    add_common(cert)


def _show_password(args: argparse.Namespace, name: str, password: str) -> None:
    """Once, where the user asked: a new 0600 file, or standard output."""
    from pathlib import Path

    from dpsense.cloud.deploy.files import folder_owner, write_private
    if args.password_file:
        path = Path(args.password_file)
        write_private(path, password + "\n")
        # Root writing it into a service user's folder (its data dir): that user's, so that the
        # service reads it and nobody else does.
        owner = folder_owner(path.parent)
        if owner is not None:
            os.chown(path, *owner)
        print("%s: password written to %s (mode 0600)" % (name, args.password_file), file=sys.stderr)
    else:
        print("%s %s" % (name, password))


def do_broker(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dpsense.cloud.deploy.broker import Broker
    from dpsense.cloud.errors import BrokerError
    from dpsense.cloud.deploy import tls
    st = settings_from(args)
    b = Broker(st.data_dir, port=st.broker_port, host=st.broker_host)
    if args.action == "add-account":
        _show_password(args, args.name, b.add_account(args.name, args.role, workers=args.workers))
    elif args.action == "add-device":
        if args.group is not None:
            from dpsense.cloud.analyst.devices import check_group
            try:
                check_group(args.group)
            except ValueError as e:
                raise UsageError("--group: %s" % e) from None
        name, pw = b.add_device(args.device_id)
        if args.group is not None:
            import time

            from dpsense.cloud.storage import open_analyst_store
            with open_analyst_store(st.analyst_db) as store:
                store.set_device_group(args.device_id, args.group, time.time())
        _show_password(args, name, pw)
    elif args.action == "accounts":
        for name, role in sorted(b.accounts().items()):
            print("%-16s %s" % (name, role))
    elif args.action == "make-ca":
        files = tls.make_ca(Path(args.out) if args.out else b.tls_dir, days=args.days)
        print("lab CA: %s (for services: --tls-ca), %s (for boards), key %s" % (files.pem, files.der, files.key))
    elif args.action == "make-cert":
        ca_dir = Path(args.ca) if args.ca else b.tls_dir
        sf = tls.make_cert(ca_dir, Path(args.out) if args.out else b.tls_dir, args.host, days=args.days)
        print("server certificate for %s: %s, key %s" % (", ".join(args.host), sf.cert, sf.key))
    else:
        if args.tls or args.tls_cert or args.tls_key:
            sf = tls.server_files(b.tls_dir)
            b.tls = tls.ServerFiles(Path(args.tls_cert) if args.tls_cert else sf.cert,
                                    Path(args.tls_key) if args.tls_key else sf.key)
        stop = stop_on_sigterm()
        b.die_with_parent = True
        with b.running():
            print("broker: mosquitto (pid %s) on %s:%d%s, files in %s (log %s); Ctrl-C stops it"
                  % (b.pid, b.host, b.port, " over TLS" if b.tls else "", b.dir, b.log_path),
                  file=sys.stderr, flush=True)
            try:
                while not stop.wait(0.5):
                    died = b.died()
                    if died is not None:
                        raise BrokerError(died)
            except KeyboardInterrupt:
                pass
    return 0


def parser_ingest(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense ingest --role analyst",
                        "dpsense ingest --role correction --correction-db postgresql://cs@db.example/corrections",
                        "dpsense ingest --role analyst --worker 2 --analyst-db postgresql://a@db.example/analyst",
                        "dpsense ingest --role analyst --worker 3 --retire")
    p.add_argument("--role", choices=("analyst", "correction", "status"), required=True,
                   help="analyst: store reading records; correction: store correction records; status: store "
                        "the boards' status messages in the analyst's store")
    p.add_argument("--user", help="broker account (default: the role's own one: analyst-ingest, "
                                  "correction-ingest, analyst-status)")
    p.add_argument("--worker", type=count(1),
                   help="run as worker N of several that share the stream (MQTT shared subscription "
                        "$share/<role account>/<topic>) under the account <role account>-N "
                        "(`dpsense broker add-account NAME --workers`); see docs/scale-out.md")
    p.add_argument("--retire", action="store_true",
                   help="with --worker: take worker N out of the shared subscription for good: leave the group, "
                        "store what its session still holds, exit after --idle-exit (default 5) s without a message")
    p.add_argument("--batch-size", type=count(1), default=500, help="messages per commit (default 500)")
    p.add_argument("--idle-exit", type=seconds, help="stop after this many seconds without a message")
    add_password(p)
    add_common(p)


def do_ingest(args: argparse.Namespace) -> int:
    from dpsense.cloud.ingest.service import IngestService
    from dpsense.cloud.storage import open_analyst_store, open_correction_store
    from dpsense.cloud.storage.repository import AnalystStore, CorrectionStore
    st = settings_from(args)
    stop = stop_on_sigterm()
    if args.retire and args.worker is None:
        raise UsageError("--retire takes a worker out of a shared subscription: give its --worker N")
    if args.role != "correction":
        check_analyst_zone(st)
    base = "analyst" + STATUS_SUFFIX if args.role == "status" else args.role + INGEST_SUFFIX
    user = args.user or worker_account(base, args.worker)
    # Workers share the stream in one group per role; the group is named after the role's account.
    share = base if args.worker is not None else None
    conn = connection_for(st, user, broker_password(args, user))
    store: AnalystStore | CorrectionStore
    if args.role == "analyst":
        store = open_analyst_store(st.analyst_db)
        svc = IngestService.for_analyst(conn, store, share=share, batch_size=args.batch_size, retire=args.retire)
    elif args.role == "status":
        from dpsense.cloud.analyst.devices import status_ingest
        store = open_analyst_store(st.analyst_db)
        svc = status_ingest(conn, store, share=share, batch_size=args.batch_size, retire=args.retire)
    else:
        from dpsense.cloud.correction.sealed import KeyStore, sealed_ingest
        KeyStore.for_data_dir(st.cs_dir).check_readable()
        store = open_correction_store(st.correction_db)
        svc = sealed_ingest(conn, store, st.cs_dir, share=share, batch_size=args.batch_size, retire=args.retire)
    print("ingest: %s records from %s:%d into %s" % (args.role, st.broker_host, st.broker_port,
          st.correction_db if args.role == "correction" else st.analyst_db), file=sys.stderr, flush=True)
    try:
        svc.run(stop, idle_exit=args.idle_exit if args.idle_exit is not None or not args.retire else 5.0)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    return 0


def parser_status(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense status", "dpsense status --dead 20 --data-dir /var/lib/dpsense")
    p.add_argument("--dead", type=count(0), default=5, help="show this many recent dead letters (default 5)")
    p.add_argument("--events", type=count(0), default=5,
                   help="show this many recent analyst events: carried windows, held rounds (default 5)")
    add_common(p)


def do_status(args: argparse.Namespace) -> int:
    import numpy as np

    from dpsense.cloud.ops.results import iso_time
    from dpsense.cloud.storage import open_analyst_store, open_correction_store
    from dpsense.cloud.cli.commands.common import existing_analyst_db, misplaced_keys
    st = settings_from(args)
    with open_analyst_store(existing_analyst_db(st)) as a:
        gaps = a.gaps()
        print("analyst     %d readings, %d dead letters (%d distinct), %d device boots, %d missing sequence "
              "numbers" % (a.count(), a.dead_letter_messages(), a.dead_letter_count(), len(gaps),
                           sum(g.missing for g in gaps)))
        ic = a.counters()
        # The same words and figures as the ingest's own log line (cloud/ingest/service.py).
        print("  ingest: %d received, %d stored, %d duplicates, %d dead letters"
              % (ic["ingest_received"], ic["ingest_stored"], ic["ingest_duplicates"], ic["ingest_dead_letters"]))
        for d in a.dead_letters(args.dead):
            print("  dead: %-28s %-50s %d bytes%s" % (d.topic, d.reason[:50], d.size,
                                                       " x%d" % d.repeats if d.repeats > 1 else ""))
        counts = a.window_counts()
        if any(counts.values()):
            print("windows     %d done, %d closed and awaiting their correction round, %d held after a "
                  "failed round, %d carried (no inlier)" % (counts["done"], counts["closed"], counts["held"],
                                                           counts["carried"]))
        from dpsense.cloud.ops.results import devices as device_rows
        refusals = {r.device_id: r.refused for r in device_rows(a) if r.refused}
        if refusals:
            print("refused     %d publishes refused by the broker (reported by the gateways): %s"
                  % (sum(refusals.values()), ", ".join("d%d: %d" % kv for kv in sorted(refusals.items()))))
        apart = a.set_apart_by_device()
        if apart:
            print("set apart   %d readings not scored (another column count or config_id than their window): %s"
                  % (sum(apart.values()), ", ".join("device %d: %d" % kv for kv in sorted(apart.items()))))
        from dpsense.cloud.storage.claims import partition_owners
        owners = partition_owners(a)
        if owners:
            print("partitions  %s" % "; ".join("%s: %s" % (who, ", ".join(groups))
                                               for who, groups in sorted(owners.items())))
        for w in a.windows(states=("held",), limit=3):
            print("  held: window %d (group %s, %d readings, %d attempts): %s"
                  % (w.id, w.group, w.n, w.attempts, w.last_error))
        for e in a.events(args.events):
            print("  %s %-9s %s" % (iso_time(e.at), e.kind, e.text))
        from dpsense.cloud.ops.results import board_notes
        for line in board_notes(a):
            print(line)
        devices, wins, tokens = a.reading_tokens()
    import os

    from dpsense.cloud.storage import sqlite_file
    cfile = sqlite_file(st.correction_db)
    have_cs = cfile is None or os.path.exists(cfile)
    ctokens = np.zeros(0, dtype=tokens.dtype)
    if have_cs:
        with open_correction_store(st.correction_db) as c:
            print("correction  %d records, %d dead letters (%d distinct)"
                  % (c.count(), c.dead_letter_messages(), c.dead_letter_count()))
            by_reason = c.dead_letter_reasons()
            if by_reason:
                print("  dead letters by reason: %s" % ", ".join("%s: %d" % (r, n) for r, n in by_reason))
            ctokens = c.token_array()
    else:
        print("correction  no database at %s: the correction server has not run with this folder "
              "(its folder: --correction-data-dir)" % cfile)
    from dpsense.cloud.correction.sealed import KeyStore
    sealed, plain = KeyStore.for_data_dir(st.cs_dir).devices()
    wrong = misplaced_keys(st)
    if wrong is not None:
        print("zones       %s: correction keys in the analyst's data dir; the correction server reads %s"
              % (wrong, KeyStore.for_data_dir(st.cs_dir).path))
    print("sealing     correction records sealed end to end for %d devices; plaintext (readable by the broker "
          "and a gateway) for %s" % (len(sealed), "devices " + ", ".join(map(str, plain)) if plain else "none"))
    if have_cs:
        from dpsense.cloud.correction.honest import RoundLedger, ledger_target
        # The round ledger lives in the correction database (shared by every correction-server worker).
        led = RoundLedger(ledger_target(st.correction_db))
        try:
            rc = led.counts()
        finally:
            led.close()
        refused = {k: v for k, v in rc.items() if k not in ("answered", "retries")}
        print("rounds      %d windows answered (%d retries), %d refused%s"
              % (rc["answered"], rc["retries"], sum(refused.values()),
                 " (%s)" % ", ".join("%s %d" % kv for kv in sorted(refused.items())) if refused else ""))
    only_a = np.setdiff1d(tokens, ctokens).size
    only_c = np.setdiff1d(ctokens, tokens).size
    print("matching    %d readings without a correction record, %d correction records without a reading"
          "%s" % (only_a, only_c, " (records in flight count until they arrive)" if only_a or only_c else ""))
    lacking = ~np.isin(tokens, ctokens)
    by_win = wins[lacking]
    if by_win.size:
        ids, n = np.unique(by_win[by_win >= 0], return_counts=True)
        shown = ["window %d: %d" % (w, k) for w, k in list(zip(ids.tolist(), n.tolist()))[-10:]]
        pending = int((by_win < 0).sum())
        if pending:
            shown.append("not yet in a window: %d" % pending)
        print("per window  readings without a correction record%s: %s"
              % (" (the last 10 windows)" if ids.size > 10 else "", ", ".join(shown)))
    # A record leaves its board only when both halves are committed (docs/protocol.md 3.1): a
    # stored reading without its correction record is one its device still keeps and resends.
    held = devices[lacking]
    if held.size:
        ids, n = np.unique(held, return_counts=True)
        print("ack backlog %d records kept on their boards (reading stored, correction record not): %s"
              % (held.size, ", ".join("device %d: %d" % (d, k) for d, k in zip(ids.tolist(), n.tolist()))))
    else:
        print("ack backlog 0 records: every stored reading's correction record is stored too")
    return 0


def parser_analyst(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense analyst", "dpsense analyst --window 20000 --flush-idle 5",
                        "dpsense analyst --worker 2 --no-ingest --analyst-db postgresql://a@db.example/analyst",
                        "dpsense analyst --no-ingest --detector kr --dbscan-eps 8 --dbscan-min-samples 20",
                        "dpsense analyst --correction-mode paper --skip-margin 0.1")
    p.add_argument("--dbscan-eps", type=float, help="DBSCAN radius in data units (default: profile.json, else 12)")
    p.add_argument("--dbscan-min-samples", type=int, help="DBSCAN min_samples (default: profile.json, else 60)")
    p.add_argument("--quantum", type=float, help="units per quantum (default: profile.json, else 0.01)")
    p.add_argument("--window", type=window_arg, default="100000",
                   help="detection window per device group: a duration of arrival time (30s, 15m, 1h: "
                        "tumbling windows on the clock) or a number of readings (default 100000)")
    p.add_argument("--detector", choices=("dbscan", "kr", "beta_r"), default="dbscan",
                   help="outlier notion per window: DBSCAN noise (default), (k, r) outliers with "
                        "k = min-samples and r = dbscan-eps, or (beta, r) anomalies with beta = min-samples")
    p.add_argument("--min-window", type=count(2),
                   help="smallest window scored; smaller ones are carried into the group's next window "
                        "(default: twice the readings a detector neighbourhood needs, 2 x min-samples for dbscan)")
    p.add_argument("--flush-idle", type=seconds,
                   help="count windows: also close a partial window once its group got nothing new for this "
                        "many seconds (time windows close on the clock)")
    p.add_argument("--exit-when-done", action="store_true",
                   help="count windows: exit once nothing more can close (needs --flush-idle)")
    p.add_argument("--round-timeout", type=float, default=30.0,
                   help="seconds to wait for each answer of the correction server before holding the "
                        "window and retrying (default 30)")
    p.add_argument("--max-hold", type=float, default=600.0,
                   help="seconds after a window closed during which a round that lacks correction records is "
                        "retried rather than completed without them (default 600)")
    p.add_argument("--webhook", help="POST each window's new candidates as JSON to this http(s) URL")
    p.add_argument("--correction-mode", choices=("paper", "bands", "secure"), default="bands",
                   help="correction round: paper (Böhler et al. 2017, Sect. 6 messages), bands (radial index sets; "
                        "default) or secure (garbled circuits, reveals only R; raise --round-timeout for large "
                        "windows); the correction server must run the same mode")
    p.add_argument("--band-width", type=float,
                   help="mode bands: band width in data units (default: profile.json; until it exists, "
                        "windows are held)")
    p.add_argument("--skip-margin", type=float, default=0.05,
                   help="mode paper: no round when |O'| is within this share of the expected outlier count "
                        "(default 0.05; negative: always run the round)")
    p.add_argument("--rotate-noise-key", action="store_true",
                   help="start with a new noise key and this run's parameters (after a recalibration or "
                        "another --analyst-epsilon); every window answered so far is closed and never "
                        "answered again. Stop every correction-server worker of the database first")
    add_round_policy(p)
    p.add_argument("--no-ingest", action="store_true",
                   help="only detect; other processes run `dpsense ingest --role analyst` and `--role status`")
    p.add_argument("--worker", type=count(1),
                   help="run as analyst N of several sharing a PostgreSQL store: account analyst-N, scores only "
                        "the device groups it claims (its ingest, unless --no-ingest, is worker N of a shared "
                        "subscription); see docs/scale-out.md")
    p.add_argument("--lease", type=seconds, default=15.0,
                   help="with --worker: seconds a claim on a device group lasts unless renewed; a stopped "
                        "analyst's groups pass to the others after this long (default 15)")
    add_password(p)
    add_common(p)


def add_round_policy(p: argparse.ArgumentParser) -> None:
    """The honest-round sizes; the analyst and the correction server must use the same."""
    p.add_argument("--min-round", type=count(2), default=100,
                   help="smallest window (tokens with a correction record) a correction round covers; the "
                        "correction server refuses smaller ones and the analyst completes them uncorrected "
                        "(default 100)")
    p.add_argument("--min-presumed", type=count(1), default=10,
                   help="mode paper: smallest presumed-outlier set a round may name (default 10)")


def window_arg(text: str) -> "WindowSpec":
    from dpsense.cloud.analyst.windows import parse_window
    try:
        return parse_window(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def do_analyst(args: argparse.Namespace) -> int:
    from dpsense.cloud.analyst.service import Analyst, AnalystParams
    from dpsense.cloud.deploy.profile import load_profile
    from dpsense.cloud.storage import open_analyst_store
    st = settings_from(args)
    check_analyst_zone(st)
    if args.flush_idle is not None and args.window.seconds is not None:
        raise UsageError("--flush-idle applies to count windows; time windows close on the clock")
    if args.exit_when_done and args.flush_idle is None:
        raise UsageError("--exit-when-done needs --flush-idle (and count windows)")
    if args.band_width is not None and not args.band_width > 0:
        raise UsageError("--band-width must be > 0 data units")
    quantum = profile_default(args, st, "quantum", 0.01)
    prof = load_profile(st.data_dir)
    band_q = args.band_width / quantum if args.band_width is not None else (
        prof.band_width_q if prof is not None else 0.0)
    params = AnalystParams(eps_q=profile_default(args, st, "dbscan_eps", 12.0) / quantum,
                           min_samples=int(profile_default(args, st, "dbscan_min_samples", 60)),
                           window=args.window, detector=args.detector, min_window=args.min_window,
                           round_timeout=args.round_timeout, max_hold=args.max_hold,
                           mode=args.correction_mode, band_width_q=band_q,
                           centre_q=tuple(map(float, prof.centre_q)) if prof is not None else None,
                           outlier_share=prof.outlier_share if prof is not None else 0.10,
                           skip_margin=args.skip_margin, min_round=args.min_round,
                           min_presumed=args.min_presumed)
    if args.webhook:
        from dpsense.cloud.ops.alerts import check_webhook
        try:
            check_webhook(args.webhook)
        except ValueError as e:
            raise UsageError("--webhook: %s" % e) from None
    stop = stop_on_sigterm()
    if args.lease < 1:
        raise UsageError("--lease must be at least 1 s (a third of it passes between renewals)")
    if args.worker is not None and not st.analyst_db.lower().startswith(("postgresql://", "postgres://")):
        raise UsageError("--worker: analysts that share windows need a PostgreSQL analyst store "
                         "(--analyst-db postgresql://...); SQLite serves one analyst")
    opener = lambda: open_analyst_store(st.analyst_db)  # noqa: E731
    opener().close()            # create the database once, before two threads open it
    account = worker_account("analyst", args.worker)
    pw = broker_password(args, account)
    analyst = Analyst(connection_for(st, account, pw), opener, params, webhook=args.webhook,
                      profile=lambda: load_profile(st.data_dir),
                      owner=account if args.worker is not None else None, lease=args.lease)
    ingests: list[IngestThread] = []
    if not args.no_ingest:
        ingests = [IngestThread(connection_for(st, worker_account("analyst" + suffix, args.worker), pw), opener,
                                role, stop, share="analyst" + suffix if args.worker is not None else None)
                   for suffix, role in ((INGEST_SUFFIX, "analyst"), (STATUS_SUFFIX, "status"))]
    try:
        analyst.run(stop, flush_when_idle=args.flush_idle, exit_when_done=args.exit_when_done)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        for ingest in ingests:
            ingest.join()
    for ingest in ingests:
        ingest.check()
    return 0


def parser_correction(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense correction-server",
                        "dpsense correction-server --correction-mode paper --split gap --w-o 1500")
    p.add_argument("--w-o", type=float, help="outlier-layer width in quanta (default: profile.json)")
    p.add_argument("--correction-mode", choices=("paper", "bands", "secure"), default="bands",
                   help="the one round mode this server answers (default bands); others get an error reply")
    p.add_argument("--split", choices=("noise", "otsu", "trimmed_gap", "gap"), default="noise",
                   help="mode paper: FP/TP split rule; noise (default) is the never-worse rule with the "
                        "provable FN layers, otsu/trimmed_gap/gap the 2017 reconstruction (Böhler et al. 2017, Sect. 6)")
    p.add_argument("--alpha", type=float, default=0.005,
                   help="split noise: bound on P(d_diff > tau) for any row (default 0.005)")
    p.add_argument("--bound", choices=("R1", "R2", "R3"), default="R1", help="FN_L3 upper bound (default R1)")
    p.add_argument("--no-guard", action="store_true", help="accept every split (paper-literal; not advised)")
    p.add_argument("--analyst-epsilon", default="1",
                   help="epsilon towards the analyst per reading within the normal radius: every answer is "
                        "computed from d_diff plus discrete Laplace noise of scale ceil(normal radius) / epsilon, "
                        "fixed per record (default 1; a number like 0.5 or 1/2)")
    p.add_argument("--rotate-noise-key", action="store_true",
                   help="start with a new noise key and this run's parameters (after a recalibration or "
                        "another --analyst-epsilon); every window answered so far is closed and never "
                        "answered again. Stop every correction-server worker of the database first")
    add_round_policy(p)
    p.add_argument("--no-ingest", action="store_true", help="only answer rounds; another process ingests")
    p.add_argument("--worker", type=count(1),
                   help="run as correction server N of several sharing the correction database: account "
                        "correction-N; every server receives every round and the one that claims it in the "
                        "database answers it; its ingest is worker N of correction-ingest's (see docs/scale-out.md)")
    add_password(p)
    add_common(p)


def do_correction(args: argparse.Namespace) -> int:
    from dpsense.cloud.correction.rules import CorrectionParams, normal_radius
    from dpsense.cloud.correction.server import CorrectionServer
    from dpsense.cloud.deploy.profile import load_profile
    from dpsense.cloud.storage import open_correction_store
    st = settings_from(args)
    stop = stop_on_sigterm()
    from dpsense.cloud.correction.binding import answer_parameters, new_key
    from dpsense.cloud.correction.honest import (KEY_SIZE, RecordNoise, RoundLedger, RoundPolicy, ledger_target,
                                                 load_key, parse_epsilon)
    noise = args.split == "noise"
    # Every mode needs the normal radius (the noise on d_diff towards the analyst is calibrated
    # to it) and the never-worse split the noise scale: only the profile gives them.
    needs_profile = True
    path = st.cs_dir / "profile.json"
    if noise:
        waiting = ("w_O, the noise scale and the normal radius are not known yet (the never-worse split takes "
                   "them from %s)" % path)
    else:
        waiting = "the normal radius is not known yet (the noise on d_diff takes it from %s)" % path
    epsilon = parse_epsilon(args.analyst_epsilon)
    policy = RoundPolicy(min_window=args.min_round, min_presumed=args.min_presumed)
    from dpsense.cloud.deploy.files import private_dir
    private_dir(st.cs_dir)
    from dpsense.cloud.correction.sealed import KeyStore
    # Its own folder's key store, readable by this user, before anything is started.
    KeyStore.for_data_dir(st.cs_dir).check_readable()
    key_path = st.cs_dir / "correction-noise.key"
    key = None if args.rotate_noise_key else load_key(key_path)

    def params(w_o: float | None = args.w_o) -> CorrectionParams | None:
        # The profile may arrive after the server started: it is read until it exists.
        prof = load_profile(st.cs_dir) if w_o is None or needs_profile else None
        if prof is None and (w_o is None or needs_profile):
            return None
        if w_o is None:
            assert prof is not None
            w_o = prof.w_o_q
        return CorrectionParams(w_o=float(w_o), split=args.split, bound=args.bound, guard=not args.no_guard,
                                layers="provable" if noise else "paper", alpha=args.alpha,
                                noise_scale=prof.noise_scale_q() if prof is not None else 0.0,
                                columns=len(prof.delta_q) if prof is not None else 2,
                                normal_radius=normal_radius(prof.delta_q) if prof is not None else 0.0,
                                board_noise_scale=prof.board_noise_scale_q() if prof is not None else 0.0)
    if not 0 < args.alpha < 1:
        raise UsageError("--alpha must be in (0, 1)")
    if args.w_o is not None and not args.w_o >= 0:
        raise UsageError("--w-o must be >= 0 quanta")
    if args.worker is not None and not st.correction_db.lower().startswith(("postgresql://", "postgres://")):
        raise UsageError("--worker: correction servers that share rounds need a PostgreSQL correction store "
                         "(--correction-db postgresql://...), where they claim rounds and keep one round "
                         "ledger; SQLite serves one correction server")
    opener = lambda: open_correction_store(st.correction_db)  # noqa: E731
    opener().close()            # create the database once, before two threads open it
    # The round ledger is in the correction database: shared by every correction-server worker.
    ledger_at = ledger_target(st.correction_db)
    ledger = RoundLedger(ledger_at)
    try:
        # A changed key or changed parameters stop the server here, not at its first round (with no
        # profile yet, the parameters are bound or checked when it arrives).
        known = params()
        bound = None if known is None else answer_parameters(
            args.correction_mode, epsilon, RecordNoise(bytes(KEY_SIZE), known.normal_radius, epsilon).delta_q, known)
        if key is None:
            key = new_key(key_path, KEY_SIZE)
            ledger.rotate(key, bound)
        else:
            ledger.bind_key(key, bound)
    finally:
        ledger.close()
    account = worker_account("correction", args.worker)
    pw = broker_password(args, account)
    server = CorrectionServer(connection_for(st, account, pw), params, opener, mode=args.correction_mode,
                              waiting=waiting, noise_key=key, epsilon=epsilon, policy=policy,
                              ledger=lambda: RoundLedger(ledger_at),
                              worker=account if args.worker is not None else None)
    ingest = None
    if not args.no_ingest:
        ingest = IngestThread(connection_for(st, worker_account("correction" + INGEST_SUFFIX, args.worker), pw),
                              opener, "correction", stop,
                              share="correction" + INGEST_SUFFIX if args.worker is not None else None,
                              data_dir=st.cs_dir)
    try:
        server.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if ingest is not None:
            ingest.join()
    if ingest is not None:
        ingest.check()
    return 0


def parser_gateway(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense gateway --port /dev/ttyACM0 --device-id 10",
                        "dpsense gateway --port /dev/pts/3 --device-id 7 --idle-exit 30")
    p.add_argument("--port", required=True, help="the board's serial port or pty (/dev/ttyACM0, /dev/pts/3)")
    p.add_argument("--device-id", type=device_id, required=True,
                   help="publish as device account d<ID> (password: --password-file or DPSENSE_BROKER_PASSWORD)")
    p.add_argument("--baud", type=count(1), default=115200, help="serial speed (default 115200)")
    p.add_argument("--idle-exit", type=seconds, help="stop after this many seconds without a byte")
    p.add_argument("--keepalive", type=count(1), default=60,
                   help="MQTT keepalive in seconds: a broker that stops answering is noticed "
                        "within about that long, then the gateway reconnects and resends "
                        "(default 60)")
    add_password(p)
    add_common(p)


def do_gateway(args: argparse.Namespace) -> int:
    from dpsense.cloud.transport.gateway.service import run
    from dpsense.protocol.topics import DEVICE_USER
    st = settings_from(args)
    stop = stop_on_sigterm()
    user = DEVICE_USER % args.device_id
    conn = connection_for(st, user, broker_password(args, user))
    try:
        run(args.port, args.device_id, st.broker_host, st.broker_port, conn.password, baud=args.baud,
            stop=stop, idle_exit=args.idle_exit, keepalive=args.keepalive, tls_ca=conn.tls_ca)
    except KeyboardInterrupt:
        pass
    return 0


DATA_CHOICES = ("paper1", "sensors", "drift", "radial_groups", "elongated", "two_clusters", "ring")


def parser_simulate(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense simulate --devices 10 --n 100000 --epsilon 0.5",
                        "dpsense simulate --csv readings.csv --devices 4 --seed 3")
    p.add_argument("--devices", type=count(1), default=10,
                   help="virtual devices d1..dN (default 10); their broker accounts get new passwords, "
                        "held in memory for the run")
    p.add_argument("--n", type=count(1), default=100_000, help="readings in all (default 100000)")
    p.add_argument("--csv", help="publish this CSV (numeric columns, header row) instead of synthetic data; "
                                 "an optional column named 'outlier' (0/1) is ground truth")
    p.add_argument("--data", choices=DATA_CHOICES, default="paper1",
                   help="synthetic data without --csv: paper1 (the paper-1 generator, --separation and --shape), "
                        "sensors (the simulated temperature and humidity fleet with its faults, "
                        "cloud/sim/sensors.py; one simulated sensor per device) or a data family of "
                        "cloud/sim/families.py (default paper1)")
    p.add_argument("--separation", type=float, default=220.0, help="paper-1 generator (default 220)")
    p.add_argument("--shape", choices=("scale", "shift"), default="scale")
    p.add_argument("--epsilon", default="0.5", help="epsilon per column (default 0.5)")
    p.add_argument("--quantum", type=float, default=0.01, help="units per quantum (default 0.01)")
    p.add_argument("--seed", type=seed, default=None,
                   help="seed the data and the noise: reproducible, not private "
                        "(default: synthetic data of seed 1, noise from the OS CSPRNG)")
    p.add_argument("--rate", type=float,
                   help="a steady fleet: publish this many readings per second across the devices (paper-1 "
                        "data drawn afresh, or the --csv rows over and over; --n is then the calibration set)")
    p.add_argument("--duration", type=float, help="with --rate: stop after this many seconds (default: until "
                                                  "Ctrl-C or SIGTERM)")
    p.add_argument("--wait", choices=("committed", "broker"), default="committed",
                   help="a record is done when both ingests committed it (default; needs the analyst and "
                        "the correction server running), or when the broker acknowledged it (broker: a "
                        "test of the broker alone, which says nothing about delivery)")
    p.add_argument("--commit-timeout", type=float, default=120.0,
                   help="seconds to wait, after the last record left, for the rest to be committed "
                        "(default 120); the run fails and says how many were not")
    add_common(p)


def do_simulate(args: argparse.Namespace) -> int:
    from dpsense.cloud.cli.commands.simulate import run_simulation, run_steady
    if args.duration is not None and args.rate is None:
        raise UsageError("--duration needs --rate")
    if args.rate is not None and not args.rate > 0:
        raise UsageError("--rate must be > 0 readings per second")
    if args.duration is not None and not args.duration > 0:
        raise UsageError("--duration must be > 0 seconds")
    if not args.commit_timeout > 0:
        raise UsageError("--commit-timeout must be > 0 seconds")
    if args.rate is not None:
        run_steady(settings_from(args), args, stop_on_sigterm())
    else:
        run_simulation(settings_from(args), args)
    return 0
