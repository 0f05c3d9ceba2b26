"""Capacity advice on a real cluster's snapshots: the local cluster collected with traffic, `pulsar-rebalance capacity`
on what the collects stored (the samples dataset through the product's storage URIs, the store's published
snapshots, the cluster's declared configuration), then the recording replayed without the advised broker."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from planner.cli import main
from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import collect
from planner.simulator.capacity_report import busiest_p95
from planner.simulator.recorded import read_history
from planner.simulator.replay import replay
from planner.store.database import Store
from pulsar_rebalance_devtools.traffic import BundleTraffic

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a dozen collects a few seconds apart

SNAPSHOTS = 14


def test_capacity_advice_from_the_local_clusters_snapshots_and_its_replay(
    pulsar_cluster, traffic_generator, tmp_path, monkeypatch, capsys
):
    brokers = sorted(broker["id"] for broker in pulsar_cluster["brokers"])
    generator = traffic_generator(
        [BundleTraffic(bundle=0, topics=2, rate=60), BundleTraffic(bundle=1, rate=30), BundleTraffic(bundle=2, rate=20)]
    )
    generator.place_bundles({0: brokers[0], 1: brokers[1], 2: brokers[-1]})
    generator.start()
    database = f"sqlite:///{tmp_path / 'planner.db'}"
    store = Store(database)
    start = datetime.now(UTC) - timedelta(minutes=1)
    with PulsarAdminClient(pulsar_cluster["brokers"][0]["adminUrl"]) as client:
        for _ in range(SNAPSHOTS):
            collect(client, store, tmp_path)
            time.sleep(2)
    end = datetime.now(UTC)
    generator.stop()

    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(tmp_path))
    cluster = pulsar_cluster["cluster"]
    window = ["--from", start.isoformat(), "--to", end.isoformat()]
    assert main(["capacity", cluster, "--target", "80", *window, "--json", "--db", database]) == 0
    advice = json.loads(capsys.readouterr().out)
    assert sorted(broker for kind in advice["kinds"] for broker in kind["brokers"]) == brokers
    assert advice["snapshots"] == SNAPSHOTS and advice["moments"] == SNAPSHOTS
    assert sum(count["recorded"] for count in advice["counts"]) == len(brokers)
    assert [option["broker"] for option in advice["removals"]] != [] and advice["explanation"]
    removal = advice["removal"]
    assert removal is not None, advice["explanation"]  # a few hundred msg/s leave every broker far under 80
    assert (
        advice["drainCommand"]
        == f"pulsar-rebalance plan run --cluster {cluster} --mode drain --brokers {removal['broker']}"
    )

    # The same recording replayed without the advised broker: the others carry its bundles under the target.
    history = read_history(tmp_path, store, cluster, start, end)
    without = replay(history, "offline:AvgShedderPredictive", remove=[removal["broker"]])
    assert removal["broker"] not in without.brokers
    assert busiest_p95(without.scores) < 80
    store.dispose()
