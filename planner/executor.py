"""Executing an approved plan: exactly the approved actions, each re-checked against the live cluster.

Safety rules, in order:
- the approval must be for this plan's action list (its hash, recomputed from the stored actions);
- the plan must be younger than the TTL;
- each action is re-checked right before it runs: the bundle still exists and is owned by the planned
  source, the destination is still an active broker;
- an action already done by an earlier attempt is never repeated (a task retry after a crash finds
  a "running" attempt and checks the cluster to see whether it took effect);
- calls are paced, at most `max_actions` per run, and the run stops after `max_failures` failures;
- an action whose destination is down is deferred, not closed: the plan ends partial and a rerun after
  the broker returns performs it;
- after an unload the bundle's owner is looked up: on the destination it succeeded, elsewhere it is
  recorded as "placed elsewhere"; unloaded bundles are recorded so plans skip them for the grace period.
Every decision is written to the audit log.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from planner.admin_client import AdminError, PulsarAdminClient
from planner.bundles.bundle_range import BundleName
from planner.errors import InputError, NotFoundError
from planner.planning import actions_hash
from planner.store.database import Store
from planner.store.models import ActionExecution, Approval, Plan, RecentlyUnloaded, audit_event, utc_now

logger = logging.getLogger(__name__)

DONE = frozenset({"succeeded", "placed-elsewhere", "skipped"})


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    ttl: timedelta = timedelta(hours=6)
    actions_per_minute: float = 30.0
    max_actions: int = 100
    max_failures: int = 3
    attempts_per_action: int = 2
    verify_timeout_seconds: float = 60.0
    verify_interval_seconds: float = 1.0


@dataclass(slots=True)
class ExecutionReport:
    plan_id: int
    status: str
    results: dict[int, str] = field(default_factory=dict)  # action sequence -> final status
    reasons: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for status in self.results.values():
            counts[status] = counts.get(status, 0) + 1
        return {"plan": self.plan_id, "status": self.status, "counts": counts}


def _audit(session: Any, cluster: str, actor: str, event: str, **details: Any) -> None:
    session.add(audit_event(cluster, actor, event, **details))


def record_decision(
    store: Store,
    plan_id: int,
    *,
    approved: bool,
    approver: str | None,
    approved_hash: str,
    decided_at: datetime | None = None,
) -> None:
    """Store the reviewer's decision; an approval must be for the action list the plan holds now."""
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        existing = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        if existing is not None:
            return  # a retried task: the decision was recorded already
        if plan.status not in {"pending"}:
            raise InputError(f"plan {plan_id} is {plan.status}; only a pending plan can be decided")
        current = actions_hash(plan.details.get("actions", []))
        if approved and (approved_hash != plan.actions_hash or current != plan.actions_hash):
            raise InputError(f"plan {plan_id}: the approved action list does not match the stored one")
        session.add(
            Approval(
                plan_id=plan_id,
                decision="approved" if approved else "rejected",
                approver=approver,
                decided_at=decided_at or utc_now(),
                actions_hash=approved_hash,
            )
        )
        plan.status = "approved" if approved else "rejected"
        _audit(session, plan.cluster.name, approver or "timeout", f"plan.{plan.status}", plan=plan_id)


class _Cluster:
    """Live checks on the cluster, through the admin client."""

    def __init__(self, client: PulsarAdminClient, cluster: str) -> None:
        self.client = client
        self.cluster = cluster

    def active_brokers(self) -> list[str]:
        return self.client.active_brokers(self.cluster)

    def owner(self, bundle: str, brokers: list[str]) -> str | None:
        for broker in brokers:
            if bundle in self.client.owned_bundles(self.cluster, broker):
                return broker
        return None

    def bundle_exists(self, bundle: str) -> bool:
        name = BundleName.parse(bundle)
        boundaries = self.client.bundle_boundaries(name.namespace)
        for lower, upper in itertools.pairwise(boundaries):
            if (lower, upper) == (name.range.lower, name.range.upper):
                return True
        return False


def _attempts(session: Any, action_id: int) -> list[ActionExecution]:
    return list(
        session.scalars(
            select(ActionExecution).where(ActionExecution.action_id == action_id).order_by(ActionExecution.attempt)
        )
    )


def execute_plan(
    store: Store,
    client: PulsarAdminClient,
    plan_id: int,
    settings: ExecutorSettings = ExecutorSettings(),
    *,
    actor: str = "executor",
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
) -> ExecutionReport:
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        cluster = plan.cluster.name
        approval = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        if approval is None or approval.decision != "approved":
            raise InputError(f"plan {plan_id} is not approved")
        if approval.actions_hash != actions_hash(plan.details.get("actions", [])):
            raise InputError(f"plan {plan_id}: the stored actions differ from the approved ones; refusing to run")
        created_at = plan.created_at if plan.created_at.tzinfo else plan.created_at.replace(tzinfo=UTC)
        if now() - created_at > settings.ttl and plan.status != "executing":
            plan.status = "expired"
            _audit(session, cluster, actor, "plan.expired", plan=plan_id, ttlSeconds=settings.ttl.total_seconds())
            return ExecutionReport(plan_id, "expired")
        plan.status = "executing"
        _audit(session, cluster, actor, "plan.execution-started", plan=plan_id, approver=approval.approver)
        actions = [(a.id, a.sequence, a.kind, a.bundle, a.source, a.destination, dict(a.details)) for a in plan.actions]

    live = _Cluster(client, cluster)
    report = ExecutionReport(plan_id, "executing")
    failures = performed = 0
    pause = 60.0 / settings.actions_per_minute if settings.actions_per_minute > 0 else 0.0
    for action_id, sequence, kind, bundle, source, destination, details in actions:
        with store.session() as session:
            attempts = _attempts(session, action_id)
        finished = next((a for a in attempts if a.status in DONE), None)
        if finished is not None:
            report.results[sequence] = finished.status
            continue
        if failures >= settings.max_failures or performed >= settings.max_actions:
            report.results[sequence] = "not-run"
            report.reasons[sequence] = "stopped: too many failures" if failures else "max actions per run reached"
            continue
        interrupted = any(a.status == "running" for a in attempts)
        if interrupted:
            # A run died mid-action: its attempt stays in the history as interrupted, and the cluster
            # decides below whether that attempt took effect.
            with store.session() as session:
                for attempt in _attempts(session, action_id):
                    if attempt.status == "running":
                        attempt.status, attempt.finished_at = "interrupted", utc_now()
        status, reason = "failed", ""
        for _ in range(settings.attempts_per_action):
            attempt_number = len(attempts) + 1
            with store.session() as session:
                row = ActionExecution(action_id=action_id, attempt=attempt_number, status="running")
                session.add(row)
                session.flush()
                attempt_id = row.id
            attempts.append(row)
            try:
                status, reason = _perform(
                    live, kind, bundle, source, destination, details, interrupted, settings, sleep
                )
            except AdminError as error:
                status, reason = "failed", str(error)
            with store.session() as session:
                execution = session.get(ActionExecution, attempt_id)
                execution.status, execution.error, execution.finished_at = status, reason or None, utc_now()
                _audit(
                    session,
                    cluster,
                    actor,
                    f"action.{status}",
                    plan=plan_id,
                    sequence=sequence,
                    kind=kind,
                    bundle=bundle,
                    source=source,
                    destination=destination,
                    attempt=attempt_number,
                    reason=reason,
                )
                if kind == "unload" and status in {"succeeded", "placed-elsewhere"}:
                    _remember_unload(session, plan_id, bundle, now())
            if status != "failed":
                break
            interrupted = False
        report.results[sequence] = status
        if reason:
            report.reasons[sequence] = reason
        performed += 1
        if status == "failed":
            failures += 1
        if pause and sequence != actions[-1][1]:
            sleep(pause)

    final = "executed" if all(s in DONE for s in report.results.values()) else "partial"
    if all(s == "skipped" for s in report.results.values()) and report.results:
        final = "partial"
    report.status = final
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        plan.status = final
        _audit(session, cluster, actor, "plan.execution-finished", plan=plan_id, status=final, results=report.to_json())
    return report


def _remember_unload(session: Any, plan_id: int, bundle: str, at: datetime) -> None:
    plan = session.get(Plan, plan_id)
    millis = int(at.timestamp() * 1000)
    row = session.scalar(
        select(RecentlyUnloaded).where(
            RecentlyUnloaded.cluster_id == plan.cluster_id, RecentlyUnloaded.bundle == bundle
        )
    )
    if row is None:
        session.add(RecentlyUnloaded(cluster_id=plan.cluster_id, bundle=bundle, unloaded_at_millis=millis))
    else:
        row.unloaded_at_millis = millis


def _perform(
    live: _Cluster,
    kind: str,
    bundle: str,
    source: str,
    destination: str | None,
    details: Mapping[str, Any],
    interrupted: bool,
    settings: ExecutorSettings,
    sleep: Callable[[float], None],
) -> tuple[str, str]:
    """Run one action after re-checking it; returns (status, reason)."""
    name = BundleName.parse(bundle)
    brokers = live.active_brokers()
    if kind == "split":
        if not live.bundle_exists(bundle):
            positions = details.get("splitPositions") or []
            boundaries = live.client.bundle_boundaries(name.namespace)
            if interrupted and positions and all(p in boundaries for p in positions):
                return "succeeded", "already split by an earlier attempt"
            return "skipped", "the bundle no longer exists (split or changed since the plan)"
        live.client.split_bundle(
            name.namespace,
            str(name.range),
            algorithm=details.get("splitAlgorithm"),
            positions=details.get("splitPositions"),
            unload=False,
        )
        if live.bundle_exists(bundle):
            return "failed", "the split left the bundle in place (Pulsar found no valid split position)"
        return "succeeded", ""

    owner = live.owner(bundle, brokers)
    if interrupted and owner != source:
        # The earlier attempt sent the unload: see where the bundle went instead of sending it again.
        return _verify_unload(live, bundle, source, destination, settings, sleep, "an earlier attempt took effect")
    if not live.bundle_exists(bundle):
        return "skipped", "the bundle no longer exists (split or changed since the plan)"
    if owner != source:
        return "skipped", f"the bundle is owned by {owner or 'nobody'}, not the planned source {source}"
    if destination not in brokers:
        # Not done: a rerun once the destination is back performs it (the bundle is still on its source).
        return "deferred", f"destination {destination} is not an active broker"
    live.client.unload_bundle(name.namespace, str(name.range), destination)
    return _verify_unload(live, bundle, source, destination, settings, sleep)


def _verify_unload(
    live: _Cluster,
    bundle: str,
    source: str,
    destination: str | None,
    settings: ExecutorSettings,
    sleep: Callable[[float], None],
    note: str = "",
) -> tuple[str, str]:
    """Wait (bounded) for a new owner and judge the unload by where the bundle went."""
    deadline = time.monotonic() + settings.verify_timeout_seconds
    while True:
        owner = live.owner(bundle, live.active_brokers())
        if (owner is not None and owner != source) or time.monotonic() >= deadline:
            break
        sleep(settings.verify_interval_seconds)
    if owner == destination:
        return "succeeded", note
    if owner is None:
        return "succeeded", "unloaded; not owned yet: the next client lookup assigns it to the destination"
    if owner == source:
        return "placed-elsewhere", "re-acquired by the source broker"
    return "placed-elsewhere", f"Pulsar placed it on {owner}, not {destination}"
