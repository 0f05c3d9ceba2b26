"""Samples in an object store: the collector writes a real cluster's snapshots to an S3-compatible server on
loopback (moto), and the planning job reads them as `s3a://` on a real Spark standalone cluster whose workers
see nothing of the checkout (`tests/spark/cluster.py`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.object_store import TEST_S3_CREDENTIALS, objects, s3_server
from tests.spark.test_on_a_cluster import cli

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BUCKET = "pulsar-samples"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server(BUCKET) as endpoint:
        yield endpoint


@pytest.mark.slow  # CI's run plans on the standalone cluster from files; S3 URIs have unit tests
def test_snapshots_in_an_object_store_are_planned_on_a_standalone_cluster(
    pulsar_cluster, traffic_generator, s3_endpoint, standalone_spark, tmp_path
):
    running, python = standalone_spark
    hot = pulsar_cluster["brokers"][0]["id"]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=40) for i in range(4)])
    generator.place_bundles(dict.fromkeys(range(4), hot))
    generator.start()
    time.sleep(12)  # two load-report intervals, so the reports show the traffic
    storage = f"s3://{BUCKET}/fleet?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    env = {
        **os.environ,
        **TEST_S3_CREDENTIALS,
        "PULSAR_REBALANCE_HOME": str(tmp_path / "home"),
        "PULSAR_REBALANCE_STORAGE": storage,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
    }
    admin_url = pulsar_cluster["brokers"][0]["adminUrl"]
    collected = [cli(env, "collect", "--admin-url", admin_url) for _ in range(3)]
    generator.stop()

    # Everything a collect writes is in the bucket, nothing in the local home but the store.
    stored = objects(s3_endpoint, f"{BUCKET}/fleet")
    for result in collected:
        assert any(f"snapshot-{result['snapshot']:012d}.json.gz" in path for path in stored), stored
        assert sum(f"snapshot-{result['snapshot']:012d}.parquet" in path for path in stored) == 2, stored
    assert not [path for path in stored if "/_" in path or "/." in path], "staged or temporary files left behind"
    assert sorted(path.name for path in (tmp_path / "home").iterdir()) == ["planner.db"]

    planned = cli(
        env,
        "plan",
        "--cluster",
        pulsar_cluster["cluster"],
        "--strategy",
        "UniformLoadShedder",
        "--set",
        "minUnloadMessage=0",
        "--set",
        "maxUnloadPercentage=0.5",
        "--history",
        "1d",
        "--master",
        running.master_url,
        "--conf",
        f"spark.pyspark.python={python}",
        "--conf",
        "spark.executor.memory=512m",
    )
    [summary] = planned["plans"]
    plan = cli(env, "plan", "show", str(summary["plan"]))
    assert plan["snapshot"] == collected[-1]["snapshot"]
    assert {broker["broker"] for broker in plan["brokers"]} == {b["id"] for b in pulsar_cluster["brokers"]}
    unloads = [action for action in plan["actions"] if action["kind"] == "unload"]
    assert unloads and {action["source"] for action in unloads} == {hot}, plan["actions"]
