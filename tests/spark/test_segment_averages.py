"""The one-read averages: every way a segment's share is settled (`spark_jobs.averaging._segment_terms`) is taken
by the bundles it is meant for, and every bundle's averages equal Pulsar's update rule within 1e-9.

The history is built in memory: 7,400 snapshots (long enough for a segment whose short-term weight leaves a
double's range), two clusters with the same snapshot ids, a broker missing from some snapshots, and a snapshot the
store's record lacks."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from planner.plan.request import Averaging
from planner.pulsar.model import BundleData, NamespaceBundleStats
from planner.samples.averages_state import RATE_COLUMNS
from planner.samples.reports import SnapshotReports
from planner.samples.time_average import update_bundle_data
from spark_jobs.averaging import ReportPositions, _placed, _segment_sums, _segment_terms
from spark_jobs.averaging import bundle_averages as averages_of

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 20, tzinfo=UTC)
SNAPSHOTS = 7400
LACKED = 200  # the store's record of cluster "other" lacks this snapshot


def c_reports(index: int) -> bool:
    """Broker c is missing from every 50th snapshot."""
    return index % 50 != 49


# Per bundle of cluster "main": the brokers that report it in snapshot `index`.
BUNDLES = {
    "steady": lambda i: ["a"],
    "on-the-irregular-broker": lambda i: ["c"] if c_reports(i) else [],
    "new-mid-window": lambda i: ["a"] if i >= 3000 else [],
    "moved-early": lambda i: ["a"] if i < 150 else ["b"],
    "moved-late": lambda i: ["a"] if i < 2000 else ["b"],
    "moved-onto-the-new-one": lambda i: ["b"] if 3000 <= i < 3400 else ["a"] if i >= 3400 else [],
    "vanished": lambda i: ["a"] if i < 1200 else [],
    "handed-over": lambda i: ["a"] if i < 4000 else ["a", "b"] if i < 4003 else ["b"],
    "gappy": lambda i: ["b"] if i % 97 != 5 else [],
    "few": lambda i: ["a"] if i >= SNAPSHOTS - 6 else [],
}
# Per segment (cluster, bundle, broker): how its short- and long-term shares are settled, worked out by hand from
# the rules in `_segment_terms` (m samples, N = 10 or 1000).
WAYS = {
    ("main", "steady", "a"): ("first", "first"),
    ("main", "on-the-irregular-broker", "c"): ("first", "first"),  # by c's own positions
    ("main", "new-mid-window", "a"): ("cut", "cut"),  # the oldest N begin at position 3000
    ("main", "moved-early", "a"): ("gone", "uniform"),  # 7,250 newer samples: 0.9^7250 is no double
    ("main", "moved-early", "b"): ("decayed", "cut"),
    ("main", "moved-late", "a"): ("first", "first"),
    ("main", "moved-late", "b"): ("decayed", "decayed"),
    ("main", "moved-onto-the-new-one", "b"): ("cut", "uniform"),
    ("main", "moved-onto-the-new-one", "a"): ("decayed", "cut"),
    ("main", "vanished", "a"): ("ranked", "first"),  # its newest report is 6,200 back: 0.9^-6200 is no double
    ("main", "handed-over", "a"): ("ranked", "ranked"),  # interleaves with b's
    ("main", "handed-over", "b"): ("decayed", "decayed"),
    ("main", "gappy", "b"): ("ranked", "ranked"),  # b reported it not every time
    ("main", "few", "a"): ("small", "small"),
    ("other", "steady", "a"): ("ranked", "small"),  # a sample of a snapshot the store's record lacks
}


def snapshot_id(index: int) -> int:
    """The same in both clusters (as in two stores), with jumps, as when other clusters take ids in between."""
    return 10 + index + (index // 1000) * 3


def history(rng: random.Random) -> tuple[list[dict], dict[str, SnapshotReports]]:
    rows, reports = [], {}
    for cluster, count in (("main", SNAPSHOTS), ("other", 300)):
        snapshots, missing = [], {}
        for index in range(count):
            sid, taken = snapshot_id(index), T0 + timedelta(minutes=5 * index)
            if not (cluster == "other" and index == LACKED):
                snapshots.append((sid, int(taken.timestamp() * 1000)))
            if not c_reports(index):
                missing.setdefault("c", []).append(sid)
            for name, owners in BUNDLES.items():
                if cluster == "other" and name != "steady":
                    continue
                for owner in owners(index):
                    sample = {c: rng.uniform(0, 1e4 if "rate" in c else 1e8) for c in RATE_COLUMNS}
                    rows.append(
                        {
                            "cluster": cluster,
                            "date": taken.date().isoformat(),
                            "snapshot_id": sid,
                            "taken_at": taken,
                            "broker": owner,
                            "bundle": name,
                            "topics": rng.randint(1, 9),
                            **sample,
                        }
                    )
        reports[cluster] = SnapshotReports(snapshots=snapshots, missing=missing)
    return rows, reports


def replay(rows: list[dict]) -> dict[tuple[str, str], BundleData]:
    """Pulsar's update rule over each bundle's rows in the collector's replay order (snapshot id, then broker)."""
    averages: dict[tuple[str, str], BundleData] = {}
    for row in sorted(rows, key=lambda r: (r["snapshot_id"], r["broker"])):
        key = (row["cluster"], row["bundle"])
        sample = NamespaceBundleStats(**{c: row[c] for c in (*RATE_COLUMNS, "topics")})
        averages[key] = update_bundle_data(averages.get(key, BundleData()), sample)
    return averages


def test_each_way_of_settling_a_segment_is_taken_and_equals_the_update_rule(spark):
    rows, reports = history(random.Random(3))
    frame = spark.createDataFrame(rows)
    positions = ReportPositions.of_reports(reports)

    terms = _segment_terms(_segment_sums(_placed(frame, positions))).collect()
    ways = {(t["cluster"], t["bundle"], t["broker"]): (t["how_short"], t["how_long"]) for t in terms}
    assert ways == WAYS

    got = {(r["cluster"], r["bundle"]): r for r in averages_of(frame, Averaging(), T0, positions).collect()}
    expected = replay(rows)
    assert set(got) == set(expected)
    for key, want in expected.items():
        row = got[key]
        assert row["topics"] == want.topics, key
        assert row["samples"] == sum(1 for r in rows if (r["cluster"], r["bundle"]) == key)
        for prefix, term in (("short", want.short_term_data), ("long", want.long_term_data)):
            assert row[f"{prefix}_samples"] == term.num_samples, (key, prefix)
            for column in RATE_COLUMNS:
                value = getattr(term, column)
                assert abs(row[f"{prefix}_{column}"] - value) <= 1e-9 * max(1.0, abs(value)), (key, prefix, column)
