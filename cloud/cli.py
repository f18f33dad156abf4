"""The ``dpsense`` command: a table of subcommands, each ``do_<name>(args) -> int``."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from dpsense.cloud.commands.curator import do_curator, do_query, parser_curator, parser_query
from dpsense.cloud.commands.demo import (
    do_demo,
    do_perturb,
    do_version,
    parser_demo,
    parser_perturb,
    parser_version,
)
from dpsense.cloud.commands.experiments import do_experiment, parser_experiment
from dpsense.cloud.commands.results import do_results, parser_results
from dpsense.cloud.commands.services import (
    do_analyst,
    do_broker,
    do_correction,
    do_gateway,
    do_ingest,
    do_simulate,
    do_status,
    parser_analyst,
    parser_broker,
    parser_correction,
    parser_gateway,
    parser_ingest,
    parser_simulate,
    parser_status,
)

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
    "results": (do_results, parser_results,
                "detection results: windows, candidates (device, boot, seq) and devices, as a table, CSV or JSON"),
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
