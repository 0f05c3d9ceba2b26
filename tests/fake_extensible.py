"""Fake brokers of the extensible load manager (`tests.fake_pulsar.FakePulsar` on loopback, in the test's process),
for the tests of the collect's worker processes: the unit tests (`tests/unit/test_read_processes.py`) and the collect
DAG under a real Airflow scheduler (`tests/integration/test_collect_processes_in_airflow.py`); and the processes a
test finds under another, from /proc."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tests.fake_pulsar import FakePulsar, Reply, declare, declare_broker

EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
TOPIC_STATS = ("GET", "/admin/v2/broker-stats/topics")


def _topics(namespace: str, count: int, rate: float) -> dict:
    topic = {
        "msgRateIn": rate,
        "msgRateOut": rate / 2,
        "msgThroughputIn": rate * 100,
        "msgThroughputOut": rate * 50,
        "producerCount": 1,
        "subscriptions": {"s": {"consumers": [{"consumerName": "c"}]}},
    }
    return {
        namespace: {
            "0x00000000_0x80000000": {"persistent": {f"persistent://{namespace}/t-{i}": topic for i in range(count)}}
        }
    }


def _metrics(cpu: float) -> list[dict]:
    usage = {
        "brk_lb_cpu_usage": cpu,
        "brk_lb_memory_usage": 20.0,
        "brk_lb_directMemory_usage": 1.0,
        "brk_lb_bandwidth_in_usage": 2.0,
        "brk_lb_bandwidth_out_usage": 3.0,
    }
    return [
        {"dimensions": {"metric": "loadBalancing"}, "metrics": usage},
        {"dimensions": {"metric": "loadBalancing", "feature": "max_ema"}, "metrics": {"brk_lb_resource_usage": 0.3}},
    ]


@contextlib.contextmanager
def extensible_cluster(cluster: str, count: int) -> Iterator[list[FakePulsar]]:
    """`count` fake brokers of `cluster` on the extensible load manager (release 4.2.4), sorted by id, the first
    the entry the collect asks; broker i serves the lower bundle of namespace `t/ns-i` (50 + i topics), and the odd
    namespaces are in anti-affinity group `spread`. Closed on exit."""
    brokers = sorted((FakePulsar() for _ in range(count)), key=lambda broker: broker.broker_id)
    try:
        ids = [broker.broker_id for broker in brokers]
        entry = brokers[0]
        entry.route("GET", f"/admin/v2/brokers/{cluster}", Reply(200, ids))
        entry.route("GET", "/admin/v2/brokers/leaderBroker", Reply(200, {"brokerId": ids[0]}))
        for index, broker in enumerate(brokers):
            namespace = f"t/ns-{index}"
            runtime = {"clusterName": cluster, "loadManagerClassName": EXTENSIBLE, "webServicePort": ids[index]}
            declare_broker(broker, runtime, version="4.2.4")
            broker.route("GET", "/admin/v2/broker-stats/metrics", Reply(200, _metrics(10.0 + index)))
            broker.route(*TOPIC_STATS, Reply(200, _topics(namespace, 50 + index, 1.5 + index)))
            owned = {f"{namespace}/0x00000000_0x80000000": {"is_active": True}}
            entry.route("GET", f"/admin/v2/brokers/{cluster}/{ids[index]}/ownedNamespaces", Reply(200, owned))
        anti_affinity = {f"t/ns-{index}": "spread" if index % 2 else None for index in range(count)}
        declare(entry, cluster, anti_affinity=anti_affinity)
        yield brokers
    finally:
        for broker in brokers:
            broker.close()


def descendants(root: int | None = None) -> dict[int, int]:
    """The descendants of `root` (default: this process), pid to parent pid."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = {}, {root or os.getpid()}
    while frontier:
        children = {pid: parent for pid, parent in parents.items() if parent in frontier}
        found.update(children)
        frontier = set(children)
    return found


def gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie counts: it runs nothing and holds nothing open)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
