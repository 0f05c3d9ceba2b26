"""`pulsar-rebalance`: the planner's capabilities from the command line (a stable interface, see README.md).

Results go to stdout as JSON; bad input exits 2 with a one-line error on stderr and writes nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from planner.cli import algorithms, db, execution, plans, simulate, snapshots
from planner.cli.common import ArgumentParser, run_command

# Each command group adds its commands; the store, the collector, the executor and the Spark runner are imported
# by the commands that use them, so `--help` loads none of them.
COMMAND_GROUPS = (algorithms, snapshots, plans, execution, simulate, db)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="pulsar-rebalance", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log the strategies' reasons to stderr")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for group in COMMAND_GROUPS:
        group.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), plans.with_legacy_spellings(sys.argv[1:] if argv is None else argv))
