"""The execution claim: one run per plan and one plan per cluster sends, and only while its lease holds.

A run claims the plan and its cluster together, with a conditional UPDATE that succeeds only when nobody holds an
unexpired lease (the row count decides, on SQLite and PostgreSQL alike); a second run sends nothing and is told who
holds which and since when. While it runs, the holder renews both leases in the same transaction as every record
it writes (`Lease.write`), and immediately before each request it renews them again and refuses to send unless the
lease outlasts the request (`Lease.fence_request`): a run that was paused past its lease and taken over fails there
and sends nothing more. A crashed run's lease expires, and the plan can be resumed.
"""

from __future__ import annotations

import getpass
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from planner.errors import InputError, NotFoundError
from planner.execute.events import ExecutionEvent
from planner.store.database import Store
from planner.store.models import Cluster, Plan, as_utc, audit_event

T = TypeVar("T")


class PlanClaimedError(InputError):
    """Another run holds the plan's execution claim; this run sent nothing."""


class ClaimLostError(InputError):
    """The lease ran out and another run claimed the plan (or the cluster), or too little of it is left to
    send: stop at once, sending nothing more."""


@dataclass(frozen=True, slots=True)
class Claim:
    plan_id: int
    token: str
    holder: str


class _ClusterBusyError(Exception):
    """Another plan holds the cluster's execution claim (rolls the claim's transaction back)."""


def default_holder(actor: str) -> str:
    """Who holds a claim, for the people reading a refusal: the actor, the host and the process."""
    return f"{actor} ({getpass.getuser()}@{socket.gethostname()} pid {os.getpid()})"


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
            if _take(session, plan_id, cluster_id, token, holder, lease, now):
                plan = session.get(Plan, plan_id)
                session.add(
                    audit_event(
                        plan.cluster.name,
                        holder,
                        ExecutionEvent.CLAIMED,
                        plan=plan_id,
                        leaseSeconds=lease.total_seconds(),
                    )
                )
                return Claim(plan_id, token, holder)
    except _ClusterBusyError:
        pass
    _refuse(store, plan_id, holder)


def _take(
    session: Session, plan_id: int, cluster_id: int, token: str, holder: str, lease: timedelta, now: datetime
) -> bool:
    """Take the plan's claim and then its cluster's, in the caller's transaction: False when another run holds the
    plan; _ClusterBusyError (rolling the plan's claim back) when another plan holds the cluster."""
    taken = session.execute(
        update(Plan)
        .where(Plan.id == plan_id, or_(Plan.claim_token.is_(None), Plan.lease_expires_at < now))
        .values(claim_token=token, claimed_by=holder, claimed_at=now, lease_expires_at=now + lease)
        .execution_options(synchronize_session=False)
    ).rowcount
    if taken != 1:
        return False
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
    return True


def _refuse(store: Store, plan_id: int, holder: str) -> NoReturn:
    """Audit and raise the refusal, naming who holds the cluster's claim or the plan's, and since when."""
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
        session.add(audit_event(cluster.name, holder, ExecutionEvent.CLAIM_REFUSED, plan=plan_id, **details))
    raise PlanClaimedError(message)


def wait_for_claim(
    store: Store,
    plan_id: int,
    holder: str,
    lease: timedelta,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    wait_seconds: float,
) -> Claim:
    """Claim the plan, retrying for up to `wait_seconds` while another run holds it (a retried task after a crash
    waits for the dead run's lease to expire); the last refusal is raised."""
    give_up = time.monotonic() + wait_seconds
    while True:
        try:
            return claim_plan(store, plan_id, holder, lease, now())
        except PlanClaimedError:
            if time.monotonic() >= give_up:
                raise
            sleep(min(5.0, max(give_up - time.monotonic(), 0.1)))


def renew(session: Session, claim: Claim, lease: timedelta, now: datetime) -> None:
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


def release(session: Session, claim: Claim) -> None:
    """Give both claims up (a claim another run took over is left alone)."""
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


class Lease:
    """A claim held through a run. Every write renews it in the same transaction, so nothing is recorded (or sent)
    without the claim."""

    def __init__(self, store: Store, claim: Claim, length: timedelta, now: Callable[[], datetime]) -> None:
        self.store, self.claim, self.length, self.now = store, claim, length, now
        self.renewed = time.monotonic()

    def write(self, change: Callable[[Session], T]) -> T:
        """Run `change` in a transaction that renews the lease first (and fails, changing nothing, without it)."""
        with self.store.session() as session:
            renew(session, self.claim, self.length, self.now())
            result = change(session)
        self.renewed = time.monotonic()
        return result

    def keep(self) -> None:
        """Renew the lease during long waits (a quarter of it at most between renewals)."""
        if time.monotonic() - self.renewed > self.length.total_seconds() / 4:
            self.write(lambda _session: None)

    def fence_request(self, request_timeout_seconds: float, margin_seconds: float) -> None:
        """Immediately before a request leaves: renew the claim (it fails if another run took it while this one
        was paused) and refuse to send unless the lease outlasts the request by the margin, so no other run can
        take over while the request may still be on its way."""
        asked = time.monotonic()
        self.write(lambda _session: None)
        left = self.length.total_seconds() - (time.monotonic() - asked)
        if left < request_timeout_seconds + margin_seconds:
            raise ClaimLostError(
                f"plan {self.claim.plan_id}: {max(left, 0):.0f} s of the lease left, less than the request timeout "
                f"plus {margin_seconds:.0f} s; this run sends nothing more"
            )
