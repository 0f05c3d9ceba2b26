"""Scale events around the collect: each snapshot observed for brokers that joined (`planner.plan.scale_events`),
the events recorded once (`planner.store.scale_events`), and the maintenance plan each one is proposed: what the
collect DAG triggers (`proposals`), what the plan that answers an event is asked with (`event_request`).

The Airflow collect DAG observes the latest snapshot of each cluster after its collects, and triggers the cluster's
maintenance DAG once per open event (its run id is the event's, so a trigger repeated by a retried or cleared task
finds the run there and adds none). The CLI's `collect` observes the snapshot it took and lists the events it
recorded; `plan run --scale-event ID` plans one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from planner import dag_ids
from planner.errors import InputError
from planner.lifecycle import ScaleEventState
from planner.plan.maintenance import MaintenanceRequest
from planner.plan.scale_events import maintenance_request, observe
from planner.samples.dataset import read_samples
from planner.store.database import Store
from planner.store.models import as_utc
from planner.store.scale_events import (
    OPEN_STATES,
    StoredScaleEvent,
    known_brokers,
    list_scale_events,
    mark_proposed,
    record_sightings,
    scale_event,
)
from planner.store.snapshots import StoredSnapshot, list_snapshots, published_snapshot

RUN_ID_PREFIX = "scale-event-"  # the maintenance DAG run proposed for an event: one per event


def present_brokers(root: str | Path, snapshot: StoredSnapshot) -> list[str]:
    """The brokers whose load the snapshot holds (one listed but unreadable is not there: nothing could fill it)."""
    rows = read_samples(
        root,
        "brokers",
        snapshot.cluster,
        snapshot=snapshot.id,
        since=snapshot.taken_at,
        until=snapshot.taken_at,
        columns=("snapshot_id", "broker"),
    )
    return sorted(set(rows.column("broker").to_pylist()))


def observe_snapshot(
    store: Store, root: str | Path, snapshot_id: int, rejoin_after: timedelta, actor: str
) -> list[StoredScaleEvent]:
    """Observe a published snapshot for joins; the events recorded now (none for any recorded before)."""
    snapshot = published_snapshot(store, snapshot_id)
    present = present_brokers(root, snapshot)
    taken_at = as_utc(snapshot.taken_at)
    return record_sightings(
        store,
        snapshot.cluster,
        snapshot.id,
        taken_at,
        lambda known: observe(known, present, taken_at, rejoin_after),
        actor,
    )


def observe_latest(
    store: Store, root: str | Path, cluster: str, rejoin_after: timedelta, actor: str
) -> list[StoredScaleEvent]:
    """`observe_snapshot` on the cluster's latest published snapshot (none yet: nothing)."""
    latest = list_snapshots(store, cluster, limit=1)
    return observe_snapshot(store, root, latest[0].id, rejoin_after, actor) if latest else []


@dataclass(frozen=True, slots=True)
class Proposal:
    """A maintenance DAG run to trigger for an open event: its DAG, its run id (the event's) and its params."""

    event: StoredScaleEvent
    dag_id: str
    run_id: str
    conf: dict[str, Any]

    def trigger_kwargs(self) -> dict[str, Any]:
        """The arguments of Airflow's `TriggerDagRunOperator` that ask for this run."""
        return {"trigger_dag_id": self.dag_id, "trigger_run_id": self.run_id, "conf": self.conf}


def proposal(event: StoredScaleEvent) -> Proposal:
    request = maintenance_request(event.kind, event.broker, event.id)
    conf = {"mode": request.mode.value, "brokers": list(request.brokers), "scale_event": event.id}
    return Proposal(event, dag_ids.MAINTENANCE_DAG_PREFIX + event.cluster, f"{RUN_ID_PREFIX}{event.id}", conf)


def proposals(store: Store, cluster: str, actor: str) -> list[Proposal]:
    """The maintenance runs to trigger for the cluster's open events, oldest first; each event is marked proposed
    with its run's id before the trigger (a trigger that then fails is asked again by the next collect's, under
    the same run id). An event whose broker is missing from the latest observed snapshot waits: no plan could
    fill or drain it now (its reports unreadable, or it left again); it is proposed once the broker is back."""
    events = sorted(list_scale_events(store, cluster, OPEN_STATES, limit=1000), key=lambda event: event.id)
    sightings = known_brokers(store, cluster)
    latest = max((sighting.last_snapshot for sighting in sightings), default=0)
    present = {sighting.broker for sighting in sightings if sighting.last_snapshot == latest}
    made = []
    for event in events:
        if event.broker not in present:
            continue
        made.append(proposal(event))
        mark_proposed(store, event.id, made[-1].run_id, actor)
    return made


def event_request(store: Store, cluster: str, event_id: int, max_moves: int | None = None) -> MaintenanceRequest:
    """The maintenance plan that answers an open event of the cluster, resolved from the store (its mode and broker
    are the event's, whatever the caller says); an event of another cluster, or one superseded or withdrawn, is
    refused in one line."""
    event = scale_event(store, event_id)
    if event.cluster != cluster:
        raise InputError(f"scale event {event_id}: an event of cluster {event.cluster!r}, not of {cluster!r}")
    if event.state not in (*OPEN_STATES, ScaleEventState.PLANNED):
        raise InputError(f"scale event {event_id}: it is {event.state.value}; nothing to plan")
    request = maintenance_request(event.kind, event.broker, event.id)
    return MaintenanceRequest(request.mode, request.brokers, max_moves, request.scale_event)
