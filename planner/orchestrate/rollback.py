"""Rolling an executed plan back: the inverse plan, each bundle it moved back to its source.

Unloads copy no data, so undoing one is as cheap as doing it. The inverse plan moves a bundle back only where
that is still the undo: the plan's unload took effect, the bundle is still on the planned destination (not
moved since by anyone, not split), and its source is an active broker. Splits are not undone: Pulsar has no
bundle merge. The rollback is an ordinary plan from then on: the same approval gate, the same executor, and
the audit trail links the two plans both ways.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from planner.actions import ActionKind
from planner.collect.admin_client import PulsarAdminClient
from planner.errors import InputError
from planner.lifecycle import DONE_ATTEMPT_STATUSES, AttemptStatus
from planner.plan.document import MaintenanceDocument, PlanDocument, PlannedAction
from planner.store.audit_log import record_events
from planner.store.clusters import cluster_admin_url
from planner.store.database import Store
from planner.store.models import audit_event
from planner.store.plans import CommitResult, commit_plan_once, plan_record, read_state

ROLLBACK = "rollback"
# Outcomes after which the bundle left its source (PLACED_ELSEWHERE: for another broker than planned).
MOVED = frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.RECONCILED_APPLIED, AttemptStatus.PLACED_ELSEWHERE})


@dataclass(frozen=True, slots=True)
class ExecutedUnload:
    """An unload of the plan and how its execution ended (None: never done)."""

    bundle: str
    source: str
    destination: str
    outcome: AttemptStatus | None
    traffic: float | None  # the msg/s its plan measured; None: not measured


def inverse_plan(
    cluster: str,
    plan_id: int,
    unloads: Sequence[ExecutedUnload],
    splits: int,
    owners: Mapping[str, str],
    active: Collection[str],
) -> PlanDocument:
    """The rollback of plan `plan_id` given where its bundles are now (`owners`) and the active brokers. Pure."""
    actions: list[PlannedAction] = []
    notes: list[str] = []
    for unload in unloads:
        if unload.outcome not in MOVED:
            continue
        owner = owners.get(unload.bundle)
        if owner != unload.destination:
            where = f"on {owner}" if owner else "not owned by any active broker (split, deleted or unassigned)"
            notes.append(f"{unload.bundle}: now {where}, not on {unload.destination}: left where it is")
        elif unload.source not in active:
            notes.append(f"{unload.bundle}: its source {unload.source} is not an active broker: left on {owner}")
        else:
            actions.append(
                PlannedAction(
                    kind=ActionKind.UNLOAD,
                    bundle=unload.bundle,
                    source=unload.destination,
                    destination=unload.source,
                    # The original plan's measurement, for the reviewer; bytes/s were never kept, so none is
                    # written: the document's default says not measured.
                    msg_rate=unload.traffic,
                    reason=f"roll back plan {plan_id}: back to {unload.source}",
                )
            )
    if splits:
        notes.append(f"{splits} split(s) of plan {plan_id} stay: Pulsar cannot merge bundles")
    moved = sum(unload.outcome in MOVED for unload in unloads)
    notes.insert(0, f"rollback of plan {plan_id}: {len(actions)} of its {moved} moved bundles go back")
    return PlanDocument(
        cluster=cluster,
        strategy=ROLLBACK,
        actions=actions,
        notes=notes,
        maintenance=MaintenanceDocument(mode=ROLLBACK, rolls_back=plan_id),
    )


def executed_unloads(store: Store, plan_id: int) -> tuple[str, str, list[ExecutedUnload], int]:
    """The plan's cluster, admin URL, unloads with their outcome, and number of splits."""
    plan = plan_record(store, plan_id)
    unloads, splits = [], 0
    for action in plan.actions:
        runs = action.runs
        if runs.kind != ActionKind.UNLOAD:
            splits += 1
            continue
        done = [attempt.status for attempt in action.attempts if attempt.status in DONE_ATTEMPT_STATUSES]
        # The plan's document keeps an unmeasured msg/s as null; the traffic column cannot (it holds 0.0 then).
        traffic = action.planned.get("msgRate")
        unloads.append(
            ExecutedUnload(runs.bundle, runs.source, runs.destination or "", done[0] if done else None, traffic)
        )
    admin_url = cluster_admin_url(store, plan.cluster) or ""
    return plan.cluster, admin_url, sorted(unloads, key=lambda u: u.bundle), splits


def plan_rollback(
    store: Store, client: PulsarAdminClient, plan_id: int, actor: str, run_key: str | None = None
) -> tuple[CommitResult, PlanDocument]:
    """Commit the rollback of an executed plan as a pending plan, from the cluster as it is now. `run_key`: the
    orchestrator run's (a retried task commits once); by default the plan and the actions, so asking twice while
    the cluster is unchanged commits once."""
    cluster, admin_url, unloads, splits = executed_unloads(store, plan_id)
    if not any(unload.outcome in MOVED for unload in unloads):
        raise InputError(f"plan {plan_id} moved no bundle (nothing executed, or only splits): nothing to roll back")
    active = client.active_brokers(cluster)
    document = inverse_plan(cluster, plan_id, unloads, splits, client.bundle_owners(cluster), active)
    run_key = run_key or f"{ROLLBACK}:{plan_id}:{document.actions_hash[:16]}"
    committed = commit_plan_once(
        store,
        document,
        admin_url=admin_url,
        run_key=run_key,
        expected_version=read_state(store, cluster, ROLLBACK).version,
        actor=actor,
    )
    if committed.created:
        record_events(
            store,
            audit_event(cluster, actor, "plan.rollback-planned", plan=plan_id, rollback=committed.plan_id),
            audit_event(cluster, actor, "plan.rolls-back", plan=committed.plan_id, rollsBack=plan_id),
        )
    return committed, document
