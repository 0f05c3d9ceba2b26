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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from planner import storage
from spark_jobs.session import spark_session

if TYPE_CHECKING:
    from planner.plan.document import JobResult

SHORT_SAMPLES = 10
LONG_SAMPLES = 1000
# A chunk is 2**CHUNK_BITS consecutive snapshot ids: one 64-bit mask says which of them a bundle has rows in.
CHUNK_BITS = 6
CHUNK_SIZE = 1 << CHUNK_BITS
HORIZONS = (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES))
# Chunks whose rows are ranked one by one are joined to their rows by broadcast up to this many (~100 MB).
BROADCAST_MOST_CHUNKS = 2_000_000
RATE_COLUMNS = ("msg_rate_in", "msg_throughput_in", "msg_rate_out", "msg_throughput_out")
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
    import pyarrow as pa

    from planner.samples.dataset import BROKER_SCHEMA, BUNDLE_SCHEMA

    types = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "STRING"}
    schema = BROKER_SCHEMA if table == "brokers" else BUNDLE_SCHEMA
    columns = [
        f"`{field.name}` {'TIMESTAMP' if pa.types.is_timestamp(field.type) else types[field.type]}" for field in schema
    ]
    return ", ".join([*columns, "`cluster` STRING", "`date` STRING"])


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
    """
    if averaging.mode != "pulsar":
        aggregations = [F.max_by("topics", F.struct("snapshot_id", "broker")).alias("topics")]
        for prefix, span in (("short", averaging.short_window), ("long", averaging.long_window)):
            inside = F.col("taken_at") > F.lit(as_of - span)
            aggregations += [F.avg(F.when(inside, F.col(c))).alias(f"{prefix}_{c}") for c in RATE_COLUMNS]
            aggregations.append(F.count(F.when(inside, F.lit(1))).alias(f"{prefix}_samples"))
        return bundles.groupBy("cluster", "bundle").agg(*aggregations)

    presence = broker_presence(brokers) if brokers is not None else None
    # Small (about one row per bundle and 64 snapshots): materialised once for its three uses.
    terms = _chunk_terms(_chunk_sums(bundles, presence)).localCheckpoint()
    averaged = [f"{prefix}_{c}" for prefix, _ in HORIZONS for c in RATE_COLUMNS]
    columns = ["topics", *averaged, "short_samples", "long_samples"]

    def add_up(parts: DataFrame) -> DataFrame:
        return parts.groupBy("cluster", "bundle").agg(
            F.max("topics").alias("topics"),
            *[F.sum(c).alias(c) for c in averaged],
            F.max("short_samples").alias("short_samples"),
            F.max("long_samples").alias("long_samples"),
        )

    # Added up per bundle before the union: the window left each bundle's chunks in one partition, so the last
    # shuffle carries a row per bundle, not one per chunk.
    parts = [add_up(terms.where(~F.col("needs_rows")).select("cluster", "bundle", *columns))]
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
        parts.append(_sample_count_averages(ranked).select("cluster", "bundle", *columns))
    return add_up(reduce(DataFrame.unionByName, parts))


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


def _latest(frame: DataFrame) -> DataFrame:
    newest = frame.groupBy("cluster").agg(F.max("snapshot_id").alias("latest_snapshot"))
    return frame.join(newest, "cluster").where(F.col("snapshot_id") == F.col("latest_snapshot"))


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
    rows: Iterator[Any], inputs: Mapping[str, Any], strategy: str, now_millis: int, emit_load_data: bool
) -> JobResult:
    """Assemble one cluster's LoadData from its rows and run the planner on it."""
    from planner.config import PulsarConfig
    from planner.model import load_data_from_mapping
    from planner.plan.document import JobResult
    from planner.plan.planning import make_plan
    from planner.plan.usage_model import UsageModels

    brokers: dict[str, dict[str, Any]] = {}
    stats: dict[str, dict[str, dict[str, Any]]] = {}
    bundle_data: dict[str, dict[str, Any]] = {}
    cluster = None
    latest_snapshot = None
    for row in rows:
        cluster = row["cluster"]
        payload = json.loads(row["payload"])
        if row["kind"] == "broker":
            brokers[payload["broker"]] = payload["row"]
            latest_snapshot = payload["row"]["snapshot_id"]
        elif row["kind"] == "stats":
            stats.setdefault(payload["broker"], {})[payload["bundle"]] = payload["stats"]
        else:
            bundle_data[payload["bundle"]] = _bundle_data_json(payload["row"])
    assert cluster is not None
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
        usage_models=UsageModels.from_json(cluster_inputs["usageModels"]) if "usageModels" in cluster_inputs else None,
    )
    return JobResult(
        plan=plan.to_document(),
        snapshot=latest_snapshot,
        load_data=load_data.model_dump(by_alias=True, mode="json") if emit_load_data else None,
    )


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
) -> dict[str, JobResult]:
    """Plans for the clusters, keyed by cluster (the plan, the snapshot planned, and LoadData when asked).

    `inputs[cluster]` carries what the store knows: `state`, `settings` (Pulsar keys),
    `recentlyUnloadedBundles`, `namespaceBundleCounts`, `includeSplits`. The job adds `usageModels`,
    fitted on the brokers' reports within `history`.
    """
    as_of = as_of or datetime.now(UTC)
    excluded = {cluster: (inputs or {}).get(cluster, {}).get("excludedSnapshots", []) for cluster in clusters}
    bundles = read_table(spark, samples, "bundles", clusters, as_of, excluded).where(
        F.col("taken_at") > F.lit(as_of - history)
    )
    brokers = read_table(spark, samples, "brokers", clusters, as_of, excluded)
    inputs = {cluster: dict(document) for cluster, document in (inputs or {}).items()}
    for cluster, models in usage_models(brokers.where(F.col("taken_at") > F.lit(as_of - history))).items():
        inputs.setdefault(cluster, {})["usageModels"] = models
    latest_brokers = _latest(brokers)
    latest_stats = bundles.join(latest_brokers.select("cluster", "latest_snapshot").distinct(), "cluster").where(
        F.col("snapshot_id") == F.col("latest_snapshot")
    )
    averages = bundle_averages(bundles, averaging, as_of, brokers)

    broker_columns = [c for c in brokers.columns if c not in ("cluster", "date", "taken_at", "latest_snapshot")]
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
    # Each cluster's plan is made on the driver by the pure planner (pydantic and all; the executors need none
    # of it), from its rows streamed one partition at a time: no RDDs, so Spark Connect runs it too.
    streamed = rows.orderBy("cluster").toLocalIterator()
    results = {}
    for cluster, cluster_rows in itertools.groupby(streamed, key=operator.itemgetter("cluster")):
        results[cluster] = _plan_group(cluster_rows, inputs, strategy, now_millis, emit_load_data)
    return results


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
        )
    finally:
        spark.stop()
    for cluster, result in plans.items():
        storage.write_bytes(plan_output_uri(args.output, cluster), json.dumps(result.to_json(), indent=2).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
