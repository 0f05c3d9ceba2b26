"""The lifecycles of a plan, of one attempt at an action, and of a snapshot: each an enum with one
transition table. The store, the executor, the review pages and the DAG tasks all move states through
`advance`, so an illegal transition is an error wherever it is attempted.

Plan:      pending → approved | rejected | expired;  empty (no actions) is final;
           approved → executing | expired;  executing → executed | partial | stopped | expired;
           partial | stopped → executing (a rerun: `stopped` is an operator's `stop`, honoured between actions;
           only an explicit `execute` resumes it) | expired;
           executed | partial | stopped | executing | expired → rolled-back when a rollback of it starts
           executing (final: a rolled-back plan is never resumed).
Attempt:   one row per attempt at one action. `sending` is written and committed *before* the request
           leaves, so a run that dies finds it and knows the request may have reached the broker;
           `sent` is written once the broker accepted; `unknown` when the answer was lost (timeout after
           sending, connection reset, 5xx, proxy error). `unknown` is settled only by looking at the
           cluster (`reconciled-*`), never by sending again blindly.
Snapshot:  staged (row committed, files not yet published) → published | abandoned.
Scale event: detected → proposed | planned | superseded | withdrawn;  proposed → planned | superseded | withdrawn;
           planned → planned (planned again) | withdrawn (a removal mark taken back).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

from planner.errors import InputError


class IllegalTransitionError(InputError):
    """A lifecycle was asked to move along an edge its transition table does not have."""


class PlanStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXECUTING = "executing"
    EXECUTED = "executed"
    PARTIAL = "partial"
    STOPPED = "stopped"  # an operator's stop request ended the execution between two actions
    EXPIRED = "expired"
    EMPTY = "empty"
    ROLLED_BACK = "rolled-back"


PLAN_TRANSITIONS: Mapping[PlanStatus, frozenset[PlanStatus]] = MappingProxyType(
    {
        PlanStatus.PENDING: frozenset({PlanStatus.APPROVED, PlanStatus.REJECTED, PlanStatus.EXPIRED}),
        PlanStatus.APPROVED: frozenset({PlanStatus.EXECUTING, PlanStatus.EXPIRED}),
        PlanStatus.EXECUTING: frozenset(
            {PlanStatus.EXECUTED, PlanStatus.PARTIAL, PlanStatus.STOPPED, PlanStatus.EXPIRED, PlanStatus.ROLLED_BACK}
        ),
        PlanStatus.PARTIAL: frozenset({PlanStatus.EXECUTING, PlanStatus.EXPIRED, PlanStatus.ROLLED_BACK}),
        PlanStatus.STOPPED: frozenset({PlanStatus.EXECUTING, PlanStatus.EXPIRED, PlanStatus.ROLLED_BACK}),
        PlanStatus.REJECTED: frozenset(),
        PlanStatus.EXECUTED: frozenset({PlanStatus.ROLLED_BACK}),
        PlanStatus.EXPIRED: frozenset({PlanStatus.ROLLED_BACK}),
        PlanStatus.EMPTY: frozenset(),
        PlanStatus.ROLLED_BACK: frozenset(),
    }
)

# A plan in one of these may be executed (again): approved, or left by a run that ended early, was stopped or died.
EXECUTABLE_PLAN_STATUSES = frozenset(
    {PlanStatus.APPROVED, PlanStatus.EXECUTING, PlanStatus.PARTIAL, PlanStatus.STOPPED}
)


class Decision(StrEnum):
    """A reviewer's or policy's decision on a plan, as its approval row records it: the plan moves to the status of
    the same name."""

    APPROVED = "approved"
    REJECTED = "rejected"

    @property
    def plan_status(self) -> PlanStatus:
        return PlanStatus(self.value)


class AttemptStatus(StrEnum):
    SENDING = "sending"  # committed before the request leaves: it may be in flight
    SENT = "sent"  # the broker accepted the request; the outcome is being verified
    UNKNOWN = "unknown"  # the request may have reached the broker but no answer came back
    SUCCEEDED = "succeeded"
    PLACED_ELSEWHERE = "placed-elsewhere"  # unloaded, but Pulsar placed the bundle on another broker
    RECONCILED_APPLIED = "reconciled-applied"  # an unknown request that the cluster shows took effect
    RECONCILED_NOT_APPLIED = "reconciled-not-applied"  # ... that the cluster shows did not take effect
    SKIPPED = "skipped"  # the precondition no longer holds (moved, split, gone)
    DEFERRED = "deferred"  # the destination is down; a later run performs it
    FAILED = "failed"  # refused, or failed before anything was sent


ATTEMPT_TRANSITIONS: Mapping[AttemptStatus | None, frozenset[AttemptStatus]] = MappingProxyType(
    {
        # A new attempt row: either the intent to send, or a decision reached without sending.
        None: frozenset({AttemptStatus.SENDING, AttemptStatus.SKIPPED, AttemptStatus.DEFERRED, AttemptStatus.FAILED}),
        AttemptStatus.SENDING: frozenset({AttemptStatus.SENT, AttemptStatus.UNKNOWN, AttemptStatus.FAILED}),
        AttemptStatus.SENT: frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.PLACED_ELSEWHERE, AttemptStatus.FAILED}),
        AttemptStatus.UNKNOWN: frozenset(
            {AttemptStatus.RECONCILED_APPLIED, AttemptStatus.RECONCILED_NOT_APPLIED, AttemptStatus.PLACED_ELSEWHERE}
        ),
        AttemptStatus.SUCCEEDED: frozenset(),
        AttemptStatus.PLACED_ELSEWHERE: frozenset(),
        AttemptStatus.RECONCILED_APPLIED: frozenset(),
        AttemptStatus.RECONCILED_NOT_APPLIED: frozenset(),
        AttemptStatus.SKIPPED: frozenset(),
        AttemptStatus.DEFERRED: frozenset(),
        AttemptStatus.FAILED: frozenset(),
    }
)

# The action is done: no later run touches it again.
DONE_ATTEMPT_STATUSES = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.PLACED_ELSEWHERE,
        AttemptStatus.RECONCILED_APPLIED,
        AttemptStatus.SKIPPED,
    }
)
# The request took effect on the cluster.
APPLIED_ATTEMPT_STATUSES = frozenset(
    {AttemptStatus.SUCCEEDED, AttemptStatus.PLACED_ELSEWHERE, AttemptStatus.RECONCILED_APPLIED}
)
# A request may be out there: the cluster must be asked before anything is sent again.
IN_DOUBT_ATTEMPT_STATUSES = frozenset({AttemptStatus.SENDING, AttemptStatus.SENT, AttemptStatus.UNKNOWN})


class SnapshotStatus(StrEnum):
    STAGED = "staged"
    PUBLISHED = "published"
    ABANDONED = "abandoned"


SNAPSHOT_TRANSITIONS: Mapping[SnapshotStatus | None, frozenset[SnapshotStatus]] = MappingProxyType(
    {
        None: frozenset({SnapshotStatus.STAGED}),
        SnapshotStatus.STAGED: frozenset({SnapshotStatus.PUBLISHED, SnapshotStatus.ABANDONED}),
        SnapshotStatus.PUBLISHED: frozenset(),
        SnapshotStatus.ABANDONED: frozenset(),
    }
)


class ScaleEventKind(StrEnum):
    """What a scale event is about; the maintenance plan that answers it is `planner.plan.scale_events`'."""

    JOIN = "join"  # a broker joined the cluster: fill it
    REMOVAL = "removal"  # a broker is marked for removal: drain it


class ScaleEventState(StrEnum):
    """A scale event (`planner.plan.scale_events`): a broker that joined, or one marked for removal."""

    DETECTED = "detected"  # recorded; no plan asked for yet
    PROPOSED = "proposed"  # the maintenance DAG was triggered for it
    PLANNED = "planned"  # a fill or drain plan for it was committed (the plan then has its own lifecycle)
    SUPERSEDED = "superseded"  # a later event about the same broker replaced it before it was planned
    WITHDRAWN = "withdrawn"  # a removal mark taken back (`brokers unmark`)


SCALE_EVENT_TRANSITIONS: Mapping[ScaleEventState | None, frozenset[ScaleEventState]] = MappingProxyType(
    {
        None: frozenset({ScaleEventState.DETECTED}),
        ScaleEventState.DETECTED: frozenset(
            {ScaleEventState.PROPOSED, ScaleEventState.PLANNED, ScaleEventState.SUPERSEDED, ScaleEventState.WITHDRAWN}
        ),
        ScaleEventState.PROPOSED: frozenset(
            {ScaleEventState.PLANNED, ScaleEventState.SUPERSEDED, ScaleEventState.WITHDRAWN}
        ),
        # Planned again (a rejected plan, asked for once more) links the newer plan; a mark withdrawn after its
        # drain was planned leaves that plan to be rejected.
        ScaleEventState.PLANNED: frozenset({ScaleEventState.PLANNED, ScaleEventState.WITHDRAWN}),
        ScaleEventState.SUPERSEDED: frozenset(),
        ScaleEventState.WITHDRAWN: frozenset(),
    }
)

_TABLES: dict[type[StrEnum], Mapping] = {
    PlanStatus: PLAN_TRANSITIONS,
    AttemptStatus: ATTEMPT_TRANSITIONS,
    SnapshotStatus: SNAPSHOT_TRANSITIONS,
    ScaleEventState: SCALE_EVENT_TRANSITIONS,
}


S = TypeVar("S", bound=StrEnum)


def advance(current: S | str | None, target: S, what: str) -> S:
    """`target`, if the lifecycle of `target`'s kind may move there from `current`; otherwise an error
    naming `what` (e.g. "plan 12"). `current` None is a new row."""
    kind = type(target)
    table = _TABLES[kind]
    source = kind(current) if current is not None else None
    if target not in table.get(source, frozenset()):
        raise IllegalTransitionError(
            f"{what}: cannot go from {source.value if source is not None else 'new'} to {target.value}"
        )
    return target
