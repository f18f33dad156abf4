"""``dpsense demo|perturb|version``."""
from __future__ import annotations

import argparse

from dpsense import __version__
from dpsense.cloud.cli.commands.common import examples, seed


def parser_demo(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense demo", "dpsense demo --n 20000 --epsilon 0.1 --no-sweep --out out/quick")
    p.add_argument("--n", type=int, default=100_000, help="readings (default 100000)")
    p.add_argument("--devices", type=int, default=10, help="simulated devices (default 10)")
    p.add_argument("--separation", type=float, default=220.0,
                   help="gap between normal readings and outliers, paper 1 (default 220)")
    p.add_argument("--shape", choices=("scale", "shift"), default="scale",
                   help="how outliers are pushed out (Böhler et al. 2017, Sect. 7; default scale)")
    p.add_argument("--epsilon", default="0.5", help="epsilon per column, a decimal (default 0.5)")
    p.add_argument("--seed", type=seed, default=None,
                   help="seed the data and the boards' noise: reproducible, not private "
                        "(default: synthetic data of seed 1, noise from the OS CSPRNG)")
    p.add_argument("--out", default="out/demo", help="report and data folder (default out/demo)")
    p.add_argument("--no-sweep", action="store_true", help="skip the recall-vs-epsilon sweep")
    p.add_argument("--correction-mode", choices=("paper", "bands"), default="bands",
                   help="correction round of both services: bands (default) or paper (never-worse rule)")


def do_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dpsense.cloud.sim.demo import DemoOptions, run_pipeline_demo
    opts = DemoOptions(n=args.n, devices=args.devices, separation=args.separation, shape=args.shape,
                       epsilon=args.epsilon, seed=args.seed, out=Path(args.out), sweep=not args.no_sweep,
                       mode=args.correction_mode)
    return run_pipeline_demo(opts)


def parser_perturb(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense perturb", "dpsense perturb --n 20000 --epsilon 1 --seed 3")
    p.add_argument("--n", type=int, default=100_000, help="readings in the window (default 100000)")
    p.add_argument("--separation", type=float, default=220.0,
                   help="gap between normal readings and outliers, paper 1 (default 220)")
    p.add_argument("--shape", choices=("scale", "shift"), default="scale",
                   help="how outliers are pushed out (Böhler et al. 2017, Sect. 7; default scale)")
    p.add_argument("--epsilon", default="0.5", help="epsilon per column, a decimal (default 0.5)")
    p.add_argument("--seed", type=seed, default=None,
                   help="seed the data and the noise: reproducible, not private "
                        "(default: synthetic data of seed 1, noise from the OS CSPRNG)")


def do_perturb(args: argparse.Namespace) -> int:
    from dpsense.cloud.sim.perturb_summary import SummaryOptions, run_summary
    opts = SummaryOptions(n=args.n, separation=args.separation, shape=args.shape,
                          epsilon=args.epsilon, seed=args.seed)
    return run_summary(opts)


def parser_version(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense version")


def do_version(args: argparse.Namespace) -> int:
    from dpsense.protocol import wire
    print("dpsense %s (wire protocol v%d)" % (__version__, wire.VERSION))
    return 0
