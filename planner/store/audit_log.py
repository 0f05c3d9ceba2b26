"""The audit log's reads, and events written on their own (most are written with the change they record)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select

from planner.store.database import Store
from planner.store.models import AuditEvent, Cluster


@dataclass(frozen=True, slots=True)
class AuditRecord:
    at: datetime
    cluster: str | None
    actor: str
    event: str
    plan_id: int | None
    details: dict[str, Any]  # the event's own fields, which differ per event

    @classmethod
    def of(cls, row: AuditEvent) -> AuditRecord:
        return cls(row.at, row.cluster, row.actor, row.event, row.plan_id, row.details)


def record_events(store: Store, *events: AuditEvent) -> None:
    """Events (`planner.store.models.audit_event`) in one transaction: all of them or none."""
    with store.session() as session:
        session.add_all(events)


def plan_trail(store: Store, plan_id: int) -> list[AuditRecord]:
    """Every event about a plan, in the order they were recorded."""
    with store.session() as session:
        return [
            AuditRecord.of(row)
            for row in session.scalars(select(AuditEvent).where(AuditEvent.plan_id == plan_id).order_by(AuditEvent.id))
        ]


def cluster_events(store: Store, cluster: str, event: str, since: datetime) -> list[AuditRecord]:
    """A cluster's events of one kind since a time, oldest first."""
    with store.session() as session:
        return [
            AuditRecord.of(row)
            for row in session.scalars(
                select(AuditEvent)
                .where(AuditEvent.cluster == cluster, AuditEvent.event == event, AuditEvent.at >= since)
                .order_by(AuditEvent.at)
            )
        ]


def _latest(cluster: str, event: str) -> Select[tuple[AuditEvent]]:
    return (
        select(AuditEvent)
        .where(AuditEvent.cluster == cluster, AuditEvent.event == event)
        .order_by(AuditEvent.id.desc())
        .limit(1)
    )


def latest_cluster_event(store: Store, cluster: str, event: str) -> AuditRecord | None:
    """A cluster's newest event of one kind (a state kept as the events that changed it)."""
    with store.session() as session:
        row = session.scalar(_latest(cluster, event))
        return AuditRecord.of(row) if row is not None else None


def record_after_latest(
    store: Store, cluster: str, event: str, decide: Callable[[AuditRecord | None], AuditEvent | None]
) -> AuditEvent | None:
    """Records the event `decide` makes of the cluster's newest `event` (None: nothing to record), one caller at a
    time per cluster: the read and the write share a transaction holding the cluster's row (on SQLite, the whole
    database), so two callers deciding at once see each other's event and a state kept as events changes once."""
    with store.session() as session:
        session.scalar(select(Cluster.id).where(Cluster.name == cluster).with_for_update())
        row = session.scalar(_latest(cluster, event))
        recorded = decide(AuditRecord.of(row) if row is not None else None)
        if recorded is not None:
            session.add(recorded)
        return recorded
