"""The planning job: bundle averages at fleet scale with Spark (`spark_jobs.averaging`), then each cluster's rows
streamed to the driver, assembled into its LoadData and planned by the planner's pure functions
(`planner.plan.cluster_plan`), so Spark and the CLI always agree. It reads the samples dataset and writes one plan
file per cluster; it never writes the database (the commit step does).

Usage models: each broker's CPU and NIC usage as background plus costs per msg/s and per byte/s,
fitted on its load reports within the history window (`planner.plan.usage_model`, grouped by cluster with
`applyInPandas`; broker counts are small). Every plan's forecast predicts with them, and
`AvgShedderPredictive` plans with them.

Run with spark-submit:
  spark-submit spark_jobs/plan_job.py --samples URI --input URI --output URI
(paths or URIs under the storage root; `planner.storage`; the input is a `planner.plan.request.JobRequest`), or
import `plan_clusters(spark, samples, request)`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import operator
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from planner import storage
from planner.plan.cluster_plan import ClusterLoad, plan_cluster
from planner.plan.document import AveragesSource, JobResult
from planner.plan.request import AveragingMode, JobRequest
from planner.plan.usage_model import HISTORY_COLUMNS, UsageModels
from planner.pulsar.model import load_data_from_mapping
from planner.samples.averages_state import (
    LONG_SAMPLES,
    SHORT_SAMPLES,
    STATE_SCHEMA,
    AveragesState,
    StateChoice,
    write_state,
)
from spark_jobs.averaging import cluster_averages, recent_snapshots
from spark_jobs.session import spark_session
from spark_jobs.tables import date_partition, read_table

JSON_NAMES = {
    "msg_rate_in": "msgRateIn",
    "msg_throughput_in": "msgThroughputIn",
    "msg_rate_out": "msgRateOut",
    "msg_throughput_out": "msgThroughputOut",
}


_MODEL_COLUMNS = ("cluster", *HISTORY_COLUMNS)


def usage_models(brokers: DataFrame) -> dict[str, UsageModels]:
    """Per cluster, the brokers' fitted usage models from their rows of the `brokers` table."""

    def fit(frame: Any) -> Any:
        import pandas as pd

        from planner.plan.usage_model import planning_models

        models = planning_models(frame)  # the plan is made on the cluster's newest snapshot
        return pd.DataFrame({"cluster": [str(frame["cluster"].iloc[0])], "models": [json.dumps(models.to_json())]})

    fitted = brokers.select(*_MODEL_COLUMNS).groupBy("cluster").applyInPandas(fit, "cluster string, models string")
    return {row["cluster"]: UsageModels.from_json(json.loads(row["models"])) for row in fitted.collect()}


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


def _cluster_load(payloads: Sequence[tuple[str, Any]], recently_unloaded: Mapping[str, int]) -> ClusterLoad:
    """One cluster's rows (kind and parsed payload) as its LoadData at the latest snapshot, with what the extensible
    load manager's plans read besides."""
    brokers: dict[str, dict[str, Any]] = {}
    stats: dict[str, dict[str, dict[str, Any]]] = {}
    bundle_data: dict[str, dict[str, Any]] = {}
    throughputs: dict[str, list[tuple[int, float]]] = {}
    latest_snapshot = None
    for kind, payload in payloads:
        if kind == "broker":
            brokers[payload["broker"]] = payload["row"]
            latest_snapshot = payload["row"]["snapshot_id"]
        elif kind == "stats":
            stats.setdefault(payload["broker"], {})[payload["bundle"]] = payload["stats"]
        elif kind == "throughput":
            throughputs.setdefault(payload["broker"], []).append((payload["snapshot_id"], payload["throughput"]))
        else:
            bundle_data[payload["bundle"]] = _bundle_data_json(payload["row"])
    document = {
        "brokers": {broker: _broker_json(row, stats.get(broker, {})) for broker, row in brokers.items()},
        "bundleData": {
            bundle: data for bundle, data in bundle_data.items() if any(bundle in s for s in stats.values())
        },
        "recentlyUnloadedBundles": dict(recently_unloaded),
    }
    return ClusterLoad(
        load_data=load_data_from_mapping(document),
        snapshot=latest_snapshot,
        weighted_max_ema={broker: row.get("weighted_max_ema") for broker, row in brokers.items()},
        throughput_history=throughputs,
    )


def _latest_snapshots(brokers: DataFrame) -> dict[str, tuple[int, datetime]]:
    """Per cluster, its newest snapshot's id and time."""
    newest = brokers.groupBy("cluster").agg(F.max_by(F.struct("snapshot_id", "taken_at"), "snapshot_id").alias("s"))
    return {row["cluster"]: (row["s"]["snapshot_id"], row["s"]["taken_at"]) for row in newest.collect()}


def _of_snapshots(frame: DataFrame, snapshots: Mapping[str, tuple[int, datetime]]) -> DataFrame:
    """The rows of one snapshot per cluster (its date partition only)."""
    conditions = [
        (F.col("cluster") == F.lit(cluster))
        & (F.col("date") == date_partition(taken_at))
        & (F.col("snapshot_id") == F.lit(snapshot_id))
        for cluster, (snapshot_id, taken_at) in snapshots.items()
    ]
    return frame.where(reduce(operator.or_, conditions))


def plan_clusters(spark: SparkSession, samples: str | Path, request: JobRequest) -> dict[str, JobResult]:
    """Plans for the request's clusters, keyed by cluster (the plan, the snapshot planned, and LoadData when asked),
    each made with what the store knows of its cluster (`request.inputs`) and the usage models fitted on its
    brokers' reports within the history.

    `pulsar` averages fold the samples taken since the cluster's stored averages state onto it, or are
    recomputed from the samples within the history (`planner.samples.averages_state` says when); each result says
    which and why. The run then stores its own state.
    """
    clusters, averaging, history = request.clusters, request.averaging, request.history
    as_of = request.as_of or datetime.now(UTC)
    samples_uri = storage.to_uri(samples)
    excluded = {cluster: request.inputs_of(cluster).excluded_snapshots for cluster in clusters}
    all_bundles = read_table(spark, samples, "bundles", clusters, as_of, excluded)
    in_history = F.col("taken_at") > F.lit(as_of - history)
    brokers = read_table(spark, samples, "brokers", clusters, as_of, excluded).where(in_history)
    models = usage_models(brokers)
    latest = _latest_snapshots(brokers)
    if not latest:
        return {}
    latest_brokers = _of_snapshots(brokers, latest)
    latest_stats = _of_snapshots(all_bundles, latest)
    averages, choices = cluster_averages(
        spark,
        all_bundles,
        samples_uri,
        clusters,
        averaging,
        as_of,
        history,
        excluded,
        request.recompute_averages,
        {cluster: known.reports for cluster, known in request.inputs.items() if known.reports is not None},
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
        .unionByName(
            # On the extensible load manager (where brokers give their weightedMaxEMA): each broker's throughput
            # over the history, for TransferShedder's msgThroughputEMA.
            brokers.where(F.col("weighted_max_ema").isNotNull()).select(
                "cluster",
                F.lit("throughput").alias("kind"),
                F.to_json(
                    F.struct(
                        F.col("broker"),
                        F.col("snapshot_id"),
                        (F.col("msg_throughput_in") + F.col("msg_throughput_out")).alias("throughput"),
                    )
                ).alias("payload"),
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
        inputs = request.inputs_of(cluster)
        load = _cluster_load(payloads, inputs.recently_unloaded_bundles)
        plan = plan_cluster(
            cluster, load, inputs, request.strategy, now_millis=now_millis, usage_models=models.get(cluster)
        )
        if averaging.mode is not AveragingMode.PULSAR:
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
        results[cluster] = JobResult(
            plan=plan,
            snapshot=load.snapshot,
            load_data=load.load_data.model_dump(by_alias=True, mode="json") if request.emit_load_data else None,
            averages=source,
        )
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
    request = JobRequest.parse(storage.read_bytes(args.input, "the plan job's input"), f"plan job input {args.input}")
    spark = spark_session(args.master, storage_root=args.samples)  # master None: spark-submit's
    try:
        plans = plan_clusters(spark, args.samples, request)
    finally:
        spark.stop()
    for cluster, result in plans.items():
        storage.write_bytes(plan_output_uri(args.output, cluster), json.dumps(result.to_json(), indent=2).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
