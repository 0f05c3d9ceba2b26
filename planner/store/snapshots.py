"""The snapshot registry: each collect's row, from staged to published or abandoned (`planner.collect.collector`
writes the files; these are the row's reads and its conditional writes).

Abandoning, renewing and publishing are each one UPDATE conditional on the row still being `staged`, so the row
count decides between a collect and the collects that take it for dead.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import ColumnElement, func, select, update

from planner import storage
from planner.errors import InputError, NotFoundError, format_validation_error
from planner.lifecycle import SnapshotStatus, advance
from planner.pulsar.declarations import ClusterDeclarations
from planner.store.clusters import cluster_row
from planner.store.database import Store
from planner.store.models import Cluster, RecentlyUnloaded, Snapshot, audit_event


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A snapshot's row: when it was taken, what it holds, and the brokers it is missing (broker id → why)."""

    id: int
    cluster: str
    taken_at: datetime
    brokers: int
    bundles: int
    partial: bool
    missing_brokers: dict[str, str]
    load_manager: str | None
    archive_path: str
    leader: str | None
    status: SnapshotStatus

    @classmethod
    def of(cls, row: Snapshot, cluster: str) -> StoredSnapshot:
        return cls(
            row.id,
            cluster,
            row.taken_at,
            row.brokers,
            row.bundles,
            row.partial,
            dict(row.missing_brokers or {}),
            row.load_manager,
            row.archive_path,
            row.leader,
            SnapshotStatus(row.status),
        )

    def to_json(self) -> dict[str, Any]:
        """As `snapshots` lists it."""
        return {
            "id": self.id,
            "cluster": self.cluster,
            "takenAt": self.taken_at.isoformat(),
            "brokers": self.brokers,
            "bundles": self.bundles,
            "partial": self.partial,
            "missingBrokers": sorted(self.missing_brokers),
            "loadManager": self.load_manager,
        }


@dataclass(frozen=True, slots=True)
class NewSnapshot:
    """What a collect fetched, for its staged row."""

    cluster: str
    admin_url: str
    taken_at: datetime
    brokers: int
    bundles: int
    missing_brokers: dict[str, str]
    load_manager: str | None
    leader: str | None


def stage_snapshot(store: Store, snapshot: NewSnapshot, archive_uri: Callable[[int], str]) -> int:
    """Commit the snapshot's row as `staged`, alive now; `archive_uri`: where its archive goes, by its id. Its id is
    never given out again, even on SQLite, whatever becomes of the collect."""
    with store.session() as session:
        row = Snapshot(
            cluster_id=cluster_row(session, snapshot.cluster, snapshot.admin_url).id,
            taken_at=snapshot.taken_at,
            brokers=snapshot.brokers,
            bundles=snapshot.bundles,
            partial=bool(snapshot.missing_brokers),
            missing_brokers=snapshot.missing_brokers,
            load_manager=snapshot.load_manager,
            archive_path="",
            leader=snapshot.leader,
            status=advance(None, SnapshotStatus.STAGED, "a new snapshot").value,
            # Alive now, however long the fetch took since taken_at.
            heartbeat_at=datetime.now(UTC),
        )
        session.add(row)
        session.flush()
        row.archive_path = archive_uri(row.id)
        return row.id


def _last_alive() -> ColumnElement[Any]:
    """When a staged row's collect was last known alive (rows staged before heartbeats: when it began)."""
    return func.coalesce(Snapshot.heartbeat_at, Snapshot.taken_at)


def stale_snapshot_ids(store: Store, cluster: str, last_alive_before: datetime) -> list[int]:
    """The cluster's staged snapshots whose collect was last known alive before then."""
    with store.session() as session:
        return list(
            session.scalars(
                select(Snapshot.id)
                .join(Cluster)
                .where(
                    Cluster.name == cluster,
                    Snapshot.status == SnapshotStatus.STAGED.value,
                    _last_alive() < last_alive_before,
                )
                .order_by(Snapshot.id)
            )
        )


def abandon_snapshot(
    store: Store,
    snapshot_id: int,
    actor: str,
    reason: str,
    delete_files: Callable[[str, datetime], None],
    *,
    last_alive_before: datetime | None = None,
) -> bool:
    """Mark a staged snapshot abandoned (the row is kept: ids are never reused), with its audit event; with
    `last_alive_before`, only if its collect was last known alive before then. Returns whether this call did.

    `delete_files(cluster, taken_at)` runs once the row is won, before that commits: a kill in between leaves the
    row staged, for the next collect to abandon again."""
    abandoned = advance(SnapshotStatus.STAGED, SnapshotStatus.ABANDONED, f"snapshot {snapshot_id}").value
    still_staged = [Snapshot.id == snapshot_id, Snapshot.status == SnapshotStatus.STAGED.value]
    if last_alive_before is not None:
        still_staged.append(_last_alive() < last_alive_before)
    with store.session() as session:
        won = session.execute(
            update(Snapshot).where(*still_staged).values(status=abandoned).execution_options(synchronize_session=False)
        ).rowcount
        if won != 1:
            return False
        snapshot = session.get(Snapshot, snapshot_id)
        cluster = snapshot.cluster.name
        delete_files(cluster, snapshot.taken_at)
        session.add(audit_event(cluster, actor, "snapshot.abandoned", snapshot=snapshot_id, reason=reason))
    return True


def renew_heartbeat(store: Store, snapshot_id: int) -> bool:
    """Record that the collect of a staged snapshot is alive; False once the row is no longer staged."""
    with store.session() as session:
        return (
            session.execute(
                update(Snapshot)
                .where(Snapshot.id == snapshot_id, Snapshot.status == SnapshotStatus.STAGED.value)
                .values(heartbeat_at=datetime.now(UTC))
                .execution_options(synchronize_session=False)
            ).rowcount
            == 1
        )


def publish_snapshot(
    store: Store, snapshot_id: int, cluster: str, actor: str, *, brokers: int, missing: list[str]
) -> bool:
    """Mark the snapshot published, with its audit event, if it is still staged (still its collect's); returns
    whether it was."""
    published = advance(SnapshotStatus.STAGED, SnapshotStatus.PUBLISHED, f"snapshot {snapshot_id}").value
    with store.session() as session:
        still_ours = session.execute(
            update(Snapshot)
            .where(Snapshot.id == snapshot_id, Snapshot.status == SnapshotStatus.STAGED.value)
            .values(status=published)
            .execution_options(synchronize_session=False)
        ).rowcount
        if still_ours != 1:
            return False
        session.add(
            audit_event(cluster, actor, "snapshot.collected", snapshot=snapshot_id, brokers=brokers, missing=missing)
        )
    return True


def snapshot_status(store: Store, snapshot_id: int) -> SnapshotStatus | None:
    with store.session() as session:
        status = session.scalar(select(Snapshot.status).where(Snapshot.id == snapshot_id))
    return SnapshotStatus(status) if status is not None else None


def snapshot_cluster(store: Store, snapshot_id: int | None) -> str | None:
    """The cluster a snapshot of any status belongs to; None for a snapshot this store does not have."""
    if snapshot_id is None:
        return None
    with store.session() as session:
        return session.scalar(select(Cluster.name).join(Snapshot).where(Snapshot.id == snapshot_id))


def unpublished_snapshot_ids(store: Store, cluster: str) -> list[int]:
    """Snapshot ids readers must skip: staged (being written, or left by a killed collect) and abandoned."""
    with store.session() as session:
        return list(
            session.scalars(
                select(Snapshot.id)
                .join(Cluster)
                .where(Cluster.name == cluster, Snapshot.status != SnapshotStatus.PUBLISHED.value)
                .order_by(Snapshot.id)
            )
        )


def published_snapshot(store: Store, snapshot_id: int) -> StoredSnapshot:
    """A published snapshot, or NotFoundError (saying so when it is staged or abandoned)."""
    with store.session() as session:
        row = session.get(Snapshot, snapshot_id)
        if row is None or row.status != SnapshotStatus.PUBLISHED.value:
            raise NotFoundError(f"unknown snapshot {snapshot_id}" + (f" (it is {row.status})" if row else ""))
        return StoredSnapshot.of(row, row.cluster.name)


def published_snapshots(
    store: Store, cluster: str | None = None, *, after: datetime | None = None, until: datetime | None = None
) -> list[StoredSnapshot]:
    """The published snapshots (of a cluster), taken after `after` and up to `until` when given, oldest first."""
    query = (
        select(Snapshot, Cluster.name)
        .join(Cluster)
        .where(Snapshot.status == SnapshotStatus.PUBLISHED.value)
        .order_by(Snapshot.id)
    )
    if cluster:
        query = query.where(Cluster.name == cluster)
    if after is not None:
        query = query.where(Snapshot.taken_at > after)
    if until is not None:
        query = query.where(Snapshot.taken_at <= until)
    with store.session() as session:
        return [StoredSnapshot.of(row, name) for row, name in session.execute(query)]


def list_snapshots(store: Store, cluster: str | None = None, *, limit: int = 50) -> list[StoredSnapshot]:
    """The newest published snapshots first."""
    query = (
        select(Snapshot, Cluster.name)
        .join(Cluster)
        .where(Snapshot.status == SnapshotStatus.PUBLISHED.value)
        .order_by(Snapshot.id.desc())
        .limit(limit)
    )
    if cluster:
        query = query.where(Cluster.name == cluster)
    with store.session() as session:
        return [StoredSnapshot.of(row, name) for row, name in session.execute(query)]


def recently_unloaded_bundles(store: Store, cluster: str) -> dict[str, int]:
    """The cluster's recently unloaded bundles, each with when (epoch millis), as a leader keeps them."""
    with store.session() as session:
        return {
            row.bundle: row.unloaded_at_millis
            for row in session.scalars(select(RecentlyUnloaded).join(Cluster).where(Cluster.name == cluster))
        }


def read_archive(location: str) -> dict[str, Any]:
    """A snapshot's archive, by the URI (or, for snapshots taken before storage URIs, the path) its row keeps."""
    return json.loads(gzip.decompress(storage.read_bytes(location, "snapshot archive")))


def archive_declarations(archive: Mapping[str, Any], snapshot_id: int) -> ClusterDeclarations | None:
    """What the cluster declared when the snapshot was taken, from its archive (already read); None for a snapshot
    taken before collects read the declarations."""
    found = archive.get("declarations")
    if found is None:
        return None
    try:
        return ClusterDeclarations.model_validate(found)
    except ValidationError as error:
        raise InputError(format_validation_error(error, f"declarations of snapshot {snapshot_id}")) from None


def latest_declarations(store: Store, cluster: str) -> ClusterDeclarations | None:
    """What the cluster declared at its latest published snapshot; None when it has none, or that snapshot was taken
    before collects read the declarations."""
    latest = list_snapshots(store, cluster, limit=1)
    if not latest:
        return None
    return archive_declarations(read_archive(latest[0].archive_path), latest[0].id)
