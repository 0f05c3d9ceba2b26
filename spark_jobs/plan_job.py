"""The planning job: bundle averages at fleet scale with Spark, then each cluster's plan with the planner's
pure functions, so Spark and the CLI always agree. It reads the samples dataset and writes one plan
file per cluster; it never writes the database (the commit step does).

Averaging modes:
- `pulsar`: Pulsar's sample-count rule (10 short-term, 1000 long-term samples), the samples of each
  bundle replayed in time order (snapshot id, then broker). The recurrence has a closed form: a bundle
  with m samples gives the sample r places from the newest the weight 1/m when m <= N, else
  (1/N)(1 - 1/N)^r for the newest m - N samples and (1 - 1/N)^(m - N) / N for the oldest N. One read
  of the samples sums them per bundle and chunk of 64 snapshot ids, plainly and decayed by position;
  from those sums alone follows each chunk whose rows all weigh the same, or whose rows' ranks are its
  positions (no gap but where the broker's report is missing, one row per snapshot). The rest, a few
  chunks per bundle at most (where the oldest N begin, gaps, two brokers reporting the bundle in one
  snapshot), have their rows read again, from the files holding them, and ranked by a sort.
- `window`: plain means over wall-clock windows ending at the plan time (short and long window).

Usage models: each broker's CPU and NIC usage as background plus costs per msg/s and per byte/s,
fitted on its load reports within the history window (`planner.plan.usage_model`, grouped by cluster with
`applyInPandas`; broker counts are small). Every plan's forecast predicts with them, and
`AvgShedderPredictive` plans with them.

Run with spark-submit:
  spark-submit spark_jobs/plan_job.py --samples URI --input URI --output URI
(paths or URIs under the storage root; `planner.storage`), or import `plan_clusters(spark, ...)`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import operator
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from planner import storage
from planner.samples.averages_state import (
    AVERAGE_COLUMNS,
    LATE_WINDOW,
    LONG_SAMPLES,
    RATE_COLUMNS,
    SHORT_SAMPLES,
    STATE_SCHEMA,
    AveragesState,
    StateChoice,
    choose_state,
    write_state,
)
from spark_jobs.session import spark_session

if TYPE_CHECKING:
    from planner.plan.document import JobResult

# A chunk is 2**CHUNK_BITS consecutive snapshot ids: one 64-bit mask says which of them a bundle has rows in.
CHUNK_BITS = 6
CHUNK_SIZE = 1 << CHUNK_BITS
HORIZONS = (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES))
# Chunks whose rows are ranked one by one are joined to their rows by broadcast up to this many (~100 MB).
BROADCAST_MOST_CHUNKS = 2_000_000
# Besides the averages, per bundle: what the next run folds onto them (`planner.samples.averages_state`).
FOLD_COLUMNS = ("samples", "last_snapshot_id", "last_taken_millis")
JSON_NAMES = {
    "msg_rate_in": "msgRateIn",
    "msg_throughput_in": "msgThroughputIn",
    "msg_rate_out": "msgRateOut",
    "msg_throughput_out": "msgThroughputOut",
}


@dataclass(frozen=True, slots=True)
class Averaging:
    mode: str = "pulsar"  # or "window"
    short_window: timedelta = timedelta(hours=1)
    long_window: timedelta = timedelta(days=1)

    @classmethod
    def parse(cls, text: str) -> Averaging:
        """`pulsar`, or `window:1h,1d` (short and long window; units s, m, h, d)."""
        if text == "pulsar":
            return cls()
        kind, _, spans = text.partition(":")
        if kind != "window" or spans.count(",") != 1:
            raise ValueError(f"averaging {text!r}: expected 'pulsar' or 'window:SHORT,LONG' such as window:1h,1d")
        short, long = (parse_duration(span) for span in spans.split(","))
        return cls("window", short, long)


def parse_duration(text: str) -> timedelta:
    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
    text = text.strip()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise ValueError(f"duration {text!r}: expected a number and one of s, m, h, d (e.g. 30m, 7d)")
    return timedelta(**{units[text[-1]]: int(text[:-1])})


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
    return f"{_spark_ddl(schema)}, `cluster` STRING, `date` STRING"


def _spark_ddl(schema: pa.Schema) -> str:
    """A pyarrow schema as Spark DDL."""
    types = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "STRING"}
    return ", ".join(
        f"`{field.name}` {'TIMESTAMP' if pa.types.is_timestamp(field.type) else types[field.type]}" for field in schema
    )


def _sample_count_weight(count: F.Column, rank: F.Column, samples: int) -> F.Column:
    alpha = 1.0 / samples
    decayed_old = F.pow(F.lit(1 - alpha), count - samples) / samples
    return (
        F.when(count <= samples, 1.0 / count)
        .when(rank < count - samples, alpha * F.pow(F.lit(1 - alpha), rank))
        .otherwise(decayed_old)
    )


def _report_key(chunk: F.Column) -> F.Column:
    """One long for (cluster, broker, chunk): a join on it took half the per-row time of one on the three."""
    return F.xxhash64("cluster", "broker", chunk)


def broker_presence(brokers: DataFrame) -> DataFrame:
    """Per `report_key` (a broker's chunk): a bit mask of the snapshot ids the broker's load report is in.

    Should two keys collide, their masks merge. That cannot make an average wrong: a mask only decides which
    chunks the sums settle, and they settle only where the mask agrees with the bundle's own rows (see
    `_chunk_terms`), whatever mask it is; other chunks are ranked row by row.
    """
    chunk = F.shiftright("snapshot_id", CHUNK_BITS)
    return brokers.groupBy(_report_key(chunk).alias("report_key")).agg(
        F.bit_or(F.expr(f"shiftleft(1L, snapshot_id & {CHUNK_SIZE - 1})")).alias("reported")
    )


def _decay_factors(samples: int, exponent: F.Column) -> F.Column:
    """(1 - 1/samples)^exponent for an exponent in 0..63, from a table: Spark's pow is StrictMath's, which took
    a third of the full read's time."""
    return F.get(F.array(*[F.lit((1 - 1 / samples) ** k) for k in range(CHUNK_SIZE)]), exponent)


def _chunk_sums(bundles: DataFrame, presence: DataFrame | None) -> DataFrame:
    """Pass 1, the only full read: per (cluster, bundle, chunk of 64 snapshot ids), the row count, a bit mask
    of the ids with rows, the newest row's topics, and per rate the plain sum and, per horizon, the sum
    weighted by (1 - 1/N)^k, where k counts the snapshot ids above the row that the row's broker reported in.

    Where the bundle has a row in every snapshot its broker reported in between the chunk's oldest and
    newest row, k is the row's rank within the chunk plus a constant, so the weighted sum is exact.
    `reported` is the broker's report mask, the same for every row when one broker reported them all
    (min = max).
    """
    keyed = bundles.withColumn("chunk", F.shiftright("snapshot_id", CHUNK_BITS)).withColumn(
        "offset", F.col("snapshot_id").bitwiseAND(CHUNK_SIZE - 1)
    )
    if presence is None:  # as if every broker reported in every snapshot
        keyed = keyed.withColumn("reported", F.lit(-1).cast("long"))
    else:  # 0 where the brokers table lacks the report
        keyed = (
            keyed.withColumn("report_key", _report_key(F.col("chunk")))
            .join(F.broadcast(presence), "report_key", "left")
            .withColumn("reported", F.coalesce("reported", F.lit(0).cast("long")))
        )
    # Two shifts: a Java shift by 64 is a shift by 0.
    reported_above = F.expr("bit_count(shiftrightunsigned(shiftrightunsigned(reported, offset), 1))")
    keyed = keyed.withColumn("reported_above", reported_above)
    aggregations = [
        F.count(F.lit(1)).alias("rows"),
        F.bit_or(F.expr("shiftleft(1L, offset)")).alias("mask"),
        F.max("offset").alias("highest"),
        F.min("reported").alias("reported"),
        F.max("reported").alias("reported_max"),
        F.max_by("topics", "snapshot_id").alias("topics"),
        F.max("taken_at").alias("newest_taken"),
        *[F.sum(c).alias(f"plain_{c}") for c in RATE_COLUMNS],
    ]
    for prefix, samples in HORIZONS:
        # A column of its own: computed once per row, not once per rate.
        keyed = keyed.withColumn(f"{prefix}_decay", _decay_factors(samples, F.col("reported_above")))
        decay = F.col(f"{prefix}_decay")
        aggregations += [F.sum(F.col(c) * decay).alias(f"{prefix}_decayed_{c}") for c in RATE_COLUMNS]
    return keyed.groupBy("cluster", "bundle", "chunk").agg(*aggregations)


def _chunk_terms(chunks: DataFrame) -> DataFrame:
    """Each chunk's share of its bundle's averages, where its sums determine it; `needs_rows` marks the
    chunks whose rows must be ranked one by one (see `bundle_averages`)."""
    by_bundle = Window.partitionBy("cluster", "bundle")
    newer_chunks = by_bundle.orderBy(F.col("chunk").desc()).rowsBetween(Window.unboundedPreceding, -1)
    chunks = chunks.withColumn("newer", F.coalesce(F.sum("rows").over(newer_chunks), F.lit(0))).withColumn(
        "count", F.sum("rows").over(by_bundle)
    )
    distinct_ids = F.col("rows") == F.bit_count("mask")
    # The ids from the oldest row's (the mask's lowest bit, -(mask & -mask) being it and all above) to the newest.
    span = F.expr("shiftrightunsigned(-1L, 63 - highest) & -(mask & -mask)")
    # Every snapshot the broker reported in, from the oldest row to the newest, has one row: no gaps.
    exact = (
        distinct_ids
        & (F.col("reported") == F.col("reported_max"))
        & (F.col("mask") == F.col("reported").bitwiseAND(span))
    )
    reported_after_newest = F.expr("bit_count(shiftrightunsigned(shiftrightunsigned(reported, highest), 1))")
    needs_rows = ~distinct_ids  # two rows for one snapshot id: their order is by broker
    terms = []
    for prefix, samples in HORIZONS:
        alpha, threshold = 1.0 / samples, F.col("count") - samples
        # The oldest `samples` rows, or all of a bundle with fewer, weigh the same.
        uniform = (F.col("count") <= samples) | (F.col("newer") >= threshold)
        decayed = F.col("newer") + F.col("rows") <= threshold
        needs_rows = needs_rows | ~(uniform | (decayed & exact))
        uniform_weight = _sample_count_weight(F.col("count"), F.col("count"), samples)  # an oldest row's
        decay = alpha * F.pow(F.lit(1 - alpha), F.col("newer") - reported_after_newest)
        terms += [
            F.when(uniform, uniform_weight * F.col(f"plain_{c}"))
            .otherwise(decay * F.col(f"{prefix}_decayed_{c}"))
            .alias(f"{prefix}_{c}")
            for c in RATE_COLUMNS
        ]
        terms.append(F.least(F.col("count"), F.lit(samples)).alias(f"{prefix}_samples"))
    return chunks.select(
        "cluster",
        "bundle",
        "chunk",
        "newer",
        "count",
        needs_rows.alias("needs_rows"),
        F.when(F.col("newer") == 0, F.col("topics")).alias("topics"),
        *terms,
        F.col("count").alias("samples"),
        (F.shiftleft("chunk", CHUNK_BITS) + F.col("highest")).alias("last_snapshot_id"),
        F.unix_millis("newest_taken").alias("last_taken_millis"),
    )


def _snapshot_ranges(chunk_ids: Sequence[int], most: int = 32) -> F.Column:
    """A filter on snapshot_id for the chunks, as ranges Parquet row-group statistics can skip files by."""
    ranges: list[list[int]] = []
    for chunk in sorted(chunk_ids):
        if ranges and chunk == ranges[-1][1] + 1:
            ranges[-1][1] = chunk
        else:
            ranges.append([chunk, chunk])
    if len(ranges) > most:
        ranges = [[ranges[0][0], ranges[-1][1]]]
    snapshot = F.col("snapshot_id")
    conditions = [snapshot.between(first << CHUNK_BITS, ((last + 1) << CHUNK_BITS) - 1) for first, last in ranges]
    return reduce(operator.or_, conditions)


def _sample_count_averages(ranked: DataFrame) -> DataFrame:
    """Per (cluster, bundle), from rows with their bundle's row `count` and their `rank` (0 = newest)."""
    # The weights in a projection first: computed once per row, not once per averaged column.
    weights = [
        _sample_count_weight(F.col("count"), F.col("rank"), samples).alias(f"{prefix}_weight")
        for prefix, samples in HORIZONS
    ]
    aggregations = [F.max(F.when(F.col("rank") == 0, F.col("topics"))).alias("topics")]
    for prefix, samples in HORIZONS:
        weight = F.col(f"{prefix}_weight")
        aggregations += [F.sum(weight * F.col(c)).alias(f"{prefix}_{c}") for c in RATE_COLUMNS]
        aggregations.append(F.least(F.max("count"), F.lit(samples)).alias(f"{prefix}_samples"))
    return (
        ranked.select("cluster", "bundle", "count", "rank", "topics", *RATE_COLUMNS, *weights)
        .groupBy("cluster", "bundle")
        .agg(*aggregations)
    )


def bundle_averages(
    bundles: DataFrame, averaging: Averaging, as_of: datetime, brokers: DataFrame | None = None
) -> DataFrame:
    """Per (cluster, bundle): short- and long-term averages, sample counts and the latest topic count.

    Samples are in the order the collector replays them: by snapshot id, then broker (a bundle two
    brokers reported in one snapshot gets two samples). `brokers` (the brokers table) says which
    snapshots each broker reported in, so that a snapshot without its broker's report is no gap.
    Also per bundle: its sample count and newest sample's id and time (`FOLD_COLUMNS`).
    """
    if averaging.mode != "pulsar":
        aggregations = [
            F.max_by("topics", F.struct("snapshot_id", "broker")).alias("topics"),
            F.count(F.lit(1)).alias("samples"),
            F.max("snapshot_id").alias("last_snapshot_id"),
            F.unix_millis(F.max("taken_at")).alias("last_taken_millis"),
        ]
        for prefix, span in (("short", averaging.short_window), ("long", averaging.long_window)):
            inside = F.col("taken_at") > F.lit(as_of - span)
            aggregations += [F.avg(F.when(inside, F.col(c))).alias(f"{prefix}_{c}") for c in RATE_COLUMNS]
            aggregations.append(F.count(F.when(inside, F.lit(1))).alias(f"{prefix}_samples"))
        return bundles.groupBy("cluster", "bundle").agg(*aggregations)

    presence = broker_presence(brokers) if brokers is not None else None
    # Small (about one row per bundle and 64 snapshots): materialised once for its three uses.
    terms = _chunk_terms(_chunk_sums(bundles, presence)).localCheckpoint()
    columns = ["topics", *AVERAGE_COLUMNS, "short_samples", "long_samples", *FOLD_COLUMNS]

    def add_up(parts: DataFrame) -> DataFrame:
        return parts.groupBy("cluster", "bundle").agg(
            *[F.sum(c).alias(c) for c in AVERAGE_COLUMNS],
            *[F.max(c).alias(c) for c in columns if c not in AVERAGE_COLUMNS],
        )

    # Added up per bundle before the union: the window left each bundle's chunks in one partition, so the last
    # shuffle carries a row per bundle, not one per chunk. Chunks ranked row by row add nothing to the averages
    # here, but their sample counts and newest ids.
    settled = [F.when(~F.col("needs_rows"), F.col(c)).alias(c) for c in ("topics", *AVERAGE_COLUMNS)]
    parts = [add_up(terms.select("cluster", "bundle", *settled, "short_samples", "long_samples", *FOLD_COLUMNS))]
    needed = terms.where("needs_rows").select("cluster", "bundle", "chunk", "newer", "count")
    chunks_per_id = {row["chunk"]: row["count"] for row in needed.groupBy("chunk").count().collect()}
    if chunks_per_id:
        # Pass 2, over the files holding those chunks only: rank their rows by a sort within each chunk.
        if sum(chunks_per_id.values()) <= BROADCAST_MOST_CHUNKS:
            needed = F.broadcast(needed)
        rows = (
            bundles.where(_snapshot_ranges(list(chunks_per_id)))
            .withColumn("chunk", F.shiftright("snapshot_id", CHUNK_BITS))
            .join(needed, ["cluster", "bundle", "chunk"])
        )
        within_chunk = Window.partitionBy("cluster", "bundle", "chunk").orderBy(
            F.col("snapshot_id").desc(), F.col("broker").desc()
        )
        ranked = rows.withColumn("rank", F.col("newer") + F.row_number().over(within_chunk) - 1)
        no_fold_columns = [F.lit(None).cast("long").alias(c) for c in FOLD_COLUMNS]
        averaged_columns = [c for c in columns if c not in FOLD_COLUMNS]
        parts.append(_sample_count_averages(ranked).select("cluster", "bundle", *averaged_columns, *no_fold_columns))
    return add_up(reduce(DataFrame.unionByName, parts))


def _fold_weights(samples: int, stored: F.Column, new: F.Column, position: F.Column) -> tuple[F.Column, F.Column]:
    """Pulsar's rule, n = min(n + 1, N) and avg = ((n - 1) avg + x) / n, applied `new` times to an average of
    `stored` samples, in closed form: the weight of the new sample at `position` (1 = the oldest new one), and
    the stored average's.

    The sample folded k-th is divided by n_k = min(stored + k, N), then each later step j multiplies it by
    (n_j - 1) / n_j: while n_j < N, the product telescopes to (stored + k) / (stored + J), where J = min(new, L)
    and L = N - stored is the step at which n reaches N; after that, each step multiplies by (1 - 1/N).
    The stored average's weight is the same product from k = 0, without the division (0 when nothing was stored).
    """
    capped_at = F.greatest(F.lit(samples) - stored, F.lit(0))
    uncapped = F.least(new, capped_at)

    def carried(k: F.Column) -> F.Column:
        telescoped = F.when(uncapped > k, (stored + k) / (stored + uncapped)).otherwise(F.lit(1.0))
        decayed = F.pow(F.lit(1 - 1 / samples), F.greatest(new - F.greatest(k, capped_at), F.lit(0)))
        return telescoped * decayed

    return carried(position) / F.least(stored + position, F.lit(samples)), carried(F.lit(0))


def fold_samples(state: DataFrame, new_rows: DataFrame, as_of: datetime, history: timedelta) -> DataFrame:
    """The averages of `bundle_averages` (with `FOLD_COLUMNS`) from a stored state (`STATE_SCHEMA` rows with their
    `cluster`) and the samples taken since, read in the collector's replay order. Bundles with no sample within
    `history` are dropped, as a recompute drops them."""
    by_bundle = Window.partitionBy("cluster", "bundle")
    newest_first = by_bundle.orderBy(F.col("snapshot_id").desc(), F.col("broker").desc())
    stored = state.select("cluster", "bundle", F.col("samples").alias("stored"))
    ranked = (
        new_rows.select("cluster", "bundle", "snapshot_id", "broker", "taken_at", "topics", *RATE_COLUMNS)
        .withColumn("new", F.count(F.lit(1)).over(by_bundle))
        .withColumn("position", F.col("new") - F.row_number().over(newest_first) + 1)
        .join(stored, ["cluster", "bundle"], "left")
        .withColumn("stored", F.coalesce("stored", F.lit(0).cast("long")))
    )
    aggregations = [
        F.max("new").alias("new"),
        F.max_by("topics", "position").alias("new_topics"),
        F.max("snapshot_id").alias("new_last_snapshot_id"),
        F.unix_millis(F.max("taken_at")).alias("new_last_taken_millis"),
    ]
    for prefix, samples in HORIZONS:
        weight, _ = _fold_weights(samples, F.col("stored"), F.col("new"), F.col("position"))
        ranked = ranked.withColumn(f"{prefix}_weight", weight)
        aggregations += [F.sum(F.col(f"{prefix}_weight") * F.col(c)).alias(f"new_{prefix}_{c}") for c in RATE_COLUMNS]
    folded = ranked.groupBy("cluster", "bundle").agg(*aggregations).join(state, ["cluster", "bundle"], "full")
    stored_samples = F.coalesce("samples", F.lit(0).cast("long"))
    new_samples = F.coalesce("new", F.lit(0).cast("long"))
    columns = [
        F.coalesce("new_topics", "topics").alias("topics"),
        (stored_samples + new_samples).alias("samples"),
        F.coalesce("new_last_snapshot_id", "last_snapshot_id").alias("last_snapshot_id"),
        F.coalesce("new_last_taken_millis", "last_taken_millis").alias("last_taken_millis"),
    ]
    for prefix, samples in HORIZONS:
        _, carried = _fold_weights(samples, stored_samples, new_samples, F.lit(0))
        for c in RATE_COLUMNS:
            new_part = F.coalesce(F.col(f"new_{prefix}_{c}"), F.lit(0.0))
            columns.append((F.coalesce(F.col(f"{prefix}_{c}"), F.lit(0.0)) * carried + new_part).alias(f"{prefix}_{c}"))
        columns.append(F.least(stored_samples + new_samples, F.lit(samples)).alias(f"{prefix}_samples"))
    window_start = int((as_of - history).timestamp() * 1000)
    return folded.select("cluster", "bundle", *columns).where(F.col("last_taken_millis") > F.lit(window_start))


_MODEL_COLUMNS = (
    "cluster",
    "broker",
    "snapshot_id",
    "cpu_usage",
    "cpu_limit",
    "bandwidth_in_usage",
    "bandwidth_in_limit",
    "bandwidth_out_usage",
    "bandwidth_out_limit",
    "msg_rate_in",
    "msg_rate_out",
    "msg_throughput_in",
    "msg_throughput_out",
)


def usage_models(brokers: DataFrame) -> dict[str, dict[str, Any]]:
    """Per cluster, the brokers' fitted usage models (JSON) from their rows of the `brokers` table."""

    def fit(frame: Any) -> Any:
        import pandas as pd

        from planner.plan.usage_model import fit_usage_models, histories_from_columns

        models = fit_usage_models(histories_from_columns(frame))
        return pd.DataFrame({"cluster": [str(frame["cluster"].iloc[0])], "models": [json.dumps(models.to_json())]})

    fitted = brokers.select(*_MODEL_COLUMNS).groupBy("cluster").applyInPandas(fit, "cluster string, models string")
    return {row["cluster"]: json.loads(row["models"]) for row in fitted.collect()}


def _bundle_data_json(row: Mapping[str, Any]) -> dict[str, Any]:
    def term(prefix: str, max_samples: int) -> dict[str, Any]:
        document = {"maxSamples": max_samples, "numSamples": int(row[f"{prefix}_samples"] or 0)}
        for column, name in JSON_NAMES.items():
            value = row[f"{prefix}_{column}"]
            document[name] = float(value) if value is not None else 0.0
        return document

    return {
        "shortTermData": term("short", SHORT_SAMPLES),
        "longTermData": term("long", LONG_SAMPLES),
        "topics": int(row["topics"] or 0),
    }


def _broker_json(row: Mapping[str, Any], stats: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    def usage(name: str) -> dict[str, float]:
        return {"usage": float(row[f"{name}_usage"]), "limit": float(row[f"{name}_limit"])}

    return {
        "cpu": usage("cpu"),
        "memory": usage("memory"),
        "directMemory": usage("direct_memory"),
        "bandwidthIn": usage("bandwidth_in"),
        "bandwidthOut": usage("bandwidth_out"),
        "msgRateIn": float(row["msg_rate_in"]),
        "msgRateOut": float(row["msg_rate_out"]),
        "msgThroughputIn": float(row["msg_throughput_in"]),
        "msgThroughputOut": float(row["msg_throughput_out"]),
        "numTopics": int(row["num_topics"]),
        "numBundles": int(row["num_bundles"]),
        "numConsumers": int(row["num_consumers"]),
        "numProducers": int(row["num_producers"]),
        "lastUpdate": int(row["last_update"]),
        "lastStats": dict(stats),
        "bundles": sorted(stats),
    }


def _plan_group(
    cluster: str,
    payloads: Sequence[tuple[str, Any]],
    inputs: Mapping[str, Any],
    strategy: str,
    now_millis: int,
    emit_load_data: bool,
) -> JobResult:
    """Assemble one cluster's LoadData from its rows (kind and parsed payload) and run the planner on it."""
    from planner.config import PulsarConfig
    from planner.model import load_data_from_mapping
    from planner.plan.document import JobResult
    from planner.plan.maintenance import MaintenanceRequest, maintenance_plan
    from planner.plan.planning import make_plan
    from planner.plan.usage_model import UsageModels

    brokers: dict[str, dict[str, Any]] = {}
    stats: dict[str, dict[str, dict[str, Any]]] = {}
    bundle_data: dict[str, dict[str, Any]] = {}
    latest_snapshot = None
    for kind, payload in payloads:
        if kind == "broker":
            brokers[payload["broker"]] = payload["row"]
            latest_snapshot = payload["row"]["snapshot_id"]
        elif kind == "stats":
            stats.setdefault(payload["broker"], {})[payload["bundle"]] = payload["stats"]
        else:
            bundle_data[payload["bundle"]] = _bundle_data_json(payload["row"])
    cluster_inputs = inputs.get(cluster, {})
    document = {
        "brokers": {broker: _broker_json(row, stats.get(broker, {})) for broker, row in brokers.items()},
        "bundleData": {
            bundle: data for bundle, data in bundle_data.items() if any(bundle in s for s in stats.values())
        },
        "recentlyUnloadedBundles": cluster_inputs.get("recentlyUnloadedBundles", {}),
    }
    load_data = load_data_from_mapping(document)
    config = PulsarConfig.from_settings(cluster_inputs.get("settings", {}), source=f"settings of {cluster}")
    models = UsageModels.from_json(cluster_inputs["usageModels"]) if "usageModels" in cluster_inputs else None
    if "maintenance" in cluster_inputs:
        request = MaintenanceRequest.parse(cluster_inputs["maintenance"], f"maintenance of {cluster}")
        return JobResult(
            plan=maintenance_plan(
                cluster, load_data, config, request, models, cluster_inputs.get("ownedBundles")
            ).to_document(),
            snapshot=latest_snapshot,
            load_data=load_data.model_dump(by_alias=True, mode="json") if emit_load_data else None,
        )
    plan = make_plan(
        cluster,
        load_data,
        config,
        strategy,
        cluster_inputs.get("state"),
        now_millis=now_millis,
        include_splits=cluster_inputs.get("includeSplits", True),
        namespace_bundle_counts=cluster_inputs.get("namespaceBundleCounts"),
        seed=int(latest_snapshot or 0),
        usage_models=models,
    )
    return JobResult(
        plan=plan.to_document(),
        snapshot=latest_snapshot,
        load_data=load_data.model_dump(by_alias=True, mode="json") if emit_load_data else None,
    )


def _date_partition(taken_at: datetime) -> F.Column:
    """The `date` partition value of rows taken at `taken_at` (UTC)."""
    return F.lit(taken_at.astimezone(UTC).date().isoformat())


def _taken_after(since: datetime) -> F.Column:
    """Rows taken after `since`, in words the reader prunes date partitions by."""
    return (F.col("date") >= _date_partition(since)) & (F.col("taken_at") > F.lit(since))


def _new_samples(bundles: DataFrame, folding: Mapping[str, AveragesState]) -> DataFrame:
    """The rows of each folding cluster that its state has not folded: taken since `LATE_WINDOW` before the state,
    other than the snapshots it folded then (the date partitions before are never listed)."""
    conditions = []
    for cluster, state in folding.items():
        condition = (F.col("cluster") == F.lit(cluster)) & _taken_after(state.as_of - LATE_WINDOW)
        if state.recent_snapshots:
            condition &= ~F.col("snapshot_id").isin(list(state.recent_snapshots))
        conditions.append(condition)
    return bundles.where(reduce(operator.or_, conditions))


def _choose_states(
    bundles: DataFrame,
    samples: str,
    clusters: Sequence[str],
    as_of: datetime,
    history: timedelta,
    excluded: Mapping[str, Sequence[int]],
    recompute: bool,
) -> dict[str, StateChoice]:
    """Per cluster, the averages state its run folds onto, or why it recomputes (`choose_state`, and here the check
    that needs the samples: none of those not folded is older than the newest folded)."""
    choices = {
        cluster: choose_state(samples, cluster, as_of, history, excluded[cluster], recompute=recompute)
        for cluster in clusters
    }
    folding = {cluster: choice.state for cluster, choice in choices.items() if choice.state is not None}
    if folding:
        oldest_new = _new_samples(bundles, folding).groupBy("cluster").agg(F.min("snapshot_id").alias("id")).collect()
        for row in oldest_new:
            newest_folded = folding[row["cluster"]].newest_snapshot
            if row["id"] <= newest_folded:
                choices[row["cluster"]] = StateChoice(
                    f"snapshot {row['id']} was published after the averages state's newest, {newest_folded}"
                )
    return choices


def recent_snapshots(bundles: DataFrame, as_of: datetime) -> dict[str, list[int]]:
    """Per cluster, the snapshot ids taken after `as_of - LATE_WINDOW` (what a state records as folded lately)."""
    recent = bundles.where(_taken_after(as_of - LATE_WINDOW)).groupBy("cluster")
    rows = recent.agg(F.sort_array(F.collect_set("snapshot_id")).alias("ids")).collect()
    return {row["cluster"]: list(row["ids"]) for row in rows}


def _latest_snapshots(brokers: DataFrame) -> dict[str, tuple[int, datetime]]:
    """Per cluster, its newest snapshot's id and time."""
    newest = brokers.groupBy("cluster").agg(F.max_by(F.struct("snapshot_id", "taken_at"), "snapshot_id").alias("s"))
    return {row["cluster"]: (row["s"]["snapshot_id"], row["s"]["taken_at"]) for row in newest.collect()}


def _of_snapshots(frame: DataFrame, snapshots: Mapping[str, tuple[int, datetime]]) -> DataFrame:
    """The rows of one snapshot per cluster (its date partition only)."""
    conditions = [
        (F.col("cluster") == F.lit(cluster))
        & (F.col("date") == _date_partition(taken_at))
        & (F.col("snapshot_id") == F.lit(snapshot_id))
        for cluster, (snapshot_id, taken_at) in snapshots.items()
    ]
    return frame.where(reduce(operator.or_, conditions))


def cluster_averages(
    spark: SparkSession,
    bundles: DataFrame,
    brokers: DataFrame,
    samples: str,
    clusters: Sequence[str],
    averaging: Averaging,
    as_of: datetime,
    history: timedelta,
    excluded: Mapping[str, Sequence[int]],
    recompute: bool = False,
) -> tuple[DataFrame, dict[str, StateChoice]]:
    """The clusters' bundle averages (`bundle_averages`' columns) from the `bundles` table up to `as_of`, and for
    `pulsar` averaging each cluster's choice of state: folded onto it, or recomputed over `history` (with the
    `brokers` table within it)."""
    choices: dict[str, StateChoice] = {}
    if averaging.mode == "pulsar":
        choices = _choose_states(bundles, samples, clusters, as_of, history, excluded, recompute)
    folding = {cluster: choice for cluster, choice in choices.items() if choice.state is not None}
    recomputed = [cluster for cluster in clusters if cluster not in folding]
    parts = []
    if recomputed:
        of_recomputed = F.col("cluster").isin(recomputed)
        within = of_recomputed & (F.col("taken_at") > F.lit(as_of - history))
        parts.append(bundle_averages(bundles.where(within), averaging, as_of, brokers.where(of_recomputed)))
    if folding:
        states = [
            spark.read.schema(_spark_ddl(STATE_SCHEMA))
            .parquet(storage.spark_uri(choice.uri or ""))
            .withColumn("cluster", F.lit(cluster))
            for cluster, choice in folding.items()
        ]
        new_rows = _new_samples(bundles, {cluster: choice.state for cluster, choice in folding.items() if choice.state})
        parts.append(fold_samples(reduce(DataFrame.unionByName, states), new_rows, as_of, history))
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts), choices


def plan_clusters(
    spark: SparkSession,
    samples: str | Path,
    clusters: Sequence[str],
    strategy: str,
    *,
    inputs: Mapping[str, Any] | None = None,
    averaging: Averaging = Averaging(),
    history: timedelta = timedelta(days=7),
    as_of: datetime | None = None,
    emit_load_data: bool = False,
    recompute_averages: bool = False,
) -> dict[str, JobResult]:
    """Plans for the clusters, keyed by cluster (the plan, the snapshot planned, and LoadData when asked).

    `inputs[cluster]` carries what the store knows: `state`, `settings` (Pulsar keys),
    `recentlyUnloadedBundles`, `namespaceBundleCounts`, `includeSplits`, `excludedSnapshots`. The job adds
    `usageModels`, fitted on the brokers' reports within `history`.

    `pulsar` averages fold the samples taken since the cluster's stored averages state onto it, or are
    recomputed from the samples within `history` (`planner.samples.averages_state` says when); each result says
    which and why. The run then stores its own state.
    """
    from planner.plan.document import AveragesSource

    as_of = as_of or datetime.now(UTC)
    samples_uri = storage.to_uri(samples)
    excluded = {cluster: (inputs or {}).get(cluster, {}).get("excludedSnapshots", []) for cluster in clusters}
    all_bundles = read_table(spark, samples, "bundles", clusters, as_of, excluded)
    in_history = F.col("taken_at") > F.lit(as_of - history)
    brokers = read_table(spark, samples, "brokers", clusters, as_of, excluded).where(in_history)
    inputs = {cluster: dict(document) for cluster, document in (inputs or {}).items()}
    for cluster, models in usage_models(brokers).items():
        inputs.setdefault(cluster, {})["usageModels"] = models
    latest = _latest_snapshots(brokers)
    if not latest:
        return {}
    latest_brokers = _of_snapshots(brokers, latest)
    latest_stats = _of_snapshots(all_bundles, latest)
    averages, choices = cluster_averages(
        spark, all_bundles, brokers, samples_uri, clusters, averaging, as_of, history, excluded, recompute_averages
    )

    broker_columns = [c for c in brokers.columns if c not in ("cluster", "date", "taken_at")]
    average_columns = [c for c in averages.columns if c != "cluster"]
    rows = (
        latest_brokers.select(
            "cluster",
            F.lit("broker").alias("kind"),
            F.to_json(F.struct(F.col("broker"), F.struct(*broker_columns).alias("row"))).alias("payload"),
        )
        .unionByName(
            latest_stats.select(
                "cluster",
                F.lit("stats").alias("kind"),
                F.to_json(
                    F.struct(
                        F.col("broker"),
                        F.col("bundle"),
                        F.struct(
                            F.col("msg_rate_in").alias("msgRateIn"),
                            F.col("msg_throughput_in").alias("msgThroughputIn"),
                            F.col("msg_rate_out").alias("msgRateOut"),
                            F.col("msg_throughput_out").alias("msgThroughputOut"),
                            F.col("consumer_count").alias("consumerCount"),
                            F.col("producer_count").alias("producerCount"),
                            F.col("topics"),
                        ).alias("stats"),
                    )
                ).alias("payload"),
            )
        )
        .unionByName(
            averages.select(
                "cluster",
                F.lit("average").alias("kind"),
                F.to_json(F.struct(F.col("bundle"), F.struct(*average_columns).alias("row"))).alias("payload"),
            )
        )
    )
    now_millis = int(as_of.timestamp() * 1000)
    recent = recent_snapshots(all_bundles, as_of) if choices else {}
    # Each cluster's plan is made on the driver by the pure planner (pydantic and all; the executors need none
    # of it), from its rows streamed one partition at a time: no RDDs, so Spark Connect runs it too.
    streamed = rows.orderBy("cluster").toLocalIterator()
    results = {}
    for cluster, cluster_rows in itertools.groupby(streamed, key=operator.itemgetter("cluster")):
        payloads = [(row["kind"], json.loads(row["payload"])) for row in cluster_rows]
        result = _plan_group(cluster, payloads, inputs, strategy, now_millis, emit_load_data)
        if averaging.mode != "pulsar":
            source = AveragesSource(
                method="window", reason=f"plain means over {averaging.short_window} and {averaging.long_window} windows"
            )
        else:
            choice = choices[cluster]
            written = keep_state(
                samples_uri, cluster, choice, payloads, recent.get(cluster, []), as_of, history, excluded[cluster]
            )
            source = AveragesSource(
                method="incremental" if choice.state else "full",
                reason=choice.reason,
                state=storage.display(choice.uri) if choice.uri else None,
                written=storage.display(written),
            )
        results[cluster] = result.model_copy(update={"averages": source})
    return results


def keep_state(
    samples: str,
    cluster: str,
    choice: StateChoice,
    payloads: Sequence[tuple[str, Any]],
    recent: Sequence[int],
    as_of: datetime,
    history: timedelta,
    unpublished: Sequence[int],
) -> str:
    """Store the cluster's averages as this run leaves them, for the next run to fold onto."""
    rows = [
        {"bundle": payload["bundle"], **{name: payload["row"][name] for name in STATE_SCHEMA.names[1:]}}
        for kind, payload in payloads
        if kind == "average"
    ]
    newest = max([row["last_snapshot_id"] for row in rows] + list(recent), default=0)
    state = AveragesState(
        cluster=cluster,
        as_of=as_of,
        origin=choice.state.origin if choice.state else as_of - history,
        newest_snapshot=newest,
        recent_snapshots=tuple(recent),
        unpublished=tuple(sorted(unpublished)),
    )
    return write_state(samples, state, rows)


def plan_output_uri(output: str, cluster: str) -> str:
    """Where the job writes a cluster's plan (JobResult JSON) under its `--output`."""
    return storage.join(storage.to_uri(output), f"plan-{cluster}.json")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Plan rebalances for clusters from the samples dataset.")
    parser.add_argument("--samples", required=True, help="the samples dataset root (path or URI)")
    parser.add_argument("--input", required=True, help="JSON: clusters, strategy and per-cluster inputs (path or URI)")
    parser.add_argument("--output", required=True, help="directory for plan-<cluster>.json files (path or URI)")
    parser.add_argument("--master", default=None, help="Spark master; overrides spark-submit's --master")
    args = parser.parse_args(argv)
    request = json.loads(storage.read_bytes(args.input, "the plan job's input"))
    spark = spark_session(args.master, storage_root=args.samples)  # master None: spark-submit's
    try:
        plans = plan_clusters(
            spark,
            args.samples,
            request["clusters"],
            request["strategy"],
            inputs=request.get("inputs", {}),
            averaging=Averaging.parse(request.get("averaging", "pulsar")),
            history=parse_duration(request.get("history", "7d")),
            as_of=datetime.fromisoformat(request["asOf"]) if request.get("asOf") else None,
            emit_load_data=request.get("emitLoadData", False),
            recompute_averages=request.get("recomputeAverages", False),
        )
    finally:
        spark.stop()
    for cluster, result in plans.items():
        storage.write_bytes(plan_output_uri(args.output, cluster), json.dumps(result.to_json(), indent=2).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
