"""Which load reports a cluster's samples hold within a history window: the input that lets the Spark job weigh a
bundle's samples by their position among its broker's reports without sorting them (`spark_jobs.averaging`).

The store records it as each collect ends (`planner.collect.collector.snapshot_reports`): every published
snapshot and the brokers whose reports it lacks. The brokers table of the samples dataset says the same
(`from_brokers_table`), at the cost of reading a small file per snapshot.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
from pydantic import BaseModel, ConfigDict


class SnapshotReports(BaseModel):
    """A cluster's published snapshots within a window, as (id, taken at in epoch millis) in ascending id order,
    and per broker the snapshot ids among them whose load reports it is missing from. A broker's reports are the
    snapshots less its missing ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    snapshots: list[tuple[int, int]]
    missing: dict[str, list[int]] = {}

    @classmethod
    def from_brokers_table(cls, rows: pa.Table) -> SnapshotReports:
        """From a cluster's (`snapshot_id`, `taken_at`, `broker`) rows of the brokers table: a broker is missing from
        every snapshot it has no row in (before it joined and after it left too)."""
        ids = rows.column("snapshot_id").to_pylist()
        taken = rows.column("taken_at").cast(pa.int64()).to_pylist()
        brokers = rows.column("broker").to_pylist()
        snapshots = dict(zip(ids, taken, strict=True))
        reported: dict[str, set[int]] = defaultdict(set)
        for snapshot_id, broker in zip(ids, brokers, strict=True):
            reported[broker].add(snapshot_id)
        return cls(
            snapshots=sorted(snapshots.items()),
            missing={
                broker: sorted(set(snapshots) - ids_of_broker)
                for broker, ids_of_broker in sorted(reported.items())
                if len(ids_of_broker) < len(snapshots)
            },
        )
