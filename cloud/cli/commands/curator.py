"""``dpsense curator|query``: the data owner's budgets, calibration and private queries."""
from __future__ import annotations

import argparse
import sys

from typing import TYPE_CHECKING

from dpsense.cloud.cli.commands.common import examples, parse_floats

if TYPE_CHECKING:
    from dpsense.cloud.privacy.accountant import BudgetAccountant

# The Gaussian counts' default delta: small enough that the documented budget (delta 1e-6)
# holds nine of them with their discretisation slack (about 1e-13 each).
DEFAULT_DELTA = 1e-7
LEVEL = 0.95
Z95 = 1.959963984540054


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

    calibrate = ("dpsense curator calibrate --csv ref.csv --epsilon 1 --bounds=-600,600 --dataset fleet "
                 "--out dpsense-data/profile.json")
    p.epilog = examples("dpsense curator budget set --dataset fleet --epsilon 1", calibrate)
    sub = p.add_subparsers(dest="area", metavar="AREA", required=True)
    budget = sub.add_parser("budget", help="privacy budgets per data set",
                            description="Show, set or reset the (epsilon, delta) budget of a data set.",
                            epilog=examples("dpsense curator budget set --dataset fleet --epsilon 1 --delta 1e-6",
                                            "dpsense curator budget show"))
    actions = budget.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text, example in (
            ("show", "budget, releases and what remains (all data sets without --dataset)",
             "dpsense curator budget show --dataset fleet"),
            ("set", "create or change a budget; releases so far still count",
             "dpsense curator budget set --dataset fleet --epsilon 1 --delta 1e-6"),
            ("reset", "stop counting the releases so far (they stay in the log)",
             "dpsense curator budget reset --dataset fleet")):
        a = actions.add_parser(name, help=text, description=text, epilog=examples(example))
        a.add_argument("--dataset", required=name != "show", help="data set name")
        if name == "set":
            a.add_argument("--epsilon", type=exact, required=True, help="total epsilon, >= 0")
            a.add_argument("--delta", type=exact, default=None, help="total delta in [0, 1) (default 0)")
        a.add_argument("--db", help="budget database (default <data dir>/budget.db, env DPSENSE_DATA_DIR)")
    cal = sub.add_parser("calibrate", help="DP calibration of the device profile from raw calibration data",
                         description="Relaxed sensitivity (DP quantiles), centre (DP mean) and w_O (DP radius "
                                     "quantiles) from a CSV, charged to the data set's budget; writes a "
                                     "profile.json that `dpsense simulate`/`analyst`/`correction-server` and the "
                                     "firmware provisioning read.",
                         epilog=examples(calibrate))
    cal.add_argument("--csv", required=True, help="numeric CSV with a header row; a column 'outlier' is ignored")
    cal.add_argument("--epsilon", type=exact, required=True, help="curator epsilon for the whole calibration")
    cal.add_argument("--bounds", type=parse_floats, required=True,
                     help="LOWER,UPPER: public range of every column (values are clipped to it)")
    cal.add_argument("--device-epsilon", default="0.5", help="epsilon per column on the devices (default 0.5)")
    cal.add_argument("--quantum", type=float, default=0.01, help="units per quantum (default 0.01)")
    cal.add_argument("--outlier-percent", type=float, default=10.0, help="outlier percentage p_o of the percentile estimate of the relaxed sensitivity, Böhler et al. 2017 (default 10)")
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

    from dpsense.cloud.errors import UsageError
    from dpsense.cloud.privacy.calibration import dp_calibrate, load_csv
    if len(args.bounds) != 2:
        raise UsageError("--bounds must be LOWER,UPPER")
    acct = _accountant(args.db)
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
    return 0


def do_curator(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dpsense.cloud.deploy.config import Settings
    from dpsense.cloud.privacy.accountant import BudgetAccountant
    if args.area == "calibrate":
        return _do_calibrate(args)
    db = Path(args.db) if args.db else Settings.resolve().data_dir / "budget.db"
    acct = BudgetAccountant(db) if args.action == "set" else _accountant(args.db)
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
    return 0


def parser_query(p: argparse.ArgumentParser) -> None:
    count = "dpsense query count --csv data.csv --r 1.1 --epsilon 0.5 --subspace 0,1 --dataset fleet"
    subspaces = ("dpsense query subspaces --csv data.csv --r 0.2 --h 2 --epsilon-select 0.3 "
                 "--epsilon-count 0.2 --dataset fleet")
    p.epilog = examples(count, subspaces)
    sub = p.add_subparsers(dest="query", metavar="QUERY", required=True)
    for name, text, example in (
            ("count", "DP count of distance-based outliers, q_count(X, k, r, S) (paper 4: Okada et al. 2015, Theorems 4-6, Algorithms 1-2)", count),
            ("subspaces", "DP top-h outlier subspaces (exponential mechanism), then DP counts "
                          "(paper 4: Okada et al. 2015, Theorem 7, Algorithm 3)", subspaces)):
        q = sub.add_parser(name, help=text, description=text, epilog=examples(example))
        q.add_argument("--csv", required=True, help="numeric CSV, one record per row (a header row is skipped)")
        q.add_argument("--k", type=int, default=3, help="outliers have fewer than k neighbours (default 3)")
        q.add_argument("--r", type=float, required=True, help="radius in the normalised subspace distance")
        q.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                       help="delta of the Gaussian count(s) (default %g: nine fit in a budget with delta 1e-6)"
                            % DEFAULT_DELTA)
        q.add_argument("--method", choices=("smooth", "global"), default="smooth",
                       help="count mechanism: smooth (NRS) or global (Theorem 4 upper bound); default smooth")
        q.add_argument("--dataset", required=True,
                       help="charge this data set's budget (see `dpsense curator budget`); every answer is charged")
        q.add_argument("--db", help="budget database (default <data dir>/budget.db, env DPSENSE_DATA_DIR)")
        q.add_argument("--seed", type=int, default=None, help="seed the noise (testing only; default: OS randomness)")
        if name == "count":
            q.add_argument("--epsilon", type=float, required=True, help="epsilon of the count")
            q.add_argument("--subspace", type=parse_floats, default=None, help="comma-separated column indices (0-based)")
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
            "(paper 2: Asif et al. 2019, Theorems 4.4 and 4.6); always charged to a data set's budget")
    q = sub.add_parser("identify", help=text, description=text,
                       epilog=examples("dpsense query identify --csv data.csv --record 3.1,0.2 --beta 5 "
                                       "--r 1.5 --epsilon 0.5 --sp-k 1 --dataset fleet"))
    q.add_argument("--csv", required=True, help="numeric CSV, one record per row (a header row is skipped)")
    q.add_argument("--record", required=True, type=parse_floats, help="the queried record, comma-separated values")
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

    from dpsense.cloud.errors import UsageError
    if not args.dataset:
        raise UsageError("--dataset is required: every answer is charged to a data set's budget")
    x = _query_csv(args.csv)
    acct = _accountant(args.db)
    rng = random.Random(args.seed) if args.seed is not None else None
    if args.query == "identify":
        from dpsense.cloud.privacy.identify import identify
        bit = identify(lambda: x, args.record, beta=args.beta, r=args.r, epsilon=args.epsilon,
                       accountant=acct, dataset=args.dataset, k=args.sp_k, rng=rng)
        print("anomaly: %s" % ("yes" if bit else "no"))
        print("guarantee: %s" % ("%g-DP (add/remove one record)" % args.epsilon if args.sp_k is None else
                                 "(%g, %d)-sensitively private" % (args.epsilon, args.sp_k)))
    elif args.query == "count":
        from dpsense.cloud.privacy.outlier_count import dp_outlier_count
        cols = None
        if args.subspace is not None:
            if any(c != int(c) for c in args.subspace):
                raise UsageError("--subspace must hold integer column indices")
            cols = [int(c) for c in args.subspace]
        rel = dp_outlier_count(x, k=args.k, r=args.r, epsilon=args.epsilon, delta=args.delta, subspace=cols,
                               method=args.method, accountant=acct, dataset=args.dataset, rng=rng)
        print("outlier count (subspace %s): %s" % (",".join(map(str, rel.subspace)),
                                                   _answer(rel.value, rel.n, rel.sigma_bound, rel.method == "global")))
        print("guarantee: %s" % rel.guarantee)
    else:
        from dpsense.cloud.privacy.subspaces import subspaces_with_counts, top_h_subspaces
        if args.epsilon_count is None:
            sel = top_h_subspaces(x, k=args.k, r=args.r, h=args.h, epsilon=args.epsilon_select,
                                  paper_mode=args.paper_mode, accountant=acct, dataset=args.dataset, rng=rng)
            print("top-%d subspaces: %s" % (args.h, " ".join(",".join(map(str, s)) for s in sel.subspaces)))
            print("guarantee: %s" % sel.guarantee)
        else:
            if args.paper_mode:
                raise UsageError("--paper-mode applies to the selection alone (omit --epsilon-count)")
            counted = subspaces_with_counts(x, k=args.k, r=args.r, h=args.h,
                                            epsilon_select=args.epsilon_select,
                                            epsilon_count=args.epsilon_count, delta=args.delta,
                                            count_method=args.method, accountant=acct,
                                            dataset=args.dataset, rng=rng)
            for s, c, sb in zip(counted.subspaces, counted.counts, counted.sigma_bounds):
                print("subspace %s: outlier count %s" % (",".join(map(str, s)),
                                                         _answer(c, counted.n, sb, counted.sigma_exact)))
            print("guarantee: %s" % counted.guarantee)
    print(acct.summary(args.dataset))
    return 0


def _accountant(path: str | None) -> "BudgetAccountant":
    """The budget database, which must exist: a missing one is a refusal (exit 1), not a new file."""
    from pathlib import Path

    from dpsense.cloud.deploy.config import Settings
    from dpsense.cloud.privacy.accountant import BudgetAccountant, BudgetError
    db = Path(path) if path else Settings.resolve().data_dir / "budget.db"
    try:
        return BudgetAccountant(db, create=False)
    except FileNotFoundError:
        raise BudgetError("no budget database at %s; create a budget first (dpsense curator budget set "
                          "--dataset NAME --epsilon E --delta D --db %s)" % (db, db)) from None


def _answer(value: float, n: int, sigma_bound: float | None, exact: bool) -> str:
    """A released count post-processed into ``[0, n]``, with the noise's error bar. Clamping is
    post-processing (no further cost) and never moves the answer away from the true count, so
    the error bar of the released value holds for it too."""
    clamped = min(max(value, 0.0), float(n))
    text = "%.6g of %d records" % (clamped, n)
    if clamped != value:
        text += " (released %.6g, clamped to [0, %d])" % (value, n)
    if sigma_bound is not None:
        text += "; error bar +-%.3g at %g %% (noise sigma %s %.3g%s)" % (
            Z95 * sigma_bound, 100 * LEVEL, "=" if exact else "<=", sigma_bound,
            "" if exact else ": the smooth mechanism's sigma depends on the data and is not released, this bound "
                             "takes its smooth sensitivity at n; --method global gives an exact one")
    return text
