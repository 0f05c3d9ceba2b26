"""`flow_or_qps_equally_divide`: cut a hot bundle so no part carries more than the split thresholds.

Topics with traffic are walked in hash order, accumulating message rate and throughput; where adding
the next topic would pass `loadBalancerNamespaceBundleMaxMsgRate` or `...MaxBandwidthMbytes`, a split
position is placed between the two hashes and the accumulator restarts at that topic.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import topic_hash
from planner.plan.bundles.split_algorithm import SplitInputs, TopicLoad
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import MIB, PulsarConfig

NAME = "flow_or_qps_equally_divide"


def split_positions(bundle: BundleRange, topics: Sequence[TopicLoad], config: PulsarConfig) -> list[int]:
    """Positions in ascending order; empty when the bundle needs no split.

    Like Pulsar, topics are keyed by hash (the last topic with a hash wins) while every hash stays in the
    walk, so topics whose names collide under CRC-32 are walked as that last topic, once per topic. Totals
    are summed one topic at a time, as Java does (Python's `sum` of floats is compensated from 3.12 on).
    """
    max_msg_rate = config.namespace_bundle_max_msg_rate
    max_throughput = config.namespace_bundle_max_bandwidth_mbytes * MIB
    margin = 1 + config.flow_or_qps_difference_threshold_percentage / 100.0
    by_hash: dict[int, TopicLoad] = {}
    hashes: list[int] = []
    total_rate = total_throughput = 0.0
    for topic in topics:
        if topic.msg_rate <= 0 and topic.throughput <= 0:
            continue
        topic_hash_value = topic_hash(topic.name)
        by_hash[topic_hash_value] = topic
        hashes.append(topic_hash_value)
        total_rate += topic.msg_rate
        total_throughput += topic.throughput
    if len(by_hash) < 2 or (total_rate < max_msg_rate * margin and total_throughput < max_throughput * margin):
        return []

    hashes.sort()
    rate, throughput = by_hash[hashes[0]].msg_rate, by_hash[hashes[0]].throughput
    positions: list[int] = []
    for previous_hash, current_hash in itertools.pairwise(hashes):
        topic = by_hash[current_hash]
        if rate + topic.msg_rate > max_msg_rate or throughput + topic.throughput > max_throughput:
            positions.append(previous_hash + (current_hash - previous_hash) // 2 + 1)
            rate, throughput = topic.msg_rate, topic.throughput
        else:
            rate += topic.msg_rate
            throughput += topic.throughput
    # Pulsar does not check this and its split then fails as a whole; the planner plans no split instead.
    return positions if all(bundle.lower < position < bundle.upper for position in positions) else []


class FlowOrQpsEquallyDivide:
    name = NAME
    takes_requested_positions = False
    runs_only_as_default = True
    pulsar_checks_positions = False

    def positions(self, inputs: SplitInputs) -> list[int]:
        return split_positions(inputs.bundle, inputs.topics, inputs.config)

    def planned_positions(self, bundle: BundleRange, topics: Sequence[str] | None) -> list[int] | None:
        return None  # the broker cuts by its topics' traffic as it splits, which a plan does not know
