"""``dpsense aggregate``: estimates with confidence intervals per group and time window, from the
analyst's store, at no privacy cost.

    dpsense aggregate --group hall-a --window 1h --since 24h --column 0 --stat mean
    dpsense aggregate --window 1d --column 2 --stat count-above 40 --format json
    dpsense aggregate --window 1h --column 1 --stat histogram --edges 10,20,30,40
    dpsense aggregate --window 1h --column 0 --stat quantile 0.9 --level 0.99

The numbers come from ``dpsense.cloud.privacy.stream_aggregates.aggregate`` (the same function a
script calls); this module parses the options and formats the rows.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from typing import Any

from dpsense.cloud.cli.commands.common import add_common, examples, parse_floats, settings_from
from dpsense.cloud.errors import UsageError


def parser_aggregate(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense aggregate --group hall-a --window 1h --since 24h --column 0 --stat mean",
                        "dpsense aggregate --window 1d --column 2 --stat count-above 40 --format json",
                        "dpsense aggregate --window 1h --column 1 --stat histogram --edges 10,20,30,40")
    p.add_argument("--group", default="default", help="device group (default: the default group)")
    p.add_argument("--window", default="1h", help="window length: 30m, 1h, 1d (default 1h), aligned on the epoch")
    p.add_argument("--since", default="24h", help="readings that arrived since: 15m, 24h ago, an ISO time or Unix "
                                                 "seconds (default 24h)")
    p.add_argument("--until", help="and before this time (default now)")
    p.add_argument("--column", type=int, default=0, help="column index, 0-based (default 0)")
    p.add_argument("--stat", nargs="+", default=["mean"], metavar="STAT",
                   help="mean | sum | count-above T | count-below T | histogram | quantile Q (default mean); "
                        "T in physical units, Q in (0, 1)")
    p.add_argument("--edges", type=parse_floats, help="histogram bin edges in physical units, comma-separated "
                                                       "(default: 10 bins over the profile's centre +- 2 x delta)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    p.add_argument("--profile", help="device profile (default <data dir>/profile.json)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format (default table)")
    add_common(p)


def do_aggregate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dpsense.cloud.privacy.stream_aggregates import NO_BUDGET, Stat, aggregate, parse_stat
    from dpsense.cloud.deploy.profile import PROFILE_FILE
    from dpsense.cloud.ops.results import parse_since
    from dpsense.cloud.storage import open_analyst_store
    from dpsense.cloud.analyst.windows import parse_window
    st = settings_from(args)
    try:
        spec = parse_window(args.window)
        now = time.time()
        since = parse_since(args.since, now=now)
        until = parse_since(args.until, now=now) if args.until else now
        stat = parse_stat(args.stat)
        if not 0.5 <= args.level < 1:
            raise ValueError("--level is a confidence level in [0.5, 1), got %g" % args.level)
        if args.edges is not None:
            stat = Stat(stat.kind, stat.arg, tuple(args.edges))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if spec.seconds is None:
        raise UsageError("--window is a duration here (30m, 1h, 1d), not a number of readings")
    if args.profile:
        path = Path(args.profile)
        if not path.is_file():
            raise UsageError("no profile at %s" % path)
    else:
        path = Path(st.data_dir) / PROFILE_FILE
        if not path.is_file():
            raise UsageError("no device profile in %s (give --profile PATH): the noise law comes from it"
                             % st.data_dir)
    profile = _profile_file(path)
    with open_analyst_store(st.analyst_db) as store:
        rows = aggregate(store, profile, group=args.group, window_s=spec.seconds, since=since, until=until,
                         column=args.column, stat=stat, level=args.level)
    _write(rows, args.format, NO_BUDGET)
    return 0


def _profile_file(path: Any) -> Any:
    """A profile JSON (cloud/deploy/profile.py's fields) at any path; a damaged one is a usage error."""
    from dpsense.cloud.deploy.profile import DeviceProfile
    try:
        d = json.loads(path.read_text())
        d["delta_q"] = tuple(int(v) for v in d["delta_q"])
        d["centre_q"] = tuple(int(v) for v in d["centre_q"])
        return DeviceProfile(**d)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise UsageError("%s is not a device profile (%s)" % (path, e)) from None


def _write(windows: list[Any], fmt: str, privacy: str) -> None:
    from dpsense.cloud.ops.results import iso_time
    flat = [{"group": w.group, "start": iso_time(w.start), "end": iso_time(w.end), "column": w.column,
             "stat": w.stat, "bin": r.label, "n": w.n, "estimate": r.value, "lo": r.lo, "hi": r.hi,
             "level": w.level, "set_apart": w.set_apart, "method": r.method}
            for w in windows for r in w.rows]
    out = sys.stdout
    if fmt == "json":
        json.dump({"privacy": privacy, "windows": flat}, out, indent=1)
        out.write("\n")
        return
    names = ["group", "start", "end", "column", "stat", "bin", "n", "estimate", "lo", "hi", "level", "set_apart"]
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(names)
        w.writerows([[_cell(r[k]) for k in names] for r in flat])
        print("dpsense aggregate: %s" % privacy, file=sys.stderr)
        return
    text = [[_cell(r[k]) for k in names] for r in flat]
    widths = [max([len(n)] + [len(t[i]) for t in text]) for i, n in enumerate(names)]
    for line in [names] + text:
        out.write("  ".join(c.ljust(wd) for c, wd in zip(line, widths)).rstrip() + "\n")
    if not flat:
        out.write("no readings of this group in the interval\n")
    out.write("privacy: this %s\n" % privacy)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "%.6g" % v
    return str(v)
