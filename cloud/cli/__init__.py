"""The ``dpsense`` command: a table of subcommands, each ``do_<name>(args) -> int`` (cli/commands/).
May import: transport, deploy, storage, ingest, correction, privacy, ops, analyst, sim.

``main`` is the one place that turns failures into what a user sees: a ``DpsenseError``,
a bad value (``ValueError``) or an OS error (a missing file, a refused connection) ends
the command with one line, ``dpsense <command>: <reason>``, on stderr and exit status 2
(argparse's own errors exit 2 too); a refusal (``RefusedError``: a privacy budget that a
release would exceed, a budget that does not exist) exits 1, as docs/curator.md says; Ctrl-C
exits 130. A reader that closes the output
early (``dpsense status | head -1``) ends the command quietly, with status 0. Anything
else is a bug and keeps its traceback. Every command runs with umask 077.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Iterator

from dpsense.cloud.cli.commands.aggregate import do_aggregate, parser_aggregate
from dpsense.cloud.cli.commands.common import HelpFormatter
from dpsense.cloud.cli.commands.curator import do_curator, do_query, parser_curator, parser_query
from dpsense.cloud.cli.commands.dashboard import do_dashboard, parser_dashboard
from dpsense.cloud.cli.commands.demo import (
    do_demo,
    do_perturb,
    do_version,
    parser_demo,
    parser_perturb,
    parser_version,
)
from dpsense.cloud.cli.commands.experiments import do_experiment, parser_experiment
from dpsense.cloud.cli.commands.results import do_results, parser_results
from dpsense.cloud.cli.commands.services import (
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
from dpsense.cloud.errors import DpsenseError, RefusedError

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
    "dashboard": (do_dashboard, parser_dashboard,
                  "serve a read-only live view of the analyst's store and Prometheus metrics (loopback)"),
    "results": (do_results, parser_results,
                "detection results: windows, candidates (device, boot, seq) and devices, as a table, CSV or JSON"),
    "aggregate": (do_aggregate, parser_aggregate,
                  "mean, sum, threshold counts, histogram or quantile per group and window, with confidence "
                  "intervals, from the released readings (spends no privacy budget)"),
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
        epilog="examples:\n  dpsense demo --n 20000 --epsilon 0.1\n  dpsense status\n"
               "(see `dpsense COMMAND --help`)",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, add_args, help_text) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    for q in parsers(p):
        q.formatter_class = HelpFormatter
    return p


def parsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``p`` and every parser of its subcommands, depth first."""
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):     # once each, aliases aside
                yield from parsers(child)


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not args.command:
        p.print_help()
        return 2
    where = "dpsense %s" % args.command
    # Whatever the caller's umask: what dpsense and its children (Mosquitto, SQLite) create
    # is private to this user (cloud/deploy/files.py sets the modes explicitly as well).
    os.umask(0o077)
    try:
        rc = COMMANDS[args.command][0](args)
        sys.stdout.flush()          # a closed pipe shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        # The reader has all it wanted. Point stdout at /dev/null so that the interpreter's
        # final flush of what is still buffered does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except KeyboardInterrupt:
        print("%s: interrupted" % where, file=sys.stderr)
        return 130
    except RefusedError as e:
        print("%s: %s" % (where, _one_line(e)), file=sys.stderr)
        return 1
    except (DpsenseError, ValueError) as e:
        print("%s: %s" % (where, _one_line(e)), file=sys.stderr)
        return 2
    except OSError as e:
        reason = _one_line(e) if e.strerror is None else e.strerror
        if e.filename is not None:
            reason = "%s: %s" % (e.filename, reason)
        print("%s: %s" % (where, reason), file=sys.stderr)
        return 2


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__

