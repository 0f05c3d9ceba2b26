"""Measuring an executed plan: one path for every entry point (the plan DAG's report task, `execute`, and
`accuracy measure` to measure a plan again later).

Collect until every broker's load report is newer than the execution (the moves are in it), for at most a wait;
then record the newest snapshot beside the plan's prediction, with the plan's own snapshot read the same way
(`planner.store.plans.record_measurement`), so the outcome (`planner.plan.outcome`) can be rebuilt from the store
alone. Afterwards the cluster's accuracy is checked against its bound (`planner.audit.accuracy`): the caller tells
of a crossing (a notification, a warning line).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from planner.actions import ActionKind
from planner.audit.accuracy import AccuracyAlert, AccuracyBound
from planner.audit.outcomes import check_bound
from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import CollectResult, collect
from planner.plan.document import PlanDocument
from planner.plan.outcome import PlanOutcome, plan_outcome
from planner.pulsar.broker_score import broker_usage
from planner.pulsar.config import PulsarConfig
from planner.pulsar.java_numbers import percent_usage
from planner.pulsar.model import LocalBrokerData, local_broker_data_from_json
from planner.store.database import Store
from planner.store.models import as_utc
from planner.store.plans import BrokerSample, Measurement, SnapshotLoad, plan_record, record_measurement
from planner.store.snapshots import published_snapshot, read_archive

logger = logging.getLogger(__name__)

POLL_SECONDS = 5.0  # between two collects while the load settles
SETTLED_TOLERANCE = 0.05  # two snapshots in a row within 5 % of each other's msg/s per broker: settled


@dataclass(frozen=True, slots=True)
class MeasuredOutcome:
    """What measuring a plan recorded, its outcome, and the cluster's accuracy alert after it (None: no change)."""

    measurement: Measurement
    outcome: PlanOutcome
    fresh: bool  # every broker reported after the execution, and the load settled
    alert: AccuracyAlert | None

    def to_json(self) -> dict[str, object]:
        return {
            "plan": self.outcome.plan_id,
            "snapshot": self.measurement.snapshot_id,
            "fresh": self.fresh,
            "disturbances": [note.to_json() for note in self.outcome.disturbances],
            "alert": self.alert.to_json() if self.alert is not None else None,
        }


def _settled(before: Mapping[str, float], after: Mapping[str, float]) -> bool:
    """Two snapshots show the same brokers at the same msg/s (within SETTLED_TOLERANCE): the moves are reported."""
    return before.keys() == after.keys() and all(
        abs(after[broker] - rate) <= SETTLED_TOLERANCE * max(rate, 1.0) for broker, rate in before.items()
    )


def collect_fresh(
    collect_once: Callable[[], CollectResult],
    store: Store,
    since_millis: int,
    wait_seconds: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[CollectResult, bool]:
    """Collect until the load has settled after the execution: every broker's report newer than `since_millis`, in
    two snapshots in a row that agree (a move's new owner reports its traffic a report or two late), for at most
    `wait_seconds`. The newest snapshot, and whether it is fresh and settled."""
    deadline = time.monotonic() + wait_seconds
    previous: dict[str, float] | None = None
    while True:
        result = collect_once()
        reports = _reports(store, result.snapshot_id)
        if not reports:
            # Not a wait for fresher reports: none was readable (a failing cluster, or not Pulsar's admin API).
            raise RuntimeError(f"snapshot {result.snapshot_id} holds no broker's load report: nothing to measure")
        fresh = min(report.last_update for report in reports.values()) >= since_millis
        if fresh:
            rates = {broker: report.msg_rate for broker, report in reports.items()}
            if previous is not None and _settled(previous, rates):
                return result, True
            previous = rates
        if time.monotonic() >= deadline:
            return result, False
        sleep(POLL_SECONDS)


def _reports(store: Store, snapshot_id: int) -> dict[str, LocalBrokerData]:
    """The snapshot's load reports, of the brokers it counts (a refused report stays in the archive for audit)."""
    snapshot = published_snapshot(store, snapshot_id)
    archive = read_archive(snapshot.archive_path)
    return {
        broker: local_broker_data_from_json(raw if isinstance(raw, str | bytes) else json.dumps(raw), broker)
        for broker, raw in archive.get("loadReports", {}).items()
        if broker not in snapshot.missing_brokers
    }


def snapshot_load(store: Store, snapshot_id: int, bundles: Collection[str] = ()) -> SnapshotLoad:
    """What an outcome needs of a snapshot, from its archive: each broker's usage, traffic and report clock, the
    brokers it is missing, and the owner and traffic of each of `bundles` (a plan's moved bundles)."""
    snapshot = published_snapshot(store, snapshot_id)
    reports = _reports(store, snapshot_id)
    config = PulsarConfig()  # the stored score; outcomes score with the plan's own weights
    brokers = {broker: _sample(report, config) for broker, report in sorted(reports.items())}
    owners: dict[str, str] = {}
    moved: dict[str, dict[str, float]] = {}
    for broker, report in sorted(reports.items()):
        for bundle in bundles:
            stats = report.last_stats.get(bundle)
            if bundle in report.bundles or stats is not None:
                owners[bundle] = broker
            if stats is not None:
                moved[bundle] = {
                    "msgRateIn": stats.msg_rate_in,
                    "msgRateOut": stats.msg_rate_out,
                    "throughputIn": stats.msg_throughput_in,
                    "throughputOut": stats.msg_throughput_out,
                }
    return SnapshotLoad(snapshot.id, as_utc(snapshot.taken_at), brokers, dict(snapshot.missing_brokers), owners, moved)


def _sample(report: LocalBrokerData, config: PulsarConfig) -> BrokerSample:
    return BrokerSample(
        score=broker_usage(report, config) * 100,
        msg_rate=report.msg_rate,
        throughput=report.msg_throughput,
        cpu=percent_usage(report.cpu),
        bandwidth_in=percent_usage(report.bandwidth_in),
        bandwidth_out=percent_usage(report.bandwidth_out),
        direct_memory=percent_usage(report.direct_memory),
        msg_rate_in=report.msg_rate_in,
        msg_rate_out=report.msg_rate_out,
        throughput_in=report.msg_throughput_in,
        throughput_out=report.msg_throughput_out,
        last_update=report.last_update,
        start_timestamp=report.start_timestamp or None,
    )


def record_outcome(store: Store, plan_id: int, snapshot_id: int, *, actor: str) -> tuple[Measurement, PlanOutcome]:
    """Record the snapshot as the plan's measurement, with the plan's own snapshot, and rebuild its outcome."""
    record = plan_record(store, plan_id)
    document = PlanDocument.parse(record.document, f"plan {plan_id}")
    bundles = sorted({action.bundle for action in document.actions if action.kind is ActionKind.UNLOAD})
    measured = snapshot_load(store, snapshot_id, bundles)
    planned = snapshot_load(store, record.snapshot_id, bundles) if record.snapshot_id is not None else None
    measurement = record_measurement(store, plan_id, measured, planned=planned, actor=actor)
    return measurement, plan_outcome(record, measurement)


def measure_plan(
    store: Store,
    client: PulsarAdminClient,
    root: str | Path,
    plan_id: int,
    *,
    since: datetime,
    wait_seconds: float,
    bound: AccuracyBound,
    actor: str,
    cluster_name: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> MeasuredOutcome:
    """Collect until the reports are newer than `since` (the execution's end), record the measurement and the
    outcome, and check the cluster's accuracy against its bound (remembered in the store, so a crossing is told
    once)."""
    cluster = plan_record(store, plan_id).cluster

    def collect_once() -> CollectResult:
        return collect(client, store, root, cluster_name or cluster, actor=actor)

    result, fresh = collect_fresh(collect_once, store, int(since.timestamp() * 1000), wait_seconds, sleep=sleep)
    if not fresh:
        logger.warning(
            "plan %s: measured from snapshot %s before the load settled after the execution (waited %.0f s)",
            plan_id,
            result.snapshot_id,
            wait_seconds,
        )
    measurement, outcome = record_outcome(store, plan_id, result.snapshot_id, actor=actor)
    alert = check_bound(store, cluster, bound, measurement.measured_at, actor=actor)
    return MeasuredOutcome(measurement, outcome, fresh, alert)
