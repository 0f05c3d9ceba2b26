"""Pulsar-compatible bundle averages over a synthetic history: Spark (local[2]) against single-process pandas.

Goal: <= 60 s for 50 M samples on local[2], at least 2x faster than pandas on the same data, and
doubling the data at most 2.2x the time. Prints the figures per size.

The history: `--bundles` bundles on `--brokers` brokers, `--snapshots` snapshots one minute apart, each
sampling every bundle, except that the first broker's report is missing from every 97th snapshot (its
bundles get a gap there, as in a partial snapshot). Rows are in the collector's layout (`BUNDLE_SCHEMA`,
`bundles/cluster=<name>/date=<YYYY-MM-DD>/`, and the `brokers` table beside it, one row per report),
one file per hour of snapshots as a compacted history would be. Data sets are generated once and kept
in ~/.cache/pulsar-rebalance/bench; generation is never timed.

Both sides compute the same thing from the same Parquet files: per (cluster, bundle), Pulsar's
short- and long-term sample-count averages of the four rates, the sample counts and the latest topic
count, the samples in the collector's replay order (snapshot id, then broker).
- Spark: `spark_jobs.averaging.bundle_averages` as the job runs it, given what the store records of the
  snapshots (which broker's report each lacks: a missing report is no gap), written to a no-op sink.
- pandas: one process, vectorised (pandas and NumPy, no Python loop over rows); reads only the columns
  it needs with pyarrow (string keys as categoricals), sorts by (cluster, bundle, snapshot id, broker),
  numbers each bundle's samples from the newest (groupby cumcount), applies the same closed-form weights
  and sums them per bundle (NumPy bincount over the group numbers).
Usage: python bench/bench_spark_averages.py [--bundles 10000] [--snapshots 5000] [--factors 1,2]
       [--brokers 20] [--pandas-max-samples 6e7] [--driver-memory 4g]
(50 M samples = 10,000 bundles x 5,000 snapshots; factor 2 doubles the snapshots.)
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from planner.plan.request import Averaging
from planner.samples.averages_state import LONG_SAMPLES, RATE_COLUMNS, SHORT_SAMPLES
from planner.samples.dataset import BROKER_SCHEMA, BUNDLE_SCHEMA
from planner.samples.reports import SnapshotReports
from spark_jobs.averaging import ReportPositions, bundle_averages
from spark_jobs.session import spark_session
from spark_jobs.tables import read_table

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SNAPSHOTS_PER_FILE = 60  # one file per hour: never across a date partition
GAP_EVERY = 97
CACHE = Path.home() / ".cache" / "pulsar-rebalance" / "bench"
AS_OF = T0 + timedelta(days=3650)


def broker_names(brokers: int) -> np.ndarray:
    return np.array([f"10.0.{b // 250}.{b % 250}:8080" for b in range(brokers)], dtype=object)


def hours(
    snapshots: int, members: int, per_file: int = SNAPSHOTS_PER_FILE
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Per file (`per_file` snapshots): its first snapshot, and each row's snapshot and member (bundle or broker)."""
    for first in range(0, snapshots, per_file):
        count = min(per_file, snapshots - first)
        yield first, np.repeat(np.arange(first, first + count), members), np.tile(np.arange(members), count)


def reported(snapshot: np.ndarray, broker: np.ndarray) -> np.ndarray:
    """Whether the broker's report is in the snapshot: the first broker's is missing from every 97th."""
    return ~((snapshot % GAP_EVERY == GAP_EVERY - 1) & (broker == 0))


def write_hour(
    root: Path, table: str, first: int, columns: dict[str, Any], schema: pa.Schema, minutes_apart: int = 1
) -> None:
    """One file of `table` in the collector's layout; columns the schema has and `columns` lacks are null."""
    snapshot = columns.pop("snapshot")
    taken = T0 + timedelta(minutes=first * minutes_apart)
    columns["snapshot_id"] = snapshot + 1
    millis = int(T0.timestamp() * 1000) + snapshot * 60_000 * minutes_apart
    columns["taken_at"] = pa.array(millis).cast(pa.timestamp("ms", tz="UTC"))
    frame = pa.table({f.name: columns.get(f.name, pa.nulls(len(snapshot), f.type)) for f in schema}, schema=schema)
    out = root / table / "cluster=bench" / f"date={taken.date().isoformat()}"
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(frame, out / f"part-{first:08d}.parquet", compression="zstd")


def generate(
    root: Path,
    bundles: int,
    brokers: int,
    snapshots: int,
    seed: int = 7,
    minutes_apart: int = 1,
    per_file: int = SNAPSHOTS_PER_FILE,
) -> None:
    """Write the bundles table under `root` (see the module docstring): snapshots `minutes_apart`, `per_file` of
    them in each file."""
    rng = np.random.default_rng(seed)
    names = np.array([f"t{i % 20}/ns{i % 300}/0x{i:08x}_0x{i + 1:08x}" for i in range(bundles)], dtype=object)
    namespaces = np.array([n.rsplit("/", 1)[0] for n in names], dtype=object)
    owner = np.arange(bundles) % brokers
    owner_names = broker_names(brokers)
    base_rate = rng.lognormal(5, 1, bundles)
    for first, snapshot, bundle in hours(snapshots, bundles, per_file):
        keep = reported(snapshot, owner[bundle])
        snapshot, bundle = snapshot[keep], bundle[keep]
        rate = base_rate[bundle] * rng.uniform(0.5, 1.5, len(bundle))
        columns = {
            "snapshot": snapshot,
            "broker": pa.array(owner_names[owner[bundle]]),
            "bundle": pa.array(names[bundle]),
            "namespace": pa.array(namespaces[bundle]),
            "msg_rate_in": rate,
            "msg_throughput_in": rate * 1000,
            "msg_rate_out": rate * 2,
            "msg_throughput_out": rate * 2000,
            "consumer_count": np.zeros(len(bundle), dtype=np.int64),
            "producer_count": np.zeros(len(bundle), dtype=np.int64),
            "topics": np.full(len(bundle), 4, dtype=np.int64),
        }
        write_hour(root, "bundles", first, columns, BUNDLE_SCHEMA, minutes_apart)


def generate_brokers(
    root: Path, brokers: int, snapshots: int, minutes_apart: int = 1, per_file: int = SNAPSHOTS_PER_FILE
) -> None:
    """The brokers table beside the bundles: a row per report (only which broker reported in which snapshot)."""
    names = broker_names(brokers)
    for first, snapshot, broker in hours(snapshots, brokers, per_file):
        keep = reported(snapshot, broker)
        columns = {"snapshot": snapshot[keep], "broker": pa.array(names[broker[keep]])}
        write_hour(root, "brokers", first, columns, BROKER_SCHEMA, minutes_apart)


def dataset(
    bundles: int, brokers: int, snapshots: int, minutes_apart: int = 1, per_file: int = SNAPSHOTS_PER_FILE
) -> tuple[Path, int]:
    """The cached data set (generated if missing) and its sample count."""
    name = f"bundles{bundles}-brokers{brokers}-snapshots{snapshots}-v2"
    if (minutes_apart, per_file) != (1, SNAPSHOTS_PER_FILE):
        name += f"-every{minutes_apart}m-{per_file}perfile"
    root = CACHE / name
    if (root / "DONE").exists() and not (root / "BROKERS_DONE").exists():  # cached before brokers were written
        shutil.rmtree(root / "brokers", ignore_errors=True)
        generate_brokers(root, brokers, snapshots, minutes_apart, per_file)
        (root / "BROKERS_DONE").touch()
    if not (root / "DONE").exists():
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        started = time.perf_counter()
        generate(partial, bundles, brokers, snapshots, minutes_apart=minutes_apart, per_file=per_file)
        generate_brokers(partial, brokers, snapshots, minutes_apart, per_file)
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)
        (root / "DONE").touch()
        (root / "BROKERS_DONE").touch()
        print(f"  (generated {root} in {time.perf_counter() - started:.0f} s, not timed)")
    samples = pq.ParquetDataset(root / "bundles").read(columns=["snapshot_id"]).num_rows
    return root, samples


def store_reports(brokers: int, snapshots: int, minutes_apart: int = 1) -> dict[str, SnapshotReports]:
    """What the store records of a generated history, as a plan run takes it: every snapshot, and the snapshots
    whose report of the first broker is missing."""
    snapshot = np.arange(snapshots)
    start = int(T0.timestamp() * 1000)
    lacking = snapshot[~reported(snapshot, np.zeros_like(snapshot))]
    return {
        "bench": SnapshotReports(
            snapshots=[(int(s) + 1, start + int(s) * 60_000 * minutes_apart) for s in snapshot],
            missing={str(broker_names(brokers)[0]): [int(s) + 1 for s in lacking]},
        )
    }


def spark_bundle_averages(spark: SparkSession, root: Path, reports: dict[str, SnapshotReports]) -> DataFrame:
    """Spark's averages as the job computes them, from the bundles table and the store's record of the reports."""
    frame = read_table(spark, root, "bundles", ["bench"], AS_OF)
    return bundle_averages(frame, Averaging(), AS_OF, ReportPositions.of_reports(reports))


def spark_averages(spark: SparkSession, root: Path, reports: dict[str, SnapshotReports]) -> float:
    started = time.perf_counter()
    spark_bundle_averages(spark, root, reports).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def pandas_averages(root: Path) -> tuple[float, pd.DataFrame]:
    """The same averages in one process (see the module docstring)."""
    started = time.perf_counter()
    columns = ["cluster", "bundle", "snapshot_id", "broker", "topics", *RATE_COLUMNS]
    table = pq.read_table(root / "bundles", columns=columns, filters=[("taken_at", "<=", AS_OF)])
    frame = table.to_pandas(categories=["cluster", "bundle", "broker"], self_destruct=True)
    del table
    # Category codes in name order, so that sorting by code sorts by name.
    for key in ("cluster", "bundle", "broker"):
        frame[key] = frame[key].cat.reorder_categories(sorted(frame[key].cat.categories))
    frame = frame.sort_values(["cluster", "bundle", "snapshot_id", "broker"], ascending=False, ignore_index=True)
    grouped = frame.groupby(["cluster", "bundle"], sort=False, observed=True)
    group = grouped.ngroup().to_numpy()
    rank = grouped.cumcount().to_numpy()  # 0 = the newest sample
    count = grouped["snapshot_id"].transform("size").to_numpy()
    result = grouped["topics"].first().to_frame()  # the newest sample's
    for prefix, samples in (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES)):
        alpha = 1.0 / samples
        weight = np.where(
            count <= samples,
            1.0 / count,
            np.where(rank < count - samples, alpha * (1 - alpha) ** rank, (1 - alpha) ** (count - samples) / samples),
        )
        for column in RATE_COLUMNS:
            # Weighted sums per group: bincount over the group numbers, which follow `result`'s order.
            result[f"{prefix}_{column}"] = np.bincount(group, weights=weight * frame[column].to_numpy())
        result[f"{prefix}_samples"] = np.minimum(np.bincount(group), samples)
    return time.perf_counter() - started, result.reset_index()


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def largest_difference(
    spark: SparkSession, root: Path, reports: dict[str, SnapshotReports], expected: pd.DataFrame
) -> float:
    """The largest relative difference between Spark's and pandas' averages (untimed cross-check)."""
    got = spark_bundle_averages(spark, root, reports).toPandas()
    both = expected.merge(got, on=["cluster", "bundle"], suffixes=("_pandas", "_spark"), validate="1:1")
    assert len(both) == len(expected) == len(got)
    worst = 0.0
    # Spark's output also carries what the next run folds onto (samples, last snapshot): pandas has no such columns.
    for column in [c for c in got.columns if c in expected.columns and c not in ("cluster", "bundle")]:
        a, b = both[f"{column}_pandas"].to_numpy(float), both[f"{column}_spark"].to_numpy(float)
        worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(1.0, np.maximum(np.abs(a), np.abs(b))))))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundles", type=int, default=10_000)
    parser.add_argument("--brokers", type=int, default=20)
    parser.add_argument("--snapshots", type=int, default=5_000)
    parser.add_argument("--factors", default="1,2", help="sizes as multiples of --snapshots (default 1,2)")
    # pandas holds about 180 bytes a sample at its peak (9 GB for 50 M): bigger sizes run Spark only.
    parser.add_argument("--pandas-max-samples", type=float, default=60e6)
    parser.add_argument("--driver-memory", default="4g", help="Spark driver (and, in local mode, executor) heap")
    args = parser.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The JVM starts with the session: its heap can only be set this way from an in-process session.
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-memory {args.driver_memory} pyspark-shell")
    sizes = [round(args.snapshots * f) for f in factors]
    data = [(*dataset(args.bundles, args.brokers, size), store_reports(args.brokers, size)) for size in sizes]
    print(f"machine before: {load_average()}")
    spark = spark_session("local[2]", "bench-averages")
    rows = []
    try:
        for root, samples, reports in data:
            warm_up_time = spark_averages(spark, root, reports)  # JIT, file listing
            spark_time = spark_averages(spark, root, reports)
            print(f"  Spark warm-up run {warm_up_time:.1f} s, timed run {spark_time:.1f} s", flush=True)
            pandas_time = None
            if samples <= args.pandas_max_samples:
                pandas_time, expected = pandas_averages(root)
                difference = largest_difference(spark, root, reports, expected)
                del expected
            rows.append((samples, spark_time, pandas_time))
            if pandas_time is None:
                print(f"{samples / 1e6:7.1f} M samples: Spark local[2] {spark_time:6.1f} s, pandas not run (memory)")
            else:
                print(
                    f"{samples / 1e6:7.1f} M samples: Spark local[2] {spark_time:6.1f} s, pandas {pandas_time:6.1f} s, "
                    f"Spark {pandas_time / spark_time:.2f}x faster (results agree within {difference:.1e} relative)"
                )
    finally:
        spark.stop()
    for (small, small_time, _), (large, large_time, _) in itertools.pairwise(rows):
        print(
            f"{small / 1e6:.1f} M -> {large / 1e6:.1f} M samples ({large / small:.2f}x the data): "
            f"Spark {large_time / small_time:.2f}x the time"
        )
    print(f"machine after: {load_average()}")


if __name__ == "__main__":
    main()
