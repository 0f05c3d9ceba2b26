"""Collection from the real local cluster: the snapshot matches the admin API, and the LoadData built
from it plans the same through the library and through the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from planner.audit.plan_records import show_plan
from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import collect, load_data_for_snapshot
from planner.collect.declared import DECLARED_KEYS
from planner.orchestrate.runner import PlanRequest, run_plan
from planner.plan.shedding.registry import shedding_strategy
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import FailureDomain, NamespaceIsolationPolicy
from planner.samples.dataset import read_samples, samples_root
from planner.store.database import Store
from planner.store.plans import read_state
from planner.store.snapshots import latest_declarations, list_snapshots
from pulsar_rebalance_devtools.traffic import BundleTraffic

pytestmark = pytest.mark.integration

UNIFORM_SETTINGS = {"minUnloadMessage": "0", "maxUnloadPercentage": "0.5"}


def owned_bundles(cluster, broker_id, namespace):
    admin = cluster["brokers"][0]["adminUrl"]
    owned = requests.get(
        f"{admin}/admin/v2/brokers/{cluster['cluster']}/{broker_id}/ownedNamespaces", timeout=10
    ).json()
    return {bundle for bundle in owned if bundle.startswith(namespace + "/")}


def test_collect_matches_the_admin_api_and_plans_like_the_cli(pulsar_cluster, traffic_generator, tmp_path):
    hot, cold = pulsar_cluster["brokers"][0]["id"], pulsar_cluster["brokers"][1]["id"]
    generator = traffic_generator(
        [
            BundleTraffic(bundle=0, topics=2, rate=80),
            BundleTraffic(bundle=1, topics=2, rate=60),
            BundleTraffic(bundle=3, rate=5),
        ]
    )
    generator.place_bundles({0: hot, 1: hot, 3: cold})
    generator.start()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = PulsarAdminClient(pulsar_cluster["brokers"][0]["adminUrl"])

    def hot_rate_in(snapshot_id):
        data = load_data_for_snapshot(store, tmp_path, snapshot_id)
        reported = data.brokers[hot].last_stats.items()
        return data, sum(stats.msg_rate_in for bundle, stats in reported if bundle.startswith(generator.namespace))

    # 280 msg/s are produced into the hot broker's bundles; wait until its report shows most of it,
    # then take a few more snapshots so the bundle averages settle.
    deadline = time.monotonic() + 120
    while True:
        result = collect(client, store, tmp_path)
        data, rate = hot_rate_in(result.snapshot_id)
        if rate > 200 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert rate > 200, f"the generated traffic never showed up in the hot broker's load report ({rate} msg/s)"
    for _ in range(3):
        time.sleep(2)
        result = collect(client, store, tmp_path)
    data, _ = hot_rate_in(result.snapshot_id)

    active = requests.get(f"{client.admin_url}/admin/v2/brokers/{pulsar_cluster['cluster']}", timeout=10).json()
    assert result.cluster == pulsar_cluster["cluster"]
    assert set(data.brokers) == set(active) and not result.partial
    for broker_id in active:
        reported = {b for b in data.brokers[broker_id].bundles if b.startswith(generator.namespace + "/")}
        assert reported == owned_bundles(pulsar_cluster, broker_id, generator.namespace)
    samples = read_samples(tmp_path, "bundles", result.cluster, up_to_snapshot=result.snapshot_id)
    sampled = {row["bundle"] for row in samples.to_pylist() if row["snapshot_id"] == result.snapshot_id}
    assert sampled == {bundle for report in data.brokers.values() for bundle in report.last_stats}
    assert list_snapshots(store, result.cluster)[0].id == result.snapshot_id

    load_data_file = tmp_path / "load-data.json"
    cli = [sys.executable, "-m", "planner.cli"]
    dumped = subprocess.run(
        [*cli, "load-data", "--snapshot", str(result.snapshot_id), "--db", f"sqlite:///{tmp_path / 'planner.db'}"],
        capture_output=True,
        text=True,
        check=True,
        env={"PULSAR_REBALANCE_HOME": str(tmp_path), "PATH": "/usr/bin"},
    )
    load_data_file.write_text(dumped.stdout)
    settings = [arg for key, value in UNIFORM_SETTINGS.items() for arg in ("--set", f"{key}={value}")]
    shed = subprocess.run(
        [*cli, "shed", "--load-data", str(load_data_file), "--strategy", "UniformLoadShedder", *settings],
        capture_output=True,
        text=True,
        check=True,
    )
    from_cli = json.loads(shed.stdout)["runs"][0]["unloads"]
    strategy = shedding_strategy("UniformLoadShedder")
    outcome = strategy.run(data, PulsarConfig.from_settings(UNIFORM_SETTINGS), None)
    assert from_cli == [unload.to_json() for unload in outcome.unloads]
    assert from_cli, "a skewed cluster should give UniformLoadShedder something to move"
    assert {unload["broker"] for unload in from_cli} == {hot}
    client.close()
    store.dispose()


def test_the_snapshot_carries_the_policies_set_through_the_admin_api(pulsar_cluster, traffic_generator, tmp_path):
    """A real isolation policy, failure domain and anti-affinity group, set through Pulsar's admin API, are in the
    snapshot's declarations with each broker's release and load-balancing configuration; removed afterwards."""
    cluster, admin = pulsar_cluster["cluster"], pulsar_cluster["brokers"][0]["adminUrl"]
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = traffic_generator([BundleTraffic(bundle=0, rate=5)], num_bundles=1)
    generator.place_bundles({0: brokers[0]})
    generator.start()
    namespace = generator.namespace
    suffix = namespace.rpartition("/")[2]
    policy, domain, group = f"it-isolation-{suffix}", f"it-domain-{suffix}", f"it-group-{suffix}"
    host = brokers[0].rpartition(":")[0]
    isolation = {
        "namespaces": [re.escape(namespace)],
        "primary": [re.escape(host)],
        "secondary": [re.escape(brokers[-1].rpartition(":")[0])],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": "1", "usage_threshold": "80"},
        },
    }
    policy_url = f"{admin}/admin/v2/clusters/{cluster}/namespaceIsolationPolicies/{policy}"
    domain_url = f"{admin}/admin/v2/clusters/{cluster}/failureDomains/{domain}"
    group_url = f"{admin}/admin/v2/namespaces/{namespace}/antiAffinity"
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = PulsarAdminClient(admin)
    try:
        requests.post(policy_url, json=isolation, timeout=10).raise_for_status()
        requests.post(domain_url, json={"brokers": [brokers[-1]]}, timeout=10).raise_for_status()
        # Pulsar takes the group as a bare string body, as pulsar-admin sends it.
        requests.post(
            group_url, data=group, headers={"Content-Type": "application/json"}, timeout=10
        ).raise_for_status()
        deadline = time.monotonic() + 60
        while True:  # the namespace shows in a load report once its bundle is owned
            collect(client, store, tmp_path)
            declared = latest_declarations(store, cluster)
            assert declared is not None
            if namespace in declared.policies.anti_affinity_groups or time.monotonic() > deadline:
                break
            time.sleep(2)

        assert declared.unreadable == ()
        assert declared.policies.anti_affinity_groups[namespace] == group
        assert declared.policies.isolation[policy] == NamespaceIsolationPolicy.model_validate(isolation)
        assert declared.policies.failure_domains[domain] == FailureDomain(brokers=frozenset({brokers[-1]}))
        release = requests.get(f"{admin}/admin/v2/brokers/version", timeout=10).text.strip()
        assert declared.broker_versions == dict.fromkeys(brokers, release)
        assert declared.leader in brokers
        assert set(declared.configuration) == set(brokers)
        for values in declared.configuration.values():
            assert values["clusterName"] == cluster and "loadBalancerSheddingEnabled" in values
            assert set(values) <= DECLARED_KEYS
    finally:
        requests.delete(group_url, timeout=10)
        requests.delete(domain_url, timeout=10)
        requests.delete(policy_url, timeout=10)
        client.close()
        store.dispose()
    assert requests.get(f"{admin}/admin/v2/clusters/{cluster}/failureDomains", timeout=10).json().get(domain) is None


def test_collect_through_the_cli_registers_the_cluster_under_its_pulsar_name(pulsar_cluster, tmp_path: Path):
    env = {"PULSAR_REBALANCE_HOME": str(tmp_path), "PATH": "/usr/bin"}
    admin_url = pulsar_cluster["brokers"][1]["adminUrl"]
    done = subprocess.run(
        [sys.executable, "-m", "planner.cli", "collect", "--admin-url", admin_url],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    result = json.loads(done.stdout)
    assert result["cluster"] == pulsar_cluster["cluster"]
    assert result["brokers"] == len(pulsar_cluster["brokers"]) and result["partial"] is False
    listed = subprocess.run(
        [sys.executable, "-m", "planner.cli", "snapshots"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert json.loads(listed.stdout)["snapshots"][0]["id"] == result["snapshot"]


@pytest.mark.spark
def test_the_spark_job_plans_from_the_real_clusters_snapshots(pulsar_cluster, traffic_generator, spark, tmp_path):
    hot = pulsar_cluster["brokers"][0]["id"]
    generator = traffic_generator([BundleTraffic(bundle=0, topics=2, rate=60), BundleTraffic(bundle=2, topics=2)])
    generator.place_bundles({0: hot, 2: hot})
    generator.start()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = PulsarAdminClient(pulsar_cluster["brokers"][0]["adminUrl"])
    snapshots = []
    for _ in range(3):
        snapshots.append(collect(client, store, tmp_path))
        time.sleep(2)
    request = PlanRequest(
        clusters=(pulsar_cluster["cluster"],), strategy="AvgShedder", settings={}, history=timedelta(days=1)
    )
    [(commit, result)] = run_plan(store, samples_root(tmp_path), request, spark=spark).values()
    plan = result.plan
    assert commit.created and commit.state_version == 1
    assert {broker.broker for broker in plan.brokers} == {b["id"] for b in pulsar_cluster["brokers"]}
    shown = show_plan(store, commit.plan_id)
    assert shown.snapshot_id == snapshots[-1].snapshot_id and shown.document.strategy == "AvgShedder"
    assert read_state(store, pulsar_cluster["cluster"], "AvgShedder").version == 1
    client.close()
    store.dispose()
