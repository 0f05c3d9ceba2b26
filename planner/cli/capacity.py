"""`capacity CLUSTER`: how many brokers the cluster needs, which one it can spare, and how its headroom moves."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from planner.arguments import Bounded, bounded_int
from planner.cli.common import Commands, add_config_options, add_store_options, open_store, print_json, pulsar_config
from planner.errors import InputError
from planner.names import check_cluster_name
from planner.settings import planner_settings, storage_root

TARGET = Bounded(integral=False, minimum=1.0, maximum=1000.0, unit=" points")
TOLERANCE = Bounded(integral=False, minimum=0.0, maximum=10.0)
DAYS = Bounded(integral=False, minimum=0.01, maximum=366.0, unit=" days")
MOMENTS = bounded_int(1, 100_000)


def moment(text: str) -> datetime:
    """An ISO 8601 time (`2026-03-02`, `2026-03-02T06:00`, `...Z`, `...+02:00`); without an offset, UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2026-03-02T06:00Z, got {text[:40]!r}"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def command_capacity(args: argparse.Namespace) -> None:
    from planner.audit.capacity import DEFAULT_DAYS, CapacityQuery, read_capacity_advice, window_ending

    cluster = check_cluster_name(args.cluster, "CLUSTER")
    if args.days is not None and args.start is not None:
        raise InputError("pulsar-rebalance capacity: give --from or --days, not both")
    target = args.target if args.target is not None else planner_settings().capacity_target
    config = pulsar_config(args)
    settings = config.model_dump(by_alias=True, exclude_unset=True, mode="json")
    if args.start is not None:
        start, end = args.start, args.end or datetime.now(UTC)
    else:
        start, end = window_ending(args.end, args.days if args.days is not None else DEFAULT_DAYS)
    query = CapacityQuery(cluster, start, end, target=target, tolerance=args.tolerance, max_moments=args.max_moments)
    advice = read_capacity_advice(open_store(args), storage_root(), query, settings)
    if args.json:
        print_json(advice.to_json())
        return
    document = advice.to_json()
    print(f"Capacity of {cluster}, {start.isoformat()} to {end.isoformat()}, target p95 score {target:g}")
    print()
    print(f"{'kind':<8} {'brokers':<40} {'recorded':>8} {'needed':>6} {'spare':>5}")
    for kind, count in zip(document["kinds"], document["counts"], strict=True):
        members = ",".join(kind["brokers"])
        members = members if len(members) <= 40 else members[:37] + "..."
        print(f"{kind['name']:<8} {members:<40} {count['recorded']:>8} {count['needed']:>6} {count['spare']:>5}")
    print()
    print(f"{'without':<30} {'p95':>6} {'meets':>5} {'bundles':>7} {'share':>6}")
    for option in document["removals"]:
        meets = "yes" if option["meetsTarget"] else "no"
        p95 = "-" if option["p95"] is None else option["p95"]
        print(f"{option['broker']:<30} {p95:>6} {meets:>5} {option['bundles']:>7} {option['share']:>6.1%}")
    print()
    for line in advice.explanation:
        print(line)


def add_commands(commands: Commands) -> None:
    capacity = commands.add_parser(
        "capacity",
        help="how many brokers of each kind keep the p95 score under a target with one down, which can go, headroom",
    )
    capacity.add_argument("cluster", metavar="CLUSTER", help="the cluster, as its snapshots name it")
    capacity.add_argument(
        "--target", type=TARGET, help="the p95 score not to exceed (default: the capacity_target setting, 80)"
    )
    capacity.add_argument("--from", dest="start", type=moment, help="the window's start (ISO 8601; UTC by default)")
    capacity.add_argument("--to", dest="end", type=moment, help="the window's end (default: now)")
    capacity.add_argument("--days", type=DAYS, help="the window: this many days up to --to (default 7)")
    capacity.add_argument(
        "--tolerance",
        type=TOLERANCE,
        default=0.2,
        help="how far two brokers' costs of the same traffic may differ and still be one kind (default 0.2: 20 %%)",
    )
    capacity.add_argument(
        "--max-moments",
        type=MOMENTS,
        default=288,
        help="snapshots evaluated at most, evenly spaced over the window (default 288)",
    )
    capacity.add_argument("--json", action="store_true", help="print the advice as JSON")
    add_config_options(capacity)
    add_store_options(capacity)
    capacity.set_defaults(handler=command_capacity)
