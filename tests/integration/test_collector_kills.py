"""A real `pulsar-rebalance collect` process, SIGKILLed at every step boundary of a collect in turn: every
snapshot is complete in the archive, Parquet and the database, or absent for every reader (the store's
listings, the pyarrow reader, the Spark job's reader), and the next collects are unaffected."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from planner import storage
from planner.collect.collector import (
    COLLECTOR_POINTS,
    SNAPSHOT_FILES,
    abandon_stale_snapshots,
    snapshot_files,
)
from planner.failpoints import ENV as FAILPOINT_ENV
from planner.orchestrate.runner import PlanRequest, cluster_inputs
from planner.samples.dataset import read_samples, samples_root
from planner.store.database import Store
from planner.store.models import Snapshot
from planner.store.snapshots import unpublished_snapshot_ids
from pulsar_rebalance_devtools.traffic import BundleTraffic
from spark_jobs.tables import read_table
from tests.integration.test_exactly_once import _wait_stopped

pytestmark = [pytest.mark.integration, pytest.mark.reliability, pytest.mark.spark]

# Each boundary, with the how-manieth time it is reached in one collect.
KILLS = [
    (COLLECTOR_POINTS[0], 1),
    *((COLLECTOR_POINTS[1], n) for n in range(1, SNAPSHOT_FILES + 1)),
    *((COLLECTOR_POINTS[2], n) for n in range(1, SNAPSHOT_FILES + 1)),
    (COLLECTOR_POINTS[3], 1),
]


def collect_process(cluster, home, db_url, failpoint=None) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != FAILPOINT_ENV}
    env["PULSAR_REBALANCE_HOME"] = str(home)
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    admin_url = cluster["brokers"][0]["adminUrl"]
    return subprocess.Popen(
        [sys.executable, "-m", "planner.cli", "collect", "--admin-url", admin_url, "--db", db_url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def check_all_or_nothing(store, home, cluster_name, spark):
    """Every published snapshot whole in all three places; nothing of any other visible to a reader."""
    with store.session() as session:
        rows = [(row.id, row.status, row.taken_at) for row in session.scalars(select(Snapshot))]
    published = {snapshot_id for snapshot_id, status, _ in rows if status == "published"}
    hidden = unpublished_snapshot_ids(store, cluster_name)
    assert set(hidden) == {snapshot_id for snapshot_id, status, _ in rows if status != "published"}
    if published:  # what the Spark job is told to skip
        inputs, _ = cluster_inputs(store, PlanRequest((cluster_name,), "AvgShedder", {}), datetime.now(UTC))
        assert inputs[cluster_name].excluded_snapshots == hidden
        # and what it is told the files hold: the published snapshots only
        assert [snapshot for snapshot, _ in inputs[cluster_name].reports.snapshots] == sorted(published)
    for snapshot_id, status, taken_at in rows:
        files = snapshot_files(home, cluster_name, snapshot_id, taken_at)
        if status == "published":
            assert all(storage.exists(published) and not storage.exists(staged) for staged, published in files), (
                snapshot_id
            )
    for table in ("brokers", "bundles"):
        seen = set(read_samples(home, table, cluster_name, exclude=hidden).column("snapshot_id").to_pylist())
        assert seen == published, (table, seen, published)
        if not published:
            continue  # nothing published yet: Spark has no files to list at all
        frame = read_table(
            spark,
            samples_root(home),
            table,
            [cluster_name],
            datetime.now(UTC) + timedelta(hours=1),
            {cluster_name: hidden},
        )
        assert {row.snapshot_id for row in frame.select("snapshot_id").distinct().collect()} == published, table
    return published, hidden


def test_a_collect_killed_at_any_step_leaves_every_snapshot_whole_or_absent(
    pulsar_cluster, traffic_generator, tmp_path, spark
):
    traffic_generator([BundleTraffic(bundle=i, topics=1, rate=5) for i in range(2)], num_bundles=2).start()
    time.sleep(12)  # two load-report intervals: every snapshot has bundle rows
    home, db_url = tmp_path / "home", f"sqlite:///{tmp_path / 'planner.db'}"
    store = Store(db_url)
    name = pulsar_cluster["cluster"]
    figures = []
    for point, nth in KILLS:
        process = collect_process(pulsar_cluster, home, db_url, f"{point}#{nth}")
        _wait_stopped(process)
        process.send_signal(signal.SIGKILL)
        process.wait()
        published, hidden = check_all_or_nothing(store, home, name, spark)
        # The next collect abandons what the killed one left (here at once; by default after STALE_AFTER).
        abandon_stale_snapshots(store, home, name, older_than=timedelta(0))
        after = collect_process(pulsar_cluster, home, db_url)
        out, err = after.communicate(timeout=120)
        assert after.returncode == 0, err
        snapshot_id = json.loads(out)["snapshot"]
        with store.session() as session:
            assert snapshot_id > max(session.scalars(select(Snapshot.id).where(Snapshot.id != snapshot_id)))
        published_now, _ = check_all_or_nothing(store, home, name, spark)
        assert published_now == published | {snapshot_id}
        figures.append(f"{point}#{nth}: {len(hidden)} hidden, then snapshot {snapshot_id} whole")
    with store.session() as session:
        statuses = [row.status for row in session.scalars(select(Snapshot))]
    # Killed after its row was published, a snapshot is whole; killed any earlier, it was abandoned.
    assert statuses.count("published") == len(KILLS) + 1 and statuses.count("abandoned") == len(KILLS) - 1
    print("\ncollect killed at every step boundary:\n  " + "\n  ".join(figures))
    store.dispose()
