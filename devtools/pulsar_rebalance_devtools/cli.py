"""`pulsar-rebalance-dev`: the dev tools from the command line, a local Pulsar cluster and the demo.

Results go to stdout as JSON; bad input exits 2 with a one-line error on stderr, as with `pulsar-rebalance`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Sequence

from planner.arguments import bounded_int
from planner.cli.common import ArgumentParser, print_json, run_command
from planner.errors import InputError
from planner.pulsar.config import parse_assignments
from pulsar_rebalance_devtools.maven import MavenError

PORT = bounded_int(1, 65535)
# The local cluster puts broker i on 127.0.0.(i + 1).
LOCAL_BROKERS = bounded_int(1, 254)


def command_local_cluster(args: argparse.Namespace) -> None:
    from pulsar_rebalance_devtools import local_cluster

    try:
        if args.action == "start":
            settings = local_cluster.settings_from_env()
            settings = dataclasses.replace(
                settings,
                auth=args.auth,
                load_manager=args.load_manager or settings.load_manager,
                pulsar_version=local_cluster.check_release(args.pulsar_version or settings.pulsar_version),
                broker_settings=local_cluster.broker_setting_overrides(parse_assignments(args.set)),
            )
            print_json(local_cluster.start(brokers=args.brokers, settings=settings))
        elif args.action == "status":
            print_json(local_cluster.status() or {"running": False})
        elif args.action == "stop":
            local_cluster.stop()
        else:
            local_cluster.wipe()
    except (local_cluster.LocalClusterError, MavenError) as error:
        raise InputError(f"local-cluster {args.action}: {error}") from None


def command_demo(args: argparse.Namespace) -> None:
    from pulsar_rebalance_devtools.demo import run_demo

    # Importing Airflow (for its DAG file) set the root logger to INFO: the steps and the result, not every
    # client's connection log, are what a first run should show (`-v` shows them).
    logging.getLogger().setLevel(logging.INFO if args.verbose else logging.WARNING)
    result = run_demo(approve=args.approve, brokers=args.brokers, port=args.port)
    print(json.dumps(result))


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="pulsar-rebalance-dev", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step and client to stderr")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    cluster = commands.add_parser("local-cluster", help="a real Pulsar cluster on 127.0.0.1 for trying things out")
    cluster.add_argument(
        "action",
        choices=["start", "status", "stop", "wipe"],
        help="start it (downloading Pulsar on first use), show it, stop it, or stop it and delete its data",
    )
    cluster.add_argument("--brokers", type=LOCAL_BROKERS, default=3, help="with start: how many brokers")
    cluster.add_argument(
        "--auth",
        choices=["none", "token"],
        default="none",
        help="with start: token enables Pulsar's JWT authentication; the superuser token's file is in the output",
    )
    cluster.add_argument(
        "--load-manager",
        choices=["modular", "extensible"],
        help="with start: the brokers' load manager, ModularLoadManagerImpl (default) or the extensible one (PIP-192)",
    )
    cluster.add_argument(
        "--pulsar-version",
        metavar="X.Y.Z",
        help="with start: the Pulsar release the brokers run, any 3.x or 4.x on Maven Central (default "
        "$PULSAR_REBALANCE_PULSAR_VERSION or 4.2.4); give another release its own PULSAR_REBALANCE_HOME and ports",
    )
    cluster.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="with start: a broker.conf key for every broker, over the shared settings (repeatable), e.g. "
        "loadBalancerSheddingEnabled=true or failureDomainsEnabled=true",
    )
    cluster.set_defaults(handler=command_local_cluster)

    demo = commands.add_parser("demo", help="the full cycle on a local cluster with Airflow (see README)")
    demo.add_argument("--approve", action="store_true", help="approve the plan automatically instead of in the UI")
    demo.add_argument("--brokers", type=LOCAL_BROKERS, default=3, help="brokers of the local cluster (default 3)")
    demo.add_argument("--port", type=PORT, default=8080, help="Airflow UI port on 127.0.0.1 (without --approve)")
    demo.set_defaults(handler=command_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
