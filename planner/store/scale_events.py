"""The brokers each cluster was seen with, and its scale events: a broker that joined, one marked for removal, and
the plan proposed for each (`planner.plan.scale_events` decides what a snapshot shows; this records it).

Every write locks the cluster's row first (PostgreSQL; SQLite's transactions are serial), so two collects observing
at once, or a collect and a `brokers mark-removal`, see each other's rows: the second finds the broker known, or
the mark open. Each event's key is unique per cluster besides (`event_key`), so an event is one row whatever runs
twice. States move through `planner.lifecycle.advance` (`ScaleEventState`), and every change is audited with the
change, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from planner.errors import InputError, NotFoundError
from planner.lifecycle import ScaleEventKind, ScaleEventState, advance
from planner.store.database import Store
from planner.store.models import Cluster, KnownBroker, ScaleEvent, as_utc, audit_event, utc_now

# An event in one of these still waits for its plan.
OPEN_STATES = frozenset({ScaleEventState.DETECTED, ScaleEventState.PROPOSED})
# A removal mark in one of these holds (`brokers unmark` withdraws it).
MARKED_STATES = frozenset({ScaleEventState.DETECTED, ScaleEventState.PROPOSED, ScaleEventState.PLANNED})


@dataclass(frozen=True, slots=True)
class BrokerSighting:
    """A known broker: when the collects first and last saw it, and how many times it joined."""

    broker: str
    first_seen: datetime
    last_seen: datetime
    joins: int  # 0: there at the cluster's first observed snapshot
    first_snapshot: int = 0
    last_snapshot: int = 0

    @classmethod
    def of(cls, row: KnownBroker) -> BrokerSighting:
        return cls(
            row.broker,
            as_utc(row.first_seen_at),
            as_utc(row.last_seen_at),
            row.joins,
            row.first_snapshot_id,
            row.last_snapshot_id,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "firstSeen": self.first_seen.isoformat(),
            "firstSnapshot": self.first_snapshot,
            "lastSeen": self.last_seen.isoformat(),
            "lastSnapshot": self.last_snapshot,
            "joins": self.joins,
        }


@dataclass(frozen=True, slots=True)
class JoinSighting:
    broker: str
    generation: int  # the how-many-th join of this broker: 1 for one never seen
    absent_seconds: float | None = None  # a broker back after a long absence: how long it was gone


@dataclass(frozen=True, slots=True)
class Sightings:
    """What one snapshot shows against the known brokers (`planner.plan.scale_events.observe`)."""

    baseline: bool  # the cluster's first observed snapshot: its brokers become known, none joined
    new: tuple[str, ...] = ()  # brokers to add to the known ones
    seen: tuple[str, ...] = ()  # known brokers whose last sighting moves to this snapshot
    joins: tuple[JoinSighting, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredScaleEvent:
    id: int
    cluster: str
    kind: ScaleEventKind
    broker: str
    state: ScaleEventState
    recorded_at: datetime
    recorded_by: str
    reason: str
    snapshot_id: int | None
    updated_at: datetime
    run_id: str | None
    plan_id: int | None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, row: ScaleEvent, cluster: str) -> StoredScaleEvent:
        return cls(
            row.id,
            cluster,
            ScaleEventKind(row.kind),
            row.broker,
            ScaleEventState(row.state),
            as_utc(row.recorded_at),
            row.recorded_by,
            row.reason,
            row.snapshot_id,
            as_utc(row.updated_at),
            row.run_id,
            row.plan_id,
            dict(row.details or {}),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cluster": self.cluster,
            "kind": self.kind.value,
            "broker": self.broker,
            "state": self.state.value,
            "recordedAt": self.recorded_at.isoformat(),
            "recordedBy": self.recorded_by,
            "reason": self.reason,
            "snapshot": self.snapshot_id,
            "updatedAt": self.updated_at.isoformat(),
            "run": self.run_id,
            "plan": self.plan_id,
            **({"details": self.details} if self.details else {}),
        }


def event_key(kind: ScaleEventKind, broker: str, generation: int) -> str:
    """The event's key, unique per cluster: the broker's how-many-th join, or how-many-th removal mark."""
    return f"{kind.value}:{broker}:{generation}"


def _locked_cluster(session: Session, cluster: str) -> Cluster:
    row = session.scalar(select(Cluster).where(Cluster.name == cluster).with_for_update())
    if row is None:
        raise NotFoundError(f"cluster {cluster!r} is not in the store: collect it first")
    return row


def _known(session: Session, cluster_id: int) -> dict[str, KnownBroker]:
    rows = session.scalars(select(KnownBroker).where(KnownBroker.cluster_id == cluster_id))
    return {row.broker: row for row in rows}


def _events(session: Session, cluster_id: int, broker: str, kind: ScaleEventKind, states: Collection[str]) -> list[Any]:
    query = select(ScaleEvent).where(
        ScaleEvent.cluster_id == cluster_id,
        ScaleEvent.broker == broker,
        ScaleEvent.kind == kind.value,
        ScaleEvent.state.in_(sorted(states)),
    )
    return list(session.scalars(query.order_by(ScaleEvent.id)))


def _move(session: Session, row: ScaleEvent, cluster: str, target: ScaleEventState, actor: str, **details: Any) -> None:
    """Move the event's state (checked by its transition table) and audit it with the change."""
    before = row.state
    row.state = advance(row.state, target, f"scale event {row.id}").value
    row.updated_at = utc_now()
    session.add(
        audit_event(
            cluster,
            actor,
            f"scale-event.{target.value}",
            scaleEvent=row.id,
            kind=row.kind,
            broker=row.broker,
            previous=before,
            **details,
        )
    )


def record_sightings(
    store: Store,
    cluster: str,
    snapshot_id: int,
    taken_at: datetime,
    decide: Callable[[Mapping[str, BrokerSighting]], Sightings],
    actor: str,
) -> list[StoredScaleEvent]:
    """Observe a snapshot: `decide` gets the cluster's known brokers and says what the snapshot shows; the new
    brokers are added, the sightings moved forward and each join recorded (once: by its key), all in one
    transaction with the cluster's row locked. Returns the events recorded now (none for one recorded before)."""
    recorded = []
    with store.session() as session:
        cluster_row = _locked_cluster(session, cluster)
        rows = _known(session, cluster_row.id)
        sightings = decide({broker: BrokerSighting.of(row) for broker, row in rows.items()})
        if sightings.baseline and not rows and sightings.new:
            session.add(
                audit_event(cluster, actor, "scale-event.baseline", snapshot=snapshot_id, brokers=list(sightings.new))
            )
        for broker in sightings.new:
            if broker in rows:
                continue
            rows[broker] = KnownBroker(
                cluster_id=cluster_row.id,
                broker=broker,
                first_seen_at=taken_at,
                first_snapshot_id=snapshot_id,
                last_seen_at=taken_at,
                last_snapshot_id=snapshot_id,
                joins=0,
            )
            session.add(rows[broker])
        for broker in sightings.seen:
            row = rows[broker]
            if as_utc(row.last_seen_at) < taken_at:
                row.last_seen_at, row.last_snapshot_id = taken_at, snapshot_id
        for join in sightings.joins:
            key = event_key(ScaleEventKind.JOIN, join.broker, join.generation)
            exists = session.scalar(
                select(ScaleEvent.id).where(ScaleEvent.cluster_id == cluster_row.id, ScaleEvent.event_key == key)
            )
            if exists is not None:
                continue
            rows[join.broker].joins = max(rows[join.broker].joins, join.generation)
            # Back after a long absence: an older join still unplanned, or a removal mark (it was decommissioned), is
            # moot; this join replaces them.
            for stale_kind in (ScaleEventKind.JOIN, ScaleEventKind.REMOVAL):
                for stale in _events(session, cluster_row.id, join.broker, stale_kind, OPEN_STATES):
                    _move(session, stale, cluster, ScaleEventState.SUPERSEDED, actor, by=key)
            details = {"absentSeconds": round(join.absent_seconds)} if join.absent_seconds is not None else {}
            event = ScaleEvent(
                cluster_id=cluster_row.id,
                event_key=key,
                kind=ScaleEventKind.JOIN.value,
                broker=join.broker,
                state=advance(None, ScaleEventState.DETECTED, f"join of {join.broker}").value,
                recorded_by=actor,
                reason="rejoined after a long absence" if join.absent_seconds is not None else "joined",
                snapshot_id=snapshot_id,
                details=details,
            )
            session.add(event)
            session.flush()
            session.add(
                audit_event(
                    cluster,
                    actor,
                    "scale-event.detected",
                    scaleEvent=event.id,
                    kind=event.kind,
                    broker=join.broker,
                    snapshot=snapshot_id,
                    **details,
                )
            )
            recorded.append(StoredScaleEvent.of(event, cluster))
    return recorded


def mark_removal(
    store: Store, cluster: str, broker: str, actor: str, reason: str = ""
) -> tuple[StoredScaleEvent, bool]:
    """Mark a known broker of the cluster for removal: a drain plan is proposed for it. Returns the event and
    whether it was marked already (a repeated mark records nothing). Open joins of the broker are superseded."""
    with store.session() as session:
        cluster_row = _locked_cluster(session, cluster)
        known = _known(session, cluster_row.id)
        if broker not in known:
            listed = ", ".join(sorted(known)) or "none yet: collect it first"
            raise InputError(f"cluster {cluster!r}: broker {broker!r} is not one of its brokers ({listed})")
        marked = _events(session, cluster_row.id, broker, ScaleEventKind.REMOVAL, MARKED_STATES)
        if marked:
            return StoredScaleEvent.of(marked[-1], cluster), True
        generation = 1 + (
            session.scalar(
                select(func.count(ScaleEvent.id)).where(
                    ScaleEvent.cluster_id == cluster_row.id,
                    ScaleEvent.broker == broker,
                    ScaleEvent.kind == ScaleEventKind.REMOVAL.value,
                )
            )
            or 0
        )
        key = event_key(ScaleEventKind.REMOVAL, broker, generation)
        for join in _events(session, cluster_row.id, broker, ScaleEventKind.JOIN, OPEN_STATES):
            _move(session, join, cluster, ScaleEventState.SUPERSEDED, actor, by=key)
        event = ScaleEvent(
            cluster_id=cluster_row.id,
            event_key=key,
            kind=ScaleEventKind.REMOVAL.value,
            broker=broker,
            state=advance(None, ScaleEventState.DETECTED, f"removal of {broker}").value,
            recorded_by=actor,
            reason=reason,
            details={},
        )
        session.add(event)
        session.flush()
        session.add(
            audit_event(cluster, actor, "broker.marked-for-removal", scaleEvent=event.id, broker=broker, reason=reason)
        )
        return StoredScaleEvent.of(event, cluster), False


def unmark_removal(store: Store, cluster: str, broker: str, actor: str, reason: str = "") -> StoredScaleEvent:
    """Withdraw the broker's removal mark. A drain already planned for it stays pending: reject it."""
    with store.session() as session:
        cluster_row = _locked_cluster(session, cluster)
        marked = _events(session, cluster_row.id, broker, ScaleEventKind.REMOVAL, MARKED_STATES)
        if not marked:
            raise InputError(f"cluster {cluster!r}: broker {broker!r} is not marked for removal")
        row = marked[-1]
        _move(session, row, cluster, ScaleEventState.WITHDRAWN, actor, reason=reason, plan=row.plan_id)
        session.add(audit_event(cluster, actor, "broker.removal-unmarked", scaleEvent=row.id, broker=broker))
        return StoredScaleEvent.of(row, cluster)


def list_scale_events(
    store: Store, cluster: str, states: Collection[ScaleEventState] = (), limit: int = 100
) -> list[StoredScaleEvent]:
    """The cluster's events, newest first (only those in `states`, when given)."""
    query = select(ScaleEvent).join(Cluster).where(Cluster.name == cluster)
    if states:
        query = query.where(ScaleEvent.state.in_(sorted(state.value for state in states)))
    with store.session() as session:
        rows = session.scalars(query.order_by(ScaleEvent.id.desc()).limit(limit))
        return [StoredScaleEvent.of(row, cluster) for row in rows]


def scale_event(store: Store, event_id: int) -> StoredScaleEvent:
    with store.session() as session:
        row = session.get(ScaleEvent, event_id)
        if row is None:
            raise NotFoundError(f"unknown scale event {event_id}")
        cluster = session.scalar(select(Cluster.name).where(Cluster.id == row.cluster_id)) or ""
        return StoredScaleEvent.of(row, cluster)


def known_brokers(store: Store, cluster: str) -> list[BrokerSighting]:
    with store.session() as session:
        rows = session.scalars(
            select(KnownBroker).join(Cluster).where(Cluster.name == cluster).order_by(KnownBroker.broker)
        )
        return [BrokerSighting.of(row) for row in rows]


def mark_proposed(store: Store, event_id: int, run_id: str, actor: str) -> StoredScaleEvent:
    """The maintenance DAG run `run_id` is asked for the event (a repeat, with the same run, changes nothing)."""
    with store.session() as session:
        row = session.get(ScaleEvent, event_id, with_for_update=True)
        if row is None:
            raise NotFoundError(f"unknown scale event {event_id}")
        cluster = session.scalar(select(Cluster.name).where(Cluster.id == row.cluster_id)) or ""
        if row.state == ScaleEventState.DETECTED.value:
            row.run_id = run_id
            _move(session, row, cluster, ScaleEventState.PROPOSED, actor, run=run_id)
        return StoredScaleEvent.of(row, cluster)


def record_planned(store: Store, event_id: int, cluster: str, plan_id: int, actor: str) -> StoredScaleEvent:
    """A plan for the event was committed: the event is planned, linked to it (a repeat for the same plan, as a
    retried commit makes, changes nothing). Refused for an event of another cluster or one superseded or
    withdrawn."""
    with store.session() as session:
        row = session.get(ScaleEvent, event_id, with_for_update=True)
        name = session.scalar(select(Cluster.name).where(Cluster.id == row.cluster_id)) if row else None
        if row is None or name != cluster:
            raise InputError(f"scale event {event_id}: not an event of cluster {cluster!r}")
        if row.plan_id != plan_id:
            row.plan_id = plan_id
            _move(session, row, cluster, ScaleEventState.PLANNED, actor, plan=plan_id)
        return StoredScaleEvent.of(row, cluster)
