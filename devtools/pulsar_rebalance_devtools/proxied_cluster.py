"""A local cluster whose brokers only Pulsar's own proxy can reach, as behind a proxy or an ingress in production.

ZooKeeper, the bookie, the brokers and the proxy run in a network namespace of their own (`ip netns`; root only),
joined to this one by a veth pair: the brokers advertise addresses that are valid only inside it (its own
loopback, 127.0.0.x), and from here only the proxy answers, on the pair's inner address. The proxy routes `/admin`
and `/lookup` to the first broker (`brokerWebServiceURL`), and exposes each broker's own admin API under
`/brokers/{host}-{port}/admin` (`httpReverseProxy.<name>.path` / `.proxyTo`), which the planner reaches through
`broker_url_template = "http://PROXY/brokers/{host}-{port}"`. Each path ends with the fixed segment `/admin`: the
proxy refuses a path another one starts with (`WebServer.addServlet`), as `/brokers/b-1` and `/brokers/b-10` would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.netns import network_namespace

log = logging.getLogger(__name__)

PROXY_MAIN = "org.apache.pulsar.proxy.server.ProxyServiceStarter"
# The template the planner is given: each broker under the proxy's path for it (`broker_path`).
BROKER_URL_TEMPLATE = "{proxy}/brokers/{{host}}-{{port}}"
_PROXY_MEM = ["-Xms64m", "-Xmx192m"]


def broker_path(broker_id: str) -> str:
    """The proxy's path for a broker's admin API: `/brokers/{host}-{port}/admin`."""
    host, _, port = broker_id.rpartition(":")
    return f"/brokers/{host}-{port}/admin"


@dataclass(frozen=True, slots=True)
class ProxiedCluster:
    """A running proxied cluster: the proxy's URL from here, the cluster as its brokers advertise it, and how the
    planner maps each broker (`broker_url_template`)."""

    netns: str
    proxy_url: str
    description: Mapping[str, Any]
    settings: local_cluster.LocalClusterSettings

    @property
    def name(self) -> str:
        return str(self.description["cluster"])

    @property
    def broker_ids(self) -> list[str]:
        return [str(broker["id"]) for broker in self.description["brokers"]]

    @property
    def broker_url_template(self) -> str:
        return BROKER_URL_TEMPLATE.format(proxy=self.proxy_url)


def _cluster_env(root: Path, settings: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, "PULSAR_REBALANCE_HOME": str(root), **settings}


@contextlib.contextmanager
def proxied_cluster(
    root: Path,
    *,
    name: str = "proxied",
    netns: str = "prb-proxied",
    subnet: int = 236,
    brokers: int = 2,
    pulsar_version: str = "3.3.6",
    ports: tuple[int, int, int, int, int] = (24181, 25181, 29081, 27651, 29181),
) -> Iterator[ProxiedCluster]:
    """Start the cluster and its proxy in `netns` (ports: ZooKeeper, bookie, first broker web and binary port, the
    proxy's web port, its binary port the next one), and stop both and delete the namespace at the end.
    `pulsar_version`'s distribution must hold `pulsar-proxy` (3.x's do; for 4.x add the jar to its lib)."""
    zookeeper, bookie, web, broker, proxy_port = ports
    env = _cluster_env(
        root,
        {
            local_cluster.ENV_CLUSTER: name,
            local_cluster.ENV_ZK_PORT: str(zookeeper),
            local_cluster.ENV_BOOKIE_PORT: str(bookie),
            local_cluster.ENV_WEB_PORT: str(web),
            local_cluster.ENV_BROKER_PORT: str(broker),
            local_cluster.ENV_VERSION: pulsar_version,
        },
    )
    with contextlib.ExitStack() as stack:
        _, address = stack.enter_context(network_namespace(netns, subnet))
        with _environment(env):
            settings = local_cluster.settings_from_env()
        stack.callback(local_cluster.stop, settings)
        # The cluster starts inside the namespace, where its readiness checks reach the brokers.
        dev_cli = str(Path(sys.executable).parent / "pulsar-rebalance-dev")
        started = subprocess.run(
            ["ip", "netns", "exec", netns, dev_cli, "local-cluster", "start", "--brokers", str(brokers)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode != 0:
            raise local_cluster.LocalClusterError(f"cluster in {netns} did not start: {started.stderr.strip()[-2000:]}")
        description = json.loads(started.stdout)
        _start_proxy(settings, netns, description, proxy_port)
        proxied = ProxiedCluster(netns, f"http://{address}:{proxy_port}", description, settings)
        _wait_for_proxy(proxied, settings.start_timeout_seconds)
        yield proxied


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """`env` as this process's environment for the block (the local cluster reads its settings from there)."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def proxy_configuration(description: Mapping[str, Any], web_port: int) -> dict[str, object]:
    """proxy.conf: `/admin` and `/lookup` to the first broker, each broker's admin API under `broker_path`."""
    first = description["brokers"][0]
    conf: dict[str, object] = {
        "clusterName": description["cluster"],
        "brokerServiceURL": first["serviceUrl"],
        "brokerWebServiceURL": first["adminUrl"],
        "bindAddress": "0.0.0.0",
        "webServicePort": web_port,
        "servicePort": web_port + 1,
        "authenticationEnabled": "false",
    }
    for index, broker in enumerate(description["brokers"]):
        conf[f"httpReverseProxy.broker{index}.path"] = broker_path(broker["id"])
        conf[f"httpReverseProxy.broker{index}.proxyTo"] = f"{broker['adminUrl']}/admin"
    return conf


def _start_proxy(
    settings: local_cluster.LocalClusterSettings, netns: str, description: Mapping[str, Any], web_port: int
) -> None:
    """The distribution's own proxy in `netns`, recorded with the cluster's processes (`local_cluster.stop` stops
    it)."""
    lib_dir = local_cluster.ensure_distribution(settings)
    if not any(lib_dir.glob("*pulsar-proxy-*.jar")):
        raise local_cluster.LocalClusterError(f"{lib_dir} holds no pulsar-proxy jar: add it to run the proxy")
    conf = settings.conf_dir / "proxy.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in proxy_configuration(description, web_port).items()))
    local_cluster.launch_beside(
        "proxy", _PROXY_MEM, [PROXY_MAIN, "-c", str(conf)], prefix=("ip", "netns", "exec", netns), settings=settings
    )


def _wait_for_proxy(proxied: ProxiedCluster, timeout: float) -> None:
    """Until the proxy lists the brokers (its `/admin` route) and answers for each on its path."""
    deadline = time.monotonic() + timeout
    paths = [f"/admin/v2/brokers/{proxied.name}"] + [
        f"{broker_path(broker)}/v2/brokers/{proxied.name}/{broker}/ownedNamespaces" for broker in proxied.broker_ids
    ]
    last: dict[str, object] = {}
    while True:
        running = local_cluster.status(proxied.settings)
        if running is None or not running["healthy"]:
            raise local_cluster.LocalClusterError(
                f"a process of the proxied cluster exited; see {proxied.settings.log_dir} (proxy.out, proxy.log)"
            )
        for path in paths:
            try:
                last[path] = requests.get(proxied.proxy_url + path, timeout=2, allow_redirects=False).status_code
            except requests.RequestException as error:
                last[path] = type(error).__name__
        if all(status == 200 for status in last.values()):
            return
        if time.monotonic() > deadline:
            raise local_cluster.LocalClusterError(f"the proxy at {proxied.proxy_url} answers {last}")
        time.sleep(0.5)
