"""The ``dpsense`` command: a table of subcommands, each ``do_<name>(args) -> int``."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from cloud import __version__


def parser_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=100_000, help="readings in the window (default 100000)")
    p.add_argument("--separation", type=float, default=220.0,
                   help="gap between normal readings and outliers, paper 1 (default 220)")
    p.add_argument("--shape", choices=("scale", "shift"), default="scale",
                   help="how outliers are pushed out (SPEC 1.7; default scale)")
    p.add_argument("--epsilon", default="0.5", help="epsilon per column, a decimal (default 0.5)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed for data and noise; 0 draws noise from the OS CSPRNG (default 1)")


def do_demo(args: argparse.Namespace) -> int:
    from cloud.demo import DemoOptions, run_demo
    try:
        opts = DemoOptions(n=args.n, separation=args.separation, shape=args.shape,
                           epsilon=args.epsilon, seed=args.seed)
        return run_demo(opts)
    except ValueError as e:
        print("dpsense demo: %s" % e, file=sys.stderr)
        return 2


def parser_version(p: argparse.ArgumentParser) -> None:
    pass


def do_version(args: argparse.Namespace) -> int:
    from shared_protocol import PROTOCOL_VERSION
    print("dpsense %s (wire protocol v%d)" % (__version__, PROTOCOL_VERSION))
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None], str]] = {
    "demo": (do_demo, parser_demo, "perturb a synthetic fleet window with the board code and summarise"),
    "version": (do_version, parser_version, "print versions"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpsense",
        description="Privacy-preserving outlier detection for sensor fleets.",
        epilog="example: dpsense demo --n 20000 --epsilon 0.1",
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
