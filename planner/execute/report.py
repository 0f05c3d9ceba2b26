"""What a run reports: per action the outcome it reached, and the plan's status after the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from planner.lifecycle import AttemptStatus, PlanStatus
from planner.store.stops import RecordedStop


class NotRun(StrEnum):
    """Report only: the action was not reached in this run (never an attempt row)."""

    NOT_RUN = "not-run"


NOT_RUN = NotRun.NOT_RUN
# What a run reports of an action: the status its attempt reached, or that it was not reached.
Outcome = AttemptStatus | NotRun
# Outcomes that count towards `max_failures`.
FAILURES: frozenset[Outcome] = frozenset(
    {AttemptStatus.FAILED, AttemptStatus.UNKNOWN, AttemptStatus.RECONCILED_NOT_APPLIED}
)


@dataclass(slots=True)
class ActionResult:
    sequence: int
    status: Outcome
    reason: str = ""
    reconciled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "status": self.status.value,
            "reason": self.reason,
            "reconciled": self.reconciled,
        }


@dataclass(slots=True)
class ExecutionReport:
    plan_id: int
    status: PlanStatus
    claimed_by: str = ""
    actions: dict[int, ActionResult] = field(default_factory=dict)
    # A drain plan: the bundles each drained broker still owns after the run (heartbeat/SLA-monitor aside).
    still_owned: dict[str, list[str]] | None = None
    # Maintenance plans: the fences (planner.execute.fence) this run set or removed, per broker.
    fences: dict[str, str] | None = None
    # The operator's stop request this run honoured (the plan is then `stopped`).
    stopped_by: RecordedStop | None = None

    @property
    def results(self) -> dict[int, Outcome]:
        return {sequence: result.status for sequence, result in self.actions.items()}

    @property
    def reasons(self) -> dict[int, str]:
        return {sequence: result.reason for sequence, result in self.actions.items() if result.reason}

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for result in self.actions.values():
            counts[result.status.value] = counts.get(result.status.value, 0) + 1
        return {
            "plan": self.plan_id,
            "status": self.status.value,
            "claimedBy": self.claimed_by,
            "counts": counts,
            "reconciliations": sum(result.reconciled for result in self.actions.values()),
            "actions": [self.actions[sequence].to_json() for sequence in sorted(self.actions)],
            **({"drainedBrokersStillOwn": self.still_owned} if self.still_owned is not None else {}),
            **({"fences": self.fences} if self.fences is not None else {}),
            **({"stop": self.stopped_by.to_json()} if self.stopped_by is not None else {}),
        }


class Step(StrEnum):
    """What a progress event tells: an action started or ended, the run waits before the next, or it stopped."""

    STARTED = "started"
    ENDED = "ended"
    WAITING = "waiting"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One step of a run as it happens, for an operator watching it (the CLI prints them on stderr)."""

    step: Step
    index: int  # the action's position in the plan, from 1 (WAITING: the next action's)
    total: int  # the plan's actions
    kind: str = ""
    bundle: str = ""
    outcome: Outcome | None = None  # ENDED
    reason: str = ""
    seconds: float = 0.0  # WAITING: the pause before the next action
    stop: RecordedStop | None = None  # STOPPED


Progress = Callable[[ProgressEvent], None]


def no_progress(_event: ProgressEvent) -> None:
    """Nobody watches the run."""
