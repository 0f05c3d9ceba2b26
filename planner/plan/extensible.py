"""The extensible load manager's view of a cluster (PIP-192), built from collected snapshots: what each broker
would publish as its `BrokerLoadData` and `TopBundlesLoadData`, the input of TransferShedder
(`planner.plan.shedding.transfer_shedder`). Pure.

- `weightedMaxEMA`: the broker's own, as its metrics gave it at the snapshot (the value its leader ranks it by);
  where a snapshot lacks it, the weighted maximum of the snapshot's usage.
- `msgThroughputEMA`: Pulsar's moving average (`EMA = EMA * h + (1 - h) * x`, the first value as it is, h =
  `loadBalancerHistoryResourcePercentage`) over the broker's snapshots within the history. A broker steps it
  every 5 seconds; here it steps once per snapshot, so it follows the traffic more slowly than the broker's own.
- the top bundles: `TopKBundles` over the bundles of the newest snapshot, least busy of the top first.
- `updatedAt`: when the snapshot was taken, so that TransferShedder's data-age guard judges the snapshot's age.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from planner.plan.bundles.split import can_split
from planner.plan.extensible_filters import has_policies
from planner.pulsar.broker_score import max_resource_usage, max_resource_usage_with_weight
from planner.pulsar.bundle_range import BundleName, namespace_of
from planner.pulsar.config import MIB, PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.java_numbers import java_max, percent_usage
from planner.pulsar.load_manager_shared import SYSTEM_NAMESPACE, is_sla_or_heartbeat_namespace
from planner.pulsar.model import (
    BrokerLoadData,
    ExtensibleLoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    TopBundleLoadData,
    TopBundlesLoadData,
)


def weighted_max(report: LocalBrokerData, config: PulsarConfig) -> float:
    """`BrokerLoadData.updateWeightedMaxEMA`'s sample: the largest weighted resource usage, a fraction. Unlike the
    modular load manager's score it weighs memory too (`loadBalancerMemoryResourceWeight`)."""
    weighted_memory = percent_usage(report.memory) * config.memory_weight / 100
    return java_max(max_resource_usage_with_weight(report, config.resource_weights), weighted_memory)


def moving_average(values: Iterable[float], history: float) -> float:
    """Pulsar's EMA over the values in time order: the first as it is, then `ema * h + (1 - h) * x`."""
    average = math.nan
    for index, value in enumerate(values):
        average = value if index == 0 else average * history + (1 - history) * value
    return 0.0 if math.isnan(average) else average


def _java_round(value: float) -> int:
    return math.floor(value + 0.5)


def _ranking_key(stats: NamespaceBundleStats) -> tuple[int, int, int, int, int]:
    """`NamespaceBundleStats.compareTo`: bytes/s in and out to 100 kB/s, msg/s to 100, topics and connections to
    500, cache to 100 kB."""
    return (
        _java_round(stats.msg_throughput_in / 1e5),
        _java_round(stats.msg_throughput_out / 1e5),
        _java_round((stats.msg_rate_in + stats.msg_rate_out) / 100),
        (stats.topics + stats.consumer_count + stats.producer_count) // 500,
        stats.cache_size // 100000,
    )


def top_k_bundles(
    bundles: Mapping[str, NamespaceBundleStats], config: PulsarConfig, policies: ClusterPolicies | None = None
) -> TopBundlesLoadData:
    """`TopKBundles.update`: a broker's `loadBalancerMaxNumberOfBundlesInBundleLoadReport` busiest bundles, the least
    busy of them first, leaving out system, heartbeat and SLA-monitor bundles, from 3.3.5 and 4.0.1 those without
    traffic, and from 4.1 those of `loadBalancerSheddingExcludedNamespaces`.

    Ties under the coarse comparison are broken by bundle name (Pulsar's quickselect leaves them in an order that
    depends on its hash map). With the cluster's `policies`, bundles with isolation or anti-affinity policies are
    left out unless `loadBalancerSheddingBundlesWithPoliciesEnabled`, before the busiest are taken, as Pulsar does
    in every release; without them (not read) they are kept.
    """
    version = config.pulsar_version
    excluded = config.shedding_excluded_namespaces if version.has_shedding_excluded_namespaces else frozenset()
    skip_policies = policies is not None and not config.shedding_bundles_with_policies_enabled
    with_policies: dict[str, bool] = {}  # per namespace: a broker holds many bundles of few namespaces
    kept = []
    for bundle, stats in bundles.items():
        namespace = namespace_of(bundle)
        if version.transfer_shedder_skips_idle_bundles and stats.msg_throughput_in + stats.msg_throughput_out == 0:
            continue
        if namespace == SYSTEM_NAMESPACE or is_sla_or_heartbeat_namespace(namespace, version):
            continue
        if skip_policies and policies is not None:
            if namespace not in with_policies:
                with_policies[namespace] = has_policies(namespace, policies)
            if with_policies[namespace]:
                continue
        if namespace in excluded:
            continue
        kept.append((bundle, stats))
    busiest = sorted(kept, key=lambda item: (_ranking_key(item[1]), item[0]), reverse=True)
    top = busiest[: config.max_bundles_in_bundle_load_report]
    return TopBundlesLoadData(
        top_bundles_load_data=[TopBundleLoadData(bundle_name=bundle, stats=stats) for bundle, stats in reversed(top)]
    )


def bundles_kept_off_the_top(
    reports: Mapping[str, LocalBrokerData], config: PulsarConfig, policies: ClusterPolicies
) -> dict[str, list[str]]:
    """Per broker, the bundles with isolation or anti-affinity policies that would be among its top bundles were
    it not for them (what `top_k_bundles` leaves out because of the policies), busiest first."""
    if config.shedding_bundles_with_policies_enabled:
        return {}
    kept_off = {}
    for broker, report in sorted(reports.items()):
        top = top_k_bundles(report.last_stats, config).top_bundles_load_data
        names = [
            entry.bundle_name for entry in reversed(top) if has_policies(namespace_of(entry.bundle_name), policies)
        ]
        if names:
            kept_off[broker] = names
    return kept_off


def extensible_load_data(
    reports: Mapping[str, LocalBrokerData],
    weighted_max_ema: Mapping[str, float | None],
    throughput_ema: Mapping[str, float],
    taken_millis: int,
    config: PulsarConfig,
    recently_unloaded_bundles: Mapping[str, int] | None = None,
    recently_unloaded_brokers: Mapping[str, int] | None = None,
    policies: ClusterPolicies | None = None,
) -> ExtensibleLoadData:
    """TransferShedder's input for a snapshot taken at `taken_millis`: each broker's load data from its report, its
    own `weightedMaxEMA` (where the snapshot lacks it, the weighted maximum of its report) and its
    `msgThroughputEMA` (`moving_average` over its throughput in the history; without one, its throughput now),
    and its top bundles (with the cluster's `policies`, as `top_k_bundles` takes them); the brokers of the snapshot
    are the available ones."""
    brokers = {}
    top = {}
    for broker, report in sorted(reports.items()):
        own = weighted_max_ema.get(broker)
        brokers[broker] = BrokerLoadData(
            cpu=report.cpu,
            memory=report.memory,
            direct_memory=report.direct_memory,
            bandwidth_in=report.bandwidth_in,
            bandwidth_out=report.bandwidth_out,
            msg_throughput_in=report.msg_throughput_in,
            msg_throughput_out=report.msg_throughput_out,
            msg_rate_in=report.msg_rate_in,
            msg_rate_out=report.msg_rate_out,
            bundle_count=report.num_bundles,
            topics=report.num_topics,
            max_resource_usage=max_resource_usage(report),  # float math, as LocalBrokerData.max
            weighted_max_ema=own if own is not None else weighted_max(report, config),
            msg_throughput_ema=throughput_ema.get(broker, report.msg_throughput),
            updated_at=taken_millis,
            reported_at=taken_millis,
        )
        top[broker] = top_k_bundles(report.last_stats, config, policies)
    return ExtensibleLoadData(
        brokers=brokers,
        top_bundles=top,
        recently_unloaded_bundles=dict(recently_unloaded_bundles or {}),
        recently_unloaded_brokers=dict(recently_unloaded_brokers or {}),
    )


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """A bundle the extensible load manager's split strategy would split, its owner, and why."""

    bundle: str
    broker: str
    reason: str  # Topics, Sessions, MsgRate or Bandwidth


def bundles_to_split(
    reports: Mapping[str, LocalBrokerData],
    config: PulsarConfig,
    hit_counts: Mapping[str, Mapping[str, int]],
    namespace_bundle_counts: Mapping[str, int] | None = None,
) -> tuple[list[SplitChoice], dict[str, dict[str, int]]]:
    """`DefaultNamespaceBundleSplitStrategyImpl.findBundlesToSplit`, as each broker runs it every minute on its own
    bundle stats, and the split condition's hit counts it leaves, per broker: a bundle over
    `loadBalancerNamespaceBundleMaxTopics`, `...MaxSessions`, `...MaxMsgRate` or `...MaxBandwidthMbytes` on more
    than `loadBalancerNamespaceBundleSplitConditionHitCountThreshold` consecutive cycles, while its namespace has
    fewer than `loadBalancerNamespaceMaximumBundles`, at most `loadBalancerMaxNumberOfBundlesToSplitPerCycle` per
    broker. A broker forgets the counts of bundles it no longer reports, so a bundle that moved starts afresh.

    Unlike the modular load manager's it reads the bundles' current stats, not their averages. Bundles are taken
    in name order (a broker takes them in its stats map's order, which matters only past the per-cycle limit)."""
    max_bandwidth = config.namespace_bundle_max_bandwidth_mbytes * MIB
    counts = dict(namespace_bundle_counts or {})
    chosen: list[SplitChoice] = []
    after: dict[str, dict[str, int]] = {}
    for broker, report in sorted(reports.items()):
        previous = hit_counts.get(broker, {})
        hits = {bundle: count for bundle, count in previous.items() if bundle in report.last_stats}
        decided, planned = 0, dict[str, int]()  # each broker counts its own cycle's splits per namespace
        for bundle, stats in sorted(report.last_stats.items()):
            if stats.topics < 2 or not can_split(BundleName.parse(bundle).range):
                continue
            reason = None
            if stats.topics > config.namespace_bundle_max_topics:
                reason = "Topics"
            elif config.namespace_bundle_max_sessions > 0 and (
                stats.consumer_count + stats.producer_count > config.namespace_bundle_max_sessions
            ):
                reason = "Sessions"
            elif stats.msg_rate_in + stats.msg_rate_out > config.namespace_bundle_max_msg_rate:
                reason = "MsgRate"
            elif stats.msg_throughput_in + stats.msg_throughput_out > max_bandwidth:
                reason = "Bandwidth"
            if reason is None:
                hits.pop(bundle, None)
                continue
            hits[bundle] = hits.get(bundle, 0) + 1
            if hits[bundle] <= config.bundle_split_condition_hit_count_threshold:
                continue
            namespace = namespace_of(bundle)
            if counts.get(namespace, 1) + planned.get(namespace, 0) >= config.namespace_maximum_bundles:
                continue
            chosen.append(SplitChoice(bundle, broker, reason))
            planned[namespace] = planned.get(namespace, 0) + 1
            del hits[bundle]
            decided += 1
            if decided == config.max_bundles_to_split_per_cycle:
                break
        if hits:
            after[broker] = hits
    return chosen, after
