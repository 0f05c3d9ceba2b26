"""Scale events: a broker that joined the cluster gets a fill plan proposed, one marked for removal a drain plan.

Pure: what the store knows of a cluster's brokers and what one snapshot shows in, what happened out. The store
(`planner.store.scale_events`) records the outcome; the collect (`planner.orchestrate.scale_events`) calls this on
every snapshot it takes.

A join is a broker the cluster has never been seen with, or one seen again after an absence longer than
`rejoin_after` (a machine replaced at the same address, a broker decommissioned and brought back). Anything shorter
is a restart or a flap: Pulsar lists a broker by its advertised address and web port, which a restart keeps, and a
broker whose load report could not be read for a few collects comes back with its id unchanged. Neither proposes a
plan. The first snapshot the planner sees of a cluster is its baseline: its brokers were there before the planner
looked, so none of them joined.

Each event has a key unique per cluster, from the broker and how many times it joined (or was marked), so however
often a snapshot is observed (a retried or cleared collect task, a rerun, two collects at once) each event is
recorded once (`planner.store.scale_events.event_key`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from planner.lifecycle import ScaleEventKind
from planner.plan.document import ScaleEventRef
from planner.plan.maintenance import MaintenanceMode, MaintenanceRequest
from planner.store.scale_events import BrokerSighting, JoinSighting, Sightings

DEFAULT_REJOIN_AFTER = timedelta(days=1)

# The maintenance plan that answers each kind of event.
MODES = {ScaleEventKind.JOIN: MaintenanceMode.FILL, ScaleEventKind.REMOVAL: MaintenanceMode.DRAIN}


def observe(
    known: Mapping[str, BrokerSighting],
    present: Collection[str],
    taken_at: datetime,
    rejoin_after: timedelta = DEFAULT_REJOIN_AFTER,
) -> Sightings:
    """The brokers of a snapshot taken at `taken_at` (those whose load it holds) against the known ones.

    An older snapshot observed after a newer one (a late retry) cannot make a broker look absent: a sighting only
    moves forward, and a known broker's absence is measured from its last sighting to this snapshot."""
    ordered = sorted(set(present))
    if not known:
        return Sightings(baseline=True, new=tuple(ordered))
    joins: list[JoinSighting] = []
    new: list[str] = []
    seen: list[str] = []
    for broker in ordered:
        entry = known.get(broker)
        if entry is None:
            joins.append(JoinSighting(broker, 1))
            new.append(broker)
            continue
        absent_for = taken_at - entry.last_seen
        if absent_for > rejoin_after:
            joins.append(JoinSighting(broker, entry.joins + 1, absent_for.total_seconds()))
        if absent_for > timedelta(0):
            seen.append(broker)
    return Sightings(baseline=False, new=tuple(new), seen=tuple(seen), joins=tuple(joins))


def maintenance_request(kind: ScaleEventKind, broker: str, event_id: int) -> MaintenanceRequest:
    """The plan that answers the event: fill the joined broker, drain the one marked for removal; the plan
    carries the event (`MaintenanceDocument.scale_event`), which approval policies match on."""
    return MaintenanceRequest(
        MODES[kind], (broker,), scale_event=ScaleEventRef(id=event_id, kind=kind.value, broker=broker)
    )
