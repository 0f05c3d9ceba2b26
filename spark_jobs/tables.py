"""The samples dataset's tables as the Spark job reads them: the schema given (partition columns as strings), the
rows of some clusters up to a time, and the date partitions a time falls in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from planner import storage


def read_table(
    spark: SparkSession,
    samples: str | Path,
    table: str,
    clusters: Sequence[str],
    as_of: datetime,
    excluded: Mapping[str, Sequence[int]] | None = None,
) -> DataFrame:
    """One table's rows of the clusters up to `as_of`, without the `excluded` (unpublished) snapshot ids of
    each cluster. Files staged by a collect (names beginning with `_`) are never listed by Spark."""
    location = storage.spark_uri(storage.join(storage.to_uri(samples), table))
    # The schema given, partition columns included: inference would read a cluster named "007" as the number 7.
    frame = spark.read.schema(_spark_schema(table)).option("basePath", location).parquet(location)
    frame = frame.where(F.col("cluster").isin(list(clusters)) & (F.col("taken_at") <= F.lit(as_of)))
    for cluster, ids in (excluded or {}).items():
        if ids:
            frame = frame.where(~((F.col("cluster") == F.lit(cluster)) & F.col("snapshot_id").isin(list(ids))))
    return frame


def _spark_schema(table: str) -> str:
    """The table's schema as Spark DDL, with its partition columns (`cluster`, `date`) as strings."""
    from planner.samples.dataset import BROKER_SCHEMA, BUNDLE_SCHEMA

    schema = BROKER_SCHEMA if table == "brokers" else BUNDLE_SCHEMA
    return f"{spark_ddl(schema)}, `cluster` STRING, `date` STRING"


def spark_ddl(schema: pa.Schema) -> str:
    """A pyarrow schema as Spark DDL."""
    types = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "STRING"}
    return ", ".join(
        f"`{field.name}` {'TIMESTAMP' if pa.types.is_timestamp(field.type) else types[field.type]}" for field in schema
    )


def date_partition(taken_at: datetime) -> F.Column:
    """The `date` partition value of rows taken at `taken_at` (UTC)."""
    return F.lit(taken_at.astimezone(UTC).date().isoformat())


def taken_after(since: datetime) -> F.Column:
    """Rows taken after `since`, in words the reader prunes date partitions by."""
    return (F.col("date") >= date_partition(since)) & (F.col("taken_at") > F.lit(since))
