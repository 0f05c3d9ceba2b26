"""Broker usage scores, as Pulsar's `LocalBrokerData.getMaxResourceUsageWithWeight`: Pulsar computes percentages in
float32, so the planner does too.

Boundary decisions such as "gap < 15 points" depend on the float32 rounding (60/100 gives
60.00000381469727, not 60.0), so the arithmetic is emulated step by step.
"""

from __future__ import annotations

from planner.pulsar.config import PulsarConfig, ResourceWeights
from planner.pulsar.java_numbers import java_max, percent_usage, to_float32
from planner.pulsar.model import LocalBrokerData


def max_resource_usage_with_weight(broker: LocalBrokerData, weights: ResourceWeights) -> float:
    """`getMaxResourceUsageWithWeight`: the largest weighted resource percentage, as a fraction."""
    return (
        java_max(
            percent_usage(broker.cpu) * weights.cpu,
            percent_usage(broker.direct_memory) * weights.direct_memory,
            percent_usage(broker.bandwidth_in) * weights.bandwidth_in,
            percent_usage(broker.bandwidth_out) * weights.bandwidth_out,
        )
        / 100
    )


def max_resource_usage(broker: LocalBrokerData) -> float:
    """`getMaxResourceUsage`: the unweighted maximum of cpu, direct memory and bandwidth (float32 math)."""
    return to_float32(
        java_max(
            percent_usage(broker.cpu),
            percent_usage(broker.direct_memory),
            percent_usage(broker.bandwidth_in),
            percent_usage(broker.bandwidth_out),
        )
        / 100
    )


def broker_usage(broker: LocalBrokerData, config: PulsarConfig) -> float:
    """The weighted max usage (fraction) that ThresholdShedder, AvgShedder and LeastResourceUsageWithWeight use."""
    return max_resource_usage_with_weight(broker, config.resource_weights)


def overload_usage(broker: LocalBrokerData, config: PulsarConfig) -> float:
    """The usage OverloadShedder, LeastLongTermMessageRate and the placement re-check compare with 85 %.

    PIP-358 (4.0) made it weighted; 3.x used the unweighted maximum.
    """
    if config.pulsar_version.weighted_overload_check:
        return broker_usage(broker, config)
    return max_resource_usage(broker)
