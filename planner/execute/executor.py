"""Executing an approved plan: exactly the approved actions, each taking effect once, under kills,
lost answers and concurrent runs.

How each promise is kept:
- **One executor per plan.** A run first claims the plan: a conditional UPDATE that succeeds only when
  nobody holds an unexpired lease (the row count decides, on SQLite and PostgreSQL alike). A second run
  sends nothing and says who holds the plan and since when. The holder renews its lease before every
  request, in the same transaction that records the attempt, so a run that lost its claim (paused past
  its lease and taken over) cannot send. A crashed run's lease expires and the plan can be resumed.
- **Intent before the request.** An attempt is committed as `sending` before its request leaves, `sent`
  once the broker accepted it, and `unknown` when the answer was lost (timeout after sending, reset,
  5xx, proxy error). Whatever a later run finds in doubt (`sending`, `sent`, `unknown`) is reconciled with
  the cluster first: after the settle time it looks up the bundle's owner (unload) or the namespace's
  boundaries (split), records what it saw, and sends again only when the cluster shows the request did
  not take effect.
- **Exactly what was approved, while it is fresh.** The approval's hash is recomputed from the action
  rows that run (the columns the calls are made from, in order). A plan starts only within its TTL;
  a started execution may continue or be resumed for `resume_window` more, and nothing is sent after that.
- **Re-checked against the live cluster.** Before each action: the bundle exists and is owned by the
  planned source, the destination is an active broker. Calls are paced, at most `max_actions` per run,
  and the run stops after `max_failures` failed actions. An action whose destination is down is
  deferred: the plan ends partial and a rerun performs it.
Every attempt, reconciliation and decision is written to the audit log.
"""

from __future__ import annotations

import functools
import getpass
import itertools
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.errors import InputError, NotFoundError
from planner.execute.fence import fence, fence_name, unfence
from planner.failpoints import failpoint
from planner.lifecycle import (
    APPLIED_ATTEMPT_STATUSES,
    DONE_ATTEMPT_STATUSES,
    EXECUTABLE_PLAN_STATUSES,
    IN_DOUBT_ATTEMPT_STATUSES,
    AttemptStatus,
    PlanStatus,
    advance,
)
from planner.pulsar.bundle_range import BundleName, namespace_of
from planner.pulsar.load_manager_shared import is_pinned_namespace
from planner.pulsar.versions import PulsarVersion
from planner.settings import ExecutionBinding, ExecutionWindow, ExecutorSettings, is_open, next_opening
from planner.store.actions import ExecutableAction, executable_actions, rows_hash
from planner.store.database import Store
from planner.store.models import (
    ActionExecution,
    Approval,
    AuditEvent,
    Cluster,
    Plan,
    PlanAction,
    RecentlyUnloaded,
    as_utc,
    audit_event,
    utc_now,
)

logger = logging.getLogger(__name__)

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

NOT_RUN = "not-run"  # report only: the action was not reached in this run
# Outcomes that count towards `max_failures`.
FAILURES = frozenset(
    {AttemptStatus.FAILED.value, AttemptStatus.UNKNOWN.value, AttemptStatus.RECONCILED_NOT_APPLIED.value}
)


class PlanClaimedError(InputError):
    """Another run holds the plan's execution claim; this run sent nothing."""


class ClaimLostError(InputError):
    """The lease ran out and another run claimed the plan (or the cluster), or too little of it is left to
    send: stop at once, sending nothing more."""


class EvidenceMissingError(InputError):
    """The audit log records attempts the attempts table lacks: what was sent cannot be told, so nothing is."""


# Pulsar's default namespaceBundleUnloadingTimeoutMs: how long a broker may take to unload a bundle it accepted.
DEFAULT_UNLOAD_TIMEOUT_SECONDS = 60.0
# Added to the broker's own unload timeout: an unanswered request is settled only once the broker has given up.
SETTLE_MARGIN_SECONDS = 5.0
# A broker configured to take longer is waited on this long; what is still unsettled then stays in doubt.
MAX_UNLOAD_TIMEOUT_SECONDS = 3600.0


@dataclass(slots=True)
class ActionResult:
    sequence: int
    status: str  # an AttemptStatus value, or NOT_RUN
    reason: str = ""
    reconciled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"sequence": self.sequence, "status": self.status, "reason": self.reason, "reconciled": self.reconciled}


@dataclass(slots=True)
class ExecutionReport:
    plan_id: int
    status: str
    claimed_by: str = ""
    actions: dict[int, ActionResult] = field(default_factory=dict)
    # A drain plan: the bundles each drained broker still owns after the run (heartbeat/SLA-monitor aside).
    still_owned: dict[str, list[str]] | None = None
    # Maintenance plans: the fences (planner.execute.fence) this run set or removed, per broker.
    fences: dict[str, str] | None = None

    @property
    def results(self) -> dict[int, str]:
        return {sequence: result.status for sequence, result in self.actions.items()}

    @property
    def reasons(self) -> dict[int, str]:
        return {sequence: result.reason for sequence, result in self.actions.items() if result.reason}

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for result in self.actions.values():
            counts[result.status] = counts.get(result.status, 0) + 1
        return {
            "plan": self.plan_id,
            "status": self.status,
            "claimedBy": self.claimed_by,
            "counts": counts,
            "reconciliations": sum(result.reconciled for result in self.actions.values()),
            "actions": [self.actions[sequence].to_json() for sequence in sorted(self.actions)],
            **({"drainedBrokersStillOwn": self.still_owned} if self.still_owned is not None else {}),
            **({"fences": self.fences} if self.fences is not None else {}),
        }


def default_holder(actor: str) -> str:
    """Who holds a claim, for the people reading a refusal: the actor, the host and the process."""
    return f"{actor} ({getpass.getuser()}@{socket.gethostname()} pid {os.getpid()})"


# --- the claim ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    plan_id: int
    token: str
    holder: str


class _ClusterBusyError(Exception):
    """Another plan holds the cluster's execution claim (rolls the claim's transaction back)."""


def claim_plan(store: Store, plan_id: int, holder: str, lease: timedelta, now: datetime) -> Claim:
    """Take the plan's execution claim and its cluster's, or raise PlanClaimedError naming who holds which and
    since when. One plan at a time sends to a cluster, whatever it is (a strategy plan, a drain, a fill, a
    rollback) and wherever it runs from, so two plans never move the same bundle at once."""
    token = secrets.token_hex(16)
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        cluster_id = plan.cluster_id
    try:
        with store.session() as session:
            taken = session.execute(
                update(Plan)
                .where(Plan.id == plan_id, or_(Plan.claim_token.is_(None), Plan.lease_expires_at < now))
                .values(claim_token=token, claimed_by=holder, claimed_at=now, lease_expires_at=now + lease)
                .execution_options(synchronize_session=False)
            ).rowcount
            if taken == 1:
                cluster_taken = session.execute(
                    update(Cluster)
                    .where(
                        Cluster.id == cluster_id,
                        or_(Cluster.execution_token.is_(None), Cluster.execution_lease_expires_at < now),
                    )
                    .values(
                        execution_token=token,
                        execution_plan_id=plan_id,
                        execution_holder=holder,
                        execution_lease_expires_at=now + lease,
                    )
                    .execution_options(synchronize_session=False)
                ).rowcount
                if cluster_taken != 1:
                    raise _ClusterBusyError
                plan = session.get(Plan, plan_id)
                session.add(
                    audit_event(
                        plan.cluster.name, holder, "plan.claimed", plan=plan_id, leaseSeconds=lease.total_seconds()
                    )
                )
                return Claim(plan_id, token, holder)
    except _ClusterBusyError:
        pass
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        cluster = plan.cluster
        if cluster.execution_token is not None and cluster.execution_plan_id != plan_id:
            other, held_by = cluster.execution_plan_id, cluster.execution_holder
            lease_end = cluster.execution_lease_expires_at
            until = as_utc(lease_end).isoformat() if lease_end else "?"
            message = (
                f"cluster {cluster.name} is being executed by plan {other} ({held_by}, lease until {until}); "
                f"plan {plan_id} waits for it to finish: this run sent nothing"
            )
            details: dict[str, Any] = {"heldBy": held_by, "otherPlan": other}
        else:
            since = as_utc(plan.claimed_at).isoformat() if plan.claimed_at else "?"
            until = as_utc(plan.lease_expires_at).isoformat() if plan.lease_expires_at else "?"
            message = (
                f"plan {plan_id} is being executed by {plan.claimed_by} since {since} (lease until {until}); "
                "this run sent nothing"
            )
            details = {"heldBy": plan.claimed_by, "since": since}
        session.add(audit_event(cluster.name, holder, "plan.claim-refused", plan=plan_id, **details))
    raise PlanClaimedError(message)


def _renew(session: Session, claim: Claim, lease: timedelta, now: datetime) -> None:
    """Extend both leases, inside the caller's transaction; fails when another run took either claim (or a run
    that finished released them)."""
    renewed = session.execute(
        update(Plan)
        .where(Plan.id == claim.plan_id, Plan.claim_token == claim.token)
        .values(lease_expires_at=now + lease)
        .execution_options(synchronize_session=False)
    ).rowcount
    renewed += session.execute(
        update(Cluster)
        .where(Cluster.execution_plan_id == claim.plan_id, Cluster.execution_token == claim.token)
        .values(execution_lease_expires_at=now + lease)
        .execution_options(synchronize_session=False)
    ).rowcount
    if renewed != 2:
        raise ClaimLostError(
            f"plan {claim.plan_id}: the execution claim was taken over by another run while this one was stopped; "
            "this run sends nothing more"
        )


def _release(session: Session, claim: Claim) -> None:
    session.execute(
        update(Plan)
        .where(Plan.id == claim.plan_id, Plan.claim_token == claim.token)
        .values(claim_token=None, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        update(Cluster)
        .where(Cluster.execution_plan_id == claim.plan_id, Cluster.execution_token == claim.token)
        .values(execution_token=None, execution_plan_id=None, execution_holder=None, execution_lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )


# --- the live cluster -----------------------------------------------------------------------------


class _Cluster:
    """Live checks on the cluster, through the admin client (reads only)."""

    def __init__(self, client: PulsarAdminClient, cluster: str) -> None:
        self.client = client
        self.cluster = cluster

    def active_brokers(self) -> list[str]:
        return self.client.active_brokers(self.cluster)

    def owner(self, bundle: str, brokers: list[str] | None = None) -> str | None:
        return self.ownership(bundle, brokers)[0]

    def ownership(self, bundle: str, brokers: list[str] | None = None) -> tuple[str | None, bool]:
        """The bundle's owner, and whether it lists the bundle as active: a broker unloading a bundle keeps listing
        it, inactive, while it closes its topics (Pulsar's NamespaceOwnershipStatus.is_active)."""
        for broker in brokers if brokers is not None else self.active_brokers():
            status = self.client.owned_bundles(self.cluster, broker).get(bundle)
            if status is not None:
                active = status.get("is_active", True) if isinstance(status, dict) else True
                return broker, active is not False
        return None, False

    @functools.cached_property
    def unload_timeout_seconds(self) -> float:
        """How long a broker may take over an unload it accepted (namespaceBundleUnloadingTimeoutMs, read from the
        runtime configuration; Pulsar's default where it cannot be read)."""
        try:
            configured = self.client.runtime_configuration().get("namespaceBundleUnloadingTimeoutMs")
            millis = float(configured) if configured not in (None, "") else DEFAULT_UNLOAD_TIMEOUT_SECONDS * 1000
        except (AdminError, ValueError, TypeError):
            millis = DEFAULT_UNLOAD_TIMEOUT_SECONDS * 1000
        if not millis >= 0:  # NaN or negative: not a timeout to wait on
            millis = DEFAULT_UNLOAD_TIMEOUT_SECONDS * 1000
        return min(millis / 1000, MAX_UNLOAD_TIMEOUT_SECONDS)

    def ranges(self, namespace: str) -> list[tuple[int, int]]:
        return list(itertools.pairwise(self.client.bundle_boundaries(namespace)))

    def bundle_exists(self, bundle: str) -> bool:
        name = BundleName.parse(bundle)
        return (name.range.lower, name.range.upper) in self.ranges(name.namespace)

    @functools.cached_property
    def destinations_keyed_by_range(self) -> bool:
        """Whether the brokers keep an unload's destination by bundle range alone (before Pulsar 4.2, #25518), so
        that two namespaces' bundles of one range share it. A version that cannot be read counts as the older
        rule: it can only make the executor wait."""
        try:
            version = PulsarVersion.parse_prefix(self.client.broker_version())
        except (AdminError, ValueError):
            return True
        return not version.destination_keyed_by_bundle_name


# --- the run --------------------------------------------------------------------------------------


class _Run:
    """One execution run of one plan, holding its claim."""

    def __init__(
        self,
        store: Store,
        live: _Cluster,
        claim: Claim,
        cluster: str,
        settings: ExecutorSettings,
        deadline: datetime,
        actor: str,
        now: Callable[[], datetime],
        sleep: Callable[[float], None],
        actions: Sequence[ExecutableAction] = (),
    ) -> None:
        self.store, self.live, self.claim, self.cluster = store, live, claim, cluster
        self.actions = tuple(actions)  # the plan's, in order
        self.settings, self.deadline, self.actor, self.now, self.sleep = settings, deadline, actor, now, sleep
        self.renewed = time.monotonic()

    # Every write renews the lease in the same transaction, so nothing is recorded (or sent) without the claim.
    def _write(self, change: Callable[[Session], Any]) -> Any:
        with self.store.session() as session:
            _renew(session, self.claim, self.settings.lease, self.now())
            result = change(session)
        self.renewed = time.monotonic()
        return result

    def keep_lease(self) -> None:
        """Renew the lease during long waits (a quarter of it at most between renewals)."""
        if time.monotonic() - self.renewed > self.settings.lease.total_seconds() / 4:
            self._write(lambda _session: None)

    def fence(self) -> None:
        """Immediately before a request leaves: renew the claim (it fails if another run took it while this one
        was paused) and refuse to send unless the lease outlasts the request by the margin, so no other run can
        take over while the request may still be on its way."""
        asked = time.monotonic()
        self._write(lambda _session: None)
        left = self.settings.lease.total_seconds() - (time.monotonic() - asked)
        if left < self.settings.request_timeout_seconds + SETTLE_MARGIN_SECONDS:
            raise ClaimLostError(
                f"plan {self.claim.plan_id}: {max(left, 0):.0f} s of the lease left, less than the request timeout "
                f"plus {SETTLE_MARGIN_SECONDS:.0f} s; this run sends nothing more"
            )

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
                kind=action.kind,
                bundle=action.bundle,
                source=action.source,
                destination=action.destination,
                **details,
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
                select(AuditEvent).where(AuditEvent.plan_id == self.claim.plan_id, AuditEvent.event.like("action.%"))
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
            self._write(
                lambda session: self._audit(session, "action.evidence-missing", action, missingAttempts=missing)
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
            self._audit(session, f"action.{status.value}", action, attempt=number, reason=reason)
            return row.id

        return self._write(change)

    def move(
        self,
        action: ExecutableAction,
        attempt_id: int,
        status: AttemptStatus,
        reason: str = "",
        *,
        request_ended: bool = False,
        **seen: Any,
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
            self._audit(session, f"action.{status.value}", action, attempt=row.attempt, reason=reason, **seen)
            if status in APPLIED_ATTEMPT_STATUSES:  # the bundle was unloaded: later plans skip it a while
                self._remember_unload(session, action)

        self._write(change)

    def _remember_unload(self, session: Session, action: ExecutableAction) -> None:
        """Unloaded bundles are skipped by later plans for the grace period (as Pulsar's leader does)."""
        if action.kind != "unload":
            return
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
            self.sleep(step)
            remaining -= step
            self.keep_lease()
        self.keep_lease()

    def wait_while_unloading(self, action: ExecutableAction) -> tuple[str | None, bool]:
        """The bundle's owner and whether it is active, waiting up to the broker's unload timeout while the source
        lists it as inactive (an unload in progress)."""
        owner, active = self.live.ownership(action.bundle)
        polls = math.ceil(self.live.unload_timeout_seconds / self.settings.verify_interval_seconds)
        while owner == action.source and not active and polls > 0:
            self.sleep(self.settings.verify_interval_seconds)
            polls -= 1
            self.keep_lease()
            owner, active = self.live.ownership(action.bundle)
        return owner, active

    def reconcile(self, action: ExecutableAction, attempt: ActionExecution) -> ActionResult | None:
        """Settle an attempt in doubt by looking at the cluster. Returns the action's result when the
        request took effect, None when the cluster shows it did not (a fresh attempt may then be sent)."""
        status = AttemptStatus(attempt.status)
        if status is AttemptStatus.SENDING:
            reason = "the run that was sending this request stopped before recording an answer"
            self.move(action, attempt.id, AttemptStatus.UNKNOWN, reason)
            status = AttemptStatus.UNKNOWN
        if status is AttemptStatus.SENT:
            # The broker accepted it: only the verification was cut short.
            result, reason = self.verify(action)
            self.move(action, attempt.id, result, reason)
            return ActionResult(action.sequence, result.value, reason, reconciled=True)
        self.settle(attempt)
        name = BundleName.parse(action.bundle)
        if action.kind == "split":
            ranges = self.live.ranges(name.namespace)
            inside = sorted({low for low, _ in ranges if name.range.lower < low < name.range.upper})
            if (name.range.lower, name.range.upper) not in ranges and inside:
                reason = f"the cluster shows the split took effect: boundaries {[f'0x{b:08x}' for b in inside]}"
                self.move(action, attempt.id, AttemptStatus.RECONCILED_APPLIED, reason, boundaries=inside)
                return ActionResult(action.sequence, AttemptStatus.RECONCILED_APPLIED.value, reason, reconciled=True)
            reason = "the cluster shows the split did not take effect: the bundle is unchanged"
            self.move(action, attempt.id, AttemptStatus.RECONCILED_NOT_APPLIED, reason, exists=not inside)
            return None
        owner, active = self.wait_while_unloading(action)
        if owner == action.source and not active:
            # Neither done nor not done: never resent while the source may still complete it.
            reason = f"the unload is still in progress: {action.source} lists {action.bundle} as inactive"
            self._write(lambda session: self._audit(session, "action.in-progress", action, reason=reason))
            return ActionResult(action.sequence, AttemptStatus.UNKNOWN.value, reason, reconciled=True)
        if owner == action.source or (owner is None and not self.live.bundle_exists(action.bundle)):
            reason = (
                f"the cluster shows the unload did not take effect: {action.bundle} is still on {owner}"
                if owner
                else f"{action.bundle} no longer exists; nothing to unload"
            )
            self.move(action, attempt.id, AttemptStatus.RECONCILED_NOT_APPLIED, reason, owner=owner)
            return None
        if owner is None or owner == action.destination or action.destination is None:
            where = f"now on {owner}" if owner else "unloaded, not owned yet: the next lookup assigns it"
            reason = f"the cluster shows the unload took effect: {where}"
            self.move(action, attempt.id, AttemptStatus.RECONCILED_APPLIED, reason, owner=owner)
            return ActionResult(action.sequence, AttemptStatus.RECONCILED_APPLIED.value, reason, reconciled=True)
        reason = f"the cluster shows the unload took effect, but Pulsar placed it on {owner}, not {action.destination}"
        self.move(action, attempt.id, AttemptStatus.PLACED_ELSEWHERE, reason, owner=owner)
        return ActionResult(action.sequence, AttemptStatus.PLACED_ELSEWHERE.value, reason, reconciled=True)

    def change_fences(self, fenced: list[str], unfenced: list[str]) -> dict[str, str]:
        """Fence the brokers a drain empties, lift the fences of those a fill or a rollback refills; audited. A
        failure is reported and the plan goes on: its moves do not depend on the fence."""
        try:
            results = fence(self.live.client, self.cluster, fenced, self.live.active_brokers()) if fenced else {}
            results |= unfence(self.live.client, self.cluster, unfenced) if unfenced else {}
        except AdminError as error:
            results = dict.fromkeys([*fenced, *unfenced], f"fence not changed: {error}")
        self._write(
            lambda session: session.add(
                audit_event(self.cluster, self.actor, "drain.fences", plan=self.claim.plan_id, fences=results)
            )
        )
        return results

    def still_owned(self, brokers: list[str]) -> dict[str, list[str]] | None:
        """What the drained brokers own now, heartbeat and SLA-monitor bundles (pinned by Pulsar) aside (a broker
        no longer active owns nothing); None when the cluster cannot be read. Audited either way."""
        try:
            active = self.live.active_brokers()
            owned: dict[str, list[str]] | None = {
                broker: sorted(
                    bundle
                    for bundle in self.live.client.owned_bundles(self.cluster, broker)
                    if not is_pinned_namespace(namespace_of(bundle))
                )
                if broker in active
                else []
                for broker in brokers
            }
            event, details = "drain.checked", {"stillOwned": owned}
        except AdminError as error:
            owned, event, details = None, "drain.check-failed", {"error": str(error)}
        self._write(
            lambda session: session.add(
                audit_event(self.cluster, self.actor, event, plan=self.claim.plan_id, **details)
            )
        )
        return owned

    def precheck(self, action: ExecutableAction) -> tuple[AttemptStatus, str] | None:
        """The action's preconditions on the live cluster: None when it may run, else the recorded outcome."""
        if not self.live.bundle_exists(action.bundle):
            return AttemptStatus.SKIPPED, "the bundle no longer exists (split or changed since the plan)"
        if action.kind == "split":
            return None
        brokers = self.live.active_brokers()
        owner = self.live.owner(action.bundle, brokers)
        if owner != action.source:
            return (
                AttemptStatus.SKIPPED,
                f"the bundle is owned by {owner or 'nobody'}, not the planned source {action.source}",
            )
        if action.destination is None:
            return None  # Pulsar places it (a strategy that names no destination, e.g. transfers turned off)
        if action.destination not in brokers:
            # Not done: a rerun once the destination is back performs it (the bundle is still on its source).
            return AttemptStatus.DEFERRED, f"destination {action.destination} is not an active broker"
        if fence_name(action.destination) in self.live.client.isolation_policies(self.cluster):
            # A plan made before (or beside) a drain must not refill the broker being emptied.
            return AttemptStatus.SKIPPED, f"destination {action.destination} is fenced: it is being drained"
        waiting = self.destination_waiting_on_the_range(action)
        if waiting is not None:
            # Not done: a rerun sends it once the other bundle is owned (its destination taken up).
            return AttemptStatus.DEFERRED, (
                f"{waiting} has the same range and nobody owns it yet: before Pulsar 4.2 a broker keeps an unload's "
                "destination by range alone, so this unload would replace that one's destination"
            )
        return None

    def destination_waiting_on_the_range(self, action: ExecutableAction) -> str | None:
        """Before Pulsar 4.2 the destination of an unload waits, keyed by bundle range, for the bundle's next
        lookup. Another bundle of this plan with the same range (another namespace's), unloaded to a destination
        and owned by nobody yet, still has its destination waiting: sending this one now would replace it."""
        if not self.live.destinations_keyed_by_range:
            return None
        key = BundleName.parse(action.bundle).range
        for other in self.actions:
            if other.kind != "unload" or other.destination is None or other.bundle == action.bundle:
                continue
            if BundleName.parse(other.bundle).range != key:
                continue
            if not any(AttemptStatus(a.status) in APPLIED_ATTEMPT_STATUSES for a in self.attempts(other)):
                continue
            if self.live.owner(other.bundle) is None and self.live.bundle_exists(other.bundle):
                return other.bundle
        return None

    def send(self, action: ExecutableAction) -> None:
        name = BundleName.parse(action.bundle)
        if action.kind == "split":
            self.live.client.split_bundle(
                name.namespace,
                str(name.range),
                algorithm=action.split_algorithm,
                positions=action.split_positions,
                unload=False,
            )
        else:
            self.live.client.unload_bundle(name.namespace, str(name.range), action.destination)

    def verify(self, action: ExecutableAction) -> tuple[AttemptStatus, str]:
        """The outcome of a request the broker accepted."""
        if action.kind == "split":
            if self.live.bundle_exists(action.bundle):
                return AttemptStatus.FAILED, "the split left the bundle in place (Pulsar found no valid split position)"
            return AttemptStatus.SUCCEEDED, ""
        deadline = time.monotonic() + self.settings.verify_timeout_seconds
        while True:
            failpoint("executor.verifying")
            owner = self.live.owner(action.bundle)
            if (owner is not None and owner != action.source) or time.monotonic() >= deadline:
                break
            self.sleep(self.settings.verify_interval_seconds)
            self.keep_lease()
        if owner == action.destination:
            return AttemptStatus.SUCCEEDED, ""
        if owner is None:
            where = "to the destination" if action.destination else ""
            return (
                AttemptStatus.SUCCEEDED,
                f"unloaded; not owned yet: the next client lookup assigns it {where}".strip(),
            )
        if owner == action.source:
            return AttemptStatus.PLACED_ELSEWHERE, "re-acquired by the source broker"
        if action.destination is None:
            return AttemptStatus.SUCCEEDED, f"Pulsar placed it on {owner}"
        reason = f"Pulsar placed it on {owner}, not {action.destination}"
        if self.live.destinations_keyed_by_range:
            reason += (
                " (before Pulsar 4.2 a destination is kept by range: another namespace's unload may have taken it)"
            )
        return AttemptStatus.PLACED_ELSEWHERE, reason

    def attempt(self, action: ExecutableAction) -> tuple[ActionResult, bool]:
        """One fresh attempt: re-check, record the intent, send, record the answer, verify. Returns the
        result and whether another attempt may follow (only after a failure that proves nothing was done)."""
        checked = self.precheck(action)
        if checked is not None:
            status, reason = checked
            self.new_attempt(action, status, reason)
            return ActionResult(action.sequence, status.value, reason), False
        if self.now() > self.deadline:
            return ActionResult(action.sequence, NOT_RUN, "the plan expired"), False
        attempt_id = self.new_attempt(action, AttemptStatus.SENDING)
        failpoint("executor.attempt-recorded")
        self.fence()
        try:
            self.send(action)
        except AdminError as error:
            failpoint("executor.answered")
            if not error.may_have_applied:
                self.move(action, attempt_id, AttemptStatus.FAILED, str(error), request_ended=True)
                return ActionResult(action.sequence, AttemptStatus.FAILED.value, str(error)), True
            reason = f"no answer that settles it: {error}"
            self.move(action, attempt_id, AttemptStatus.UNKNOWN, reason, request_ended=True)
            [row] = [row for row in self.attempts(action) if row.id == attempt_id]
            settled = self.reconcile(action, row)
            if settled is not None:
                return settled, False
            return ActionResult(action.sequence, AttemptStatus.RECONCILED_NOT_APPLIED.value, str(error), True), True
        failpoint("executor.answered")
        self.move(action, attempt_id, AttemptStatus.SENT, request_ended=True)
        failpoint("executor.sent-recorded")
        status, reason = self.verify(action)
        self.move(action, attempt_id, status, reason)
        return ActionResult(action.sequence, status.value, reason), status is AttemptStatus.FAILED

    def run_action(self, action: ExecutableAction) -> ActionResult | None:
        """The action's result in this run; None when it was already done (nothing to count or pace)."""
        attempts = self.attempts(action)
        done = next((a for a in attempts if a.status in DONE_ATTEMPT_STATUSES), None)
        if done is not None:
            return None
        self.check_evidence(action, attempts)
        result = None
        if attempts and attempts[-1].status in IN_DOUBT_ATTEMPT_STATUSES:
            result = self.reconcile(action, attempts[-1])
            if result is not None:
                return result
            if self.now() > self.deadline:
                return ActionResult(action.sequence, NOT_RUN, "the plan expired", reconciled=True)
        for _ in range(self.settings.attempts_per_action):
            result, again = self.attempt(action)
            if not again:
                break
        return result


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


def _done_result(action: ExecutableAction, attempts: list[ActionExecution]) -> ActionResult:
    done = next(a for a in attempts if a.status in DONE_ATTEMPT_STATUSES)
    return ActionResult(action.sequence, done.status, done.error or "")


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
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
) -> ExecutionReport:
    """Execute an approved plan (or resume one a stopped run left), holding its claim and its cluster's throughout.

    What the approval bound holds whatever the entry point: `settings` may shorten its TTL and resume window, never
    extend them, and actions start only within its execution windows unless `ignore_windows` (audited).
    `claim_wait`: seconds to wait for a claim another run holds (a retried task after a crash waits for
    the dead run's lease to expire); without it, a claimed plan or cluster is refused at once.
    """
    holder = holder or default_holder(actor)
    with store.session() as session:
        plan = session.get(Plan, plan_id)
        if plan is None:
            raise NotFoundError(f"unknown plan {plan_id}")
        cluster = plan.cluster.name
        approval = session.scalar(select(Approval).where(Approval.plan_id == plan_id))
        if approval is None or approval.decision != PlanStatus.APPROVED.value:
            raise InputError(f"plan {plan_id} is not approved")
        if PlanStatus(plan.status) not in EXECUTABLE_PLAN_STATUSES:
            raise InputError(f"plan {plan_id} is {plan.status}; only an approved or partly executed plan can run")
        binding = ExecutionBinding.recorded(
            approval.ttl_seconds, approval.resume_window_seconds, approval.execution_windows
        )
    settings = binding.bound(settings or ExecutorSettings())
    windows = () if ignore_windows else binding.windows
    if not is_open(windows, now()):
        _refuse_outside_windows(store, cluster, actor, plan_id, windows, now())
    if ignore_windows and binding.windows:
        with store.session() as session:
            session.add(
                audit_event(
                    cluster,
                    actor,
                    "plan.windows-ignored",
                    plan=plan_id,
                    windows=[window.describe() for window in binding.windows],
                    open=is_open(binding.windows, now()),
                )
            )

    give_up = time.monotonic() + claim_wait
    while True:
        try:
            claim = claim_plan(store, plan_id, holder, settings.lease, now())
            break
        except PlanClaimedError:
            if time.monotonic() >= give_up:
                raise
            sleep(min(5.0, max(give_up - time.monotonic(), 0.1)))
    failpoint("executor.claimed")
    report = ExecutionReport(plan_id, PlanStatus.EXECUTING.value, claimed_by=holder)
    try:
        with store.session() as session:
            plan = session.get(Plan, plan_id)
            if PlanStatus(plan.status) not in EXECUTABLE_PLAN_STATUSES:  # ended (e.g. rolled back) meanwhile
                raise InputError(f"plan {plan_id} is {plan.status}; only an approved or partly executed plan can run")
            created = as_utc(plan.created_at)
            started = plan.execution_started_at
            # The rows read here are the rows that run: the approval must be for exactly these.
            actions = executable_actions(session, plan_id)
            maintenance = plan.details.get("maintenance") or {}
            drained = maintenance.get("brokers", []) if maintenance.get("mode") == "drain" else []
            # Fences to lift: a fill's brokers, or the brokers of the drain a rollback undoes.
            unfenced = maintenance.get("brokers", []) if maintenance.get("mode") == "fill" else []
            rolls_back = maintenance.get("rollsBack") if maintenance.get("mode") == "rollback" else None
            if rolls_back is not None:
                undone = (session.get(Plan, rolls_back).details.get("maintenance")) or {}
                unfenced = undone.get("brokers", []) if undone.get("mode") == "drain" else []
            matches = rows_hash(session, plan_id) == approval.actions_hash == plan.actions_hash
            if not matches:
                session.add(audit_event(cluster, actor, "plan.hash-mismatch", plan=plan_id, approver=approval.approver))
        if not matches:
            raise InputError(f"plan {plan_id}: the stored actions differ from the approved ones; refusing to run")
        # A new execution must start within the TTL; a started one may run, or be resumed, for the window more.
        deadline = created + settings.ttl + settings.resume_window
        expired = now() > (created + settings.ttl if started is None else deadline)
        run = _Run(store, _Cluster(client, cluster), claim, cluster, settings, deadline, actor, now, sleep, actions)
        if expired:
            return _expire(run, report, actions, created, settings)

        def begin(session: Session) -> None:
            plan = session.get(Plan, plan_id)
            if plan.status != PlanStatus.EXECUTING.value:
                plan.status = advance(plan.status, PlanStatus.EXECUTING, f"plan {plan_id}").value
            plan.execution_started_at = plan.execution_started_at or now()
            if rolls_back is not None:
                _end_rolled_back_plan(session, cluster, actor, rolls_back, plan_id)
            session.add(
                audit_event(
                    cluster,
                    actor,
                    "plan.execution-started",
                    plan=plan_id,
                    approver=approval.approver,
                    resumed=started is not None,
                    claimedBy=holder,
                    # Which pacing, budgets and timeouts this run used (bounded by the approval), wherever each came
                    # from, and whether the approved windows were set aside.
                    settings=settings.model_dump(mode="json"),
                    binding=binding.model_dump(mode="json"),
                    ignoreWindows=ignore_windows,
                )
            )

        run._write(begin)
        if drained or unfenced:
            report.fences = run.change_fences(drained, unfenced)
        failures = performed = 0
        pause = 60.0 / settings.actions_per_minute if settings.actions_per_minute > 0 else 0.0
        # The pace holds across runs: a rerun right after a stopped one waits as the stopped run would have.
        last_start = _last_request_started(store, plan_id)
        if pause and last_start is not None and (wait := (last_start - now()).total_seconds() + pause) > 0:
            sleep(min(wait, pause))
        for action in actions:
            attempts = run.attempts(action)
            if any(a.status in DONE_ATTEMPT_STATUSES for a in attempts):
                report.actions[action.sequence] = _done_result(action, attempts)
                continue
            in_doubt = bool(attempts) and attempts[-1].status in IN_DOUBT_ATTEMPT_STATUSES
            # What is in doubt is always settled, whatever the limits: that sends nothing unless it must.
            if not in_doubt and (failures >= settings.max_failures or performed >= settings.max_actions):
                reason = "stopped: too many failures" if failures else "max actions per run reached"
                report.actions[action.sequence] = ActionResult(action.sequence, NOT_RUN, reason)
                continue
            if not in_doubt and not is_open(windows, now()):
                opening = next_opening(windows, now())
                closed = f"the approved execution windows closed (next opening {opening:%Y-%m-%d %H:%M} UTC)"
                report.actions[action.sequence] = ActionResult(action.sequence, NOT_RUN, closed)
                continue
            try:
                result = run.run_action(action)
            except AdminError as error:
                # The cluster could not be read: what is in doubt stays in doubt for the next run.
                result = ActionResult(action.sequence, AttemptStatus.FAILED.value, f"cannot check the cluster: {error}")
            report.actions[action.sequence] = result or _done_result(action, run.attempts(action))
            failpoint("executor.action-finished")
            performed += 1
            if report.actions[action.sequence].status in FAILURES:
                failures += 1
            if pause and action is not actions[-1]:
                sleep(pause)
        if drained:
            report.still_owned = run.still_owned(drained)
        return _finish(run, report, deadline)
    finally:
        with store.session() as session:
            _release(session, claim)


def _refuse_outside_windows(
    store: Store, cluster: str, actor: str, plan_id: int, windows: Sequence[ExecutionWindow], now: datetime
) -> NoReturn:
    opening = next_opening(windows, now)
    with store.session() as session:
        session.add(
            audit_event(
                cluster,
                actor,
                "plan.outside-windows",
                plan=plan_id,
                windows=[window.describe() for window in windows],
                opens=opening.isoformat() if opening else None,
            )
        )
    raise InputError(
        f"plan {plan_id} may execute only within its approved execution windows "
        f"({'; '.join(window.describe() for window in windows)}); the next opens at {opening:%Y-%m-%d %H:%M} UTC. "
        "This run sent nothing (--ignore-windows overrides them, audited)"
    )


def _end_rolled_back_plan(session: Session, cluster: str, actor: str, original_id: int, rollback_id: int) -> None:
    """A rollback that starts ends the plan it undoes: rolled-back is final, so the original (a partial plan
    included) can never be resumed to send its remaining moves over the rollback's. A plan another rollback
    already ended is not undone twice."""
    original = session.get(Plan, original_id)
    if original.status == PlanStatus.ROLLED_BACK.value:
        ended_by = session.scalar(
            select(AuditEvent)
            .where(AuditEvent.plan_id == original_id, AuditEvent.event == "plan.rolled-back")
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
    session.add(audit_event(cluster, actor, "plan.rolled-back", plan=original_id, rolledBackBy=rollback_id))


def _finish(run: _Run, report: ExecutionReport, deadline: datetime) -> ExecutionReport:
    failpoint("executor.finishing")
    statuses = [result.status for result in report.actions.values()]
    if (
        statuses
        and all(status in DONE_ATTEMPT_STATUSES for status in statuses)
        and not all(status == AttemptStatus.SKIPPED.value for status in statuses)
    ):
        final = PlanStatus.EXECUTED
    elif run.now() > deadline and any(status == NOT_RUN for status in statuses):
        final = PlanStatus.EXPIRED
    else:
        final = PlanStatus.PARTIAL
    report.status = final.value

    def finish(session: Session) -> None:
        plan = session.get(Plan, run.claim.plan_id)
        plan.status = advance(plan.status, final, f"plan {plan.id}").value
        session.add(
            audit_event(
                run.cluster,
                run.actor,
                "plan.execution-finished",
                plan=plan.id,
                status=final.value,
                results=report.to_json(),
            )
        )

    run._write(finish)
    return report


def _expire(
    run: _Run, report: ExecutionReport, actions: list[ExecutableAction], created: datetime, settings: ExecutorSettings
) -> ExecutionReport:
    """Past the TTL (and the resume window): send nothing, but settle what is in doubt so the record is true."""
    for action in actions:
        attempts = run.attempts(action)
        if any(a.status in DONE_ATTEMPT_STATUSES for a in attempts):
            report.actions[action.sequence] = _done_result(action, attempts)
        elif attempts and attempts[-1].status in IN_DOUBT_ATTEMPT_STATUSES:
            settled = run.reconcile(action, attempts[-1])
            report.actions[action.sequence] = settled or ActionResult(
                action.sequence, NOT_RUN, "the plan expired", reconciled=True
            )
        else:
            report.actions[action.sequence] = ActionResult(action.sequence, NOT_RUN, "the plan expired")
    report.status = PlanStatus.EXPIRED.value

    def expire(session: Session) -> None:
        plan = session.get(Plan, run.claim.plan_id)
        plan.status = advance(plan.status, PlanStatus.EXPIRED, f"plan {plan.id}").value
        session.add(
            audit_event(
                run.cluster,
                run.actor,
                "plan.expired",
                plan=plan.id,
                ttlSeconds=settings.ttl.total_seconds(),
                resumeWindowSeconds=settings.resume_window.total_seconds(),
                createdAt=created.isoformat(),
            )
        )

    run._write(expire)
    return report
