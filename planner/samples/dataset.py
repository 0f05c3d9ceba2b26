"""The samples dataset: broker and bundle rows of every snapshot, in Parquet partitioned by cluster and date.

This is the Spark job's input. Each snapshot writes one file per table under
`<storage>/samples/{brokers,bundles}/cluster=<name>/date=<YYYY-MM-DD>/` (a path or URI, `planner.storage`):
first staged under a name that
begins with `_` (pyarrow's dataset discovery and Spark both skip such files), then published by a rename
once the snapshot's row is in the store (`planner.collect.collector`). Readers also exclude the ids of snapshots
that are not published (`exclude`), so a file a killed collect published is never read.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from planner import storage
from planner.pulsar.broker_score import broker_usage
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import LocalBrokerData, ResourceUsage

BROKER_SCHEMA = pa.schema(
    [
        ("snapshot_id", pa.int64()),
        ("taken_at", pa.timestamp("ms", tz="UTC")),
        ("broker", pa.string()),
        ("cpu_usage", pa.float64()),
        ("cpu_limit", pa.float64()),
        ("memory_usage", pa.float64()),
        ("memory_limit", pa.float64()),
        ("direct_memory_usage", pa.float64()),
        ("direct_memory_limit", pa.float64()),
        ("bandwidth_in_usage", pa.float64()),
        ("bandwidth_in_limit", pa.float64()),
        ("bandwidth_out_usage", pa.float64()),
        ("bandwidth_out_limit", pa.float64()),
        ("msg_rate_in", pa.float64()),
        ("msg_rate_out", pa.float64()),
        ("msg_throughput_in", pa.float64()),
        ("msg_throughput_out", pa.float64()),
        ("num_topics", pa.int64()),
        ("num_bundles", pa.int64()),
        ("num_consumers", pa.int64()),
        ("num_producers", pa.int64()),
        ("last_update", pa.int64()),
        # The broker's own weightedMaxEMA on the extensible load manager (null on the modular one, and in files
        # written before the column existed).
        ("weighted_max_ema", pa.float64()),
    ]
)

BUNDLE_SCHEMA = pa.schema(
    [
        ("snapshot_id", pa.int64()),
        ("taken_at", pa.timestamp("ms", tz="UTC")),
        ("broker", pa.string()),
        ("bundle", pa.string()),
        ("namespace", pa.string()),
        ("msg_rate_in", pa.float64()),
        ("msg_throughput_in", pa.float64()),
        ("msg_rate_out", pa.float64()),
        ("msg_throughput_out", pa.float64()),
        ("consumer_count", pa.int64()),
        ("producer_count", pa.int64()),
        ("topics", pa.int64()),
    ]
)


def samples_root(root: str | Path) -> str:
    """The samples dataset under the storage root (a path or URI), as a URI."""
    return storage.join(storage.to_uri(root), "samples")


def _partition(root: str | Path, table: str, cluster: str, taken_at: datetime) -> str:
    return storage.join(samples_root(root), table, f"cluster={cluster}", f"date={taken_at.date().isoformat()}")


def broker_rows(
    snapshot_id: int,
    taken_at: datetime,
    reports: Mapping[str, LocalBrokerData],
    weighted_max_ema: Mapping[str, float | None] | None = None,
) -> pa.Table:
    rows = [
        {
            "snapshot_id": snapshot_id,
            "taken_at": taken_at,
            "broker": broker_id,
            "cpu_usage": report.cpu.usage,
            "cpu_limit": report.cpu.limit,
            "memory_usage": report.memory.usage,
            "memory_limit": report.memory.limit,
            "direct_memory_usage": report.direct_memory.usage,
            "direct_memory_limit": report.direct_memory.limit,
            "bandwidth_in_usage": report.bandwidth_in.usage,
            "bandwidth_in_limit": report.bandwidth_in.limit,
            "bandwidth_out_usage": report.bandwidth_out.usage,
            "bandwidth_out_limit": report.bandwidth_out.limit,
            "msg_rate_in": report.msg_rate_in,
            "msg_rate_out": report.msg_rate_out,
            "msg_throughput_in": report.msg_throughput_in,
            "msg_throughput_out": report.msg_throughput_out,
            "num_topics": report.num_topics,
            "num_bundles": report.num_bundles,
            "num_consumers": report.num_consumers,
            "num_producers": report.num_producers,
            "last_update": report.last_update,
            "weighted_max_ema": (weighted_max_ema or {}).get(broker_id),
        }
        for broker_id, report in sorted(reports.items())
    ]
    return pa.Table.from_pylist(rows, schema=BROKER_SCHEMA)


def bundle_rows(snapshot_id: int, taken_at: datetime, reports: Mapping[str, LocalBrokerData]) -> pa.Table:
    rows = [
        {
            "snapshot_id": snapshot_id,
            "taken_at": taken_at,
            "broker": broker_id,
            "bundle": bundle,
            "namespace": namespace_of(bundle),
            "msg_rate_in": stats.msg_rate_in,
            "msg_throughput_in": stats.msg_throughput_in,
            "msg_rate_out": stats.msg_rate_out,
            "msg_throughput_out": stats.msg_throughput_out,
            "consumer_count": stats.consumer_count,
            "producer_count": stats.producer_count,
            "topics": stats.topics,
        }
        for broker_id, report in sorted(reports.items())
        for bundle, stats in sorted(report.last_stats.items())
    ]
    return pa.Table.from_pylist(rows, schema=BUNDLE_SCHEMA)


STAGED_PREFIX = "_"  # a file whose name begins with it is invisible to pyarrow datasets and to Spark


def staged(uri: str) -> str:
    """Where a file is written before it is published (by a move to `uri`)."""
    base, _, query = uri.partition("?")
    parent, _, name = base.rpartition("/")
    return f"{parent}/{STAGED_PREFIX}{name}" + (f"?{query}" if query else "")


def sample_path(root: str | Path, table: str, cluster: str, snapshot_id: int, taken_at: datetime) -> str:
    """The published file of one snapshot's rows of one table."""
    return storage.join(_partition(root, table, cluster, taken_at), f"snapshot-{snapshot_id:012d}.parquet")


def snapshot_tables(
    snapshot_id: int,
    taken_at: datetime,
    reports: Mapping[str, LocalBrokerData],
    weighted_max_ema: Mapping[str, float | None] | None = None,
) -> dict[str, pa.Table]:
    """One snapshot's rows, per table (with the brokers' own weightedMaxEMA on the extensible load manager)."""
    return {
        "brokers": broker_rows(snapshot_id, taken_at, reports, weighted_max_ema),
        "bundles": bundle_rows(snapshot_id, taken_at, reports),
    }


def write_snapshot_samples(
    root: str | Path, cluster: str, snapshot_id: int, taken_at: datetime, reports: Mapping[str, LocalBrokerData]
) -> list[str]:
    """One snapshot's rows written straight to their published files, with no snapshot row: for histories
    made outside a collect (tests, benchmarks). A collect stages and publishes them (planner.collect.collector)."""
    written = []
    for table, rows in snapshot_tables(snapshot_id, taken_at, reports).items():
        storage.write_parquet(rows, sample_path(root, table, cluster, snapshot_id, taken_at))
        written.append(sample_path(root, table, cluster, snapshot_id, taken_at))
    return written


def read_samples(root: str | Path, table: str, cluster: str, **conditions: Any) -> pa.Table:
    """`read_dataset` (and its conditions) on the samples dataset under the storage root."""
    return read_dataset(samples_root(root), table, cluster, **conditions)


def read_dataset(
    samples: str,
    table: str,
    cluster: str,
    *,
    up_to_snapshot: int | None = None,
    snapshot: int | None = None,
    since: datetime | None = None,
    after: datetime | None = None,
    until: datetime | None = None,
    exclude: Collection[int] = (),
    only: Collection[int] | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """One table's rows for a cluster from the samples dataset at `samples` (a URI), ordered by snapshot: all of
    them, those up to a snapshot id, one snapshot's, or those taken since a time (or after it) and up to another;
    never those of the `exclude`d (unpublished) snapshot ids; with `only`, those snapshot ids alone. `columns` reads
    only those (with `snapshot_id` and `broker`). Times bound the date partitions listed."""
    location = storage.join(samples, table, f"cluster={cluster}")
    stored = BROKER_SCHEMA if table == "brokers" else BUNDLE_SCHEMA
    schema = stored if columns is None else pa.schema([stored.field(name) for name in columns])
    if not storage.exists(location):
        return schema.empty_table()
    filesystem, path = storage.filesystem(location)
    dataset = ds.dataset(
        path,
        filesystem=filesystem,
        format="parquet",
        schema=stored.append(pa.field("date", pa.string())),
        partitioning=ds.partitioning(pa.schema([("date", pa.string())]), flavor="hive"),
    )
    conditions = []
    if up_to_snapshot is not None:
        conditions.append(ds.field("snapshot_id") <= up_to_snapshot)
    if snapshot is not None:
        conditions.append(ds.field("snapshot_id") == snapshot)
    for bound, compare in ((since, operator.ge), (after, operator.gt), (until, operator.le)):
        if bound is not None:
            date = compare if compare is operator.le else operator.ge
            conditions.append(date(ds.field("date"), bound.astimezone(UTC).date().isoformat()))
            conditions.append(compare(ds.field("taken_at"), pa.scalar(bound, pa.timestamp("ms", tz="UTC"))))
    if exclude:
        conditions.append(~ds.field("snapshot_id").isin(sorted(exclude)))
    if only is not None:
        conditions.append(ds.field("snapshot_id").isin(sorted(only)))
    expression = functools.reduce(operator.and_, conditions) if conditions else None
    rows = dataset.to_table(columns=schema.names, filter=expression)
    return rows.sort_by([("snapshot_id", "ascending"), ("broker", "ascending")])


def broker_load(rows: pa.Table, config: PulsarConfig) -> list[dict[str, Any]]:
    """Per broker row of the `brokers` table: its score (the weighted max usage, in percent points, as
    AvgShedder and ThresholdShedder see it), msg/s and bytes/s, in and out together."""
    loads = []
    for row in rows.to_pylist():
        report = LocalBrokerData.model_construct(
            **{
                resource: ResourceUsage.model_construct(usage=row[f"{resource}_usage"], limit=row[f"{resource}_limit"])
                for resource in ("cpu", "memory", "direct_memory", "bandwidth_in", "bandwidth_out")
            }
        )
        loads.append(
            {
                "snapshotId": row["snapshot_id"],
                "takenAt": row["taken_at"].isoformat(),
                "broker": row["broker"],
                "score": round(broker_usage(report, config) * 100, 2),
                "msgRate": round(row["msg_rate_in"] + row["msg_rate_out"], 3),
                "throughput": round(row["msg_throughput_in"] + row["msg_throughput_out"], 3),
            }
        )
    return loads


def snapshot_broker_load(
    root: str | Path, cluster: str, snapshot_id: int, config: PulsarConfig | None = None
) -> dict[str, dict[str, float]]:
    """One snapshot's per-broker score, msg/s and bytes/s, keyed by broker."""
    rows = broker_load(read_samples(root, "brokers", cluster, snapshot=snapshot_id), config or PulsarConfig())
    return {row["broker"]: {key: row[key] for key in ("score", "msgRate", "throughput")} for row in rows}
