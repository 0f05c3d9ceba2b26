"""UniformLoadShedder, as `impl/UniformLoadShedder.java` decides. Stateless.

Find the brokers with the highest and lowest message rate and throughput. If the rate gap (percent of
the minimum) or the throughput ratio is over its threshold, the busiest broker of that criterion
(message rate first) sheds its biggest bundles up to `(max - min) * maxUnloadPercentage`. One source
broker per run; the destination is left to the placement strategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.plan.document import BrokerForecast, PairEvaluation
from planner.plan.shedding.outcome import SheddingOutcome, Unload
from planner.pulsar.config import PulsarConfig
from planner.pulsar.java_numbers import INT_MAX, concurrent_hash_map_order, java_int, wrap_int32
from planner.pulsar.load_manager_shared import Candidate, ranked_by_traffic, sheddable_bundles
from planner.pulsar.model import LoadData

NAME = "UniformLoadShedder"
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.impl.UniformLoadShedder"

_ZERO = 1e-6
WITHIN_THRESHOLDS = "message rate and throughput spreads are within their thresholds"  # a balanced run


@dataclass(frozen=True, slots=True)
class _Extremes:
    max_rate: float
    max_rate_broker: str | None
    min_rate: float
    max_throughput: float
    max_throughput_broker: str | None
    min_throughput: float


def _extremes(load_data: LoadData) -> _Extremes:
    """One pass with strict comparisons: the first broker seen wins a tie (brokers in id order)."""
    max_rate, max_throughput = -1.0, -1.0
    min_rate = min_throughput = float(INT_MAX)
    max_rate_broker = max_throughput_broker = None
    for broker_id in sorted(load_data.brokers):
        broker = load_data.brokers[broker_id]
        rate, throughput = broker.msg_rate, broker.msg_throughput
        if rate > max_rate:
            max_rate, max_rate_broker = rate, broker_id
        if throughput > max_throughput:
            max_throughput, max_throughput_broker = throughput, broker_id
        min_rate = min(min_rate, rate)
        min_throughput = min(min_throughput, throughput)
    return _Extremes(max_rate, max_rate_broker, min_rate, max_throughput, max_throughput_broker, min_throughput)


def _extremes_before_pr_21025(load_data: LoadData) -> _Extremes:
    """The pass before PR #21025: a broker whose msg rate OR throughput beats the highest so far becomes the
    overloaded one and sets both highest values (the lowest likewise), so the answer depends on the order of the
    leader's ConcurrentHashMap. That order is taken as the map's after `put`s in the load data's broker order."""
    max_rate = max_throughput = -1.0
    min_rate = min_throughput = float(INT_MAX)
    overloaded = None
    for broker_id in concurrent_hash_map_order(list(load_data.brokers)):
        broker = load_data.brokers[broker_id]
        rate, throughput = broker.msg_rate, broker.msg_throughput
        if rate > max_rate or throughput > max_throughput:
            overloaded, max_rate, max_throughput = broker_id, rate, throughput
        if rate < min_rate or throughput < min_throughput:
            min_rate, min_throughput = rate, throughput
    return _Extremes(max_rate, overloaded, min_rate, max_throughput, overloaded, min_throughput)


@dataclass(frozen=True, slots=True)
class Spread:
    """What UniformLoadShedder compares with its thresholds (the plan's balance summary quotes it too)."""

    extremes: _Extremes
    min_rate: float  # the lowest broker's msg/s, 1 when it is about 0
    min_throughput: float
    rate_difference_percent: float  # (highest - lowest msg/s) in percent of the lowest
    throughput_multiplier: float  # highest / lowest bytes/s
    rate_hit: bool
    throughput_hit: bool


def measure(load_data: LoadData, config: PulsarConfig) -> Spread:
    if config.pulsar_version.uniform_shedder_before_pr_21025:
        found = _extremes_before_pr_21025(load_data)
    else:
        found = _extremes(load_data)
    min_rate = 1.0 if abs(found.min_rate) <= _ZERO else found.min_rate
    min_throughput = 1.0 if abs(found.min_throughput) <= _ZERO else found.min_throughput
    rate_difference_percent = (found.max_rate - min_rate) * 100 / min_rate
    throughput_multiplier = found.max_throughput / min_throughput
    rate_threshold = config.msg_rate_difference_shedder_threshold
    multiplier_threshold = config.msg_throughput_multiplier_difference_shedder_threshold
    return Spread(
        found,
        min_rate,
        min_throughput,
        rate_difference_percent,
        throughput_multiplier,
        rate_hit=rate_threshold > 0 and rate_difference_percent > rate_threshold,
        throughput_hit=multiplier_threshold > 0 and throughput_multiplier > multiplier_threshold,
    )


def find_bundles_for_unloading(load_data: LoadData, config: PulsarConfig, state: None = None) -> SheddingOutcome[None]:
    spread = measure(load_data, config)
    found, min_rate, min_throughput = spread.extremes, spread.min_rate, spread.min_throughput
    rate_hit, throughput_hit = spread.rate_hit, spread.throughput_hit
    if not rate_hit and not throughput_hit:
        return SheddingOutcome((), None, (WITHIN_THRESHOLDS,))

    if rate_hit:
        source, by_rate = found.max_rate_broker, True
        budget = java_int((found.max_rate - min_rate) * config.max_unload_percentage)
        minimum = config.min_unload_message
    else:
        source, by_rate = found.max_throughput_broker, False
        budget = java_int((found.max_throughput - min_throughput) * config.max_unload_percentage)
        minimum = config.min_unload_message_throughput
    criterion = "msgRate" if by_rate else "throughput"
    if source is None or len(load_data.brokers[source].bundles) <= 1:
        return SheddingOutcome((), None, (f"{source}: {criterion} spread found but it has at most one bundle",))
    if config.pulsar_version.uniform_shedder_before_pr_21025:
        # Either minimum lets it unload, whichever criterion is over its threshold.
        rate_budget = java_int((found.max_rate - min_rate) * config.max_unload_percentage)
        throughput_budget = java_int((found.max_throughput - min_throughput) * config.max_unload_percentage)
        if rate_budget < config.min_unload_message and throughput_budget < config.min_unload_message_throughput:
            return SheddingOutcome((), None, (f"{source}: msgRate and throughput to move are below their minimums",))
    elif budget < minimum:
        return SheddingOutcome((), None, (f"{source}: {criterion} to move ({budget}) is below the minimum {minimum}",))

    candidates = [
        Candidate(
            bundle,
            data.short_term_data.total_msg_rate if by_rate else data.short_term_data.total_msg_throughput,
        )
        for bundle, data in sheddable_bundles(load_data, source, config.pulsar_version)
    ]
    overshoot = int(config.pulsar_version.uniform_shedder_overshoot)
    if config.pulsar_version.uniform_shedder_before_pr_21025 and not by_rate:
        overshoot = 0  # the 1000 of slack was for msg rates only then
    cap = config.max_unload_bundle_num_per_shedding
    remaining = budget
    selected: list[str] = []
    for candidate in ranked_by_traffic(candidates):
        if cap != -1 and len(selected) >= cap:
            break
        # No `> 0` test: idle bundles are taken whenever budget remains (Pulsar does the same).
        # `remaining + 1000` is int arithmetic in Java: a budget near Integer.MAX_VALUE wraps to a negative limit.
        if candidate.traffic <= wrap_int32(remaining + overshoot):
            selected.append(candidate.bundle)
            remaining -= java_int(candidate.traffic)
    reasons = () if selected else (f"{source}: no bundle fits the {criterion} to move ({budget})",)
    return SheddingOutcome(tuple(Unload(source, bundle) for bundle in selected), None, reasons)


# --- the plan's balance report -------------------------------------------------------------------


def balance_thresholds(config: PulsarConfig) -> dict[str, float]:
    return {
        "loadBalancerMsgRateDifferenceShedderThreshold": config.msg_rate_difference_shedder_threshold,
        "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": (
            config.msg_throughput_multiplier_difference_shedder_threshold
        ),
    }


def balance_measured(
    config: PulsarConfig,
    load_data: LoadData,
    brokers: Sequence[BrokerForecast],
    pairs: Sequence[PairEvaluation],
    score_spread: float,
) -> tuple[str, bool]:
    uniform = measure(load_data, config)
    text = (
        f"msg/s gap {uniform.rate_difference_percent:.0f} % of the lowest broker (threshold "
        f"{config.msg_rate_difference_shedder_threshold:g} %), throughput ratio "
        f"{uniform.throughput_multiplier:.2f} (threshold "
        f"{config.msg_throughput_multiplier_difference_shedder_threshold:g})"
    )
    return text, not (uniform.rate_hit or uniform.throughput_hit)
