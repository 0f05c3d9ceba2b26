"""Pulsar-compatible bundle averages over a synthetic history: Spark (local[2]) against single-process pandas.

Goal: <= 60 s for 50 M samples on local[2], at least 2x faster than pandas on the same data, and
doubling the data at most 2.2x the time. Prints the figures.
Usage: python bench/bench_spark_averages.py [--bundles 10000] [--snapshots 5000] [--skip-pandas]
(50 M samples = 10,000 bundles x 5,000 snapshots; the doubled run uses 10,000 snapshots.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from planner.samples import BUNDLE_SCHEMA
from spark_jobs.plan_job import LONG_SAMPLES, SHORT_SAMPLES, Averaging, bundle_averages, read_table, spark_session

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SNAPSHOTS_PER_FILE = 100


def generate(root: Path, bundles: int, snapshots: int, seed: int = 7) -> None:
    """Bundle rows of `snapshots` snapshots, one minute apart, each sampling every bundle."""
    rng = np.random.default_rng(seed)
    names = np.array([f"t{i % 20}/ns{i % 300}/0x{i:08x}_0x{i + 1:08x}" for i in range(bundles)], dtype=object)
    base_rate = rng.lognormal(5, 1, bundles)
    out = root / "bundles" / "cluster=bench" / "date=2026-01-01"
    out.mkdir(parents=True)
    for first in range(0, snapshots, SNAPSHOTS_PER_FILE):
        count = min(SNAPSHOTS_PER_FILE, snapshots - first)
        ids = np.repeat(np.arange(first + 1, first + count + 1, dtype=np.int64), bundles)
        rate = np.tile(base_rate, count) * rng.uniform(0.5, 1.5, count * bundles)
        table = pa.table(
            {
                "snapshot_id": ids,
                "taken_at": pa.array(
                    [T0 + timedelta(minutes=int(i)) for i in range(first, first + count)], pa.timestamp("ms", tz="UTC")
                ).take(pa.array(np.repeat(np.arange(count), bundles))),
                "broker": pa.array(np.full(count * bundles, "10.0.0.1:8080", dtype=object)),
                "bundle": pa.array(np.tile(names, count)),
                "namespace": pa.array(np.tile(np.array([n.rsplit("/", 1)[0] for n in names], dtype=object), count)),
                "msg_rate_in": rate,
                "msg_throughput_in": rate * 1000,
                "msg_rate_out": rate * 2,
                "msg_throughput_out": rate * 2000,
                "consumer_count": np.zeros(count * bundles, dtype=np.int64),
                "producer_count": np.zeros(count * bundles, dtype=np.int64),
                "topics": np.full(count * bundles, 4, dtype=np.int64),
            },
            schema=BUNDLE_SCHEMA,
        )
        pq.write_table(table, out / f"part-{first:08d}.parquet", compression="zstd")


def spark_averages(spark, root: Path) -> float:
    started = time.perf_counter()
    frame = read_table(spark, root, "bundles", ["bench"], T0 + timedelta(days=3650))
    bundle_averages(frame, Averaging(), T0).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def pandas_averages(root: Path) -> float:
    """The same sample-count averages, single process: rank per bundle, closed-form weights, weighted sums."""
    started = time.perf_counter()
    frame = pq.read_table(root / "bundles").to_pandas()
    frame = frame.sort_values(["bundle", "snapshot_id"], ascending=[True, False])
    grouped = frame.groupby("bundle", sort=False)
    rank = grouped.cumcount().to_numpy()
    count = grouped["snapshot_id"].transform("size").to_numpy()
    columns = {}
    for prefix, samples in (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES)):
        alpha = 1.0 / samples
        weight = np.where(
            count <= samples,
            1.0 / count,
            np.where(rank < count - samples, alpha * (1 - alpha) ** rank, (1 - alpha) ** (count - samples) / samples),
        )
        for column in ("msg_rate_in", "msg_throughput_in", "msg_rate_out", "msg_throughput_out"):
            columns[f"{prefix}_{column}"] = weight * frame[column].to_numpy()
    pd.DataFrame(columns).groupby(frame["bundle"].to_numpy()).sum()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bundles", type=int, default=10_000)
    parser.add_argument("--snapshots", type=int, default=5_000)
    parser.add_argument("--skip-pandas", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = spark_session("local[2]", "bench-averages")
    workspace = Path(tempfile.mkdtemp(prefix="bench-averages-"))
    try:
        timings = {}
        for factor in (1, 2):
            root = workspace / f"x{factor}"
            started = time.perf_counter()
            generate(root, args.bundles, args.snapshots * factor)
            samples = args.bundles * args.snapshots * factor
            print(f"{samples / 1e6:.0f} M samples generated in {time.perf_counter() - started:.0f} s")
            spark_averages(spark, root)  # warm-up: JIT, file listing caches
            timings[factor] = spark_averages(spark, root)
            print(f"  Spark local[2]: {timings[factor]:.1f} s")
            if factor == 1 and not args.skip_pandas:
                pandas_time = pandas_averages(root)
                print(f"  pandas, one process: {pandas_time:.1f} s ({pandas_time / timings[1]:.1f}x Spark's time)")
            shutil.rmtree(root)
        print(f"doubling the data: {timings[2] / timings[1]:.2f}x the time")
    finally:
        spark.stop()
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    main()
