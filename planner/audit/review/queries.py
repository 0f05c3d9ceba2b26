"""What the review pages show, read from the store (and, for load history, the samples dataset).

Read-only. The plan list is built for large stores: one count query and one page query whose action
counts and approvals come from indexed joins, never from loading the plans' JSON.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Select, func, or_, select

from planner.audit.plan_records import actions_as_they_run
from planner.collect.collector import unpublished_snapshot_ids
from planner.errors import InputError, NotFoundError
from planner.lifecycle import PlanStatus
from planner.plan.document import PlanDocument
from planner.pulsar.config import PulsarConfig
from planner.samples.dataset import broker_load, read_samples
from planner.store.database import Store
from planner.store.models import (
    ActionExecution,
    Approval,
    AuditEvent,
    Cluster,
    Plan,
    PlanAction,
    PlanMeasurement,
    as_utc,
)

PLAN_STATUSES = tuple(status.value for status in PlanStatus)
MAX_PER_PAGE = 200


@dataclass(frozen=True, slots=True)
class PlanFilter:
    cluster: str | None = None
    status: str | None = None
    created_from: date | None = None  # inclusive, UTC days
    created_to: date | None = None  # inclusive
    search: str | None = None  # plans with an action on a bundle or broker containing this text
    page: int = 1
    per_page: int = 25

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in PLAN_STATUSES:
            raise InputError(f"plan filter: status must be one of {', '.join(PLAN_STATUSES)} (got {self.status!r})")
        if self.page < 1:
            raise InputError(f"plan filter: page must be 1 or more (got {self.page})")
        if not 1 <= self.per_page <= MAX_PER_PAGE:
            raise InputError(f"plan filter: per_page must be between 1 and {MAX_PER_PAGE} (got {self.per_page})")
        if self.created_from and self.created_to and self.created_from > self.created_to:
            raise InputError(f"plan filter: created_from ({self.created_from}) is after created_to ({self.created_to})")

    def apply(self, query: Select) -> Select:
        if self.cluster:
            query = query.where(Cluster.name == self.cluster)
        if self.status:
            query = query.where(Plan.status == self.status)
        if self.created_from:
            query = query.where(Plan.created_at >= datetime.combine(self.created_from, time(), UTC))
        if self.created_to:
            query = query.where(Plan.created_at < datetime.combine(self.created_to + timedelta(days=1), time(), UTC))
        if self.search:
            text = self.search.lower()
            touched = select(PlanAction.plan_id).where(
                or_(
                    *(
                        func.lower(column).contains(text, autoescape=True)
                        for column in (PlanAction.bundle, PlanAction.source, PlanAction.destination)
                    )
                )
            )
            query = query.where(Plan.id.in_(touched))
        return query


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return as_utc(moment).isoformat()


def cluster_names(store: Store, readable: Collection[str] | None = None) -> list[str]:
    """The clusters the store knows (only the `readable` ones, when given)."""
    query = select(Cluster.name).order_by(Cluster.name)
    if readable is not None:
        query = query.where(Cluster.name.in_(sorted(readable)))
    with store.session() as session:
        return list(session.scalars(query))


def plan_page(store: Store, filters: PlanFilter, readable: Collection[str] | None = None) -> dict[str, Any]:
    """One page of plans, newest first, with the total for pagination (of the `readable` clusters' plans)."""
    action_count = select(func.count(PlanAction.id)).where(PlanAction.plan_id == Plan.id).scalar_subquery()

    def scoped(query: Select) -> Select:
        query = filters.apply(query)
        return query if readable is None else query.where(Cluster.name.in_(sorted(readable)))

    with store.session() as session:
        total = session.scalar(scoped(select(func.count(Plan.id)).join(Cluster))) or 0
        query = scoped(
            select(
                Plan.id,
                Cluster.name,
                Plan.created_at,
                Plan.strategy,
                Plan.status,
                action_count,
                Approval.approver,
                Approval.decided_at,
            )
            .join(Cluster)
            .outerjoin(Approval, Approval.plan_id == Plan.id)
        )
        rows = session.execute(
            query.order_by(Plan.id.desc()).offset((filters.page - 1) * filters.per_page).limit(filters.per_page)
        ).all()
    return {
        "items": [
            {
                "id": plan_id,
                "cluster": cluster,
                "createdAt": _iso(created_at),
                "strategy": strategy,
                "status": status,
                "actions": actions,
                "approver": approver,
                "decidedAt": _iso(decided_at),
            }
            for plan_id, cluster, created_at, strategy, status, actions, approver, decided_at in rows
        ],
        "total": total,
        "page": filters.page,
        "perPage": filters.per_page,
        "pages": max(1, -(-total // filters.per_page)),
    }


def plan_detail(store: Store, plan_id: int) -> dict[str, Any]:
    """Everything a reviewer or auditor needs about one plan: the plan as committed, its approval, every
    execution attempt per action, the measured load after it ran, and its audit trail."""
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        approval = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        attempts: dict[int, list[dict[str, Any]]] = {}
        for sequence, execution in session.execute(
            select(PlanAction.sequence, ActionExecution)
            .join(ActionExecution, ActionExecution.action_id == PlanAction.id)
            .where(PlanAction.plan_id == plan_id)
            .order_by(PlanAction.sequence, ActionExecution.attempt)
        ):
            attempts.setdefault(sequence, []).append(
                {
                    "attempt": execution.attempt,
                    "status": execution.status,
                    "startedAt": _iso(execution.started_at),
                    "finishedAt": _iso(execution.finished_at),
                    "error": execution.error,
                }
            )
        measurement = session.scalar(
            select(PlanMeasurement).where(PlanMeasurement.plan_id == plan_id).order_by(PlanMeasurement.id.desc())
        )
        audit = [
            {"at": _iso(event.at), "actor": event.actor, "event": event.event, "details": event.details}
            for event in session.scalars(
                select(AuditEvent).where(AuditEvent.plan_id == plan_id).order_by(AuditEvent.id)
            )
        ]
        # The stored document with the actions that run, validated as the typed plan before anything of it is
        # shown; the hash shown is the stored one, which approvals and the executor check against the rows.
        shown = {key: value for key, value in plan.details.items() if key != "actionsHash"}
        details = PlanDocument.parse(
            {**shown, "actions": actions_as_they_run(plan)}, f"stored plan {plan_id}"
        ).to_json()
        actions = [
            {
                **action,
                "sequence": sequence,
                "attempts": attempts.get(sequence, []),
                "result": attempts[sequence][-1]["status"] if sequence in attempts else None,
            }
            for sequence, action in enumerate(details.pop("actions", []))
        ]
        return {
            **details,
            "id": plan.id,
            "cluster": plan.cluster.name,
            "status": plan.status,
            "createdAt": _iso(plan.created_at),
            "snapshot": plan.snapshot_id,
            "runKey": plan.run_key,
            "stateVersion": plan.state_version,
            "actionsHash": plan.actions_hash,
            "actions": actions,
            "approval": None
            if approval is None
            else {
                "decision": approval.decision,
                "approver": approval.approver,
                "decidedAt": _iso(approval.decided_at),
                "actionsHash": approval.actions_hash,
            },
            "measured": None
            if measurement is None
            else {
                "snapshot": measurement.snapshot_id,
                "measuredAt": _iso(measurement.measured_at),
                "brokers": measurement.brokers,
            },
            "audit": audit,
        }


def cluster_history(store: Store, home: str | Path, cluster: str, since: datetime) -> dict[str, Any]:
    """Per-broker score and msg/s per snapshot since a time, and the plan executions in that time."""
    with store.session() as session:
        if session.scalar(select(Cluster.id).where(Cluster.name == cluster)) is None:
            raise NotFoundError(f"unknown cluster {cluster!r}")
        executions = [
            {"plan": event.plan_id, "at": _iso(event.at), "status": event.details.get("status")}
            for event in session.scalars(
                select(AuditEvent)
                .where(
                    AuditEvent.cluster == cluster,
                    AuditEvent.event == "plan.execution-finished",
                    AuditEvent.at >= since,
                )
                .order_by(AuditEvent.at)
            )
        ]
        # The newest plan, empty or not: an empty one says why nothing was to do (its balance summary).
        newest = session.scalar(
            select(Plan).join(Cluster).where(Cluster.name == cluster).order_by(Plan.id.desc()).limit(1)
        )
        latest = (
            {
                "plan": newest.id,
                "at": _iso(newest.created_at),
                "status": newest.status,
                "balance": newest.details.get("balance"),
            }
            if newest is not None
            else None
        )
    hidden = unpublished_snapshot_ids(store, cluster)
    samples = broker_load(read_samples(home, "brokers", cluster, since=since, exclude=hidden), PulsarConfig())
    return {"cluster": cluster, "since": _iso(since), "samples": samples, "executions": executions, "latest": latest}


def drain_progress(
    home: str | Path, store: Store, cluster: str, brokers: Sequence[str], since: datetime
) -> list[dict[str, Any]]:
    """Per snapshot since a time: how many bundles each drained broker reported (its heartbeat and SLA-monitor
    bundles included: Pulsar pins those to it)."""
    hidden = unpublished_snapshot_ids(store, cluster)
    rows = read_samples(home, "brokers", cluster, since=since, exclude=hidden).to_pylist()
    progress: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row["broker"] in brokers:
            entry = progress.setdefault(row["snapshot_id"], {"takenAt": _iso(row["taken_at"]), "bundles": {}})
            entry["bundles"][row["broker"]] = row["num_bundles"]
    return [progress[snapshot] for snapshot in sorted(progress)]
