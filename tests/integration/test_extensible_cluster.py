"""The whole cycle on a real three-broker cluster running Pulsar's extensible load manager (PIP-192), with traffic:
collect (the load manager detected, every broker's load from its metrics and topic stats), plan (TransferShedder,
through the Spark job), approve, execute (transfers: unload with destinationBroker) and verify (each bundle on the
broker the plan named, read back from the cluster); the next plan holds for the moved broker's cool-down."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import requests

from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import collect
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER
from planner.store.database import Store
from planner.store.snapshots import list_snapshots
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator
from tests.integration.conftest import TEST_TENANT, separate_cluster

pytestmark = pytest.mark.integration

BUNDLES = 10  # on the busy broker: TransferShedder sees each broker's top 10 bundles
SPLIT = BUNDLES  # one more bundle, with two topics, on another broker: the only one over the split limit
# The plan settings: act on the first cycle a condition holds (the planner keeps the hit counters across runs),
# and split a bundle over 90 msg/s (in + out; each busy bundle has 60, the split one 120).
SETTINGS = [
    *("--set", "loadBalancerSheddingConditionHitCountThreshold=0"),
    *("--set", "loadBalancerNamespaceBundleSplitConditionHitCountThreshold=0"),
    *("--set", "loadBalancerNamespaceBundleMaxMsgRate=90"),
]


@pytest.fixture(scope="module")
def extensible_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A third local cluster: three brokers on the extensible load manager, on their own ports and home."""
    root = tmp_path_factory.mktemp("extensible-cluster")
    options = {local_cluster.ENV_LOAD_MANAGER: "extensible"}
    with separate_cluster(root, "extensible", (42181, 43181, 48081, 46651), 3, options) as cluster:
        yield cluster


def _weighted_max_ema(admin_url: str) -> float:
    for entry in requests.get(f"{admin_url}/admin/v2/broker-stats/metrics", timeout=10).json():
        if entry["dimensions"].get("metric") == "loadBalancing" and entry["dimensions"].get("feature") == "max_ema":
            return float(entry["metrics"]["brk_lb_resource_usage"])
    raise AssertionError(f"{admin_url} gives no weightedMaxEMA: is it on the extensible load manager?")


def _owners(cluster: Mapping[str, Any], namespace: str) -> dict[str, str]:
    """Each bundle of `namespace` and the broker that owns it, as the brokers say."""
    admin = cluster["brokers"][0]["adminUrl"]
    owners = {}
    for broker in cluster["brokers"]:
        url = f"{admin}/admin/v2/brokers/{cluster['cluster']}/{broker['id']}/ownedNamespaces"
        for bundle in requests.get(url, timeout=10).json():
            if bundle.startswith(namespace + "/"):
                owners[bundle] = broker["id"]
    return owners


def _cli(env: Mapping[str, str], *args: str, timeout: float = 600) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "planner.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
    return json.loads(done.stdout)


@pytest.mark.slow  # CI's run keeps the differential; the whole cycle on its own cluster takes 3 minutes
def test_the_whole_cycle_transfers_bundles_on_the_extensible_load_manager(extensible_cluster, tmp_path):
    cluster, brokers = extensible_cluster, extensible_cluster["brokers"]
    hot, admin_url = brokers[0]["id"], brokers[0]["adminUrl"]
    assert requests.get(f"{admin_url}/admin/v2/broker-stats/load-report", timeout=10).status_code == 500
    namespace = f"{TEST_TENANT}/transfer-{secrets.token_hex(3)}"
    traffic = [BundleTraffic(bundle=i, topics=1, rate=30) for i in range(BUNDLES)] + [BundleTraffic(SPLIT, 2, 30)]
    generator = TrafficGenerator.for_cluster(cluster, namespace, traffic, num_bundles=BUNDLES + 1)
    generator.setup()
    env = {
        **os.environ,
        "PULSAR_REBALANCE_HOME": str(tmp_path / "home"),
        "PULSAR_REBALANCE_DB_URL": f"sqlite:///{tmp_path / 'planner.db'}",
    }
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    try:
        generator.place_bundles({**dict.fromkeys(range(BUNDLES), hot), SPLIT: brokers[1]["id"]})
        generator.start()
        # Each broker counts its own CPU (its own cgroup): wait until the busy one's weightedMaxEMA stands out.
        deadline, loads = time.monotonic() + 180, {}
        while time.monotonic() < deadline:
            loads = {broker["id"]: _weighted_max_ema(broker["adminUrl"]) for broker in brokers}
            if loads[hot] > 1.5 * max(load for broker, load in loads.items() if broker != hot):
                break
            time.sleep(5)
        else:
            pytest.fail(f"the busy broker's weightedMaxEMA never stood out: {loads}")

        # Two worker processes decode the brokers' topic stats (a three-broker cluster would not start them).
        with PulsarAdminClient(admin_url, read_processes=2) as client:
            for _ in range(2):
                collect(client, store, Path(env["PULSAR_REBALANCE_HOME"]))
                time.sleep(3)
            # A role that may not read the brokers' runtime configuration gets {}: their answers tell instead.
            client.runtime_configuration = dict  # type: ignore[method-assign]
            collect(client, store, Path(env["PULSAR_REBALANCE_HOME"]))
        snapshots = [snapshot.to_json() for snapshot in list_snapshots(store, cluster["cluster"], limit=3)]
        assert [snapshot["loadManager"] for snapshot in snapshots] == [EXTENSIBLE_LOAD_MANAGER] * 3
        for snapshot in snapshots:
            assert snapshot["brokers"] == 3 and snapshot["missingBrokers"] == [] and not snapshot["partial"]

        planned = _cli(env, "plan", "--cluster", cluster["cluster"], *SETTINGS)["plans"][0]
        plan = _cli(env, "plans", "show", str(planned["plan"]))
        plan = plan.get("plan", plan)
        assert plan["strategy"] == "TransferShedder" and plan["loadManager"] == "ExtensibleLoadManagerImpl", plan
        moves = [action for action in plan["actions"] if action["kind"] == "unload"]
        assert moves, plan["balance"]
        split_bundle = f"{namespace}/{BundleRange(generator.boundaries[SPLIT], generator.boundaries[SPLIT + 1])}"
        splits = [(action["bundle"], action["source"]) for action in plan["actions"] if action["kind"] == "split"]
        assert splits == [(split_bundle, brokers[1]["id"])], plan["actions"]
        others = {broker["id"] for broker in brokers} - {hot}
        for move in moves:
            assert move["source"] == hot and move["destination"] in others, move
            assert move["bundle"].startswith(namespace + "/"), move  # the traffic's bundles are the top ones

        _cli(env, "approve", str(planned["plan"]), "--as", "on-call")
        executed = _cli(env, "execute", str(planned["plan"]), "--admin-url", admin_url, "--actions-per-minute", "600")
        assert executed["status"] == "executed", executed
        assert executed["counts"] == {"succeeded": len(plan["actions"])}, executed
        owners = _owners(cluster, namespace)
        assert {move["bundle"]: owners.get(move["bundle"]) for move in moves} == {
            move["bundle"]: move["destination"] for move in moves
        }
        assert split_bundle not in owners and len(owners) >= BUNDLES + 2  # split in two

        # The source broker was unloaded a moment ago: TransferShedder waits loadBalanceSheddingDelayInSeconds.
        with PulsarAdminClient(admin_url) as client:
            collect(client, store, Path(env["PULSAR_REBALANCE_HOME"]))
        again = _cli(env, "plan", "--cluster", cluster["cluster"], *SETTINGS)["plans"][0]
        held = _cli(env, "plans", "show", str(again["plan"]))
        held = held.get("plan", held)
        # (a half of the split bundle that kept both topics may be split again: splits do not wait)
        assert [action for action in held["actions"] if action["kind"] == "unload"] == [], held
        assert "(CoolDown): a broker was unloaded less than" in held["balance"]["summary"], held
    finally:
        generator.stop()
        generator.delete_namespace()
        store.dispose()
    print(f"\nextensible cluster: loads {loads}; {len(moves)} transfer(s) from {hot} executed and verified")
