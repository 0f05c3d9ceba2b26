"""Committing plans: the plan, its actions and the strategy's new state in one transaction.

The state row carries a version. A plan run reads the state and its version; the commit stores the
new state only if the version is unchanged (optimistic concurrency), so two concurrent runs cannot
both count a hit. A retried commit of the same run (same run key) finds its plan already stored and
changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from planner.collect.collector import cluster_row
from planner.errors import InputError, NotFoundError, format_validation_error
from planner.lifecycle import APPLIED_ATTEMPT_STATUSES, PlanStatus
from planner.plan.document import PlanDocument, PlannedAction
from planner.store.actions import ExecutableAction
from planner.store.database import Store
from planner.store.models import (
    ActionExecution,
    Cluster,
    Plan,
    PlanAction,
    PlanMeasurement,
    StrategyState,
    as_utc,
    audit_event,
    utc_now,
)


class StaleStateError(RuntimeError):
    """The strategy state changed since this plan run read it: another run committed first."""


@dataclass(frozen=True, slots=True)
class StoredState:
    state: dict[str, Any]
    version: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    plan_id: int
    created: bool  # False when the run had already been committed
    state_version: int


def read_state(store: Store, cluster: str, strategy: str) -> StoredState:
    """The strategy's stored state for a cluster; version 0 and an empty state before the first plan."""
    with store.session() as session:
        row = session.scalar(
            select(StrategyState).join(Cluster).where(Cluster.name == cluster, StrategyState.strategy == strategy)
        )
        return StoredState(dict(row.state), row.version) if row else StoredState({}, 0)


def commit_plan(
    store: Store,
    plan: PlanDocument | Mapping[str, Any],
    *,
    admin_url: str,
    run_key: str,
    expected_version: int,
    snapshot_id: int | None = None,
    actor: str = "planner",
) -> CommitResult:
    plan = PlanDocument.parse(plan, "plan")
    with store.session() as session:
        existing = session.scalar(select(Plan).where(Plan.run_key == run_key))
        if existing is not None:
            return CommitResult(existing.id, False, existing.state_version)
        cluster_name, strategy, actions = plan.cluster, plan.strategy, plan.actions
        cluster = cluster_row(session, cluster_name, admin_url)
        state = session.scalar(
            select(StrategyState).where(StrategyState.cluster_id == cluster.id, StrategyState.strategy == strategy)
        )
        new_version = expected_version + 1
        if state is None:
            if expected_version != 0:
                raise StaleStateError(f"{cluster_name}/{strategy}: no stored state at version {expected_version}")
            session.add(
                StrategyState(cluster_id=cluster.id, strategy=strategy, version=new_version, state=plan.state_after)
            )
            try:
                session.flush()
            except IntegrityError as error:  # a concurrent first plan of this cluster inserted the state first
                raise StaleStateError(
                    f"{cluster_name}/{strategy}: another plan run stored the first state while this one ran"
                ) from error
        else:
            changed = session.execute(
                update(StrategyState)
                .where(StrategyState.id == state.id, StrategyState.version == expected_version)
                .values(version=new_version, state=plan.state_after, updated_at=utc_now())
                .execution_options(synchronize_session=False)
            ).rowcount
            if changed != 1:
                raise StaleStateError(
                    f"{cluster_name}/{strategy}: state is at version {state.version}, this run read "
                    f"{expected_version}; another plan run committed first"
                )
        row = Plan(
            cluster_id=cluster.id,
            snapshot_id=snapshot_id,
            run_key=run_key,
            strategy=strategy,
            status=(PlanStatus.PENDING if actions else PlanStatus.EMPTY).value,
            actions_hash=plan.actions_hash,
            state_version=new_version,
            details=plan.to_json(),
        )
        session.add(row)
        session.flush()
        for sequence, action in enumerate(actions):
            session.add(
                PlanAction(
                    plan_id=row.id,
                    sequence=sequence,
                    kind=action.kind,
                    bundle=action.bundle,
                    source=action.source,
                    destination=action.destination,
                    split_algorithm=action.split_algorithm,
                    split_positions=action.split_positions,
                    # The column cannot be null: an unmeasured msg/s is 0.0 here and null only in `details`.
                    traffic=action.msg_rate if action.msg_rate is not None else 0.0,
                    reason=action.reason,
                    details=action.to_json(),
                )
            )
        session.add(
            audit_event(
                cluster_name,
                actor,
                "plan.created",
                plan=row.id,
                actions=len(actions),
                strategy=strategy,
                runKey=run_key,
            )
        )
        plan_id = row.id
    return CommitResult(plan_id, True, new_version)


def commit_plan_once(store: Store, plan: PlanDocument | Mapping[str, Any], **options: Any) -> CommitResult:
    """`commit_plan`, where a concurrent commit of the same run key counts as already committed (the twin
    may win on the run key or, first, on the state version)."""
    try:
        return commit_plan(store, plan, **options)
    except (IntegrityError, StaleStateError):
        with store.session() as session:
            existing = session.scalar(select(Plan).where(Plan.run_key == options["run_key"]))
            if existing is None:
                raise
            return CommitResult(existing.id, False, existing.state_version)


def plan_for_run(store: Store, run_id: str, cluster: str) -> int | None:
    """The plan an orchestrator run committed for a cluster (its run key starts with the run id and the
    cluster), found in the store rather than in anything the run's tasks pass each other."""
    with store.session() as session:
        return session.scalar(
            select(Plan.id)
            .where(Plan.run_key.startswith(f"{run_id}:{cluster}:", autoescape=True))
            .order_by(Plan.id.desc())
            .limit(1)
        )


def list_plans(store: Store, cluster: str | None = None, status: str | None = None, limit: int = 50) -> list[dict]:
    action_rows = select(func.count(PlanAction.id)).where(PlanAction.plan_id == Plan.id).scalar_subquery()
    with store.session() as session:
        query = select(Plan, Cluster.name, action_rows).join(Cluster).order_by(Plan.id.desc()).limit(limit)
        if cluster:
            query = query.where(Cluster.name == cluster)
        if status:
            query = query.where(Plan.status == status)
        return [
            {
                "id": plan.id,
                "cluster": name,
                "createdAt": plan.created_at.isoformat(),
                "strategy": plan.strategy,
                "status": plan.status,
                "actions": actions,
            }
            for plan, name, actions in session.execute(query)
        ]


def actions_as_they_run(plan: Plan) -> list[dict[str, Any]]:
    """The plan's actions as the executor runs them: what each call is made of read from the action rows, as the
    executor reads them (`ExecutableAction`), with the reason and predicted rates recorded on the row. Every
    view shows these, never the plan document's copy, which an edit of the rows leaves behind."""
    actions = []
    for row in plan.actions:
        runs = ExecutableAction.of(row).to_json()
        try:
            actions.append(PlannedAction.model_validate({**row.details, **runs}).to_json())
        except ValidationError as error:
            raise InputError(format_validation_error(error, f"plan {plan.id} action {row.sequence}")) from None
    return actions


def show_plan(store: Store, plan_id: int) -> dict[str, Any]:
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        return {
            "id": plan.id,
            "status": plan.status,
            "createdAt": plan.created_at.isoformat(),
            "snapshot": plan.snapshot_id,
            "runKey": plan.run_key,
            "stateVersion": plan.state_version,
            **plan.details,
            "actions": actions_as_they_run(plan),
            "actionsHash": plan.actions_hash,  # the stored hash, which approvals and the executor check
        }


def record_measurement(
    store: Store, plan_id: int, snapshot_id: int, brokers: Mapping[str, Mapping[str, float]], *, actor: str = "planner"
) -> None:
    """The load measured after a plan ran (per broker score, msgRate, throughput), beside its prediction."""
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        session.add(
            PlanMeasurement(plan_id=plan_id, snapshot_id=snapshot_id, brokers={b: dict(v) for b, v in brokers.items()})
        )
        session.add(audit_event(plan.cluster.name, actor, "plan.measured", plan=plan_id, snapshot=snapshot_id))


def recently_unloaded_brokers(
    store: Store, cluster: str, as_of: datetime, within: timedelta = timedelta(hours=1)
) -> dict[str, int]:
    """The source brokers of the cluster's unloads that took effect within `within` before `as_of`, each with its
    latest (epoch millis): TransferShedder's cool-down input (Pulsar's UnloadScheduler records the source broker
    of every unload it completes)."""
    applied = [status.value for status in APPLIED_ATTEMPT_STATUSES]
    with store.session() as session:
        rows = session.execute(
            select(PlanAction.source, func.max(ActionExecution.finished_at))
            .join(ActionExecution, ActionExecution.action_id == PlanAction.id)
            .join(Plan, Plan.id == PlanAction.plan_id)
            .join(Cluster, Cluster.id == Plan.cluster_id)
            .where(
                Cluster.name == cluster,
                PlanAction.kind == "unload",
                ActionExecution.status.in_(applied),
                ActionExecution.finished_at > as_of - within,
                ActionExecution.finished_at <= as_of,
            )
            .group_by(PlanAction.source)
        ).all()
    return {source: int(as_utc(finished).timestamp() * 1000) for source, finished in rows}
