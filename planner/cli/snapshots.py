"""A cluster's load, taken and read back: `collect`, `snapshots`, `load-data`."""

from __future__ import annotations

import argparse
import sys
from getpass import getuser
from pathlib import Path

from planner.arguments import COUNT, ID, admin_url
from planner.cli.common import Commands, add_store_options, cluster_settings, open_store, print_json
from planner.settings import planner_settings, storage_root


def command_collect(args: argparse.Namespace) -> None:
    from planner.collect.collector import collect
    from planner.orchestrate.scale_events import observe_snapshot

    settings = cluster_settings(args)
    store = open_store(args)
    # A cluster that cannot be read, or a worker process that died, is a runtime failure (exit 1: `run_command`).
    with settings.client() as client:
        result = collect(
            client, store, storage_root(), settings.name if args.cluster else None, topic_stats=args.topic_stats
        )
    # Brokers that joined since the last collect: recorded once, each with a fill to plan (`brokers events`).
    events = observe_snapshot(
        store, storage_root(), result.snapshot_id, planner_settings().scale_event_rejoin_after, f"cli:{getuser()}"
    )
    print_json({**result.to_json(), "scaleEvents": [event.to_json() for event in events]})


def command_snapshots(args: argparse.Namespace) -> None:
    from planner.store.snapshots import list_snapshots

    rows = list_snapshots(open_store(args), args.cluster, limit=args.limit)
    if args.format == "json":
        print_json({"snapshots": [row.to_json() for row in rows]})
        return
    print(f"{'id':>8}  {'cluster':<20} {'taken at (UTC)':<20} {'brokers':>7} {'bundles':>8}  partial")
    for row in rows:
        print(
            f"{row.id:>8}  {row.cluster:<20} {row.taken_at.isoformat()[:19]:<20} {row.brokers:>7} "
            f"{row.bundles:>8}  {'yes' if row.partial else 'no'}"
        )


def command_load_data(args: argparse.Namespace) -> None:
    from planner.collect.collector import load_data_for_snapshot

    load_data = load_data_for_snapshot(open_store(args), storage_root(), args.snapshot)
    sys.stdout.write(load_data.model_dump_json(by_alias=True, indent=2))
    sys.stdout.write("\n")


def add_commands(commands: Commands) -> None:
    collect_parser = commands.add_parser("collect", help="take a load snapshot of a cluster through its admin API")
    collect_parser.add_argument("--cluster", help="a cluster of the clusters file")
    collect_parser.add_argument(
        "--admin-url", type=admin_url, help="a broker's admin URL; registered under its Pulsar cluster name"
    )
    collect_parser.add_argument("--token-env", help="with --admin-url: environment variable holding the token")
    collect_parser.add_argument("--ca-file", type=Path, help="with --admin-url: CA bundle for TLS verification")
    collect_parser.add_argument("--clusters", type=Path, help="clusters file (default: $PULSAR_REBALANCE_CLUSTERS)")
    collect_parser.add_argument("--topic-stats", action="store_true", help="also archive per-topic stats")
    add_store_options(collect_parser)
    collect_parser.set_defaults(handler=command_collect)

    snapshots = commands.add_parser("snapshots", help="list collected snapshots")
    snapshots.add_argument("--cluster", help="only this cluster's snapshots")
    snapshots.add_argument("--limit", type=COUNT, default=50, help="newest snapshots at most (default 50)")
    snapshots.add_argument(
        "--format", choices=["json", "table"], default="json", help="json (default) or a table for people"
    )
    # Before --format, JSON was asked for with --json: still accepted.
    snapshots.add_argument("--json", dest="format", action="store_const", const="json", help=argparse.SUPPRESS)
    add_store_options(snapshots)
    snapshots.set_defaults(handler=command_snapshots)

    load_data = commands.add_parser("load-data", help="print the LoadData JSON of a snapshot")
    load_data.add_argument("--snapshot", type=ID, required=True, help="the snapshot id (see `snapshots`)")
    add_store_options(load_data)
    load_data.set_defaults(handler=command_load_data)
