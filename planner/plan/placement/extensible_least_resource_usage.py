"""The extensible load manager's placement, as `extensions/strategy/LeastResourceUsageWithWeight.java`.

It places a bundle nobody owns: after an unload without a destination (TransferShedder with transfers off), a
split child, a new namespace. Unlike the modular strategy of the same name it keeps no history: each broker's
own `weightedMaxEMA` is its usage. The best brokers are the candidates with load data at least
`loadBalancerAverageResourceUsageDifferenceThresholdPercentage` below the mean usage of those with load data;
Pulsar picks one of them at random, or one of all the candidates when none is (brokers without load data
included then). The candidates are the available brokers that pass its broker filters, the source broker
among them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import BrokerLoadData

NAME = "LeastResourceUsageWithWeight"
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.extensions.strategy.LeastResourceUsageWithWeight"


def best_brokers(candidates: Sequence[str], brokers: Mapping[str, BrokerLoadData], config: PulsarConfig) -> list[str]:
    """The brokers Pulsar picks one of at random, in `candidates` order (the sum of usages follows that order)."""
    with_data = [broker for broker in candidates if broker in brokers]
    best: list[str] = []
    if with_data:
        total = 0.0
        for broker in with_data:
            total += brokers[broker].weighted_max_ema
        average = total / len(with_data)
        difference = config.average_resource_usage_difference_threshold_percentage / 100.0
        best = [broker for broker in with_data if brokers[broker].weighted_max_ema + difference <= average]
    return best or list(candidates)
