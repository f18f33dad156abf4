"""``dpsense results windows|candidates|devices``: the analyst's results as a table, CSV or JSON.

    dpsense results windows --last 10
    dpsense results candidates --window 12 --format csv > window12.csv
    dpsense results candidates --since 1h --format json
    dpsense results devices

The rows come from ``dpsense.cloud.ops.results`` (the same functions a script or a dashboard calls);
this module only formats them.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpsense.cloud.cli.commands.common import add_common, count, examples, settings_from
from dpsense.cloud.errors import UsageError

if TYPE_CHECKING:
    from dpsense.cloud.storage import AnalystStore

FORMATS = ("table", "csv", "json")
Column = tuple[str, Callable[[Any], Any]]


def parser_results(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense results windows --last 10", "dpsense results candidates --since 1h --format csv",
                        "dpsense results devices --format json")
    sub = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    w = sub.add_parser("windows", help="detection windows: group, interval, readings, state, candidates",
                       description="Detection windows by id: done, or awaiting their correction round.",
                       epilog=examples("dpsense results windows --group hall-a --last 10"))
    w.add_argument("--group", help="only this device group")
    w.add_argument("--last", type=count(1), help="only the last N windows")
    w.add_argument("--mean", type=count(0), metavar="COLUMN",
                   help="add each window's mean of this column (from 0) in physical units with its 95%% interval, "
                        "estimated from the released readings with the data dir's profile (spends no privacy "
                        "budget: post-processing, as `dpsense aggregate`)")
    c = sub.add_parser("candidates", help="the candidates of done windows: device, boot, seq, arrival",
                       description="Candidates (the corrected outlier set R) of the done windows, one per reading.",
                       epilog=examples("dpsense results candidates --window 3 --format csv",
                                       "dpsense results candidates --since 15m"))
    c.add_argument("--window", type=count(0), help="only this window (its id, as `dpsense results windows` lists)")
    c.add_argument("--since", help="only readings that arrived since: 15m, 2h, 1d ago, an ISO time "
                                   "(2025-11-25T16:00, UTC unless it says otherwise) or Unix seconds")
    c.add_argument("--group", help="only this device group")
    c.add_argument("--all", action="store_true",
                   help="also the presumed outliers the correction round removed as false positives")
    d = sub.add_parser("devices", help="per device: readings, candidates, last seen, epsilon spent, cap, entropy",
                       description="Per device: readings, candidates, last seen, and what its ledger reported; "
                                   "eps_total is what the analyst holds, the correction rounds' epsilon included.",
                       epilog=examples("dpsense results devices", "dpsense results devices --format csv"))
    d.add_argument("--analyst-epsilon", type=_epsilon, default=Fraction(1),
                   help="the correction server's --analyst-epsilon (default 1, its default): what a round adds "
                        "to eps_total per reading of its window")
    for q in sub.choices.values():
        q.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
        add_common(q)


def _epsilon(text: str) -> Fraction:
    from dpsense.cloud.correction.honest import parse_epsilon
    try:
        return parse_epsilon(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _t(t: float | None) -> str:
    from dpsense.cloud.ops.results import iso_time
    return iso_time(t)


def _eps(f: Fraction | None) -> float | None:
    return None if f is None else float(f)


WINDOW_COLUMNS: list[Column] = [
    ("window", lambda w: w.id), ("group", lambda w: w.group), ("group_window", lambda w: w.seq),
    ("kind", lambda w: w.kind), ("start", lambda w: _t(w.start)), ("end", lambda w: _t(w.end)),
    ("readings", lambda w: w.n), ("state", lambda w: w.state), ("presumed", lambda w: w.presumed),
    ("removed_fp", lambda w: w.removed_fp), ("added_fn", lambda w: w.added_fn),
    ("candidates", lambda w: w.candidates), ("missing", lambda w: w.missing), ("attempts", lambda w: w.attempts),
    ("round_s", lambda w: w.round_s), ("verdict_at", lambda w: _t(w.done_at)),
    ("last_error", lambda w: w.last_error if w.state != "done" else None),
    # Why a done window kept O': the correction's model does not fit it (cloud/correction/fit.py).
    ("fit", lambda w: w.fit),
]
CANDIDATE_COLUMNS: list[Column] = [
    ("window", lambda c: c.window), ("group", lambda c: c.group), ("device", lambda c: c.device_id),
    ("boot", lambda c: c.boot_id), ("seq", lambda c: c.seq), ("received_at", lambda c: _t(c.received_at)),
    ("verdict", lambda c: c.verdict),
]
DEVICE_COLUMNS: list[Column] = [
    ("device", lambda d: d.device_id), ("group", lambda d: d.group), ("readings", lambda d: d.readings),
    ("candidates", lambda d: d.candidates), ("last_seen", lambda d: _t(d.last_seen)),
    ("eps_window", lambda d: _eps(d.eps_window)), ("ledger_window", lambda d: d.ledger_window),
    ("eps_total", lambda d: _eps(d.eps_total)), ("cap", lambda d: _eps(d.cap)),
    ("eps_record", lambda d: _eps(d.eps_record)), ("eps_record_worst", lambda d: _eps(d.eps_record_worst)),
    ("entropy", lambda d: d.entropy), ("board", lambda d: d.board), ("status", lambda d: d.status_event),
    ("status_at", lambda d: _t(d.status_at)), ("set_apart", lambda d: d.set_apart),
    ("round_readings", lambda d: d.round_readings), ("eps_a", lambda d: _eps(d.eps_a)),
]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "%.6g" % v
    return str(v)


def write_rows(rows: Sequence[Any], columns: Sequence[Column], fmt: str, out: Any = None) -> None:
    """Rows as an aligned table, CSV (header first) or a JSON list of objects."""
    out = out or sys.stdout
    names = [name for name, _ in columns]
    values = [[get(r) for _, get in columns] for r in rows]
    if fmt == "json":
        json.dump([dict(zip(names, v)) for v in values], out, indent=1)
        out.write("\n")
    elif fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(names)
        w.writerows([[_cell(x) for x in v] for v in values])
    else:
        text = [[_cell(x) for x in v] for v in values]
        widths = [max([len(n)] + [len(t[i]) for t in text]) for i, n in enumerate(names)]
        for line in [names] + text:
            out.write("  ".join(c.ljust(wd) for c, wd in zip(line, widths)).rstrip() + "\n")


def do_results(args: argparse.Namespace) -> int:
    from dpsense.cloud.ops import results
    from dpsense.cloud.storage import open_analyst_store
    st = settings_from(args)
    since = None
    if getattr(args, "since", None) is not None:
        try:
            since = results.parse_since(args.since)
        except ValueError as e:
            raise UsageError("--since: %s" % e) from None
    from dpsense.cloud.cli.commands.common import existing_analyst_db
    with open_analyst_store(existing_analyst_db(st)) as store:
        rows, columns = _query(store, args, since)
        if args.what == "windows" and args.mean is not None:
            rows, columns = _with_means(store, rows, columns, args.mean, st.data_dir)
    # A reader that stops early (head, a pager) is handled once, by cloud/cli/__init__.py.
    write_rows(rows, columns, args.format)
    return 0


def _with_means(store: "AnalystStore", rows: list[Any], columns: list[Column], column: int,
                data_dir: Any) -> tuple[list[Any], list[Column]]:
    """``rows`` (windows) with their mean of ``column``: (window, estimate) pairs and three more columns."""
    from dpsense.cloud.deploy.profile import load_profile
    from dpsense.cloud.privacy.stream_aggregates import column_means
    prof = load_profile(data_dir)
    if prof is None:
        raise UsageError("--mean needs the device profile (profile.json) in %s" % data_dir)
    if column >= len(prof.delta_q):
        raise UsageError("--mean: column must be in 0..%d (the profile has %d columns)"
                         % (len(prof.delta_q) - 1, len(prof.delta_q)))
    out = []
    for w in rows:
        m = store.window_members(w.id, columns=len(prof.delta_q), config_id=prof.config_id)
        out.append((w, column_means(m.values, prof)[column] if len(m.values) else None))
    base = [(name, (lambda f: lambda r: f(r[0]))(f)) for name, f in columns]
    extra: list[Column] = [("mean", lambda r: None if r[1] is None else r[1].value),
                           ("mean_lo", lambda r: None if r[1] is None else r[1].lo),
                           ("mean_hi", lambda r: None if r[1] is None else r[1].hi)]
    return out, base + extra


def _query(store: "AnalystStore", args: argparse.Namespace, since: float | None) -> tuple[list[Any], list[Column]]:
    from dpsense.cloud.ops import results
    if args.what == "windows":
        return list(results.windows(store, group=args.group, limit=args.last)), WINDOW_COLUMNS
    if args.what == "candidates":
        return list(results.candidates(store, window=args.window, since=since, group=args.group,
                                       all_verdicts=args.all)), CANDIDATE_COLUMNS
    return list(results.devices(store, epsilon_a=args.analyst_epsilon)), DEVICE_COLUMNS
