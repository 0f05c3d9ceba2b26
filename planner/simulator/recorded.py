"""Reading a cluster's recorded history for a replay (`planner.simulator.replay`): the samples dataset through the
storage URIs the product uses, only the snapshots the store published, each one's unreadable brokers, and what the
cluster declared at the latest of them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from planner.errors import InputError
from planner.samples.dataset import read_samples
from planner.simulator.replay import RECORDED_BUNDLE_COLUMNS, RecordedHistory
from planner.store.database import Store
from planner.store.models import as_utc
from planner.store.snapshots import archive_declarations, published_snapshots, read_archive, unpublished_snapshot_ids


def read_history(root: str | Path, store: Store, cluster: str, start: datetime, end: datetime) -> RecordedHistory:
    """The cluster's published snapshots taken from `start` to `end` (inclusive), from the samples under `root`."""
    if end <= start:
        raise InputError(f"invalid --to {end.isoformat()}: not after --from {start.isoformat()}")
    snapshots = [s for s in published_snapshots(store, cluster) if start <= as_utc(s.taken_at) <= end]
    if not snapshots:
        raise InputError(
            f"replay of cluster {cluster!r}: no published snapshot from {start.isoformat()} to {end.isoformat()}"
        )
    excluded = unpublished_snapshot_ids(store, cluster)
    conditions = {"since": start, "until": end, "exclude": excluded}
    brokers = read_samples(root, "brokers", cluster, **conditions)
    bundles = read_samples(root, "bundles", cluster, columns=RECORDED_BUNDLE_COLUMNS, **conditions)
    latest = snapshots[-1]
    return RecordedHistory(
        cluster=cluster,
        brokers=brokers,
        bundles=bundles,
        missing={s.id: frozenset(s.missing_brokers) for s in snapshots if s.missing_brokers},
        declarations=archive_declarations(read_archive(latest.archive_path), latest.id),
    )
