"""What the review pages show, as the JSON their API serves: built from the store's typed reads (and, for load
history, the samples dataset). Read-only. Times are shown in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from planner.audit.plan_records import StoredPlan, show_plan
from planner.errors import NotFoundError
from planner.execute.events import ExecutionEvent
from planner.pulsar.config import PulsarConfig
from planner.samples.dataset import broker_load, read_samples
from planner.store.audit_log import AuditRecord, cluster_events, plan_trail
from planner.store.clusters import cluster_admin_url
from planner.store.database import Store
from planner.store.models import as_utc
from planner.store.plans import AttemptRecord, Measurement, PlanListing, PlanPage, latest_measurement, newest_plan
from planner.store.snapshots import unpublished_snapshot_ids


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return as_utc(moment).isoformat()


def _listing(plan: PlanListing) -> dict[str, Any]:
    return {
        "id": plan.id,
        "cluster": plan.cluster,
        "createdAt": _iso(plan.created_at),
        "strategy": plan.strategy,
        "status": plan.status.value,
        "actions": plan.actions,
        "approver": plan.approver,
        "decidedAt": _iso(plan.decided_at),
    }


def page_json(page: PlanPage) -> dict[str, Any]:
    """A page of plans (`planner.store.plans.plan_page`), with the total for pagination."""
    return {
        "items": [_listing(plan) for plan in page.items],
        "total": page.total,
        "page": page.page,
        "perPage": page.per_page,
        "pages": page.pages,
    }


def _attempt(attempt: AttemptRecord) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "status": attempt.status.value,
        "startedAt": _iso(attempt.started_at),
        "finishedAt": _iso(attempt.finished_at),
        "error": attempt.error,
    }


@dataclass(frozen=True, slots=True)
class PlanView:
    """Everything a reviewer or auditor needs about one plan: the plan as stored (its approval and every execution
    attempt per action included), the measured load after it ran, and its audit trail."""

    plan: StoredPlan
    measured: Measurement | None
    audit: list[AuditRecord]

    def to_json(self) -> dict[str, Any]:
        plan = self.plan
        document = plan.document.to_json()
        actions = [
            {
                **action,
                "sequence": sequence,
                "attempts": [_attempt(attempt) for attempt in attempts],
                "result": attempts[-1].status.value if attempts else None,
            }
            for sequence, (action, attempts) in enumerate(zip(document.pop("actions"), plan.attempts, strict=True))
        ]
        approval = plan.approval
        return {
            **document,
            "id": plan.id,
            "cluster": plan.cluster,
            "status": plan.status.value,
            "createdAt": _iso(plan.created_at),
            "snapshot": plan.snapshot_id,
            "runKey": plan.run_key,
            "stateVersion": plan.state_version,
            "actionsHash": plan.actions_hash,
            "actions": actions,
            "approval": None
            if approval is None
            else {
                "decision": approval.decision.value,
                "approver": approval.approver,
                "decidedAt": _iso(approval.decided_at),
                "actionsHash": approval.actions_hash,
            },
            "measured": None
            if self.measured is None
            else {
                "snapshot": self.measured.snapshot_id,
                "measuredAt": _iso(self.measured.measured_at),
                "brokers": self.measured.brokers,
            },
            "audit": [
                {"at": _iso(event.at), "actor": event.actor, "event": event.event, "details": event.details}
                for event in self.audit
            ],
        }


def read_plan_view(store: Store, plan_id: int) -> PlanView:
    plan = show_plan(store, plan_id)
    return PlanView(plan, latest_measurement(store, plan_id), plan_trail(store, plan_id))


def cluster_history(store: Store, home: str | Path, cluster: str, since: datetime) -> dict[str, Any]:
    """Per-broker score and msg/s per snapshot since a time, and the plan executions in that time."""
    if cluster_admin_url(store, cluster) is None:
        raise NotFoundError(f"unknown cluster {cluster!r}")
    executions = [
        {"plan": event.plan_id, "at": _iso(event.at), "status": event.details.get("status")}
        for event in cluster_events(store, cluster, ExecutionEvent.FINISHED, since)
    ]
    newest = newest_plan(store, cluster)
    latest = (
        {"plan": newest.id, "at": _iso(newest.created_at), "status": newest.status.value, "balance": newest.balance}
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
