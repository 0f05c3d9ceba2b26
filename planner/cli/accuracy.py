"""How right the previews were: `accuracy CLUSTER`, `accuracy plan PLAN_ID`, `accuracy measure PLAN_ID`.

A table for people by default, `--json` for scripts (stable keys: `planner.audit.accuracy.ClusterAccuracy.to_json`,
`planner.plan.outcome.PlanOutcome.to_json`). `execute` measures through the same path after it moved something
(`measure_executed`).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from planner.arguments import COUNT, ID, SECONDS
from planner.cli.common import (
    Commands,
    add_plan_cluster_options,
    add_store_options,
    open_store,
    plan_cluster_client,
    print_json,
)
from planner.errors import InputError
from planner.settings import planner_settings, storage_root

if TYPE_CHECKING:
    from planner.audit.accuracy import ClusterAccuracy, Distribution
    from planner.collect.admin_client import PulsarAdminClient
    from planner.orchestrate.measure import MeasuredOutcome
    from planner.plan.outcome import PlanOutcome
    from planner.store.database import Store

USAGE = "accuracy CLUSTER | accuracy cluster NAME | accuracy plan PLAN_ID | accuracy measure PLAN_ID"


def _since(args: argparse.Namespace, now: datetime) -> datetime:
    if args.since is not None and args.days is not None:
        raise InputError("accuracy: give either --since or --days, not both")
    if args.days is not None:
        return now - timedelta(days=args.days)
    if args.since is None:
        return now - planner_settings().accuracy_window
    try:
        since = datetime.fromisoformat(args.since)
    except ValueError:
        raise InputError(f"accuracy: --since must be an ISO 8601 date or time (got {args.since!r})") from None
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    if since > now:
        raise InputError(f"accuracy: --since {args.since} is in the future")
    return since


def _plan_id(text: str) -> int:
    try:
        return int(ID(text))
    except (argparse.ArgumentTypeError, ValueError):
        raise InputError(f"accuracy: PLAN_ID must be a plan id, a positive integer (got {text!r})") from None


def command_accuracy(args: argparse.Namespace) -> int | None:
    words = list(args.words)
    if len(words) == 2 and words[0] == "plan":
        return show_plan_accuracy(args, _plan_id(words[1]))
    if len(words) == 2 and words[0] == "measure":
        return measure_again(args, _plan_id(words[1]))
    if len(words) == 2 and words[0] == "cluster":
        return show_cluster_accuracy(args, words[1])
    if len(words) == 1 and words[0] not in ("plan", "measure", "cluster"):
        return show_cluster_accuracy(args, words[0])
    raise InputError(f"accuracy: expected {USAGE} (got {' '.join(words)!r})")


def show_cluster_accuracy(args: argparse.Namespace, cluster: str) -> None:
    from planner.audit.outcomes import bound_state, cluster_accuracy_of, configured_bound
    from planner.store.clusters import cluster_names

    store = open_store(args)
    if cluster not in cluster_names(store):
        raise InputError(f"accuracy: cluster {cluster!r} is not in the store (see `snapshots` for the known ones)")
    now = datetime.now(UTC)
    accuracy = cluster_accuracy_of(store, cluster, _since(args, now), now)
    bound = configured_bound(planner_settings())
    state = bound_state(store, cluster)
    if args.json:
        print_json(
            {
                **accuracy.to_json(),
                "bound": {"p90": bound.p90, "state": state.value if state is not None else None},
            }
        )
        return
    print(cluster_text(accuracy, bound.p90))


def show_plan_accuracy(args: argparse.Namespace, plan_id: int) -> None:
    from planner.audit.outcomes import outcome_of_plan

    outcome = outcome_of_plan(open_store(args), plan_id)
    if args.json:
        print_json(outcome.to_json())
        return
    print(plan_text(outcome))


def measure_again(args: argparse.Namespace, plan_id: int) -> None:
    """Collect the plan's cluster now and record it as the plan's measurement (the newest counts)."""
    from planner.audit.outcomes import outcome_of_plan
    from planner.errors import NotFoundError
    from planner.store.plans import plan_record

    store = open_store(args)
    record = plan_record(store, plan_id)
    if not any(action.attempts for action in record.actions):
        raise InputError(f"plan {plan_id} was never executed: there is nothing to measure ({record.status.value})")
    try:
        executed = outcome_of_plan(store, plan_id).executed_at
    except NotFoundError:
        executed = None
    since = executed or datetime.now(UTC)
    with plan_cluster_client(args, store, plan_id) as client:
        measured = measure_executed(store, client, plan_id, since=since, wait=args.wait, actor="cli:accuracy")
    if args.json:
        print_json({**measured.to_json(), "outcome": measured.outcome.to_json()})
        return
    print(plan_text(measured.outcome))


def measure_executed(
    store: Store,
    client: PulsarAdminClient,
    plan_id: int,
    *,
    since: datetime,
    wait: float | None,
    actor: str,
) -> MeasuredOutcome:
    """The one measuring path (`planner.orchestrate.measure`) from the CLI: a crossing of the accuracy bound is one
    warning line on stderr (the notifiers are Airflow's)."""
    from planner.audit.outcomes import configured_bound
    from planner.orchestrate.measure import measure_plan

    settings = planner_settings()
    measured = measure_plan(
        store,
        client,
        storage_root(),
        plan_id,
        since=since,
        wait_seconds=settings.measure_wait if wait is None else wait,
        bound=configured_bound(settings),
        actor=actor,
    )
    if not measured.fresh:
        print(
            f"warning: plan {plan_id}: measured before the load settled after the execution (snapshot "
            f"{measured.measurement.snapshot_id}); `accuracy measure {plan_id}` measures it again",
            file=sys.stderr,
        )
    if measured.alert is not None:
        print(f"warning: {measured.alert.text}", file=sys.stderr)
    return measured


# --- text for people ---------------------------------------------------------------------------------------------


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def _distribution_line(name: str, figures: Distribution) -> str:
    return (
        f"  {name:<12} plans {figures.count:>4}  p50 {_number(figures.p50):>6}  p90 {_number(figures.p90):>6}  "
        f"max {_number(figures.max):>6}  bias {_number(figures.bias, signed=True):>6}"
    )


def cluster_text(accuracy: ClusterAccuracy, bound: float) -> str:
    lines = [
        f"{accuracy.cluster}: {len(accuracy.plans)} plans measured from {accuracy.since:%Y-%m-%d %H:%M} to "
        f"{accuracy.until:%Y-%m-%d %H:%M} UTC",
        "prediction error, score points (each plan's largest broker error):",
        _distribution_line("undisturbed", accuracy.undisturbed),
        _distribution_line("all", accuracy.overall),
    ]
    trend = accuracy.trend
    if trend.older_p90 is not None and trend.recent_p90 is not None:
        slope = f"; {_number(trend.slope_per_week, signed=True)} points a week" if trend.slope_per_week else ""
        lines.append(
            f"trend: {trend.direction.value} (p90 {_number(trend.older_p90)} -> {_number(trend.recent_p90)}{slope})"
        )
    else:
        lines.append("trend: unknown (too few undisturbed plans)")
    p90 = accuracy.undisturbed.p90
    verdict = "no verdict yet" if p90 is None else ("above it" if p90 > bound else "within it")
    lines.append(f"bound: p90 at most {bound:g} points: {verdict}")
    if accuracy.misses:
        lines.append("biggest misses:")
        for plan in accuracy.misses:
            why = "; ".join(f"{note.reason.value}: {note.detail}" for note in plan.disturbances)
            lines.append(f"  plan {plan.plan_id:<6} {plan.score:6.1f}  {why or 'undisturbed: the model missed'}")
    return "\n".join(lines)


def plan_text(outcome: PlanOutcome) -> str:
    executed = f"{outcome.executed_at:%Y-%m-%d %H:%M:%S}" if outcome.executed_at else "-"
    lines = [
        f"plan {outcome.plan_id} ({outcome.cluster}, {outcome.strategy}, {outcome.mode}): executed {executed}, "
        f"measured {outcome.measured_at:%Y-%m-%d %H:%M:%S} UTC from snapshot {outcome.measured_snapshot} "
        f"(planned on snapshot {outcome.plan_snapshot if outcome.plan_snapshot is not None else '-'})",
        f"{'broker':<28} {'score before':>12} {'predicted':>9} {'measured':>9} {'error':>7}   "
        f"{'msg/s predicted':>15} {'measured':>9} {'error':>8}  model",
    ]
    for broker in outcome.brokers:
        lines.append(
            f"{broker.broker:<28} {broker.score_before:12.1f} {broker.score_predicted:9.1f} "
            f"{_number(broker.score_measured):>9} {_number(broker.score_error, signed=True):>7}   "
            f"{broker.msg_rate_predicted:15.1f} {_number(broker.msg_rate_measured):>9} "
            f"{_number(broker.msg_rate_error, signed=True):>8}  {broker.model}"
        )
    lines.append("disturbed (the calibration leaves this plan out):" if outcome.disturbed else "undisturbed")
    lines += [f"  {note.reason.value}: {note.detail}" for note in outcome.disturbances]
    return "\n".join(lines)


def add_commands(commands: Commands) -> None:
    accuracy = commands.add_parser(
        "accuracy",
        help="how right the previews were: a cluster's prediction errors, one plan's, or measure a plan again",
        usage="%(prog)s [options] CLUSTER | cluster NAME | plan PLAN_ID | measure PLAN_ID",
    )
    accuracy.add_argument(
        "words",
        nargs="+",
        metavar="CLUSTER | plan PLAN_ID | measure PLAN_ID",
        help="a cluster's figures (`cluster NAME` for a cluster named plan, measure or cluster), one plan's, or "
        "measure an executed plan again now",
    )
    accuracy.add_argument("--since", metavar="WHEN", help="plans measured since (ISO 8601; default: accuracy_window)")
    accuracy.add_argument("--days", type=COUNT, metavar="N", help="plans measured in the last N days")
    accuracy.add_argument("--json", action="store_true", help="JSON instead of a table")
    accuracy.add_argument(
        "--wait",
        type=SECONDS,
        metavar="SECONDS",
        help="measure: wait this long for reports newer than the execution (default: measure_wait)",
    )
    add_plan_cluster_options(accuracy)
    add_store_options(accuracy)
    accuracy.set_defaults(handler=command_accuracy)
