"""Executing an approved plan: exactly the approved actions, each taking effect once, under kills,
lost answers and concurrent runs.

How each promise is kept:
- **One executor per plan.** A run first claims the plan and its cluster (`planner.execute.claim`): a second
  run sends nothing and says who holds the plan and since when. The holder renews its lease before every
  request, in the same transaction that records the attempt, so a run that lost its claim (paused past
  its lease and taken over) cannot send. A crashed run's lease expires and the plan can be resumed.
- **Intent before the request.** An attempt is committed as `sending` before its request leaves, `sent`
  once the broker accepted it, and `unknown` when the answer was lost (timeout after sending, reset,
  5xx, proxy error). Whatever a later run finds in doubt (`sending`, `sent`, `unknown`) is reconciled with
  the cluster first: after the settle time it asks the cluster what the request did (the bundle's owner for
  an unload, the namespace's boundaries for a split: each kind's own module, `planner.execute.kinds`),
  records what it saw, and sends again only when the cluster shows the request did not take effect.
- **Exactly what was approved, while it is fresh.** The approval's hash is recomputed from the action
  rows that run (the columns the calls are made from, in order). A plan starts only within its TTL;
  a started execution may continue or be resumed for `resume_window` more, and nothing is sent after that.
- **Re-checked against the live cluster.** Before each action: the bundle exists, and the checks of its kind
  (an unload's bundle is owned by the planned source, its destination an active broker that the cluster's
  policies in force allow: `planner.execute.declared`). Calls are paced, at most `max_actions` per run, and the
  run stops after `max_failures` failed actions. An action whose destination is down, or whose destination cannot be
  checked, is deferred: the plan ends partial and a rerun performs it.
- **Stopped when an operator says so.** Before each action, and during the pause between two, a run reads the plan's
  open stop request (`pulsar-rebalance stop`, `planner.store.stops`): once there is one it starts nothing more (the
  action under way finishes, its retries and verification included), and the plan ends `stopped`, the request closed
  and audited in the same transaction. Only an explicit `execute` resumes a stopped plan.
- **Not beside the brokers' own controllers.** A run reads the brokers' configuration before it sends anything and
  again with each batch of actions; while their own load shedding or automatic bundle splitting is on (or cannot be
  told), it sends nothing more, unless the cluster's settings allow running beside them
  (`allow_beside_broker_controllers`).
Every attempt, reconciliation and decision is written to the audit log (`planner.execute.events`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.errors import InputError, NotFoundError, format_validation_error
from planner.execute.claim import Lease, default_holder, release, wait_for_claim
from planner.execute.events import ACTION_EVENT_PREFIX, ExecutionEvent, attempt_event
from planner.execute.fence import fence, unfence
from planner.execute.kinds.protocol import KindExecutor
from planner.execute.kinds.registry import kind_executor
from planner.execute.live import SETTLE_MARGIN_SECONDS, LiveCluster
from planner.execute.report import (
    FAILURES,
    NOT_RUN,
    ActionResult,
    ExecutionReport,
    Progress,
    ProgressEvent,
    Step,
    no_progress,
)
from planner.failpoints import failpoint
from planner.lifecycle import (
    APPLIED_ATTEMPT_STATUSES,
    DONE_ATTEMPT_STATUSES,
    EXECUTABLE_PLAN_STATUSES,
    IN_DOUBT_ATTEMPT_STATUSES,
    AttemptStatus,
    Decision,
    PlanStatus,
    advance,
)
from planner.plan.document import ClusterView, MaintenanceDocument
from planner.plan.maintenance import MaintenanceMode
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.load_manager_shared import is_pinned_namespace
from planner.settings import ExecutionBinding, ExecutionWindow, ExecutorSettings, is_open, next_opening
from planner.store.actions import ExecutableAction, executable_actions, rows_hash
from planner.store.database import Store
from planner.store.models import (
    ActionExecution,
    Approval,
    AuditEvent,
    Plan,
    PlanAction,
    RecentlyUnloaded,
    as_utc,
    audit_event,
    utc_now,
)
from planner.store.stops import RecordedStop, close_stops, open_stop

T = TypeVar("T")

# How often a paced run's pause between two actions looks for a stop request: a stop waits at most this long.
STOP_POLL_SECONDS = 1.0

# The step boundaries of an execution, in order; a kill test stops the process at each in turn.
EXECUTOR_POINTS = (
    "executor.claimed",
    "executor.attempt-recorded",
    "executor.answered",
    "executor.sent-recorded",
    "executor.verifying",
    "executor.action-finished",
    "executor.finishing",
)


class EvidenceMissingError(InputError):
    """The audit log records attempts the attempts table lacks: what was sent cannot be told, so nothing is."""


# --- the plan, read before and under the claim ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Approved:
    """An approved plan, as its approval binds it."""

    plan_id: int
    cluster: str
    approver: str | None  # None: the gate's default on timeout
    actions_hash: str
    binding: ExecutionBinding


@dataclass(frozen=True, slots=True)
class _ClaimedPlan:
    """The plan as read under the claim: the rows that run, and the fences its maintenance changes."""

    created: datetime
    started: datetime | None
    actions: list[ExecutableAction]
    fenced: list[str]  # a drain's brokers
    unfenced: list[str]  # a fill's brokers, or those of the drain a rollback undoes
    rolls_back: int | None
    # The brokers' own controllers the plan saw on when it was made (its cluster view), for the audit log.
    planned_controllers: tuple[str, ...] = ()


def _refuse_unless_executable(plan: Plan) -> None:
    if PlanStatus(plan.status) not in EXECUTABLE_PLAN_STATUSES:
        raise InputError(f"plan {plan.id} is {plan.status}; only an approved or partly executed plan can run")


def _approved(store: Store, plan_id: int) -> _Approved:
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        approval = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        if approval is None or approval.decision != Decision.APPROVED:
            raise InputError(f"plan {plan_id} is not approved")
        _refuse_unless_executable(plan)
        binding = ExecutionBinding.recorded(
            approval.ttl_seconds, approval.resume_window_seconds, approval.execution_windows
        )
        return _Approved(plan_id, plan.cluster.name, approval.approver, approval.actions_hash, binding)


def _maintenance_of(plan: Plan) -> MaintenanceDocument | None:
    """What a maintenance plan was made for; None for a strategy's plan (and rows stored before maintenance)."""
    stored = plan.details.get("maintenance")
    if not stored:
        return None
    try:
        return MaintenanceDocument.model_validate(stored)
    except ValidationError as error:
        raise InputError(format_validation_error(error, f"plan {plan.id} maintenance")) from None


def _planned_controllers(plan: Plan) -> tuple[str, ...]:
    """The brokers' own controllers the plan's cluster view saw on; none for plans made before it was recorded."""
    stored = plan.details.get("clusterView")
    if not stored:
        return ()
    try:
        return ClusterView.model_validate(stored).competing_controllers
    except ValidationError as error:
        raise InputError(format_validation_error(error, f"plan {plan.id} clusterView")) from None


def _fence_changes(session: Session, maintenance: MaintenanceDocument | None) -> tuple[list[str], list[str]]:
    """The brokers to fence (a drain's) and those whose fences to lift (a fill's, or the drain's a rollback undoes)."""
    if maintenance is None:
        return [], []
    if maintenance.mode == MaintenanceMode.DRAIN:
        return maintenance.brokers, []
    if maintenance.mode == MaintenanceMode.FILL:
        return [], maintenance.brokers
    if maintenance.rolls_back is None:
        return [], []
    undone = _maintenance_of(session.get(Plan, maintenance.rolls_back))
    return [], undone.brokers if undone is not None and undone.mode == MaintenanceMode.DRAIN else []


def _claimed_plan(store: Store, approved: _Approved, actor: str) -> _ClaimedPlan:
    """Read the plan again under the claim; refuse unless its rows are still exactly the approved ones."""
    with store.session() as session:
        plan = session.get(Plan, approved.plan_id)
        _refuse_unless_executable(plan)  # ended (e.g. rolled back) meanwhile
        maintenance = _maintenance_of(plan)
        fenced, unfenced = _fence_changes(session, maintenance)
        claimed = _ClaimedPlan(
            created=as_utc(plan.created_at),
            started=plan.execution_started_at,
            # The rows read here are the rows that run: the approval must be for exactly these.
            actions=executable_actions(session, approved.plan_id),
            fenced=fenced,
            unfenced=unfenced,
            rolls_back=maintenance.rolls_back if maintenance is not None and maintenance.mode == "rollback" else None,
            planned_controllers=_planned_controllers(plan),
        )
        matches = rows_hash(session, approved.plan_id) == approved.actions_hash == plan.actions_hash
        if not matches:
            session.add(
                audit_event(
                    approved.cluster,
                    actor,
                    ExecutionEvent.HASH_MISMATCH.value,
                    plan=approved.plan_id,
                    approver=approved.approver,
                )
            )
    if not matches:
        raise InputError(f"plan {approved.plan_id}: the stored actions differ from the approved ones; refusing to run")
    return claimed


# --- the run --------------------------------------------------------------------------------------


class _Run:
    """One execution run of one plan, holding its claim: the attempts at its actions, and what they record."""

    def __init__(
        self,
        lease: Lease,
        live: LiveCluster,
        settings: ExecutorSettings,
        deadline: datetime,
        actor: str,
        now: Callable[[], datetime],
        sleep: Callable[[float], None],
        actions: Sequence[ExecutableAction] = (),
        allow_beside_broker_controllers: bool = False,
        progress: Progress = no_progress,
    ) -> None:
        self.lease, self.store, self.claim, self.live = lease, lease.store, lease.claim, live
        self.cluster = live.cluster
        self.actions = tuple(actions)  # the plan's, in order
        self.settings, self.deadline, self.actor, self.now, self.sleep = settings, deadline, actor, now, sleep
        self.allow_beside_broker_controllers = allow_beside_broker_controllers
        self.progress = progress
        self._controllers_refused = False  # audited once per run

    def write(self, change: Callable[[Session], T]) -> T:
        return self.lease.write(change)

    def pause(self, seconds: float) -> None:
        self.sleep(seconds)
        self.lease.keep()

    def stop_request(self) -> RecordedStop | None:
        """The operator's open request to stop this plan's execution, if there is one."""
        with self.store.session() as session:
            row = open_stop(session, self.claim.plan_id)
            return RecordedStop.of(row) if row is not None else None

    def pace(self, seconds: float) -> RecordedStop | None:
        """Wait `seconds` before the next action, keeping the lease and looking for a stop request meanwhile; the
        request, as soon as one is seen (the wait ends then)."""
        remaining = seconds
        while remaining > 0:
            step = min(remaining, STOP_POLL_SECONDS)
            self.pause(step)
            remaining -= step
            stop = self.stop_request()
            if stop is not None:
                return stop
        return None

    def was_applied(self, action: ExecutableAction) -> bool:
        return any(AttemptStatus(a.status) in APPLIED_ATTEMPT_STATUSES for a in self.attempts(action))

    @property
    def settle_seconds(self) -> float:
        """How long after an unanswered request ended its outcome is looked for: the configured settle time, and
        at least the broker's own unload timeout plus a margin (a broker may finish an unload that long after
        accepting it, listing the bundle as inactive meanwhile)."""
        return max(self.settings.settle_seconds, self.live.unload_timeout_seconds + SETTLE_MARGIN_SECONDS)

    def _audit(self, session: Session, event: str, action: ExecutableAction, **details: Any) -> None:
        session.add(
            audit_event(
                self.cluster,
                self.actor,
                event,
                plan=self.claim.plan_id,
                sequence=action.sequence,
                kind=action.kind.value,
                bundle=action.bundle,
                source=action.source,
                destination=action.destination,
                **details,
            )
        )

    def record(self, action: ExecutableAction, event: ExecutionEvent, **details: object) -> None:
        self.write(lambda session: self._audit(session, event.value, action, **details))

    def _audit_plan(self, event: ExecutionEvent, **details: Any) -> None:
        self.write(
            lambda session: session.add(
                audit_event(self.cluster, self.actor, event.value, plan=self.claim.plan_id, **details)
            )
        )

    def attempts(self, action: ExecutableAction) -> list[ActionExecution]:
        with self.store.session() as session:
            return list(
                session.scalars(
                    select(ActionExecution)
                    .where(ActionExecution.action_id == action.id)
                    .order_by(ActionExecution.attempt)
                )
            )

    @functools.cached_property
    def audited_attempts(self) -> dict[int, set[int]]:
        """The attempt numbers the audit log records, per action sequence. Read once per run: each action is
        checked before this run first attempts it, so what this run adds later cannot matter to the check."""
        audited: dict[int, set[int]] = {}
        with self.store.session() as session:
            events = session.scalars(
                select(AuditEvent).where(
                    AuditEvent.plan_id == self.claim.plan_id, AuditEvent.event.like(f"{ACTION_EVENT_PREFIX}%")
                )
            )
            for event in events:
                sequence, attempt = event.details.get("sequence"), event.details.get("attempt")
                if sequence is not None and attempt is not None:
                    audited.setdefault(sequence, set()).add(attempt)
        return audited

    def check_evidence(self, action: ExecutableAction, attempts: list[ActionExecution]) -> None:
        """The audit log records every attempt as it begins; an attempt it records that the attempts table lacks
        was removed, and what it sent can no longer be told: refuse rather than take it as never tried."""
        audited = self.audited_attempts.get(action.sequence, set())
        missing = sorted(audited - {attempt.attempt for attempt in attempts})
        if missing:
            self.write(
                lambda session: self._audit(
                    session, ExecutionEvent.EVIDENCE_MISSING.value, action, missingAttempts=missing
                )
            )
            raise EvidenceMissingError(
                f"plan {self.claim.plan_id} action {action.sequence}: the audit log records attempt(s) {missing} that "
                "the attempts table does not have; refusing to send what may have been sent"
            )

    def new_attempt(self, action: ExecutableAction, status: AttemptStatus, reason: str = "") -> int:
        """A new attempt row, committed (with `sending`, before its request leaves)."""
        advance(None, status, f"plan {self.claim.plan_id} action {action.sequence}")

        def change(session: Session) -> int:
            number = 1 + len(
                list(session.scalars(select(ActionExecution.id).where(ActionExecution.action_id == action.id)))
            )
            finished = None if status in IN_DOUBT_ATTEMPT_STATUSES else utc_now()
            row = ActionExecution(
                action_id=action.id, attempt=number, status=status.value, error=reason or None, finished_at=finished
            )
            session.add(row)
            session.flush()
            self._audit(session, attempt_event(status), action, attempt=number, reason=reason)
            return row.id

        return self.write(change)

    def move(
        self,
        action: ExecutableAction,
        attempt_id: int,
        status: AttemptStatus,
        reason: str = "",
        *,
        request_ended: bool = False,
        seen: Mapping[str, object] | None = None,
    ) -> None:
        """Move an attempt along its lifecycle, with the reason and, for reconciliations, what was seen.
        `request_ended`: the request's answer came or was given up on now (the settle time counts from it)."""

        def change(session: Session) -> None:
            row = session.get(ActionExecution, attempt_id)
            row.status = advance(row.status, status, f"plan {self.claim.plan_id} action {action.sequence}").value
            row.error = reason or row.error
            if request_ended:
                row.request_ended_at = self.now()
            if status not in IN_DOUBT_ATTEMPT_STATUSES:
                row.finished_at = utc_now()
            self._audit(session, attempt_event(status), action, attempt=row.attempt, reason=reason, **(seen or {}))
            if status in APPLIED_ATTEMPT_STATUSES and kind_executor(action.kind).unloads_bundle:
                self._remember_unload(session, action)

        self.write(change)

    def _remember_unload(self, session: Session, action: ExecutableAction) -> None:
        """Unloaded bundles are skipped by later plans for the grace period (as Pulsar's leader does)."""
        plan = session.get(Plan, self.claim.plan_id)
        millis = int(self.now().timestamp() * 1000)
        row = session.scalar(
            select(RecentlyUnloaded).where(
                RecentlyUnloaded.cluster_id == plan.cluster_id, RecentlyUnloaded.bundle == action.bundle
            )
        )
        if row is None:
            session.add(RecentlyUnloaded(cluster_id=plan.cluster_id, bundle=action.bundle, unloaded_at_millis=millis))
        else:
            row.unloaded_at_millis = millis

    # --- the plan's fences --------------------------------------------------------------------

    def change_fences(self, fenced: list[str], unfenced: list[str]) -> dict[str, str]:
        """Fence the brokers a drain empties, lift the fences of those a fill or a rollback refills; audited. A
        failure is reported and the plan goes on: its moves do not depend on the fence."""
        try:
            results = fence(self.live.client, self.cluster, fenced, self.live.active_brokers()) if fenced else {}
            results |= unfence(self.live.client, self.cluster, unfenced) if unfenced else {}
        except AdminError as error:
            results = dict.fromkeys([*fenced, *unfenced], f"fence not changed: {error}")
        # The fences are isolation policies: the destinations are checked against the policies as they are now.
        self.live.declared.forget()
        self._audit_plan(ExecutionEvent.FENCES, fences=results)
        return results

    # --- the brokers' own controllers -----------------------------------------------------------

    def controllers_refusal(self, planned: Sequence[str] = ()) -> str | None:
        """Why this run must send nothing (more): the brokers' own load shedding or automatic bundle splitting is on,
        or cannot be told, and the cluster's settings do not allow running beside them (audited once per run).
        None: it may go on. Read at most once per batch of actions (`planner.execute.declared`)."""
        if self.allow_beside_broker_controllers:
            return None
        seen = self.live.declared.controllers()
        if seen.clear:
            return None
        if not self._controllers_refused:
            self._controllers_refused = True
            self._audit_plan(
                ExecutionEvent.BROKER_CONTROLLERS_ON, seen=seen.to_json(), planned=list(planned), reason=seen.describe()
            )
        return seen.describe()

    def still_owned(self, brokers: list[str]) -> dict[str, list[str]] | None:
        """What the drained brokers own now, heartbeat and SLA-monitor bundles (pinned by Pulsar) aside (a broker
        no longer active owns nothing); None when the cluster cannot be read. Audited either way."""
        try:
            active = self.live.active_brokers()
            owned = {
                broker: sorted(
                    bundle
                    for bundle in self.live.client.owned_bundles(self.cluster, broker)
                    if not is_pinned_namespace(namespace_of(bundle))
                )
                if broker in active
                else []
                for broker in brokers
            }
        except AdminError as error:
            self._audit_plan(ExecutionEvent.DRAIN_CHECK_FAILED, error=str(error))
            return None
        self._audit_plan(ExecutionEvent.DRAIN_CHECKED, stillOwned=owned)
        return owned

    # --- one action -----------------------------------------------------------------------------

    def settle(self, attempt: ActionExecution) -> None:
        """Wait, keeping the lease, until the settle time has passed since the unanswered request ended. A run
        that stopped before recording the end is taken to have waited out its request timeout."""
        ended = (
            as_utc(attempt.request_ended_at)
            if attempt.request_ended_at is not None
            else as_utc(attempt.started_at) + timedelta(seconds=self.settings.request_timeout_seconds)
        )
        remaining = (ended + timedelta(seconds=self.settle_seconds) - self.now()).total_seconds()
        while remaining > 0:
            step = min(remaining, self.settings.lease.total_seconds() / 4)
            self.pause(step)
            remaining -= step
        self.lease.keep()

    def reconcile(self, action: ExecutableAction, attempt: ActionExecution) -> ActionResult | None:
        """Settle an attempt in doubt by looking at the cluster. Returns the action's result when the
        request took effect, None when the cluster shows it did not (a fresh attempt may then be sent)."""
        kind = kind_executor(action.kind)
        status = AttemptStatus(attempt.status)
        if status is AttemptStatus.SENDING:
            reason = "the run that was sending this request stopped before recording an answer"
            self.move(action, attempt.id, AttemptStatus.UNKNOWN, reason)
            status = AttemptStatus.UNKNOWN
        if status is AttemptStatus.SENT:
            # The broker accepted it: only the verification was cut short.
            verified, reason = kind.verify(action, self)
            self.move(action, attempt.id, verified, reason)
            return ActionResult(action.sequence, verified, reason, reconciled=True)
        self.settle(attempt)
        seen = kind.reconcile(action, self)
        if seen.status is AttemptStatus.UNKNOWN:  # still being carried out: stays in doubt, never resent
            self.write(
                lambda session: self._audit(session, ExecutionEvent.IN_PROGRESS.value, action, reason=seen.reason)
            )
            return ActionResult(action.sequence, AttemptStatus.UNKNOWN, seen.reason, reconciled=True)
        self.move(action, attempt.id, seen.status, seen.reason, seen=seen.details)
        if seen.status is AttemptStatus.RECONCILED_NOT_APPLIED:
            return None
        return ActionResult(action.sequence, seen.status, seen.reason, reconciled=True)

    def precheck(self, kind: KindExecutor, action: ExecutableAction) -> tuple[AttemptStatus, str] | None:
        """The action's preconditions on the live cluster: None when it may run, else the recorded outcome."""
        if not self.live.bundle_exists(action.bundle):
            return AttemptStatus.SKIPPED, "the bundle no longer exists (split or changed since the plan)"
        return kind.precheck(action, self)

    def attempt(self, action: ExecutableAction) -> tuple[ActionResult, bool]:
        """One fresh attempt: re-check, record the intent, send, record the answer, verify. Returns the
        result and whether another attempt may follow (only after a failure that proves nothing was done)."""
        kind = kind_executor(action.kind)
        checked = self.precheck(kind, action)
        if checked is not None:
            status, reason = checked
            self.new_attempt(action, status, reason)
            return ActionResult(action.sequence, status, reason), False
        if self.now() > self.deadline:
            return ActionResult(action.sequence, NOT_RUN, "the plan expired"), False
        attempt_id = self.new_attempt(action, AttemptStatus.SENDING)
        failpoint("executor.attempt-recorded")
        self.lease.fence_request(self.settings.request_timeout_seconds, SETTLE_MARGIN_SECONDS)
        try:
            kind.send(action, self.live.client)
        except AdminError as error:
            failpoint("executor.answered")
            if not error.may_have_applied:
                self.move(action, attempt_id, AttemptStatus.FAILED, str(error), request_ended=True)
                return ActionResult(action.sequence, AttemptStatus.FAILED, str(error)), True
            reason = f"no answer that settles it: {error}"
            self.move(action, attempt_id, AttemptStatus.UNKNOWN, reason, request_ended=True)
            [row] = [row for row in self.attempts(action) if row.id == attempt_id]
            settled = self.reconcile(action, row)
            if settled is not None:
                return settled, False
            return ActionResult(action.sequence, AttemptStatus.RECONCILED_NOT_APPLIED, str(error), True), True
        failpoint("executor.answered")
        self.move(action, attempt_id, AttemptStatus.SENT, request_ended=True)
        failpoint("executor.sent-recorded")
        status, reason = kind.verify(action, self)
        self.move(action, attempt_id, status, reason)
        return ActionResult(action.sequence, status, reason), status is AttemptStatus.FAILED

    def run_action(self, action: ExecutableAction) -> ActionResult:
        """The action's result in this run (the finished attempt's, when it is already done)."""
        attempts = self.attempts(action)
        done = _done(attempts)
        if done is not None:
            return _done_result(action, done)
        self.check_evidence(action, attempts)
        if _in_doubt(attempts):
            settled = self.reconcile(action, attempts[-1])
            if settled is not None:
                return settled
            if self.now() > self.deadline:
                return ActionResult(action.sequence, NOT_RUN, "the plan expired", reconciled=True)
        result, again = self.attempt(action)
        for _ in range(1, self.settings.attempts_per_action):
            if not again:
                break
            result, again = self.attempt(action)
        return result


def _done(attempts: list[ActionExecution]) -> ActionExecution | None:
    """The attempt that finished the action, if one did."""
    return next((a for a in attempts if a.status in DONE_ATTEMPT_STATUSES), None)


def _in_doubt(attempts: list[ActionExecution]) -> bool:
    """Whether the last attempt's request may be out there: the cluster must be asked before anything is sent."""
    return bool(attempts) and attempts[-1].status in IN_DOUBT_ATTEMPT_STATUSES


def _done_result(action: ExecutableAction, done: ActionExecution) -> ActionResult:
    return ActionResult(action.sequence, AttemptStatus(done.status), done.error or "")


# --- the execution --------------------------------------------------------------------------------


def execute_plan(
    store: Store,
    client: PulsarAdminClient,
    plan_id: int,
    settings: ExecutorSettings | None = None,
    *,
    actor: str = "executor",
    holder: str | None = None,
    claim_wait: float = 0.0,
    ignore_windows: bool = False,
    allow_beside_broker_controllers: bool = False,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    progress: Progress = no_progress,
) -> ExecutionReport:
    """Execute an approved plan (or resume one a stopped run left), holding its claim and its cluster's throughout.

    What the approval bound holds whatever the entry point: `settings` may shorten its TTL and resume window, never
    extend them, and actions start only within its execution windows unless `ignore_windows` (audited).
    `claim_wait`: seconds to wait for a claim another run holds (a retried task after a crash waits for
    the dead run's lease to expire); without it, a claimed plan or cluster is refused at once.
    `allow_beside_broker_controllers`: the cluster's setting (`planner.settings.ClusterExecution`); without it, a run
    finding the brokers' own load shedding or bundle splitting on is refused before it sends anything (InputError),
    and one finding it switched on during the execution starts no further action.
    `progress`: told of each action as it starts and ends, of the pause before the next, and of a stop honoured.
    """
    holder = holder or default_holder(actor)
    approved = _approved(store, plan_id)
    settings = approved.binding.bound(settings or ExecutorSettings())
    windows = _windows(store, approved, actor, ignore_windows, now)
    claim = wait_for_claim(store, plan_id, holder, settings.lease, now, sleep, claim_wait)
    failpoint("executor.claimed")
    report = ExecutionReport(plan_id, PlanStatus.EXECUTING, claimed_by=holder)
    try:
        plan = _claimed_plan(store, approved, actor)
        # A new execution must start within the TTL; a started one may run, or be resumed, for the window more.
        deadline = plan.created + settings.ttl + settings.resume_window
        live = LiveCluster(client, approved.cluster)
        lease = Lease(store, claim, settings.lease, now)
        run = _Run(
            lease, live, settings, deadline, actor, now, sleep, plan.actions, allow_beside_broker_controllers, progress
        )
        if now() > (plan.created + settings.ttl if plan.started is None else deadline):
            return _expire(run, report, plan.created)
        refusal = run.controllers_refusal(plan.planned_controllers)
        if refusal is not None:
            raise InputError(
                f"plan {plan_id}: {refusal}. This run sent nothing: turn them off, or set "
                f"allow_beside_broker_controllers = true in cluster {approved.cluster}'s settings to run beside them"
            )
        _begin(run, approved, plan, ignore_windows)
        if plan.fenced or plan.unfenced:
            report.fences = run.change_fences(plan.fenced, plan.unfenced)
        _perform(run, report, windows)
        if plan.fenced:
            report.still_owned = run.still_owned(plan.fenced)
        return _finish(run, report)
    finally:
        with store.session() as session:
            release(session, claim)


def _windows(
    store: Store, approved: _Approved, actor: str, ignore_windows: bool, now: Callable[[], datetime]
) -> Sequence[ExecutionWindow]:
    """The execution windows this run keeps to: refused outside them, and setting them aside is audited."""
    windows = () if ignore_windows else approved.binding.windows
    if not is_open(windows, now()):
        _refuse_outside_windows(store, approved, actor, windows, now())
    if ignore_windows and approved.binding.windows:
        with store.session() as session:
            session.add(
                audit_event(
                    approved.cluster,
                    actor,
                    ExecutionEvent.WINDOWS_IGNORED.value,
                    plan=approved.plan_id,
                    windows=[window.describe() for window in approved.binding.windows],
                    open=is_open(approved.binding.windows, now()),
                )
            )
    return windows


def _refuse_outside_windows(
    store: Store, approved: _Approved, actor: str, windows: Sequence[ExecutionWindow], now: datetime
) -> NoReturn:
    opening = next_opening(windows, now)
    with store.session() as session:
        session.add(
            audit_event(
                approved.cluster,
                actor,
                ExecutionEvent.OUTSIDE_WINDOWS.value,
                plan=approved.plan_id,
                windows=[window.describe() for window in windows],
                opens=opening.isoformat() if opening else None,
            )
        )
    raise InputError(
        f"plan {approved.plan_id} may execute only within its approved execution windows "
        f"({'; '.join(window.describe() for window in windows)}); the next opens at {opening:%Y-%m-%d %H:%M} UTC. "
        "This run sent nothing (--ignore-windows overrides them, audited)"
    )


def _begin(run: _Run, approved: _Approved, plan: _ClaimedPlan, ignore_windows: bool) -> None:
    """Mark the plan executing (a rollback ends the plan it undoes) and audit how this run was set up."""

    def begin(session: Session) -> None:
        row = session.get(Plan, approved.plan_id)
        if row.status != PlanStatus.EXECUTING.value:
            row.status = advance(row.status, PlanStatus.EXECUTING, f"plan {approved.plan_id}").value
        row.execution_started_at = row.execution_started_at or run.now()
        if plan.rolls_back is not None:
            _end_rolled_back_plan(session, run.cluster, run.actor, plan.rolls_back, approved.plan_id)
        session.add(
            audit_event(
                run.cluster,
                run.actor,
                ExecutionEvent.STARTED.value,
                plan=approved.plan_id,
                approver=approved.approver,
                resumed=plan.started is not None,
                claimedBy=run.claim.holder,
                # Which pacing, budgets and timeouts this run used (bounded by the approval), wherever each came
                # from, and whether the approved windows were set aside.
                settings=run.settings.model_dump(mode="json"),
                binding=approved.binding.model_dump(mode="json"),
                ignoreWindows=ignore_windows,
                # The brokers' own controllers: on when the plan was made, and whether the cluster allows running
                # beside them (then this run did not stop for them).
                plannedControllers=list(plan.planned_controllers),
                allowBesideBrokerControllers=run.allow_beside_broker_controllers,
            )
        )

    run.write(begin)


def _end_rolled_back_plan(session: Session, cluster: str, actor: str, original_id: int, rollback_id: int) -> None:
    """A rollback that starts ends the plan it undoes: rolled-back is final, so the original (a partial plan
    included) can never be resumed to send its remaining moves over the rollback's. A plan another rollback
    already ended is not undone twice."""
    original = session.get(Plan, original_id)
    if original.status == PlanStatus.ROLLED_BACK.value:
        ended_by = session.scalar(
            select(AuditEvent)
            .where(AuditEvent.plan_id == original_id, AuditEvent.event == ExecutionEvent.ROLLED_BACK.value)
            .order_by(AuditEvent.id.desc())
            .limit(1)
        )
        if ended_by is not None and ended_by.details.get("rolledBackBy") != rollback_id:
            raise InputError(
                f"plan {rollback_id} rolls back plan {original_id}, which plan {ended_by.details.get('rolledBackBy')} "
                "already rolled back; refusing to undo it twice"
            )
        return
    original.status = advance(original.status, PlanStatus.ROLLED_BACK, f"plan {original_id}").value
    session.add(
        audit_event(cluster, actor, ExecutionEvent.ROLLED_BACK.value, plan=original_id, rolledBackBy=rollback_id)
    )


def _perform(run: _Run, report: ExecutionReport, windows: Sequence[ExecutionWindow]) -> None:
    """Run the plan's actions in order, paced, within the run's budgets and the approved windows."""
    failures = performed = 0
    pause = 60.0 / run.settings.actions_per_minute if run.settings.actions_per_minute > 0 else 0.0
    # The pace holds across runs: a rerun right after a stopped one waits as the stopped run would have.
    last_start = _last_request_started(run.store, run.claim.plan_id)
    if pause and last_start is not None and (wait := (last_start - run.now()).total_seconds() + pause) > 0:
        run.sleep(min(wait, pause))
    total = len(run.actions)
    stop: RecordedStop | None = None
    for index, action in enumerate(run.actions, start=1):
        attempts = run.attempts(action)
        done = _done(attempts)
        if done is not None:
            report.actions[action.sequence] = _done_result(action, done)
            continue
        # An operator's stop comes first, before the budgets and before settling what is in doubt: after it nothing
        # more is sent, and what is in doubt stays so for the run that resumes the plan. Read once per action.
        stop = stop or run.stop_request()
        if stop is not None:
            if report.stopped_by is None:
                report.stopped_by = stop
                run.progress(ProgressEvent(Step.STOPPED, index, total, action.kind, action.bundle, stop=stop))
            reason = f"stopped by {stop.requested_by}" + (f": {stop.reason}" if stop.reason else "")
            report.actions[action.sequence] = ActionResult(action.sequence, NOT_RUN, reason)
            continue
        # What is in doubt is always settled, whatever the limits: that sends nothing unless it must.
        held_back = None if _in_doubt(attempts) else _held_back(run, windows, failures, performed)
        if held_back is not None:
            report.actions[action.sequence] = ActionResult(action.sequence, NOT_RUN, held_back)
            continue
        run.progress(ProgressEvent(Step.STARTED, index, total, action.kind, action.bundle))
        try:
            result = run.run_action(action)
        except AdminError as error:
            # The cluster could not be read: what is in doubt stays in doubt for the next run.
            result = ActionResult(action.sequence, AttemptStatus.FAILED, f"cannot check the cluster: {error}")
        report.actions[action.sequence] = result
        run.progress(ProgressEvent(Step.ENDED, index, total, action.kind, action.bundle, result.status, result.reason))
        failpoint("executor.action-finished")
        performed += 1
        if result.status in FAILURES:
            failures += 1
        if pause and action is not run.actions[-1]:
            run.progress(ProgressEvent(Step.WAITING, index + 1, total, seconds=pause))
            stop = run.pace(pause)


def _held_back(run: _Run, windows: Sequence[ExecutionWindow], failures: int, performed: int) -> str | None:
    """Why a fresh action does not start in this run: a budget is spent, the approved windows closed, or the brokers'
    own controllers were switched on meanwhile."""
    if failures >= run.settings.max_failures or performed >= run.settings.max_actions:
        return "stopped: too many failures" if failures else "max actions per run reached"
    if not is_open(windows, run.now()):
        opening = next_opening(windows, run.now())
        return f"the approved execution windows closed (next opening {opening:%Y-%m-%d %H:%M} UTC)"
    refusal = run.controllers_refusal()
    if refusal is not None:
        return f"not started: {refusal}"
    return None


def _last_request_started(store: Store, plan_id: int) -> datetime | None:
    """When the plan's latest request may have left (any attempt but those decided without sending)."""
    with store.session() as session:
        started = session.scalar(
            select(func.max(ActionExecution.started_at))
            .join(PlanAction, PlanAction.id == ActionExecution.action_id)
            .where(
                PlanAction.plan_id == plan_id,
                ActionExecution.status.not_in([AttemptStatus.SKIPPED.value, AttemptStatus.DEFERRED.value]),
            )
        )
    return as_utc(started) if started is not None else None


def _finish(run: _Run, report: ExecutionReport) -> ExecutionReport:
    failpoint("executor.finishing")
    statuses = [result.status for result in report.actions.values()]
    if (
        statuses
        and all(status in DONE_ATTEMPT_STATUSES for status in statuses)
        and not all(status is AttemptStatus.SKIPPED for status in statuses)
    ):
        final = PlanStatus.EXECUTED
    elif report.stopped_by is not None:
        final = PlanStatus.STOPPED
    elif run.now() > run.deadline and any(status is NOT_RUN for status in statuses):
        final = PlanStatus.EXPIRED
    else:
        final = PlanStatus.PARTIAL
    report.status = final

    def finish(session: Session) -> None:
        plan = session.get(Plan, run.claim.plan_id)
        plan.status = advance(plan.status, final, f"plan {plan.id}").value
        # Closed with the status the run ended with: one that came too late to stop anything is not left to stop
        # the next run.
        closed = close_stops(session, plan.id, final)
        if report.stopped_by is not None:
            stop = report.stopped_by
            session.add(
                audit_event(
                    run.cluster,
                    run.actor,
                    ExecutionEvent.STOPPED.value,
                    plan=plan.id,
                    stopRequest=stop.id,
                    requestedBy=stop.requested_by,
                    reason=stop.reason,
                    notRun=[seq for seq, result in report.actions.items() if result.status is NOT_RUN],
                )
            )
        session.add(
            audit_event(
                run.cluster,
                run.actor,
                ExecutionEvent.FINISHED.value,
                plan=plan.id,
                status=final.value,
                results=report.to_json(),
                **({"stopRequestsClosed": closed} if closed else {}),
            )
        )

    run.write(finish)
    return report


def _expire(run: _Run, report: ExecutionReport, created: datetime) -> ExecutionReport:
    """Past the TTL (and the resume window): send nothing, but settle what is in doubt so the record is true."""
    for action in run.actions:
        attempts = run.attempts(action)
        done = _done(attempts)
        if done is not None:
            report.actions[action.sequence] = _done_result(action, done)
        elif _in_doubt(attempts):
            settled = run.reconcile(action, attempts[-1])
            report.actions[action.sequence] = settled or ActionResult(
                action.sequence, NOT_RUN, "the plan expired", reconciled=True
            )
        else:
            report.actions[action.sequence] = ActionResult(action.sequence, NOT_RUN, "the plan expired")
    report.status = PlanStatus.EXPIRED

    def expire(session: Session) -> None:
        plan = session.get(Plan, run.claim.plan_id)
        plan.status = advance(plan.status, PlanStatus.EXPIRED, f"plan {plan.id}").value
        close_stops(session, plan.id, PlanStatus.EXPIRED)
        session.add(
            audit_event(
                run.cluster,
                run.actor,
                ExecutionEvent.EXPIRED.value,
                plan=plan.id,
                ttlSeconds=run.settings.ttl.total_seconds(),
                resumeWindowSeconds=run.settings.resume_window.total_seconds(),
                createdAt=created.isoformat(),
            )
        )

    run.write(expire)
    return report
