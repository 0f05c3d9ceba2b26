"""A plan as stored, read as one typed value: the plan document with the actions as they run, its status, ids,
decision and every attempt at its actions. The CLI's `plans show`, the Airflow tasks and the review pages all read
a plan through `show_plan`.

The actions shown are the action rows, as the executor runs them (`ExecutableAction`), with the reason and
predicted rates recorded on each row, never the plan document's copy, which an edit of the rows leaves behind. The
hash shown is the stored one, which approvals and the executor check against the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from planner.errors import InputError, format_validation_error
from planner.lifecycle import PlanStatus
from planner.plan.document import PlanDocument, PlannedAction
from planner.store.approvals import RecordedDecision
from planner.store.database import Store
from planner.store.models import as_utc
from planner.store.plans import AttemptRecord, PlanRecord, plan_record


@dataclass(frozen=True, slots=True)
class StoredPlan:
    id: int
    cluster: str
    status: PlanStatus
    created_at: datetime  # as the store gives it back (SQLite: without its zone); `created_at_utc` in UTC
    snapshot_id: int | None
    run_key: str
    state_version: int
    actions_hash: str  # the stored hash, which approvals and the executor check against the rows
    document: PlanDocument  # its actions are the rows as they run, and its own hash theirs
    approval: RecordedDecision | None
    attempts: tuple[tuple[AttemptRecord, ...], ...]  # per action, in the document's order

    @property
    def created_at_utc(self) -> datetime:
        return as_utc(self.created_at)

    def checked_document(self) -> PlanDocument:
        """The document, refused when its action rows no longer hash to the stored hash (rows edited after the
        commit): what the gate and the notifications present."""
        if self.document.actions_hash != self.actions_hash:
            raise InputError(
                f"invalid stored plan {self.id}: <root>: actionsHash {self.actions_hash} is not the hash of the "
                f"plan's actions ({self.document.actions_hash})"
            )
        return self.document

    def to_json(self) -> dict[str, Any]:
        """As `plans show` prints it."""
        return {
            "id": self.id,
            "status": self.status.value,
            "createdAt": self.created_at.isoformat(),
            "snapshot": self.snapshot_id,
            "runKey": self.run_key,
            "stateVersion": self.state_version,
            **self.document.to_json(),
            "actionsHash": self.actions_hash,
        }


def _document(record: PlanRecord) -> PlanDocument:
    """The committed document with the action rows as they run, each validated before anything of it is shown."""
    actions = []
    for action in record.actions:
        try:
            actions.append(PlannedAction.model_validate({**action.planned, **action.runs.to_json()}))
        except ValidationError as error:
            what = f"plan {record.id} action {action.runs.sequence}"
            raise InputError(format_validation_error(error, what)) from None
    committed = {key: value for key, value in record.document.items() if key not in ("actions", "actionsHash")}
    return PlanDocument.parse({**committed, "actions": actions}, f"stored plan {record.id}")


def show_plan(store: Store, plan_id: int) -> StoredPlan:
    record = plan_record(store, plan_id)
    return StoredPlan(
        id=record.id,
        cluster=record.cluster,
        status=record.status,
        created_at=record.created_at,
        snapshot_id=record.snapshot_id,
        run_key=record.run_key,
        state_version=record.state_version,
        actions_hash=record.actions_hash,
        document=_document(record),
        approval=record.approval,
        attempts=tuple(action.attempts for action in record.actions),
    )
