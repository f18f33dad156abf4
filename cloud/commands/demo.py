"""``dpsense demo|perturb|version``."""
from __future__ import annotations

import argparse
import sys

from dpsense import __version__


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
    p.add_argument("--no-sweep", action="store_true", help="skip the recall-vs-epsilon sweep")
    p.add_argument("--correction-mode", choices=("paper", "bands"), default="bands",
                   help="correction round of both services: bands (default) or paper (never-worse rule)")


def do_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dpsense.cloud.broker import BrokerError
    from dpsense.cloud.pipeline import DemoError, DemoOptions, run_pipeline_demo
    try:
        opts = DemoOptions(n=args.n, devices=args.devices, separation=args.separation, shape=args.shape,
                           epsilon=args.epsilon, seed=args.seed, out=Path(args.out), sweep=not args.no_sweep,
                           mode=args.correction_mode)
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
    from dpsense.cloud.perturb_summary import SummaryOptions, run_summary
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
    from dpsense.protocol import wire
    print("dpsense %s (wire protocol v%d)" % (__version__, wire.VERSION))
    return 0
