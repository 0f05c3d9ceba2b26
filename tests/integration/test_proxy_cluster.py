"""Brokers reachable only through Pulsar's own proxy: the cluster and the distribution's proxy run in a network
namespace of their own (`pulsar_rebalance_devtools.proxied_cluster`), the brokers advertise addresses valid only
there, and from here only the proxy answers. The proxy's `/admin` route serves the cluster calls, the unload
included; each broker's own reads go through its reverse-proxy path by the cluster's `broker_url_template`.
Through the CLI, as an operator runs it: collect, a drain plan, its execution; without the mapping the collect
says in one line what to set; with a wrong mapping it says where the proxy's path really leads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from pulsar_rebalance_devtools.proxied_cluster import ProxiedCluster, broker_path, proxied_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLI = str(Path(sys.executable).parent / "pulsar-rebalance")
NAMESPACE = "public/proxied"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a network namespace needs root and iproute2")
    with proxied_cluster(tmp_path_factory.mktemp("proxied-cluster")) as cluster:
        yield cluster


def run(home: Path, clusters: str, *args: str) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "clusters.toml").write_text(clusters)
    env = {
        **os.environ,
        "PULSAR_REBALANCE_HOME": str(home),
        "PULSAR_REBALANCE_CLUSTERS": str(home / "clusters.toml"),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("PULSAR_REBALANCE_DB_URL", None)
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=600, check=False)


def entry(cluster: ProxiedCluster, mapping: str = "") -> str:
    return f'[[clusters]]\nname = "{cluster.name}"\nadmin_url = "{cluster.proxy_url}"\n{mapping}\n'


def admin(cluster: ProxiedCluster, method: str, path: str, **kwargs: object) -> requests.Response:
    """The cluster's admin API through the proxy's `/admin` route (it follows the brokers' redirects itself)."""
    response = requests.request(method, cluster.proxy_url + path, timeout=60, **kwargs)  # type: ignore[arg-type]
    assert response.status_code < 300, (method, path, response.status_code, response.text[:300])
    return response


def owned(cluster: ProxiedCluster, broker: str) -> list[str]:
    answer = admin(cluster, "GET", f"/admin/v2/brokers/{cluster.name}/{broker}/ownedNamespaces").json()
    return sorted(bundle for bundle in answer if bundle.startswith(NAMESPACE + "/"))


def test_the_brokers_ids_are_not_reachable_from_here(proxied):
    for broker in proxied.broker_ids:
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://{broker}/admin/v2/brokers/version", timeout=3)


def test_without_the_mapping_the_collect_says_what_to_set(proxied, tmp_path):
    done = run(tmp_path, entry(proxied), "collect", "--cluster", proxied.name)
    for broker in proxied.broker_ids:
        [line] = [line for line in done.stderr.splitlines() if f"broker {broker} unreachable" in line]
        assert (
            f"cluster {proxied.name}: broker {broker} unreachable at http://{broker}: connection refused; the planner "
            "reads each broker's own web service: if its id is not reachable from here, set broker_url_template or "
            'broker_urls for this cluster (README, "Reaching the brokers")' in line
        ), line
    assert "timed out" not in done.stderr and "Retrying" not in done.stderr, done.stderr


def test_a_mapping_to_the_wrong_broker_is_refused_naming_where_it_leads(proxied, tmp_path):
    first, second = proxied.broker_ids[:2]
    swapped = (
        f'broker_urls = {{ "{first}" = "{proxied.proxy_url}{broker_path(second).removesuffix("/admin")}", '
        f'"{second}" = "{proxied.proxy_url}{broker_path(first).removesuffix("/admin")}" }}'
    )
    done = run(tmp_path, entry(proxied, swapped), "collect", "--cluster", proxied.name)
    [line] = [line for line in done.stderr.splitlines() if f"does not reach broker {first}" in line]
    # The proxy's reverse-proxy path does not follow redirects: the broker it leads to names the one asked for.
    assert f"(broker_urls) does not reach broker {first} but another: it redirected to http://{first}/admin" in line


def test_collect_plan_and_execute_through_the_proxy(proxied, tmp_path):
    # A namespace of 4 bundles, each owned after a lookup (through the proxy's /lookup route).
    admin(proxied, "PUT", f"/admin/v2/namespaces/{NAMESPACE}", json={"bundles": {"numBundles": 4}})
    for index in range(16):
        admin(proxied, "GET", f"/lookup/v2/topic/persistent/{NAMESPACE}/topic-{index}")
    by_broker = {broker: owned(proxied, broker) for broker in proxied.broker_ids}
    drained = max(by_broker, key=lambda broker: len(by_broker[broker]))
    assert by_broker[drained], by_broker

    clusters = entry(proxied, f'broker_url_template = "{proxied.broker_url_template}"')
    collected = run(tmp_path, clusters, "collect", "--cluster", proxied.name)
    assert collected.returncode == 0, collected.stderr[-3000:]
    snapshot = json.loads(collected.stdout)
    assert snapshot["brokers"] == len(proxied.broker_ids) and not snapshot["partial"], snapshot
    assert "unreachable" not in collected.stderr, collected.stderr[-3000:]

    planned = run(
        tmp_path, clusters, "plan", "run", "--cluster", proxied.name, "--mode", "drain", "--brokers", drained,
        "--master", "local[1]", "--set", "loadBalancerBrokerOverloadedThresholdPercentage=1000",
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-3000:]
    [plan] = json.loads(planned.stdout)["plans"]
    shown = json.loads(run(tmp_path, clusters, "plan", "show", str(plan["plan"])).stdout)
    moved = sorted(action["bundle"] for action in shown["actions"] if action["bundle"].startswith(NAMESPACE + "/"))
    assert moved == by_broker[drained], shown["actions"]

    approved = run(tmp_path, clusters, "approve", str(plan["plan"]), "--as", "operator")
    assert approved.returncode == 0, approved.stderr[-3000:]
    executed = run(
        tmp_path, clusters, "execute", str(plan["plan"]), "--cluster", proxied.name, "--quiet", "--verify-timeout", "30"
    )
    assert executed.returncode == 0, (executed.stdout[-3000:], executed.stderr[-3000:])
    assert json.loads(executed.stdout)["status"] == "executed", executed.stdout
    # The unloads went through the proxy's /admin route: the drained broker owns none of the namespace's bundles.
    assert owned(proxied, drained) == []
