"""The planner's tables (SQLAlchemy 2.x typed models). Alembic migrations create them.

The database holds state and history: clusters, snapshot registry, strategy state, plans and their
actions, approvals, execution attempts, recently unloaded bundles, and an audit log; approvals, attempts and the
audit log are append-only (the database refuses to delete them or rewrite what they record).
Bulk samples live in the Parquet dataset, raw responses in compressed archives.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """A time read from the store, in UTC (SQLite gives it back without its zone)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class Cluster(Base):
    __tablename__ = "clusters"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    admin_url: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    # The cluster's execution claim (planner.execute.executor): one plan at a time sends to a cluster.
    execution_token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    execution_plan_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    execution_holder: Mapped[str | None] = mapped_column(String(300), nullable=True)
    execution_lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Snapshot(Base):
    """One collection of a cluster's load: what was fetched, from whom, and what was missing."""

    __tablename__ = "snapshots"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"), index=True)
    taken_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    brokers: Mapped[int] = mapped_column(Integer)
    bundles: Mapped[int] = mapped_column(Integer)
    partial: Mapped[bool] = mapped_column(Boolean)
    # broker id -> error of the brokers that were listed as active but could not be read
    missing_brokers: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The brokers' loadManagerClassName (None: not known, e.g. the runtime configuration was not readable).
    load_manager: Mapped[str | None] = mapped_column(String(300), nullable=True)
    archive_path: Mapped[str] = mapped_column(String(1000))
    leader: Mapped[str | None] = mapped_column(String(300), nullable=True)
    # planner.lifecycle.SnapshotStatus: readers see only published snapshots.
    status: Mapped[str] = mapped_column(String(20), default="published", index=True)
    # When the collect of a staged snapshot was last known alive: set on staging, renewed while it runs. Another
    # collect abandons the row only once this (or, for rows staged before it existed, taken_at) is old enough.
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    cluster: Mapped[Cluster] = relationship()


class StrategyState(Base):
    """A strategy's state per cluster (AvgShedder hit counters, ...), versioned for optimistic concurrency."""

    __tablename__ = "strategy_states"
    __table_args__ = (UniqueConstraint("cluster_id", "strategy"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"))
    strategy: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)


class Plan(Base):
    __tablename__ = "plans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"), index=True)
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("snapshots.id"), nullable=True)
    # Identifies the run that produced the plan, so a retried commit of the same run is a no-op.
    run_key: Mapped[str] = mapped_column(String(300), unique=True)
    strategy: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now, index=True)
    status: Mapped[str] = mapped_column(String(30), default="pending", index=True)
    actions_hash: Mapped[str] = mapped_column(String(64))
    state_version: Mapped[int] = mapped_column(Integer)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The execution claim (planner.execute.executor): only the holder of an unexpired lease sends actions.
    claim_token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    claimed_by: Mapped[str | None] = mapped_column(String(300), nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    execution_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    cluster: Mapped[Cluster] = relationship()
    actions: Mapped[list[PlanAction]] = relationship(order_by="PlanAction.sequence", back_populates="plan")


class PlanAction(Base):
    __tablename__ = "plan_actions"
    __table_args__ = (UniqueConstraint("plan_id", "sequence"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id"), index=True)
    sequence: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))  # "split" or "unload"
    bundle: Mapped[str] = mapped_column(String(500))
    source: Mapped[str] = mapped_column(String(300))
    destination: Mapped[str | None] = mapped_column(String(300), nullable=True)
    split_algorithm: Mapped[str | None] = mapped_column(String(100), nullable=True)
    split_positions: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    traffic: Mapped[float] = mapped_column(Float, default=0.0)
    reason: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    plan: Mapped[Plan] = relationship(back_populates="actions")


class Approval(Base):
    """A decision on a plan. Append-only: the migration installs triggers that refuse UPDATE and DELETE."""

    __tablename__ = "approvals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id"), unique=True)
    decision: Mapped[str] = mapped_column(String(20))  # "approved" or "rejected"
    approver: Mapped[str | None] = mapped_column(String(300), nullable=True)  # display name
    approver_id: Mapped[str | None] = mapped_column(String(300), nullable=True)  # the auth manager's user id
    source: Mapped[str] = mapped_column(String(50), default="airflow")  # where the decision was taken
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    actions_hash: Mapped[str] = mapped_column(String(64))
    # What the decision binds: an executor may shorten the TTL and resume window, never extend them, and runs
    # only within these windows (None: decided before they were bound; the executor's settings apply).
    ttl_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    resume_window_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    execution_windows: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)


class ActionExecution(Base):
    """One attempt at one action; retries add rows, so the history of every attempt is kept. The migration's
    triggers refuse DELETE, and UPDATE except of the outcome (status, error, finish times) of an attempt in doubt."""

    __tablename__ = "action_executions"
    __table_args__ = (UniqueConstraint("action_id", "attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("plan_actions.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # When the request's answer came or was given up on: the settle time of an attempt in doubt counts from it.
    request_ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    status: Mapped[str] = mapped_column(String(30))  # planner.lifecycle.AttemptStatus
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class RecentlyUnloaded(Base):
    __tablename__ = "recently_unloaded"
    __table_args__ = (UniqueConstraint("cluster_id", "bundle"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"))
    bundle: Mapped[str] = mapped_column(String(500))
    unloaded_at_millis: Mapped[int] = mapped_column(BigInteger)


class AuditEvent(Base):
    """Append-only: the migration installs triggers that refuse UPDATE and DELETE."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now, index=True)
    cluster: Mapped[str | None] = mapped_column(String(200), nullable=True)
    actor: Mapped[str] = mapped_column(String(300))
    event: Mapped[str] = mapped_column(String(100))
    plan_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


def audit_event(cluster: str | None, actor: str, event: str, **details: Any) -> AuditEvent:
    """An audit row; one about a plan (a `plan` detail) is linked to it, so the plan's trail reads by index."""
    return AuditEvent(cluster=cluster, actor=actor, event=event, plan_id=details.get("plan"), details=details)


class PlanMeasurement(Base):
    """The cluster's load measured after a plan ran: per broker score, msg/s and bytes/s."""

    __tablename__ = "plan_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id"), index=True)
    snapshot_id: Mapped[int] = mapped_column(ForeignKey("snapshots.id"))
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    brokers: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class KnownBroker(Base):
    """A broker the collects have seen in a cluster (`planner.store.scale_events`): when first and last, and how many
    times it joined. A broker seen again tells a restart (known) from a join (new, or back after a long absence)."""

    __tablename__ = "known_brokers"
    __table_args__ = (UniqueConstraint("cluster_id", "broker"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"), index=True)
    broker: Mapped[str] = mapped_column(String(300))
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    first_snapshot_id: Mapped[int] = mapped_column(Integer)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_snapshot_id: Mapped[int] = mapped_column(Integer)
    joins: Mapped[int] = mapped_column(Integer, default=0)  # 0: there at the cluster's first observed snapshot


class ScaleEvent(Base):
    """A broker that joined, or one marked for removal, and the plan proposed for it. Its key is unique per cluster,
    so an event observed again (a retried collect, two at once, a repeated mark) is recorded once."""

    __tablename__ = "scale_events"
    __table_args__ = (UniqueConstraint("cluster_id", "event_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("clusters.id"), index=True)
    event_key: Mapped[str] = mapped_column(String(400))
    kind: Mapped[str] = mapped_column(String(20))  # planner.lifecycle.ScaleEventKind
    broker: Mapped[str] = mapped_column(String(300))
    state: Mapped[str] = mapped_column(String(20), index=True)  # planner.lifecycle.ScaleEventState
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    recorded_by: Mapped[str] = mapped_column(String(300))  # the collect, or the person who marked the broker
    reason: Mapped[str] = mapped_column(Text, default="")
    snapshot_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # a join: the snapshot that showed it
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    run_id: Mapped[str | None] = mapped_column(String(300), nullable=True)  # the maintenance DAG run proposed
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id"), nullable=True)  # the latest plan for it
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class StopRequest(Base):
    """An operator's request to stop a plan's execution between two actions (`pulsar-rebalance stop`). The executor
    reads the open one before each action; the run that honours it, or that ends first, closes it (`outcome`)."""

    __tablename__ = "stop_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id"), index=True)
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    requested_by: Mapped[str] = mapped_column(String(300))
    reason: Mapped[str] = mapped_column(Text, default="")
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The plan status the closing run ended with: `stopped` when it honoured the request, another when it ended first.
    outcome: Mapped[str | None] = mapped_column(String(30), nullable=True)
