"""A broker's load on the extensible load manager (PIP-192), from what its admin API answers.

There a broker has no load report (`/admin/v2/broker-stats/load-report` answers HTTP 500: the extensible load
manager does not implement it, in every release from 3.0.0 to 4.2.4). Its load data (`BrokerLoadData`) and top
bundles go to the non-persistent system topics `loadbalancer-broker-load-data` and
`loadbalancer-top-bundles-load-data`, which a reader sees only from the next publication on (up to 15 minutes
for an idle broker, and only the top 10 bundles). So each collect asks every broker instead:

- `/admin/v2/broker-stats/metrics`: its `brk_lb_*` figures, the usage of each resource in percent and its
  `weightedMaxEMA` (`brk_lb_resource_usage{feature=max_ema}`), computed for the answer as for a Prometheus scrape;
- `/admin/v2/broker-stats/topics`: every topic it serves, by namespace and bundle, summed here per bundle as the
  broker sums them into its bundle stats (`PulsarStats.updateStats`), so every bundle is known, not only the top 10.

From these the collect writes the same records as for a load report (a `LocalBrokerData` whose resources are in
percent of 100), so the samples, archives and plans work alike, plus the broker's `weightedMaxEMA`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from planner.errors import InputError
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER
from planner.pulsar.model import LocalBrokerData, NamespaceBundleStats, ResourceUsage

if TYPE_CHECKING:
    from planner.collect.admin_client import PulsarAdminClient

# Topic stats (~2 KiB a topic, ~40 MB for a broker serving 20,000) read at once by one process's threads: one read
# while another is decoded. Decoding holds the GIL, so more in flight hold more memory and go no faster
# (bench/bench_collect_declarations.py: 4 took longer than 2, and a third more memory). Worker processes of
# `PulsarAdminClient.map_in_processes` read one at a time each.
TOPIC_STATS_IN_FLIGHT = 2
_in_flight = threading.BoundedSemaphore(TOPIC_STATS_IN_FLIGHT)

# brk_lb_* names of the resources, in LocalBrokerData's order
USAGE_METRICS = {
    "cpu": "brk_lb_cpu_usage",
    "memory": "brk_lb_memory_usage",
    "direct_memory": "brk_lb_directMemory_usage",
    "bandwidth_in": "brk_lb_bandwidth_in_usage",
    "bandwidth_out": "brk_lb_bandwidth_out_usage",
}


@dataclass(frozen=True, slots=True)
class ExtensibleBrokerLoad:
    """What a broker of the extensible load manager says of its load: its report in LocalBrokerData form and its
    own `weightedMaxEMA` (None when its metrics lack it)."""

    report: LocalBrokerData
    weighted_max_ema: float | None


_NonNegative = Annotated[float, msgspec.Meta(ge=0)]


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        raise InputError(f"{what}: expected a non-negative number, got {value!r}")
    return float(value)


def load_balancing_metrics(
    metrics: Sequence[Mapping[str, Any]], broker_id: str
) -> tuple[dict[str, float], float | None]:
    """The resources' usage in percent (`USAGE_METRICS`), and `weightedMaxEMA`, from a broker's metrics."""
    usage: dict[str, float] = {}
    weighted_max_ema = None
    if not isinstance(metrics, list):
        raise InputError(f"metrics of broker {broker_id}: expected a JSON list")
    for entry in metrics:
        if not isinstance(entry, Mapping):
            continue
        dimensions, values = entry.get("dimensions") or {}, entry.get("metrics") or {}
        if not isinstance(dimensions, Mapping) or not isinstance(values, Mapping):
            continue
        if dimensions.get("metric") != "loadBalancing":
            continue
        where = f"metrics of broker {broker_id}"
        if dimensions.get("feature") == "max_ema" and "brk_lb_resource_usage" in values:
            weighted_max_ema = _number(values["brk_lb_resource_usage"], f"{where}: brk_lb_resource_usage")
        for resource, name in USAGE_METRICS.items():
            if name in values:
                usage[resource] = _number(values[name], f"{where}: {name}")
    missing = sorted(name for resource, name in USAGE_METRICS.items() if resource not in usage)
    if missing:
        raise InputError(
            f"metrics of broker {broker_id}: no {', '.join(missing)} (is it on the extensible load manager?)"
        )
    return usage, weighted_max_ema


class _Consumer(msgspec.Struct, gc=False):
    """A consumer, counted only: its fields are skipped unread."""


class _Subscription(msgspec.Struct, gc=False):
    consumers: list[_Consumer] = []


class _TopicStats(msgspec.Struct, rename="camel", gc=False):
    """What the collect sums of a topic's stats; every other field of Pulsar's ~2 KiB per topic is skipped unread."""

    msg_rate_in: _NonNegative = 0.0
    msg_throughput_in: _NonNegative = 0.0
    msg_rate_out: _NonNegative = 0.0
    msg_throughput_out: _NonNegative = 0.0
    producer_count: _NonNegative = 0.0
    subscriptions: dict[str, _Subscription] = {}


# `{namespace: {range: {"persistent" | "non-persistent": {topic: stats}}}}`, as `/broker-stats/topics` answers.
_TOPIC_STATS = msgspec.json.Decoder(dict[str, dict[str, dict[str, dict[str, _TopicStats]]]])
_TOPIC_KINDS = ("persistent", "non-persistent")


def bundle_stats_from_topics(topic_stats: bytes | Mapping[str, Any], broker_id: str) -> dict[str, NamespaceBundleStats]:
    """Per bundle (`tenant/ns/0x.._0x..`), its topics' stats summed as the broker sums them: the rates and
    throughputs, the producers, the consumers of every subscription, and the number of topics.

    `topic_stats`: the answer's body as it came (decoded here into the summed fields only: a broker serving
    20,000 topics answers ~40 MB, which a full parse would take ten times longer to read and hold), or parsed."""
    body = topic_stats if isinstance(topic_stats, bytes) else msgspec.json.encode(topic_stats)
    try:
        decoded = _TOPIC_STATS.decode(body)
    except msgspec.ValidationError as error:
        raise _refusal(body, broker_id, error) from None
    except (msgspec.DecodeError, RecursionError) as error:
        raise InputError(f"topic stats of broker {broker_id}: not a JSON document Pulsar writes ({error})") from None
    bundles: dict[str, NamespaceBundleStats] = {}
    for namespace, ranges in decoded.items():
        for bundle_range, kinds in ranges.items():
            # One pass over the topics, in their order (the floating-point sums are the broker's own order's).
            rate_in = throughput_in = rate_out = throughput_out = 0.0
            producers = consumers = count = 0
            for kind in _TOPIC_KINDS:
                for stats in kinds.get(kind, {}).values():
                    rate_in += stats.msg_rate_in
                    throughput_in += stats.msg_throughput_in
                    rate_out += stats.msg_rate_out
                    throughput_out += stats.msg_throughput_out
                    producers += int(stats.producer_count)
                    for subscription in stats.subscriptions.values():
                        consumers += len(subscription.consumers)
                    count += 1
            bundles[f"{namespace}/{bundle_range}"] = NamespaceBundleStats(
                msg_rate_in=rate_in,
                msg_throughput_in=throughput_in,
                msg_rate_out=rate_out,
                msg_throughput_out=throughput_out,
                producer_count=producers,
                consumer_count=consumers,
                topics=count,
            )
    return bundles


def _refusal(body: bytes, broker_id: str, error: msgspec.ValidationError) -> InputError:
    """The error naming the topic and field at fault: msgspec's own path leaves the dict keys out."""
    where = f"topic stats of broker {broker_id}"

    def items(value: object) -> list[tuple[str, Any]]:
        return list(value.items()) if isinstance(value, dict) else []

    for _, ranges in items(msgspec.json.decode(body)):
        for _, kinds in items(ranges):
            for _, topics in items(kinds):
                for topic, stats in items(topics):
                    try:
                        msgspec.convert(stats, _TopicStats)
                    except msgspec.ValidationError as bad:
                        message, _, field = str(bad).partition(" - at `$.")
                        return InputError(f"{where}: {topic}: {field.rstrip('`')}: {message}")
    return InputError(f"{where}: {error}")


def read_bundle_stats(client: PulsarAdminClient, broker_id: str) -> dict[str, NamespaceBundleStats] | InputError:
    """A broker's topic stats read and summed per bundle (`bundle_stats_from_topics`), or why they are unusable;
    a module-level function, so that worker processes can run it (`PulsarAdminClient.map_in_processes`)."""
    with _in_flight:
        try:
            return bundle_stats_from_topics(client.topic_stats_body(broker_id), broker_id)
        except InputError as error:
            return error


def broker_load(
    broker_id: str,
    metrics: Sequence[Mapping[str, Any]],
    stats: Mapping[str, NamespaceBundleStats],
    owned_bundles: Sequence[str],
    taken_millis: int,
) -> ExtensibleBrokerLoad:
    """One broker's load from its metrics, its bundles' stats (`read_bundle_stats`) and the bundles it owns, idle
    ones included."""
    usage, weighted_max_ema = load_balancing_metrics(metrics, broker_id)
    report = LocalBrokerData(
        **{resource: ResourceUsage(usage=value, limit=100.0) for resource, value in usage.items()},
        msg_rate_in=sum(s.msg_rate_in for s in stats.values()),
        msg_rate_out=sum(s.msg_rate_out for s in stats.values()),
        msg_throughput_in=sum(s.msg_throughput_in for s in stats.values()),
        msg_throughput_out=sum(s.msg_throughput_out for s in stats.values()),
        last_update=taken_millis,
        last_stats=dict(stats),
        num_topics=sum(s.topics for s in stats.values()),
        num_bundles=len(set(owned_bundles) | set(stats)),
        num_consumers=sum(s.consumer_count for s in stats.values()),
        num_producers=sum(s.producer_count for s in stats.values()),
        bundles=frozenset(set(owned_bundles) | set(stats)),
        load_manager_class_name=EXTENSIBLE_LOAD_MANAGER,
    )
    return ExtensibleBrokerLoad(report, weighted_max_ema)
