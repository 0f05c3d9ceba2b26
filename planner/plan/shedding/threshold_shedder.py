"""ThresholdShedder, as `impl/ThresholdShedder.java` decides.

Each run folds every broker's weighted max usage into a per-broker moving average
(`h = h * history + (1 - history) * u`, the first sample taken as is). A broker whose average is at
least `avg + threshold` sheds its biggest bundles (by short-term throughput) until their total reaches
`throughput * (h - avg - threshold + 0.05)`, at least one. With `lowerBoundarySheddingEnabled`, a run
that selected nothing may shed from the busiest broker when another sits below `avg - threshold`.

The moving averages are the strategy's state; they are passed in and returned, never kept here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.errors import InputError
from planner.plan.document import BrokerForecast, PairEvaluation
from planner.plan.shedding.outcome import SheddingOutcome, Unload
from planner.pulsar.broker_score import broker_usage
from planner.pulsar.config import MIB, PulsarConfig
from planner.pulsar.load_manager_shared import Candidate, select_until_reached, sheddable_bundles
from planner.pulsar.model import LoadData

NAME = "ThresholdShedder"
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"

ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05
LOWER_BOUNDARY_THRESHOLD_MARGIN = 0.5


@dataclass(frozen=True, slots=True)
class ThresholdShedderState:
    """Moving average of each broker's weighted max usage (a fraction)."""

    broker_avg_resource_usage: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"strategy": NAME, "brokerAvgResourceUsage": dict(sorted(self.broker_avg_resource_usage.items()))}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ThresholdShedderState:
        history = document.get("brokerAvgResourceUsage", {})
        if not isinstance(history, Mapping) or not all(
            isinstance(broker, str) and isinstance(value, int | float) and not isinstance(value, bool)
            for broker, value in history.items()
        ):
            raise InputError("invalid ThresholdShedder state: brokerAvgResourceUsage must map broker ids to numbers")
        return cls({broker: float(value) for broker, value in history.items()})


def _update_averages(load_data: LoadData, config: PulsarConfig, history: dict[str, float]) -> float:
    """Fold this run's usage into `history` (in place) and return the mean over all brokers."""
    keep = config.history_resource_percentage
    total = 0.0
    for broker_id, broker in sorted(load_data.brokers.items()):
        usage = broker_usage(broker, config)
        previous = history.get(broker_id)
        history[broker_id] = usage if previous is None else previous * keep + (1 - keep) * usage
        total += history[broker_id]
    return total / len(load_data.brokers) if load_data.brokers else 0.0


def _throughput_candidates(load_data: LoadData, config: PulsarConfig, broker_id: str) -> list[Candidate]:
    return [
        Candidate(bundle, data.short_term_data.total_msg_throughput)
        for bundle, data in sheddable_bundles(load_data, broker_id, config.pulsar_version)
    ]


def find_bundles_for_unloading(
    load_data: LoadData, config: PulsarConfig, state: ThresholdShedderState | None = None
) -> SheddingOutcome[ThresholdShedderState]:
    # Before each shedding cycle the leader calls onActiveBrokersChange, which drops the averages of brokers
    # that left (3.0 and later): a broker that comes back starts again from its current usage.
    previous = (state or ThresholdShedderState()).broker_avg_resource_usage
    history = {broker: usage for broker, usage in previous.items() if broker in load_data.brokers}
    threshold = config.broker_threshold_shedder_percentage / 100.0
    min_throughput = config.bundle_unload_min_throughput_threshold * MIB
    average = _update_averages(load_data, config, history)
    if average == 0:
        return SheddingOutcome((), ThresholdShedderState(history), ("average broker usage is 0",))

    unloads: list[Unload] = []
    reasons: list[str] = []
    for broker_id in sorted(load_data.brokers):
        broker = load_data.brokers[broker_id]
        current = history.get(broker_id, 0.0)
        if current < average + threshold:
            continue
        offload_fraction = current - average - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
        minimum = broker.msg_throughput * offload_fraction
        if minimum < min_throughput:
            reasons.append(f"{broker_id}: throughput to offload {minimum:.0f} B/s is below the minimum")
            continue
        if len(broker.bundles) <= 1:
            reasons.append(f"{broker_id}: overloaded but has at most one bundle")
            continue
        selected = select_until_reached(_throughput_candidates(load_data, config, broker_id), minimum)
        unloads.extend(Unload(broker_id, bundle) for bundle in selected)

    if not unloads and config.lower_boundary_shedding_enabled:
        unloads = _lower_boundary_shedding(load_data, config, history)
    return SheddingOutcome(tuple(unloads), ThresholdShedderState(history), tuple(reasons))


def _lower_boundary_shedding(load_data: LoadData, config: PulsarConfig, history: dict[str, float]) -> list[Unload]:
    """Shed a little from the busiest broker when some broker is under `avg - threshold`: Pulsar's
    `tryLowerBoundaryShedding`."""
    threshold = config.broker_threshold_shedder_percentage / 100.0
    min_throughput = config.bundle_unload_min_throughput_threshold * MIB
    # Pulsar recomputes the averages here, folding the same sample in a second time.
    average = _update_averages(load_data, config, history)
    lower_bound = average - threshold
    busiest, busiest_usage = None, lower_bound
    for broker_id in sorted(load_data.brokers):
        usage = history.get(broker_id, 0.0)
        if usage > busiest_usage and len(load_data.brokers[broker_id].bundles) > 1:
            busiest, busiest_usage = broker_id, usage
    if busiest is None or not any(history.get(broker, 0.0) < lower_bound for broker in load_data.brokers):
        return []
    minimum = load_data.brokers[busiest].msg_throughput * threshold * LOWER_BOUNDARY_THRESHOLD_MARGIN
    if min_throughput > minimum:
        return []
    selected = select_until_reached(_throughput_candidates(load_data, config, busiest), minimum)
    return [Unload(busiest, bundle) for bundle in selected]


# --- the plan's balance report -------------------------------------------------------------------


def balance_thresholds(config: PulsarConfig) -> dict[str, float]:
    return {"loadBalancerBrokerThresholdShedderPercentage": config.broker_threshold_shedder_percentage}


def balance_measured(
    config: PulsarConfig,
    load_data: LoadData,
    brokers: Sequence[BrokerForecast],
    pairs: Sequence[PairEvaluation],
    score_spread: float,
) -> tuple[str, bool]:
    percentage = config.broker_threshold_shedder_percentage
    return f"threshold {percentage} points over the cluster's average usage (score spread {score_spread:.1f})", True
