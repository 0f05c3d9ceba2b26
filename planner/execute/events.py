"""The audit log's events of an execution: what the executor records, and what the review pages read back."""

from __future__ import annotations

from enum import StrEnum

from planner.lifecycle import AttemptStatus
from planner.store.stops import STOP_REQUESTED_EVENT


class ExecutionEvent(StrEnum):
    CLAIMED = "plan.claimed"
    CLAIM_REFUSED = "plan.claim-refused"
    OUTSIDE_WINDOWS = "plan.outside-windows"
    WINDOWS_IGNORED = "plan.windows-ignored"
    HASH_MISMATCH = "plan.hash-mismatch"
    STARTED = "plan.execution-started"
    ROLLED_BACK = "plan.rolled-back"  # recorded on the plan a starting rollback ends
    EXPIRED = "plan.expired"
    FINISHED = "plan.execution-finished"
    STOP_REQUESTED = STOP_REQUESTED_EVENT  # `pulsar-rebalance stop` (planner.store.stops)
    STOPPED = "plan.stopped"  # a run honoured the stop request: it started no action after it
    # The brokers' own shedding or splitting is on (or cannot be told): the run sends nothing (more).
    BROKER_CONTROLLERS_ON = "plan.broker-controllers-on"
    # A destination the cluster's policies in force forbid: the unload is not sent (its attempt is `skipped`).
    DESTINATION_REFUSED = "action.destination-refused"
    EVIDENCE_MISSING = "action.evidence-missing"
    IN_PROGRESS = "action.in-progress"  # a reconciliation found the request still being carried out
    FENCES = "drain.fences"
    DRAIN_CHECKED = "drain.checked"
    DRAIN_CHECK_FAILED = "drain.check-failed"


# Every event of an action's attempts starts so: the audit log's record of the attempts is read back by it.
ACTION_EVENT_PREFIX = "action."


def attempt_event(status: AttemptStatus) -> str:
    """The event of an attempt reaching `status` (`action.sending`, `action.reconciled-applied`, ...)."""
    return f"{ACTION_EVENT_PREFIX}{status.value}"
