"""Incremental averages: a run folds the samples taken since the stored averages state onto it, equal to the
full recompute and to Pulsar's update rule within 1e-9, without reading the history; and recomputes, saying
why, whenever the state cannot be trusted."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from planner import storage
from planner.plan.request import Averaging, JobRequest
from planner.pulsar.model import NamespaceBundleStats
from planner.samples.averages_state import AVERAGE_COLUMNS, state_uri
from planner.samples.dataset import sample_path, samples_root, write_snapshot_samples
from planner.samples.time_average import update_bundle_data
from spark_jobs.averaging import ReportPositions, bundle_averages, read_reports
from spark_jobs.plan_job import plan_clusters
from spark_jobs.tables import read_table
from tests.builders import broker, bundle

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 2, tzinfo=UTC)
CLUSTER = "inc"
HISTORY = timedelta(days=30)


def present(name: str, index: int) -> list[str]:
    """The brokers reporting the bundle in snapshot `index`."""
    return {
        "steady": ["a:8080"],
        "gappy": [] if index % 7 == 3 else ["a:8080"],
        "late": ["b:8080"] if index >= 590 else [],  # its 10th sample comes after the first state
        "vanished": ["a:8080"] if 100 <= index < 130 else [],
        "pair": ["a:8080", "b:8080"] if 595 <= index < 606 else ["a:8080"],  # two samples a snapshot, broker order
        "thousand": ["b:8080"] if index >= 50 else [],  # reaches 1000 samples while folded
        "newcomer": ["b:8080"] if index >= 1000 else [],
    }[name]


NAMES = ("steady", "gappy", "late", "vanished", "pair", "thousand", "newcomer")


class History:
    """Snapshots written to the samples dataset, and every row, for Pulsar's update rule."""

    def __init__(self, root) -> None:
        self.root = root
        self.rows: list[dict] = []
        self.rng = random.Random(3)

    def write(self, indexes, *, snapshot_id=None, taken_at=None) -> None:
        for index in indexes:
            per_broker: dict[str, dict] = {"a:8080": {}, "b:8080": {}}
            sid = snapshot_id or index + 1
            for position, name in enumerate(NAMES):
                for owner in present(name, index):
                    sample = NamespaceBundleStats(
                        msg_rate_in=self.rng.uniform(0, 5e3),
                        msg_rate_out=self.rng.uniform(0, 5e3),
                        msg_throughput_in=self.rng.uniform(0, 1e8),
                        msg_throughput_out=self.rng.uniform(0, 1e8),
                        topics=self.rng.randint(1, 9),
                    )
                    per_broker[owner][bundle(position, f"t/{name}")] = sample
                    self.rows.append(
                        {"snapshot_id": sid, "broker": owner, "bundle": bundle(position, f"t/{name}"), "sample": sample}
                    )
            reports = {owner: broker(bundles=stats, last_stats=stats) for owner, stats in per_broker.items()}
            write_snapshot_samples(self.root, CLUSTER, sid, taken_at or self.time(index), reports)

    @staticmethod
    def time(index: int) -> datetime:
        return T0 + timedelta(minutes=index)

    def replayed(self, excluded=()) -> dict:
        """Per bundle: Pulsar's update rule over the rows in replay order (snapshot id, then broker)."""
        from planner.pulsar.model import BundleData

        averages: dict = {}
        counts: dict = {}
        for row in sorted(self.rows, key=lambda r: (r["snapshot_id"], r["broker"])):
            if row["snapshot_id"] in excluded:
                continue
            averages[row["bundle"]] = update_bundle_data(averages.get(row["bundle"], BundleData()), row["sample"])
            counts[row["bundle"]] = counts.get(row["bundle"], 0) + 1
        return {name: (data, counts[name]) for name, data in averages.items()}


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def run(spark, history: History, index: int, *, excluded=(), recompute=False, span=HISTORY):
    """A plan run as of just after snapshot `index`; returns its averages source."""
    results = plan_clusters(
        spark,
        samples_root(history.root),
        JobRequest(
            clusters=[CLUSTER],
            strategy="UniformLoadShedder",
            inputs={CLUSTER: {"excludedSnapshots": list(excluded)}},
            history=span,
            as_of=History.time(index) + timedelta(seconds=30),
            recompute_averages=recompute,
        ),
    )
    return results[CLUSTER].averages


def stored_rows(history: History, index: int) -> dict:
    uri = state_uri(samples_root(history.root), CLUSTER, History.time(index) + timedelta(seconds=30))
    filesystem, path = storage.filesystem(uri)
    return {row["bundle"]: row for row in pq.read_table(path, filesystem=filesystem).to_pylist()}


def assert_equal_to_replay(rows: dict, expected: dict) -> None:
    assert set(rows) == set(expected)
    for name, (data, count) in expected.items():
        row = rows[name]
        assert row["samples"] == count, name
        assert row["topics"] == data.topics, name
        for prefix, term in (("short", data.short_term_data), ("long", data.long_term_data)):
            for field in ("msg_rate_in", "msg_throughput_in", "msg_rate_out", "msg_throughput_out"):
                assert close(row[f"{prefix}_{field}"], getattr(term, field)), (name, prefix, field)


def test_folding_equals_the_recompute_and_the_update_rule_without_reading_the_history(spark, tmp_path):
    history = History(tmp_path)
    history.write(range(600))
    first = run(spark, history, 599)
    assert (first.method, first.reason) == ("full", "no stored averages state")
    assert_equal_to_replay(stored_rows(history, 599), history.replayed())

    history.write(range(600, 1050))
    second = run(spark, history, 1049)
    assert second.method == "incremental", second.reason
    assert second.state == storage.display(
        state_uri(samples_root(tmp_path), CLUSTER, History.time(599) + timedelta(seconds=30))
    )
    folded = stored_rows(history, 1049)
    assert_equal_to_replay(folded, history.replayed())
    # The same as the job's full recompute of the same samples.
    as_of = History.time(1049) + timedelta(seconds=30)
    frame = read_table(spark, samples_root(tmp_path), "bundles", [CLUSTER], as_of)
    positions = ReportPositions.of_reports(read_reports(samples_root(tmp_path), [CLUSTER], as_of - HISTORY, as_of))
    recomputed = {row["bundle"]: row for row in bundle_averages(frame, Averaging(), as_of, positions).collect()}
    assert set(recomputed) == set(folded)
    for name, row in recomputed.items():
        assert row["samples"] == folded[name]["samples"]
        for column in AVERAGE_COLUMNS:
            assert close(row[column], folded[name][column]), (name, column)

    # The history is not read: with the bundle rows of every snapshot up to two hours before this state gone,
    # the next run still equals the update rule over all of them.
    for index in range(1049 - 120):
        storage.delete(sample_path(tmp_path, "bundles", CLUSTER, index + 1, History.time(index)))
    history.write(range(1050, 1100))
    third = run(spark, history, 1099)
    assert third.method == "incremental", third.reason
    assert_equal_to_replay(stored_rows(history, 1099), history.replayed())


@pytest.mark.slow  # CI time: the folding test above stays in CI
def test_the_run_recomputes_and_says_why_when_the_state_cannot_be_trusted(spark, tmp_path):
    history = History(tmp_path)
    history.write(range(300))
    assert run(spark, history, 299, recompute=True).reason == "a full recompute was asked for"

    # A snapshot unpublished when the state was written, published since: its samples would be missed.
    history.write(range(300, 310))
    assert run(spark, history, 309, excluded=[305]).method == "incremental"
    history.write(range(310, 320))
    source = run(spark, history, 319)
    assert (source.method, source.reason) == ("full", "snapshot 305 was published after the averages state was written")
    assert_equal_to_replay(stored_rows(history, 319), history.replayed())

    # A snapshot published late, with an id below the state's newest: folding it now would misorder it.
    history.write([320], snapshot_id=10_000)
    run(spark, history, 320)
    history.write([321], snapshot_id=9_000, taken_at=History.time(321))
    source = run(spark, history, 321)
    assert (source.method, source.reason) == (
        "full",
        "snapshot 9000 was published after the averages state's newest, 10000",
    )
    assert_equal_to_replay(stored_rows(history, 321), history.replayed())

    # A state older than the history window; then one that cannot be read.
    history.write(range(322, 330))
    source = run(spark, history, 329, span=timedelta(minutes=5))
    assert source.method == "full" and "older than the history window" in source.reason
    newest = state_uri(samples_root(tmp_path), CLUSTER, History.time(329) + timedelta(seconds=30))
    storage.write_bytes(newest, b"not parquet")
    history.write(range(330, 335))
    source = run(spark, history, 334)
    assert source.method == "full" and "cannot be read" in source.reason
    assert_equal_to_replay(stored_rows(history, 334), history.replayed())
