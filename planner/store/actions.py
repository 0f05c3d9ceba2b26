"""A plan's action rows as the executor runs them: only the columns the approval hash covers, in order. The
executor sends these, and every view of a plan shows these, so what is shown is what runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from planner.actions import ActionKind, actions_hash
from planner.store.models import Plan, PlanAction


@dataclass(frozen=True, slots=True)
class ExecutableAction:
    """One action row, as the executor runs it (only columns the approval hash covers)."""

    id: int
    sequence: int
    kind: ActionKind
    bundle: str
    source: str
    destination: str | None
    split_algorithm: str | None
    split_positions: tuple[int, ...] | None

    @classmethod
    def of(cls, row: PlanAction) -> ExecutableAction:
        positions = tuple(row.split_positions) if row.split_positions is not None else None
        return cls(
            row.id,
            row.sequence,
            ActionKind(row.kind),
            row.bundle,
            row.source,
            row.destination,
            row.split_algorithm,
            positions,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "bundle": self.bundle,
            "source": self.source,
            "destination": self.destination,
            "splitAlgorithm": self.split_algorithm,
            "splitPositions": list(self.split_positions) if self.split_positions is not None else None,
        }


def executable_actions(session: Session, plan_id: int) -> list[ExecutableAction]:
    """The plan's action rows, in their order, as they would run."""
    rows = session.scalars(select(PlanAction).where(PlanAction.plan_id == plan_id).order_by(PlanAction.sequence))
    return [ExecutableAction.of(row) for row in rows]


def rows_hash(session: Session, plan_id: int) -> str:
    """The approval hash of the plan's action rows and maintenance as they are now (what would run)."""
    rows = executable_actions(session, plan_id)
    if [row.sequence for row in rows] != list(range(len(rows))):
        return "gaps in the action sequence"  # never equal to a hash: a row was removed or renumbered
    plan = session.get(Plan, plan_id)
    return actions_hash([row.to_json() for row in rows], plan.details.get("maintenance") if plan else None)
