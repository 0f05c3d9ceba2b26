"""An operator's stop requests (`pulsar-rebalance stop`): recorded here, honoured by the executor between two actions.

A request is accepted only for a plan that is executing (its row says so: a run holds it, or one died holding it);
for any other plan it is refused, so nothing is left waiting to surprise a later run. The executor reads the open
request before each action, wherever it was started from (the CLI's `execute`, the Airflow task), and closes it with
the plan's status: `stopped` when it honoured it, another when the run ended before reaching an action boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from planner.errors import InputError, NotFoundError
from planner.lifecycle import PlanStatus
from planner.store.database import Store
from planner.store.models import Plan, StopRequest, as_utc, audit_event, utc_now

# Audited when a stop is requested; the executor's `plan.stopped` when one is honoured (planner.execute.events).
STOP_REQUESTED_EVENT = "plan.stop-requested"


@dataclass(frozen=True, slots=True)
class RecordedStop:
    id: int
    plan_id: int
    requested_at: datetime
    requested_by: str
    reason: str
    # An open request was already recorded for the plan: this one is that one (a repeated `stop` records nothing).
    already_requested: bool = False

    @classmethod
    def of(cls, row: StopRequest, *, already_requested: bool = False) -> RecordedStop:
        return cls(row.id, row.plan_id, as_utc(row.requested_at), row.requested_by, row.reason, already_requested)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan_id,
            "stopRequest": self.id,
            "requestedAt": self.requested_at.isoformat(),
            "requestedBy": self.requested_by,
            "reason": self.reason,
            "alreadyRequested": self.already_requested,
        }


def request_stop(store: Store, plan_id: int, actor: str, reason: str) -> RecordedStop:
    """Record a request to stop the plan's execution before its next action, audited with `actor` and `reason`.
    Refused (InputError) unless the plan is executing; a request already open is returned, not recorded twice."""
    with store.session() as session:
        # The plan's row locked (PostgreSQL; SQLite's transactions are serial): a run that finishes meanwhile
        # either closes this request, or has already left the plan in a status this refuses.
        plan = session.get(Plan, plan_id, with_for_update=True)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        if plan.status != PlanStatus.EXECUTING.value:
            raise InputError(f"plan {plan_id} is {plan.status}, not executing: there is no execution to stop")
        existing = open_stop(session, plan_id)
        if existing is not None:
            return RecordedStop.of(existing, already_requested=True)
        row = StopRequest(plan_id=plan_id, requested_at=utc_now(), requested_by=actor, reason=reason)
        session.add(row)
        session.flush()
        session.add(
            audit_event(
                plan.cluster.name,
                actor,
                STOP_REQUESTED_EVENT,
                plan=plan_id,
                stopRequest=row.id,
                reason=reason,
                claimedBy=plan.claimed_by,
            )
        )
        return RecordedStop.of(row)


def open_stop(session: Session, plan_id: int) -> StopRequest | None:
    """The plan's stop request no run has closed yet."""
    return session.scalar(
        select(StopRequest)
        .where(StopRequest.plan_id == plan_id, StopRequest.closed_at.is_(None))
        .order_by(StopRequest.id)
        .limit(1)
    )


def close_stops(session: Session, plan_id: int, outcome: PlanStatus) -> list[int]:
    """Close the plan's open stop requests with the status its run ended with; their ids."""
    rows = list(
        session.scalars(select(StopRequest).where(StopRequest.plan_id == plan_id, StopRequest.closed_at.is_(None)))
    )
    for row in rows:
        row.closed_at = utc_now()
        row.outcome = outcome.value
    return [row.id for row in rows]
