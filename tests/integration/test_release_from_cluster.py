"""A cluster on a 3.x release from Maven Central, with thresholds and weights of its own in broker.conf, planned with
no settings at all: the plan takes the release and every value from the brokers, and plans exactly what Pulsar's
own classes of that release decide on the same LoadData and configuration (the differential harness's `cycle`:
ModularLoadManagerImpl.doLoadShedding with its strategy and placement). With the brokers' own shedding switched
on, the plan warns of two controllers and the executor refuses to run beside them."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from planner.errors import InputError
from planner.execute.executor import execute_plan
from planner.lifecycle import Decision
from planner.orchestrate.runner import PlanRequest, commit_job_output, job_request
from planner.plan.document import ConfigSource, JobResult
from planner.pulsar.config import PulsarConfig
from planner.samples.dataset import samples_root
from planner.settings import ExecutorSettings
from planner.store.approvals import record_decision
from planner.store.database import Store
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.demo import settled_snapshot
from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator
from tests.differential.conftest import java_harness_for
from tests.differential.planner_side import cycle_runs
from tests.integration.conftest import TEST_TENANT, policy_writer, separate_cluster
from tests.integration.executor_support import CountingClient

pytestmark = pytest.mark.integration

# A 3.x release whose broker distribution Maven Central has (pulsar-server-distribution 3.3.5 and 3.3.6 are there),
# which the slow run's differential covers (tests/differential/test_every_release.py).
RELEASE = "3.3.6"
IMPL = "org.apache.pulsar.broker.loadbalance.impl."
# broker.conf of this cluster: none of these is Pulsar's default.
BROKER_SETTINGS = {
    "loadBalancerLoadSheddingStrategy": IMPL + "UniformLoadShedder",  # 3.x's default is ThresholdShedder
    "loadBalancerMsgRateDifferenceShedderThreshold": "30",  # 50
    "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": "3",  # 4
    "maxUnloadPercentage": "0.6",  # 0.2
    "minUnloadMessage": "10",  # 1000
    "minUnloadMessageThroughput": "1000",  # 1 MiB
    "loadBalancerCPUResourceWeight": "0.5",  # 1.0
    "loadBalancerBandwithInResourceWeight": "0.8",  # 1.0 (3.x spells it so)
    "loadBalancerBrokerOverloadedThresholdPercentage": "95",  # 85
    # The brokers' own shedding, when a test switches it on, runs its first cycle 30 minutes after start (1).
    "loadBalancerSheddingIntervalMinutes": "30",
}
FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=10, verify_interval_seconds=0.5)


@pytest.fixture(scope="module")
def release_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Three brokers of Pulsar 3.3.6 with the settings above, on their own ports and home; stopped at the end."""
    root = tmp_path_factory.mktemp("release-cluster")
    options = {local_cluster.ENV_VERSION: RELEASE}
    started = time.monotonic()
    with separate_cluster(root, "release", (52181, 53181, 58081, 56651), 3, options, BROKER_SETTINGS) as cluster:
        print(f"\nPulsar {RELEASE} cluster started in {time.monotonic() - started:.0f} s")
        yield cluster


def same(found: object, expected: str) -> bool:
    """A configuration value as served or used (30.0, 30, "30") equals the broker.conf text."""
    if str(found) == expected:
        return True
    try:
        return float(str(found)) == float(expected)
    except ValueError:
        return False


def broker_conf_value(served: object) -> str:
    """A runtime configuration value as broker.conf writes it: Pulsar serves a list as `[a, b]`."""
    text = str(served)
    if text.startswith("[") and text.endswith("]"):
        return ",".join(part.strip() for part in text[1:-1].split(","))
    return text


def runtime_configuration(cluster: Mapping[str, Any]) -> dict[str, str]:
    admin = cluster["brokers"][0]["adminUrl"]
    return requests.get(f"{admin}/admin/v2/brokers/configuration/runtime", timeout=30).json()


def plan_with_load_data(store: Store, home: Path, spark, cluster: str) -> tuple[int, JobResult, int]:
    """The plan job as `run_plan` runs it, with no settings at all, asked for the LoadData it planned on as well;
    committed. Returns the plan id, the job's result and its clock."""
    from spark_jobs.plan_job import plan_clusters

    request = PlanRequest(clusters=(cluster,), strategy="UniformLoadShedder", settings={}, history=timedelta(days=1))
    job = job_request(store, request).model_copy(update={"emit_load_data": True})
    results = plan_clusters(spark, samples_root(home), job)
    commit = commit_job_output(store, job, results)[cluster]
    return commit.plan_id, results[cluster], int(job.as_of.timestamp() * 1000)


# The module takes about 2 minutes: its own cluster (20 s), each plan through the job, the harness's build and JVM.
def test_a_3x_cluster_is_planned_with_its_own_release_and_configuration_as_its_brokers_would(
    release_cluster, spark, tmp_path
):
    cluster, brokers = release_cluster, [broker["id"] for broker in release_cluster["brokers"]]
    runtime = runtime_configuration(cluster)
    # The tooling's --set took (Pulsar serves doubles as 30.0).
    assert {
        key: key in runtime and same(runtime[key], value) for key, value in BROKER_SETTINGS.items()
    } == dict.fromkeys(BROKER_SETTINGS, True), {key: runtime.get(key) for key in BROKER_SETTINGS}
    namespace = f"{TEST_TENANT}/release-{int(time.time())}"
    # Three different loads: 160, 40 and 20 msg/s in + out, so no two brokers tie for placement.
    traffic = [BundleTraffic(0, 1, 40), BundleTraffic(1, 1, 40), BundleTraffic(2, 1, 20), BundleTraffic(3, 1, 10)]
    generator = TrafficGenerator.for_cluster(cluster, namespace, traffic)
    generator.setup()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    try:
        generator.place_bundles({0: brokers[0], 1: brokers[0], 2: brokers[1], 3: brokers[2]})
        generator.start()
        with CountingClient(cluster["brokers"][0]["adminUrl"]) as client:
            settled_snapshot(client, store, tmp_path)
        started = time.monotonic()
        plan_id, result, now = plan_with_load_data(store, tmp_path, spark, cluster["cluster"])
        planned = time.monotonic() - started
    finally:
        generator.stop()
        generator.delete_namespace()

    # Pulsar 3.3.6's own doLoadShedding on the LoadData the plan was made on, with the brokers' configuration.
    plan = result.plan
    assert result.load_data is not None
    config = {key: broker_conf_value(value) for key, value in runtime.items() if key in PulsarConfig.known_keys()}
    case = {"id": "release", "kind": "cycle", "config": config, "loadData": result.load_data, "now": now, "runs": 1}
    started = time.monotonic()
    java = java_harness_for(RELEASE, own_tree=False).run([case], tmp_path / "harness")["release"]
    assert "error" not in java, java
    [run] = java["runs"]
    assert run["ties"] == 0, f"placement drew among equally good brokers, the comparison would be a draw: {java}"
    assert run["unloads"], f"Pulsar unloads nothing on this load: {java}"

    view = plan.cluster_view
    assert view is not None, "the plan records no cluster view"
    assert (view.release, view.release_source, view.mixed_releases) == (RELEASE, ConfigSource.CLUSTER, {})
    used = {value.key: value for value in view.configuration}
    for key, value in BROKER_SETTINGS.items():
        if key not in PulsarConfig.known_keys():
            continue
        assert key in used, f"{key} is not in the plan's configuration: {sorted(used)}"
        assert used[key].source is ConfigSource.CLUSTER, used[key]
        assert same(used[key].value, value), used[key]
    assert view.competing_controllers == ()

    assert not [action.to_json() for action in plan.actions if action.kind != "unload"]
    ours = {
        "runs": [
            {
                "unloads": [{"bundle": a.bundle, "destination": a.destination} for a in plan.actions],
                "state": {key: value for key, value in plan.state_after.items() if key != "strategy"},
            }
        ]
    }
    assert cycle_runs(ours) == cycle_runs(java), (ours, java)
    harness = time.monotonic() - started
    print(f"\nplan {plan_id}: {len(plan.actions)} unloads, planned in {planned:.0f} s, harness {harness:.0f} s")


def test_the_brokers_own_shedding_makes_the_plan_warn_and_the_executor_refuse(release_cluster, spark, tmp_path):
    cluster, brokers = release_cluster, [broker["id"] for broker in release_cluster["brokers"]]
    namespace = f"{TEST_TENANT}/competing-{int(time.time())}"
    traffic = [BundleTraffic(i, 1, 40) for i in range(4)]
    generator = TrafficGenerator.for_cluster(cluster, namespace, traffic)
    generator.setup()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    try:
        with policy_writer(cluster) as policies:
            generator.place_bundles(dict.fromkeys(range(4), brokers[0]))
            generator.start()
            # The brokers' own shedding on, as a team that never turned it off has it.
            policies.dynamic("loadBalancerSheddingEnabled", "true")
            with CountingClient(cluster["brokers"][0]["adminUrl"]) as client:
                settled_snapshot(client, store, tmp_path)
                plan_id, result, _ = plan_with_load_data(store, tmp_path, spark, cluster["cluster"])
                view = result.plan.cluster_view
                assert view is not None and view.competing_controllers, view
                assert any("loadBalancerSheddingEnabled" in entry for entry in view.competing_controllers), view
                assert result.plan.actions, "nothing planned: the refusal would prove nothing"
                approved_hash = result.plan.actions_hash
                record_decision(store, plan_id, Decision.APPROVED, approver="alice", approved_hash=approved_hash)
                try:
                    report = execute_plan(store, client, plan_id, FAST)
                except InputError as error:
                    refusal = str(error)
                else:
                    refusal = json.dumps(report.to_json())
                    assert report.status.value != "executed", refusal
                assert "loadBalancerSheddingEnabled" in refusal, refusal
                assert client.unloads == [] and client.splits == [], client.unloads
    finally:
        generator.stop()
        generator.delete_namespace()


def test_the_release_cluster_is_handed_back_only_as_itself(release_cluster):
    """`start` with the release cluster's home and ports returns it when asked for its release and settings, and
    refuses when asked for another release or other settings: it never stands in for a default cluster."""
    cluster_dir = Path(release_cluster["logDir"]).parent
    settings = dataclasses.replace(
        local_cluster.settings_from_env(),
        home=cluster_dir.parent,
        cluster_name=release_cluster["cluster"],
        zookeeper_port=int(release_cluster["zookeeper"].rsplit(":", 1)[1]),
        bookie_port=int(release_cluster["bookie"].rsplit(":", 1)[1]),
        web_port_base=58081,
        broker_port_base=56651,
        pulsar_version=RELEASE,
        broker_settings=local_cluster.broker_setting_overrides(BROKER_SETTINGS),
    )
    assert settings.cluster_dir == cluster_dir
    assert local_cluster.start(brokers=3, settings=settings)["brokers"] == release_cluster["brokers"]
    for other in (
        dataclasses.replace(settings, pulsar_version=local_cluster.DEFAULT_PULSAR_VERSION),
        dataclasses.replace(settings, broker_settings=()),
    ):
        with pytest.raises(local_cluster.LocalClusterError, match="stop it first"):
            local_cluster.start(brokers=3, settings=other)
