"""A cluster's brokers and its scale events: `brokers list|events|mark-removal|unmark`.

A broker that joins is seen by the collects (`collect` lists the events it recorded); one to be removed is marked
here, by whom and why (audited). Each event gets its maintenance plan proposed by the collect DAG, or planned with
`plan run --cluster NAME --scale-event ID` (`planner.orchestrate.scale_events`).
"""

from __future__ import annotations

import argparse
import getpass

from planner.arguments import COUNT
from planner.cli.common import ArgumentParser, Commands, add_store_options, open_store, print_json
from planner.lifecycle import ScaleEventKind, ScaleEventState


def _actor(args: argparse.Namespace) -> str:
    """Who acts, for the store and the audit log: the OS user, and the name they give."""
    return f"cli:{getpass.getuser()}" + (f" as {args.as_name}" if args.as_name else "")


def command_list(args: argparse.Namespace) -> None:
    from planner.store.scale_events import MARKED_STATES, known_brokers, list_scale_events

    store = open_store(args)
    marked = {
        event.broker: event.id
        for event in list_scale_events(store, args.cluster, MARKED_STATES, limit=1000)
        if event.kind is ScaleEventKind.REMOVAL
    }
    brokers = [
        {**broker.to_json(), "markedForRemoval": marked.get(broker.broker)}
        for broker in known_brokers(store, args.cluster)
    ]
    print_json({"cluster": args.cluster, "brokers": brokers})


def command_events(args: argparse.Namespace) -> None:
    from planner.store.scale_events import list_scale_events

    states = [ScaleEventState(state) for state in args.state]
    events = list_scale_events(open_store(args), args.cluster, states, limit=args.limit)
    print_json({"cluster": args.cluster, "scaleEvents": [event.to_json() for event in events]})


def command_mark_removal(args: argparse.Namespace) -> None:
    from planner.store.scale_events import mark_removal

    event, already = mark_removal(open_store(args), args.cluster, args.broker, _actor(args), args.reason or "")
    print_json({"scaleEvent": event.to_json(), "alreadyMarked": already})


def command_unmark(args: argparse.Namespace) -> None:
    from planner.store.scale_events import unmark_removal

    event = unmark_removal(open_store(args), args.cluster, args.broker, _actor(args), args.reason or "")
    print_json({"scaleEvent": event.to_json()})


def add_commands(commands: Commands) -> None:
    brokers_parser = commands.add_parser(
        "brokers", help="brokers list|events|mark-removal|unmark: a cluster's brokers and its scale events"
    )
    brokers = brokers_parser.add_subparsers(dest="brokers_command", required=True, parser_class=ArgumentParser)

    listing = brokers.add_parser("list", help="the brokers the collects have seen, and those marked for removal")
    listing.add_argument("cluster", help="the cluster's name")
    add_store_options(listing)
    listing.set_defaults(handler=command_list)

    events = brokers.add_parser("events", help="the cluster's scale events, newest first, and the plan of each")
    events.add_argument("cluster", help="the cluster's name")
    events.add_argument(
        "--state",
        action="append",
        default=[],
        choices=[state.value for state in ScaleEventState],
        help="only events in this state (repeatable)",
    )
    events.add_argument("--limit", type=COUNT, default=100, help="newest events at most (default 100)")
    add_store_options(events)
    events.set_defaults(handler=command_events)

    for name, handler, what in (
        ("mark-removal", command_mark_removal, "mark a broker for removal: a drain plan is proposed for it"),
        ("unmark", command_unmark, "withdraw a broker's removal mark (a drain already planned stays: reject it)"),
    ):
        command = brokers.add_parser(name, help=what)
        command.add_argument("cluster", help="the cluster's name")
        command.add_argument("broker", help="the broker's id as Pulsar lists it (host:port; see `brokers list`)")
        command.add_argument("--reason", help="why, for the audit log")
        command.add_argument("--as", dest="as_name", metavar="NAME", help="who asks (default: the OS user)")
        add_store_options(command)
        command.set_defaults(handler=handler)
