"""The cost of reading what a cluster declares at each collect (goal: within 10 s and 1 GiB, and at most 1.5x the
collect without policies).

A fake admin API on loopback answers every call after 20 ms, one port per broker (an asyncio server in this
process). Two clusters: 100 brokers of the modular load manager reporting 5,000 namespaces (4 bundles each), and 50
brokers of the extensible load manager serving 20,000 topics each (5,000 namespaces, each topic with a producer and
a subscription with a consumer, as Pulsar writes its `/broker-stats/topics`). Each cluster is collected twice, each
time in a fresh process (its peak memory, and its worker processes' if it starts any): without policies, by the
collect as it was before it read declarations (boundaries only, on a cluster that declares nothing), and with
policies (isolation policies, failure domains, an anti-affinity group on two namespaces of three, each broker's
runtime configuration of ~1,000 keys).
Usage: python bench/bench_collect_declarations.py [--brokers N] [--namespaces N] [--extensible-brokers N]
       [--topics N] [--delay-ms N]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLUSTER = "bench"
MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
BOUNDARIES = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
RANGES = [f"{low}_{high}" for low, high in itertools.pairwise(BOUNDARIES)]
TENANTS = 50


@dataclass(frozen=True)
class Shape:
    brokers: int
    namespaces: int
    extensible: bool
    topics_per_broker: int = 0


def namespace(index: int) -> str:
    return f"tenant-{index % TENANTS}/ns-{index}"


def _topic_stats(topic: str) -> str:
    """One topic as a broker streams it (`PersistentTopic.updateRates`): a producer, a subscription with a consumer."""
    publisher = {
        "msgRateIn": 10.5,
        "msgThroughputIn": 10752.0,
        "averageMsgSize": 1024.0,
        "chunkedMessageRate": 0.0,
        "producerId": 7,
        "supportsPartialProducer": False,
        "producerName": "standalone-0-42",
        "address": "/10.0.0.12:53214",
        "connectedSince": "2026-11-20T08:15:03.512Z",
        "clientVersion": "Pulsar-Java-v4.0.2",
        "metadata": {},
        "accessMode": "Shared",
    }
    consumer = {
        "msgRateOut": 10.5,
        "msgThroughputOut": 10752.0,
        "msgRateRedeliver": 0.0,
        "messageAckRate": 10.5,
        "consumerName": "c-3f9a1",
        "availablePermits": 995,
        "unackedMessages": 5,
        "blockedConsumerOnUnackedMsgs": False,
        "address": "/10.0.0.31:48810",
        "connectedSince": "2026-11-20T08:15:04.102Z",
        "clientVersion": "Pulsar-Java-v4.0.2",
        "lastAckedTimestamp": 1795763703512,
        "lastConsumedTimestamp": 1795763703508,
        "metadata": {},
    }
    subscription = {
        "consumers": [consumer],
        "msgBacklog": 5,
        "msgRateExpired": 0.0,
        "msgRateOut": 10.5,
        "messageAckRate": 10.5,
        "msgThroughputOut": 10752.0,
        "msgRateRedeliver": 0.0,
        "numberOfEntriesSinceFirstNotAckedMessage": 1,
        "totalNonContiguousDeletedMessagesRange": 0,
        "type": "Shared",
        "filterProcessedMsgCount": 0,
        "filterAcceptedMsgCount": 0,
        "filterRejectedMsgCount": 0,
        "filterRescheduledMsgCount": 0,
        "blockedSubscriptionOnUnackedMsgs": False,
        "unackedMessages": 5,
    }
    stats = {
        "publishers": [publisher],
        "replication": {},
        "subscriptions": {"sub-1": subscription},
        "producerCount": 1,
        "averageMsgSize": 1024.0,
        "msgRateIn": 10.5,
        "msgRateOut": 10.5,
        "msgInCount": 6302211,
        "bytesInCount": 6453464064,
        "msgOutCount": 6302206,
        "bytesOutCount": 6453458944,
        "msgThroughputIn": 10752.0,
        "msgThroughputOut": 10752.0,
        "storageSize": 2147483648,
        "backlogSize": 5120,
        "pendingAddEntriesCount": 0,
        "filteredEntriesCount": 0,
    }
    return json.dumps(topic) + ":" + json.dumps(stats)


class FakeCluster:
    """The admin API of `shape`'s brokers; `policies` switches what the cluster declares."""

    def __init__(self, shape: Shape, delay: float) -> None:
        self.shape, self.delay, self.policies = shape, delay, False
        self.ports: list[int] = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()
        self.ids = [f"127.0.0.1:{port}" for port in self.ports]
        self.index = {port: index for index, port in enumerate(self.ports)}
        self._runtime = {index: self._runtime_configuration(index).encode() for index in range(shape.brokers)}
        self._topics_cache: dict[int, bytes] = {}

    def owned(self, broker: int) -> range:
        per_broker = self.shape.namespaces // self.shape.brokers
        return range(broker * per_broker, (broker + 1) * per_broker)

    def _runtime_configuration(self, broker: int) -> str:
        values = {f"someOtherSetting{index}": str(index) for index in range(1000)}
        values.update(
            clusterName=CLUSTER,
            loadManagerClassName=EXTENSIBLE if self.shape.extensible else MODULAR,
            loadBalancerSheddingEnabled="false",
            loadBalancerAutoBundleSplitEnabled="false",
            brokerClientAuthenticationParameters="token:not-for-the-archive",
            webServicePort=str(self.ports[broker]),
        )
        return json.dumps(values)

    def _load_report(self, broker: int) -> bytes:
        stats = {"msgRateIn": 100.0, "msgRateOut": 100.0, "msgThroughputIn": 1e5, "msgThroughputOut": 1e5}
        bundles = [f"{namespace(ns)}/{bundle_range}" for ns in self.owned(broker) for bundle_range in RANGES]
        report = {
            "cpu": {"usage": 40.0, "limit": 100.0},
            "bandwidthIn": {"usage": 10.0, "limit": 100.0},
            "lastStats": {bundle: {**stats, "topics": 5} for bundle in bundles},
            "bundles": bundles,
            "numBundles": len(bundles),
            "brokerVersionString": "3.0.7",
            "loadReportType": "LocalBrokerData",
        }
        return json.dumps(report).encode()

    def _metrics(self) -> bytes:
        usage = {
            "brk_lb_cpu_usage": 40.0,
            "brk_lb_memory_usage": 30.0,
            "brk_lb_directMemory_usage": 5.0,
            "brk_lb_bandwidth_in_usage": 10.0,
            "brk_lb_bandwidth_out_usage": 10.0,
        }
        return json.dumps(
            [
                {"dimensions": {"metric": "loadBalancing"}, "metrics": usage},
                {
                    "dimensions": {"metric": "loadBalancing", "feature": "max_ema"},
                    "metrics": {"brk_lb_resource_usage": 0.4},
                },
            ]
        ).encode()

    def _topics(self, broker: int) -> bytes:
        """`/broker-stats/topics`: `{ns: {range: {"persistent": {topic: stats}}}}`, rendered once per broker."""
        if broker not in self._topics_cache:
            owned = self.owned(broker)
            per_bundle = max(1, self.shape.topics_per_broker // (len(owned) * len(RANGES)))
            parts = []
            for ns in owned:
                ranges = []
                for bundle_range in RANGES:
                    topics = ",".join(
                        _topic_stats(f"persistent://{namespace(ns)}/t-{bundle_range}-{index}")
                        for index in range(per_bundle)
                    )
                    ranges.append(f'"{bundle_range}":{{"persistent":{{{topics}}}}}')
                parts.append(f'"{namespace(ns)}":{{{",".join(ranges)}}}')
            self._topics_cache[broker] = ("{" + ",".join(parts) + "}").encode()
        return self._topics_cache[broker]

    def _owned_namespaces(self, broker_id: str) -> bytes:
        broker = self.ids.index(broker_id)
        status = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
        return json.dumps(
            {f"{namespace(ns)}/{bundle_range}": status for ns in self.owned(broker) for bundle_range in RANGES}
        ).encode()

    def _group(self, name: str) -> bytes:
        index = int(name.rpartition("-")[2])
        return f"group-{index // 3}".encode() if self.policies and index % 3 else b""

    def _isolation(self) -> bytes:
        if not self.policies:
            return b"{}"
        policies = {
            f"tenant-{tenant}-isolated": {
                "namespaces": [f"tenant-{tenant}/.*"],
                "primary": [f"broker-{tenant}-[ab]\\.example"],
                "secondary": ["127\\.0\\.0\\.1"],
                "auto_failover_policy": {
                    "policy_type": "min_available",
                    "parameters": {"min_limit": "1", "usage_threshold": "80"},
                },
            }
            for tenant in range(TENANTS)
        }
        return json.dumps(policies).encode()

    def _domains(self) -> bytes:
        if not self.policies:
            return b"{}"
        return json.dumps({f"rack-{rack}": {"brokers": self.ids[rack::10]} for rack in range(10)}).encode()

    def body(self, port: int, path: str) -> tuple[int, bytes]:
        broker = self.index[port]
        if path == "/admin/v2/brokers/configuration/runtime":
            return 200, self._runtime[broker]
        if path == "/admin/v2/brokers/version":
            return 200, b"3.0.7"
        if path == f"/admin/v2/brokers/{CLUSTER}":
            return 200, json.dumps(self.ids).encode()
        if path == "/admin/v2/brokers/leaderBroker":
            return 200, json.dumps({"brokerId": self.ids[0]}).encode()
        if path == "/admin/v2/broker-stats/load-report":
            if self.shape.extensible:
                return 500, b'{"reason": "not supported by the extensible load manager"}'
            return 200, self._load_report(broker)
        if path == "/admin/v2/broker-stats/metrics":
            return 200, self._metrics()
        if path == "/admin/v2/broker-stats/topics":
            return 200, self._topics(broker)
        if path.startswith(f"/admin/v2/brokers/{CLUSTER}/") and path.endswith("/ownedNamespaces"):
            return 200, self._owned_namespaces(path.split("/")[5])
        if path.endswith("/bundles"):
            return 200, json.dumps({"boundaries": BOUNDARIES, "numBundles": len(RANGES)}).encode()
        if path.endswith("/antiAffinity"):
            return 200, self._group(path.split("/")[-2])
        if path == f"/admin/v2/clusters/{CLUSTER}/namespaceIsolationPolicies":
            return 200, self._isolation()
        if path == f"/admin/v2/clusters/{CLUSTER}/failureDomains":
            return 200, self._domains()
        if path == "/admin/v2/brokers/configuration/values":
            return 200, b'{"loadBalancerSheddingEnabled": "false"}' if self.policies else b"{}"
        return 404, b'{"reason": "no such route"}'

    async def _serve(self, port_box: list[int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                path = request.split(b" ", 2)[1].decode().partition("?")[0]
                await asyncio.sleep(self.delay)
                status, body = self.body(port_box[0], path)
                head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                writer.write(head.encode())
                writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError):
            writer.close()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            for _ in range(self.shape.brokers):
                box: list[int] = []
                server = await asyncio.start_server(
                    lambda r, w, box=box: self._serve(box, r, w), "127.0.0.1", 0, backlog=512, limit=1 << 20
                )
                box.append(server.sockets[0].getsockname()[1])
                self.ports.append(box[0])

        self.loop.run_until_complete(start())
        ready.set()
        self.loop.run_forever()


def _peak_kib(pid: int | str) -> int:
    """A process's peak resident memory since it began (`VmHWM`: unlike `ru_maxrss`, not inherited through exec
    from the fake cluster's process that started it); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakMemory:
    """The peak memory of this process and of every process it started (the collect's worker processes and
    their fork server), each its own peak, summed: an upper bound of what the collect held at once. Sampled
    every 20 ms, so that the workers are seen before they exit."""

    def __init__(self) -> None:
        self._peaks: dict[str, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _descendants(self) -> list[str]:
        parents: dict[str, str] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[stat.parent.name] = fields[1]
        found, frontier = [], [str(os.getpid())]
        while frontier:
            children = [pid for pid, parent in parents.items() if parent in frontier]
            found.extend(children)
            frontier = children
        return found

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            for pid in self._descendants():
                self._peaks[pid] = max(self._peaks.get(pid, 0), _peak_kib(pid))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def mib(self) -> float:
        return (_peak_kib("self") + sum(self._peaks.values())) / 1024


def measure(admin_url: str, with_policies: bool) -> dict[str, Any]:
    """One collect in this process (a fresh one): its time, the process's peak memory, what it read."""
    from planner.collect import collector
    from planner.collect.admin_client import PulsarAdminClient
    from planner.collect.declared import NamespaceAnswers
    from planner.pulsar.declarations import ClusterDeclarations
    from planner.store.database import Store
    from planner.store.snapshots import latest_declarations

    if not with_policies:
        # The collect as it was before it read declarations: each namespace's boundaries asked, nothing else.
        collector.boundaries_of_owned = lambda bundles: {}  # type: ignore[assignment]
        collector.read_namespaces = lambda client, boundaries_of, groups_of: NamespaceAnswers(  # type: ignore[assignment]
            boundaries=client.map_concurrently(boundaries_of, client.bundle_boundaries)
        )
        collector.read_declarations = lambda *args, **kwargs: ClusterDeclarations()  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as home:
        store = Store(f"sqlite:///{home}/planner.db")
        client = PulsarAdminClient(admin_url)
        with PeakMemory() as memory:
            started = time.perf_counter()
            result = collector.collect(client, store, Path(home))
            elapsed = time.perf_counter() - started
        declared = latest_declarations(store, CLUSTER)
        processes = client.worker_processes(result.brokers)
        client.close()
        store.dispose()
    assert not result.partial, result.missing
    policies = declared.policies if declared else None
    return {
        "seconds": elapsed,
        "peakMiB": memory.mib(),
        "brokers": result.brokers,
        "bundles": result.bundles,
        "isolation": len(policies.isolation) if policies else 0,
        "domains": len(policies.failure_domains) if policies else 0,
        "groups": len(policies.anti_affinity_groups) if policies else 0,
        "releases": len(declared.broker_versions) if declared else 0,
        "unreadable": len(declared.unreadable) if declared else 0,
        "processes": processes,
    }


def run_measure(cluster: FakeCluster, with_policies: bool) -> dict[str, Any]:
    cluster.policies = with_policies
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--measure",
            f"http://{cluster.ids[0]}",
            *(["--with-policies"] if with_policies else []),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the measured collect failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--namespaces", type=int, default=5000)
    parser.add_argument("--extensible-brokers", type=int, default=50)
    parser.add_argument("--topics", type=int, default=20000, help="topics per broker of the extensible cluster")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--with-policies", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.with_policies)))
        return

    delay = args.delay_ms / 1000
    shapes = {
        f"modular: {args.brokers} brokers, {args.namespaces} namespaces": Shape(args.brokers, args.namespaces, False),
        f"extensible: {args.extensible_brokers} brokers x {args.topics} topics, {args.namespaces} namespaces": Shape(
            args.extensible_brokers, args.namespaces, True, args.topics
        ),
    }
    print(f"collect against a fake admin API answering after {args.delay_ms:.0f} ms (goal: <= 10 s, <= 1 GiB, <= 1.5x)")
    for title, shape in shapes.items():
        cluster = FakeCluster(shape, delay)
        for broker in range(shape.brokers):  # rendered before the clock starts: the fake's cost is not the collect's
            if shape.extensible:
                cluster._topics(broker)
        without = run_measure(cluster, with_policies=False)
        with_policies = run_measure(cluster, with_policies=True)
        ratio = with_policies["seconds"] / without["seconds"]
        met = with_policies["seconds"] <= 10 and with_policies["peakMiB"] <= 1024 and ratio <= 1.5
        print(f"\n{title}")
        print(f"  {'':28}{'time':>9}{'peak memory':>14}")
        print(f"  {'without policies (before)':28}{without['seconds']:>8.2f}s{without['peakMiB']:>10.0f} MiB")
        print(f"  {'with policies':28}{with_policies['seconds']:>8.2f}s{with_policies['peakMiB']:>10.0f} MiB")
        print(f"  ratio {ratio:.2f}x; goal {'met' if met else 'MISSED'}")
        print(
            f"  read: {with_policies['isolation']} isolation policies, {with_policies['domains']} failure domains, "
            f"{with_policies['groups']} anti-affinity groups, {with_policies['releases']} releases, "
            f"{with_policies['unreadable']} unreadable; {with_policies['bundles']} bundles; "
            f"{with_policies['processes'] if shape.extensible else 0} worker processes decoding topic stats"
        )


if __name__ == "__main__":
    main()
