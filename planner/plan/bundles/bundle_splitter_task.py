"""Bundle-split detection of the modular load manager (Pulsar's `BundleSplitterTask.findBundlesToSplit`).

A bundle with at least two topics is worth splitting when its topics, sessions, long-term message
rate or long-term throughput pass the namespace-bundle limits (all strict), as long as the namespace
stays under `loadBalancerNamespaceMaximumBundles` counting this run's picks.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import MIB, PulsarConfig
from planner.pulsar.java_numbers import wrap_int32
from planner.pulsar.model import LoadData


def known_bundle_counts(load_data: LoadData) -> dict[str, int]:
    """Bundles per namespace as far as the load data tells (reported and averaged bundles)."""
    bundles = set(load_data.bundle_data)
    for broker in load_data.brokers.values():
        bundles.update(broker.last_stats)
        bundles.update(broker.bundles)
    counts: dict[str, int] = {}
    for bundle in bundles:
        namespace = namespace_of(bundle)
        counts[namespace] = counts.get(namespace, 0) + 1
    return counts


def is_split_worthy(load_data: LoadData, bundle: str, config: PulsarConfig, topics: int, sessions: int) -> bool:
    if topics < 2:
        return False
    data = load_data.bundle_data.get(bundle)
    long_term_rate = data.long_term_data.total_msg_rate if data else 0.0
    long_term_throughput = data.long_term_data.total_msg_throughput if data else 0.0
    max_sessions = config.namespace_bundle_max_sessions
    return (
        topics > config.namespace_bundle_max_topics
        or (max_sessions > 0 and sessions > max_sessions)
        or long_term_rate > config.namespace_bundle_max_msg_rate
        # Pulsar multiplies in 32-bit int: 2048 MB or more wraps around.
        or long_term_throughput > wrap_int32(config.namespace_bundle_max_bandwidth_mbytes * MIB)
    )


def find_bundles_to_split(
    load_data: LoadData, config: PulsarConfig, namespace_bundle_counts: Mapping[str, int] | None = None
) -> list[str]:
    """Bundles to split, in broker then bundle-name order.

    `namespace_bundle_counts` are the namespaces' current bundle counts (from the admin API); without
    them, the bundles the load data knows of are counted.
    """
    counts = dict(namespace_bundle_counts) if namespace_bundle_counts is not None else known_bundle_counts(load_data)
    selected_per_namespace: dict[str, int] = {}
    selected: list[str] = []
    for broker_id in sorted(load_data.brokers):
        last_stats = load_data.brokers[broker_id].last_stats
        for bundle in sorted(last_stats):
            stats = last_stats[bundle]
            if bundle in selected or not is_split_worthy(
                load_data, bundle, config, stats.topics, stats.consumer_count + stats.producer_count
            ):
                continue
            namespace = namespace_of(bundle)
            already = selected_per_namespace.get(namespace, 0)
            if counts.get(namespace, 0) + already < config.namespace_maximum_bundles:
                selected.append(bundle)
                selected_per_namespace[namespace] = already + 1
    return selected
