"""`pulsar-rebalance`: the planner's capabilities from the command line (a stable interface, see README.md).

Results go to stdout as JSON; a failure prints one line on stderr. Exit codes: 0 success, 1 a runtime failure (a
cluster, the store or a worker failed), 2 bad input (nothing written), 3 an execution that ended without every action
done (partial, stopped or expired).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from planner.cli import accuracy, algorithms, brokers, capacity, db, execution, plans, simulate, snapshots
from planner.cli.common import ArgumentParser, run_command

# Each command group adds its commands; the store, the collector, the executor and the Spark runner are imported
# by the commands that use them, so `--help` loads none of them.
COMMAND_GROUPS = (algorithms, snapshots, plans, execution, simulate, db, brokers, capacity, accuracy)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="pulsar-rebalance", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log the strategies' reasons to stderr")
    parser.add_argument("--version", action=_PrintVersion, help="print the version and the Pulsar release lines")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for group in COMMAND_GROUPS:
        group.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), plans.with_legacy_spellings(sys.argv[1:] if argv is None else argv))


DISTRIBUTION = "pulsar-rebalance"


class _PrintVersion(argparse.Action):
    """`--version`, printed as it is (argparse's own action rewraps it) and only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    """The installed distribution's version, and the Pulsar release lines the planner compared with Pulsar's own
    classes (`planner.pulsar.versions.RELEASE_LINES`: a `pulsarVersion` of another line is refused)."""
    from planner.pulsar.versions import RELEASE_LINES

    try:
        installed = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        installed = "(not installed)"
    lines = ", ".join(f"{major}.{minor} ({release})" for (major, minor), release in sorted(RELEASE_LINES.items()))
    return f"{DISTRIBUTION} {installed}\nPulsar release lines: {lines}"
