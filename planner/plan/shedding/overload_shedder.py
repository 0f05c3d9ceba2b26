"""OverloadShedder, as `impl/OverloadShedder.java` decides. Stateless.

A broker whose current usage is at least `loadBalancerBrokerOverloadedThresholdPercentage` sheds its
biggest bundles (by short-term throughput) until `throughput * (usage - threshold + 0.05)` is reached,
at least one, if it has more than one bundle.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.plan.document import BrokerForecast, PairEvaluation
from planner.plan.shedding.outcome import SheddingOutcome, Unload
from planner.pulsar.broker_score import overload_usage
from planner.pulsar.config import PulsarConfig
from planner.pulsar.load_manager_shared import Candidate, select_until_reached, sheddable_bundles
from planner.pulsar.model import LoadData

NAME = "OverloadShedder"
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.impl.OverloadShedder"

ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05


def find_bundles_for_unloading(load_data: LoadData, config: PulsarConfig, state: None = None) -> SheddingOutcome[None]:
    threshold = config.overload_threshold
    unloads: list[Unload] = []
    reasons: list[str] = []
    for broker_id in sorted(load_data.brokers):
        broker = load_data.brokers[broker_id]
        usage = overload_usage(broker, config)
        if usage < threshold:
            continue
        minimum = broker.msg_throughput * (usage - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN)
        if len(broker.bundles) <= 1:
            reasons.append(f"{broker_id}: overloaded but has at most one bundle")
            continue
        candidates = [
            Candidate(bundle, data.short_term_data.total_msg_throughput)
            for bundle, data in sheddable_bundles(load_data, broker_id, config.pulsar_version)
        ]
        unloads.extend(Unload(broker_id, bundle) for bundle in select_until_reached(candidates, minimum))
    return SheddingOutcome(tuple(unloads), None, tuple(reasons))


# --- the plan's balance report -------------------------------------------------------------------


def balance_thresholds(config: PulsarConfig) -> dict[str, float]:
    return {"loadBalancerBrokerOverloadedThresholdPercentage": config.broker_overloaded_threshold_percentage}


def balance_measured(
    config: PulsarConfig,
    load_data: LoadData,
    brokers: Sequence[BrokerForecast],
    pairs: Sequence[PairEvaluation],
    score_spread: float,
) -> tuple[str, bool]:
    highest = max(broker.score_before for broker in brokers)
    overloaded = config.broker_overloaded_threshold_percentage
    return f"highest score {highest:.1f} (overloaded from {overloaded} %)", highest < overloaded
