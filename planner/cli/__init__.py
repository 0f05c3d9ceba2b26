"""`pulsar-rebalance`: the planner's capabilities from the command line (a stable interface, see README.md).

Results go to stdout as JSON; bad input exits 2 with a one-line error on stderr and writes nothing.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from planner.cli import algorithms, db, execution, local_tools, plans, simulate, snapshots
from planner.cli.common import ArgumentParser
from planner.errors import InputError

# Each command group adds its commands; the store, the collector, the executor and the Spark runner are imported
# by the commands that use them, so `--help` loads none of them.
COMMAND_GROUPS = (algorithms, snapshots, plans, execution, simulate, local_tools, db)

EXIT_BAD_INPUT = 2


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="pulsar-rebalance", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log the strategies' reasons to stderr")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for group in COMMAND_GROUPS:
        group.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(levelname)s %(message)s",
            stream=sys.stderr,
        )
        args.handler(args)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; that is not an error of ours.
        sys.stderr.close()
    return 0
