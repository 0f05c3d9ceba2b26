"""`simulate --replay CLUSTER --from T1 --to T2`: the simulator driven by a cluster's recorded snapshots instead of a
scenario, every strategy and this product's offline plans on that traffic (`planner.simulator.replay`), with the
check of the live plans of the window against their replanning from the recording (`--check-live`) and the result
stored for the review's replay page (`--store`)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from planner.cli.common import EXIT_RUNTIME_FAILURE, add_store_options, open_store, print_json
from planner.errors import InputError
from planner.pulsar.config import PulsarConfig
from planner.settings import storage_root

# Options that describe a scenario, meaningless on a recorded history.
_SCENARIO_ONLY = (
    ("all", "--all"),
    ("scenario", "--scenario"),
    ("maintenance", "--maintenance"),
    ("plot", "--plot"),
    ("markdown", "--markdown"),
    ("minutes", "--minutes"),
)


def parse_time(text: str | None, option: str) -> datetime:
    """An ISO 8601 time (UTC when it names no zone)."""
    if not text:
        raise InputError(f"simulate --replay needs {option} TIME (ISO 8601, such as 2026-03-02T08:00Z)")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"invalid {option} {text[:60]!r}: expected an ISO 8601 time such as 2026-03-02T08:00Z"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def simulation_choices(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The policies to run and the brokers' settings (`--broker-conf` keys Pulsar knows, then `--set`), each checked
    before anything runs; the same for a scenario and a replay."""
    from planner.pulsar.config import parse_assignments, read_properties
    from planner.simulator.engine import DEFAULT_POLICIES, parse_policy

    if args.target is not None and not args.target > 0:
        raise InputError(f"invalid --target {args.target}: must be a positive number of points")
    policies = [parse_policy(text).name for text in args.policies or DEFAULT_POLICIES]
    if len(set(policies)) != len(policies):
        raise InputError("invalid --policy: a policy is given twice")
    overrides: dict[str, str] = {}
    if args.broker_conf is not None:
        known = PulsarConfig.known_keys()
        overrides.update({k: v for k, v in read_properties(args.broker_conf).items() if k in known})
    overrides.update(parse_assignments(args.settings))
    PulsarConfig.from_settings(overrides, source="--set")  # bad values fail before anything runs
    return policies, overrides


def command_replay(args: argparse.Namespace) -> int | None:
    # Imported here: numpy, the simulator and the store load only for this command.
    from planner.audit.replays import write_replay
    from planner.simulator import report
    from planner.simulator.live_check import check_live_plans
    from planner.simulator.recorded import read_history
    from planner.simulator.replay import (
        DEFAULT_CADENCE_MINUTES,
        DEFAULT_TARGET_SPREAD,
        Interpolation,
        compare_replay,
        p95_score,
        stored_replay,
    )

    for name, option in _SCENARIO_ONLY:
        if getattr(args, name, None):
            raise InputError(f"invalid {option}: simulate --replay runs on the recorded history, not a scenario")
    if args.cluster_policies != "obey":
        raise InputError(
            f"invalid --cluster-policies {args.cluster_policies}: a replay obeys the policies the cluster declared"
        )
    start, end = parse_time(args.start, "--from"), parse_time(args.end, "--to")
    if end <= start:
        raise InputError(f"invalid --to {args.end}: not after --from {args.start}")
    policies, overrides = simulation_choices(args)
    store, root = open_store(args), storage_root()
    history = read_history(root, store, args.replay, start, end)
    comparison, _ = compare_replay(
        history,
        policies,
        overrides=overrides,
        seed=args.seed,
        cadence_minutes=args.cadence or DEFAULT_CADENCE_MINUTES,
        target_spread=args.target or DEFAULT_TARGET_SPREAD,
        interpolation=Interpolation(args.interpolation),
        calibration=args.calibration == "on",
    )
    live = check_live_plans(store, root, history, start, end) if args.check_live else None
    if args.plots:
        try:
            args.plots.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InputError(f"invalid --plots {str(args.plots)!r}: {error.strerror}") from None
        report.write_plot(comparison, args.plots / f"replay-{history.cluster}.png")
    stored = stored_replay(history, comparison, datetime.now(UTC), live.record() if live else None)
    written = write_replay(root, stored) if args.store else None
    if args.format == "json":
        document = report.to_json(comparison)
        for run in comparison.runs:
            document["policies"][run.policy]["p95Score"] = round(p95_score(run), 2)
        document.update(
            {
                "cluster": history.cluster,
                "from": history.start.isoformat(),
                "to": history.end.isoformat(),
                "snapshots": stored.snapshots,
                "notReproduced": list(stored.not_reproduced),
            }
        )
        if live is not None:
            document["live"] = live.to_json()
        if written:
            document["stored"] = written
        print_json(document)
    else:
        print(report.text_table(comparison))
        if live is not None:
            print()
            print(live_text(live.to_json()))
    if live is not None and not live.consistent:
        return EXIT_RUNTIME_FAILURE  # a live plan differs from its replanning: scripts see it without parsing
    return None


def live_text(document: dict[str, object]) -> str:
    """The check of the live plans for people: one line per plan, then what differed."""
    lines = [
        f"live plans of {document['cluster']}: {document['checked']} replanned from the recording, "
        f"{document['equal']} equal ({'consistent' if document['consistent'] else 'NOT consistent'})"
    ]
    results = document["results"]
    assert isinstance(results, list)
    for result in results:
        verdict = "equal" if result["equal"] else ("differs" if result["checked"] else "not checked")
        lines.append(f"  plan {result['plan']} ({result['strategy']}, minute {result['minute']}): {verdict}")
        lines += [f"    only live: {text}" for text in result["onlyLive"]]
        lines += [f"    only replayed: {text}" for text in result["onlyReplayed"]]
        lines += [f"    note: {text}" for text in result["notes"]]
        lines += [f"    not applied: {text}" for text in result["notApplied"]]
    return "\n".join(lines)


def add_replay_options(simulate: argparse.ArgumentParser) -> None:
    simulate.add_argument(
        "--replay", metavar="CLUSTER", help="replay a cluster's recorded snapshots (with --from, --to)"
    )
    simulate.add_argument("--from", dest="start", metavar="TIME", help="with --replay: from this time (ISO 8601)")
    simulate.add_argument("--to", dest="end", metavar="TIME", help="with --replay: up to this time (ISO 8601)")
    simulate.add_argument(
        "--interpolation",
        choices=["hold", "linear"],
        default="hold",
        help="with --replay: traffic between two snapshots is the last one's, or a line to the next (default hold)",
    )
    simulate.add_argument(
        "--check-live",
        action="store_true",
        help="with --replay: replan each live plan of the window from the recording, compare (exit 1 if one differs)",
    )
    simulate.add_argument(
        "--store", action="store_true", help="with --replay: store the result for the review's replay page"
    )
    simulate.add_argument("--plots", type=Path, metavar="DIR", help="with --replay: write the score plot into DIR")
    add_store_options(simulate)
