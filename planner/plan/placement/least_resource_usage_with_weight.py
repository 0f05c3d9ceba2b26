"""LeastResourceUsageWithWeight placement (modular), as `impl/LeastResourceUsageWithWeight.java` decides.

Each call folds every candidate's weighted max usage into a moving average (reset when the broker has
no bundles or no traffic), then picks at random among the candidates at least
`loadBalancerAverageResourceUsageDifferenceThresholdPercentage` below the candidates' mean, or among
all candidates when none is.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.plan.placement.strategy import PlacementSession
from planner.pulsar.broker_score import broker_usage
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import LoadData

NAME = "LeastResourceUsageWithWeight"
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight"

# A candidate without history counts as fully used in the comparison.
MAX_RESOURCE_USAGE = 1.0


@dataclass(frozen=True, slots=True)
class LeastResourceUsageWithWeightState:
    broker_avg_resource_usage: Mapping[str, float] = field(default_factory=dict)


def select_broker(
    candidates: Sequence[str],
    load_data: LoadData,
    config: PulsarConfig,
    state: LeastResourceUsageWithWeightState,
    rng: random.Random,
) -> tuple[str | None, LeastResourceUsageWithWeightState]:
    if not candidates:
        return None, state
    keep = config.history_resource_percentage
    # onActiveBrokersChange: the averages of brokers that left are dropped.
    history = {
        broker: value for broker, value in state.broker_avg_resource_usage.items() if broker in load_data.brokers
    }
    total = 0.0
    for broker_id in candidates:
        broker = load_data.brokers.get(broker_id)
        if broker is None:
            continue
        usage = broker_usage(broker, config)
        previous = history.get(broker_id)
        idle = not broker.bundles or (broker.msg_rate_in == 0 and broker.msg_rate_out == 0)
        history[broker_id] = usage if previous is None or idle else previous * keep + (1 - keep) * usage
        total += history[broker_id]
    average = total / len(candidates)
    difference = config.average_resource_usage_difference_threshold_percentage / 100.0
    best = [broker_id for broker_id in candidates if history.get(broker_id, MAX_RESOURCE_USAGE) + difference <= average]
    chosen = rng.choice(best or list(candidates))
    return chosen, LeastResourceUsageWithWeightState(history)


class LeastResourceUsageWithWeight:
    name = NAME
    java_class = JAVA_CLASS
    bound_shedder = None

    def select(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        config: PulsarConfig,
        session: PlacementSession,
    ) -> str | None:
        state = session.memory(LeastResourceUsageWithWeightState)
        chosen, state = select_broker(candidates, load_data, config, state, session.rng)
        session.remember(state)
        return chosen
