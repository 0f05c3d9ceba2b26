"""`flow_or_qps_equally_divide`: cut a hot bundle so no part carries more than the split thresholds.

Topics with traffic are walked in hash order, accumulating message rate and throughput; where adding
the next topic would pass `loadBalancerNamespaceBundleMaxMsgRate` or `...MaxBandwidthMbytes`, a split
position is placed between the two hashes and the accumulator restarts at that topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.bundles.bundle_range import BundleRange
from planner.bundles.consistent_hashing_topic_bundle_assigner import topic_hash
from planner.config import MIB, PulsarConfig

NAME = "flow_or_qps_equally_divide"


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """A loaded topic's current traffic: message rate (in + out) and throughput (in + out, bytes/s)."""

    name: str
    msg_rate: float = 0.0
    throughput: float = 0.0


def split_positions(bundle: BundleRange, topics: Sequence[TopicLoad], config: PulsarConfig) -> list[int]:
    max_msg_rate = config.namespace_bundle_max_msg_rate
    max_throughput = config.namespace_bundle_max_bandwidth_mbytes * MIB
    margin = 1 + config.flow_or_qps_difference_threshold_percentage / 100.0
    active = [topic for topic in topics if topic.msg_rate > 0 or topic.throughput > 0]
    if len(active) <= 1:
        return []
    total_rate = sum(topic.msg_rate for topic in active)
    total_throughput = sum(topic.throughput for topic in active)
    if total_rate < max_msg_rate * margin and total_throughput < max_throughput * margin:
        return []

    by_hash = sorted((topic_hash(topic.name), topic) for topic in active)
    positions: list[int] = []
    rate = throughput = 0.0
    previous_hash = by_hash[0][0]
    for current_hash, topic in by_hash:
        if rate + topic.msg_rate > max_msg_rate or throughput + topic.throughput > max_throughput:
            if rate > 0 or throughput > 0:
                positions.append(previous_hash + (current_hash - previous_hash) // 2 + 1)
            rate = throughput = 0.0
        rate += topic.msg_rate
        throughput += topic.throughput
        previous_hash = current_hash
    return [position for position in positions if bundle.lower < position < bundle.upper]
