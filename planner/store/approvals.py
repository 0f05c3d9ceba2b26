"""Decisions on plans in the store: who approved or rejected which action list, what the gate put to review, and
the refusals.

The approval gate records which actions hash it put to the reviewer (`plan.approval-requested`), and
its answer binds exactly that hash; the CLI's `approve` binds the hash the person reviewed. An approval is
recorded only for the action rows the plan holds at that moment, checked in the same transaction. The executor
runs a plan only with an approved decision for the hash of the rows it is about to run. Refusals (a responder who
is not an approver, an execution no recorded decision backs) are audited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import select

from planner.actions import actions_hash
from planner.errors import InputError, NotFoundError
from planner.lifecycle import Decision, advance
from planner.settings import ExecutionBinding, planner_settings
from planner.store.actions import rows_hash
from planner.store.database import Store
from planner.store.models import Approval, AuditEvent, Plan, audit_event, utc_now


class Refusal(StrEnum):
    """What was refused, as its audit event names it."""

    DECISION = "plan.decision-refused"  # a decision from someone who may not decide
    EXECUTION = "plan.execution-refused"  # an execution no recorded decision backs


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    decision: Decision
    approver: str | None  # None: the gate's default on timeout
    approver_id: str | None
    source: str
    decided_at: datetime
    actions_hash: str
    binding: ExecutionBinding

    @classmethod
    def of(cls, row: Approval) -> RecordedDecision:
        binding = ExecutionBinding.recorded(row.ttl_seconds, row.resume_window_seconds, row.execution_windows)
        return cls(
            Decision(row.decision), row.approver, row.approver_id, row.source, row.decided_at, row.actions_hash, binding
        )


def record_decision(
    store: Store,
    plan_id: int,
    decision: Decision,
    *,
    approver: str | None,
    approved_hash: str,
    approver_id: str | None = None,
    decided_at: datetime | None = None,
    source: str = "airflow",
    actor: str | None = None,
    details: Mapping[str, Any] | None = None,
    binding: ExecutionBinding | None = None,
) -> None:
    """Store the reviewer's decision; an approval must be for the action rows the plan holds now.

    `approver` None is the gate's timeout default; `details` go into the audit event (a policy's checks).
    `binding`: the TTL, resume window and execution windows the decision grants (default: the configured ones);
    recorded with it, so no later setting or option can extend them.
    A retried task finds its decision recorded and changes nothing; a different decision for an already
    decided plan is refused.
    """
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        existing = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        if existing is not None:
            if existing.decision != decision.value:
                raise InputError(f"plan {plan_id} was already {existing.decision} by {existing.approver or 'timeout'}")
            return  # a retried task: the decision was recorded already
        if decision is Decision.APPROVED:
            rows = rows_hash(session, plan_id)
            if approved_hash != plan.actions_hash or rows != plan.actions_hash:
                raise InputError(f"plan {plan_id}: the approved action list does not match the stored one")
            _refuse_rows_edited_after_planning(plan, rows, "not approved")
        plan.status = advance(plan.status, decision.plan_status, f"plan {plan_id}")
        if binding is None:
            configured = planner_settings()
            binding = ExecutionBinding.of(configured.executor, configured.execution_windows, plan.cluster.name)
        session.add(
            Approval(
                plan_id=plan_id,
                decision=decision.value,
                approver=approver,
                approver_id=approver_id,
                decided_at=decided_at or utc_now(),
                actions_hash=approved_hash,
                source=source,
                ttl_seconds=binding.ttl.total_seconds(),
                resume_window_seconds=binding.resume_window.total_seconds(),
                execution_windows=[window.model_dump(mode="json") for window in binding.windows],
            )
        )
        session.add(
            audit_event(
                plan.cluster.name,
                actor or approver or "timeout",
                f"plan.{decision.value}",
                plan=plan_id,
                approver=approver,
                approverId=approver_id,
                source=source,
                binding=binding.model_dump(mode="json"),
                **(details or {}),
            )
        )


def record_approval_request(
    store: Store, plan_id: int, actions_hash: str, *, actor: str, policies: Mapping[str, Any] | None = None
) -> None:
    """The gate put this plan, with this actions hash, to a reviewer (`policies`: why none approved it)."""
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        rows = rows_hash(session, plan_id)
        if actions_hash != plan.actions_hash or rows != plan.actions_hash:
            raise InputError(f"plan {plan_id}: the action rows differ from the plan's hash; not put to review")
        _refuse_rows_edited_after_planning(plan, rows, "not put to review")
        session.add(
            audit_event(
                plan.cluster.name,
                actor,
                "plan.approval-requested",
                plan=plan_id,
                actionsHash=actions_hash,
                **({"policies": policies} if policies else {}),
            )
        )


def _refuse_rows_edited_after_planning(plan: Plan, rows: str, refused: str) -> None:
    """The action rows run, and every view shows them; the plan's document holds what they were planned as, and
    the forecasts, notes and pairs a reviewer reads beside them. Rows edited after planning (their hash updated
    too) no longer match that document: nobody may approve them, or be asked to. `rows`: the rows' hash now."""
    document = plan.details
    if rows != actions_hash(document.get("actions", []), document.get("maintenance")):
        raise InputError(f"plan {plan.id}: its action rows differ from the actions it was planned with; {refused}")


def requested_hash(store: Store, plan_id: int) -> str:
    """The actions hash the gate last put to a reviewer for this plan ("" when none was)."""
    with store.session() as session:
        event = session.scalar(
            select(AuditEvent)
            .where(AuditEvent.plan_id == plan_id, AuditEvent.event == "plan.approval-requested")
            .order_by(AuditEvent.id.desc())
            .limit(1)
        )
        return str(event.details.get("actionsHash", "")) if event is not None else ""


def recorded_decision(store: Store, plan_id: int) -> RecordedDecision | None:
    with store.session() as session:
        row = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        return RecordedDecision.of(row) if row is not None else None


def _record_refusal(store: Store, plan_id: int, refusal: Refusal, reason: str, **details: Any) -> None:
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        cluster = plan.cluster.name if plan else None
        session.add(audit_event(cluster, "planner", refusal.value, plan=plan_id, reason=reason, **details))


def refuse_decision(store: Store, plan_id: int, reason: str) -> None:
    _record_refusal(store, plan_id, Refusal.DECISION, reason)


def refuse_execution(store: Store, plan_id: int, reason: str, *, claimed: object = None) -> None:
    """An execution no recorded decision backs; `claimed` is what the caller was told (e.g. an XCom value)."""
    _record_refusal(store, plan_id, Refusal.EXECUTION, reason, claimed=repr(claimed)[:500] if claimed else None)
