"""Why a run planned what it planned, in the strategy's own terms: the spread it measures against its
thresholds, and for AvgShedder the pairs over a threshold still waiting for their hits.

A run that plans nothing stores this with its empty plan, so "balanced, nothing to do" is a recorded
answer with its figures (shown on the cluster page and in the plan DAG's log), not a silence. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.plan.document import BalanceReport, BrokerForecast, PairEvaluation
from planner.plan.shedding import avg_shedder, transfer_shedder, uniform_load_shedder
from planner.plan.shedding.transfer_shedder import TransferOutcome
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import LoadData

AVG_SHEDDERS = ("AvgShedder", "AvgShedderPredictive")
# The strategies' own words for "within the thresholds": the summary says that with figures instead.
BALANCED_REASONS = frozenset({avg_shedder.NO_PAIR, uniform_load_shedder.WITHIN_THRESHOLDS})


def _thresholds(strategy: str, config: PulsarConfig) -> dict[str, float]:
    if strategy in AVG_SHEDDERS:
        return {
            "loadBalancerAvgShedderLowThreshold": config.avg_shedder_low_threshold,
            "loadBalancerAvgShedderHighThreshold": config.avg_shedder_high_threshold,
            "loadBalancerAvgShedderHitCountLowThreshold": config.avg_shedder_hit_count_low_threshold,
            "loadBalancerAvgShedderHitCountHighThreshold": config.avg_shedder_hit_count_high_threshold,
        }
    if strategy == "UniformLoadShedder":
        return {
            "loadBalancerMsgRateDifferenceShedderThreshold": config.msg_rate_difference_shedder_threshold,
            "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": (
                config.msg_throughput_multiplier_difference_shedder_threshold
            ),
        }
    if strategy == "ThresholdShedder":
        return {"loadBalancerBrokerThresholdShedderPercentage": config.broker_threshold_shedder_percentage}
    return {"loadBalancerBrokerOverloadedThresholdPercentage": config.broker_overloaded_threshold_percentage}


def spread(values: Sequence[float]) -> float:
    """Highest minus lowest (0 with no values)."""
    return max(values) - min(values) if values else 0.0


def _waiting_pairs(pairs: Sequence[PairEvaluation], config: PulsarConfig) -> list[str]:
    """AvgShedder's pairs over the low threshold that did not fire: how many hits they have and need."""
    waiting = []
    for pair in pairs:
        if pair.fired:
            continue
        over_high = pair.gap >= config.avg_shedder_high_threshold
        hits, needed, threshold = (
            (pair.high_hits, config.avg_shedder_hit_count_high_threshold, config.avg_shedder_high_threshold)
            if over_high
            else (pair.low_hits, config.avg_shedder_hit_count_low_threshold, config.avg_shedder_low_threshold)
        )
        waiting.append(
            f"{pair.overloaded} → {pair.underloaded}: gap {pair.gap:.1f} points over the "
            f"{'high' if over_high else 'low'} threshold {threshold:g}, {hits} of {needed} consecutive hits"
        )
    return waiting


def _measured(
    strategy: str,
    config: PulsarConfig,
    load_data: LoadData,
    brokers: Sequence[BrokerForecast],
    pairs: Sequence[PairEvaluation],
) -> tuple[str, bool]:
    """What the strategy measured, and whether that is within its thresholds."""
    score_spread = spread([broker.score_before for broker in brokers])
    if strategy in AVG_SHEDDERS:
        threshold = config.avg_shedder_low_threshold
        if not pairs:
            return (
                f"no broker pair's score gap reaches the low threshold {threshold:g} (score spread {score_spread:.1f})",
                True,
            )
        return f"{len(pairs)} broker pair(s) over the low threshold {threshold:g}", False
    if strategy == "UniformLoadShedder":
        uniform = uniform_load_shedder.measure(load_data, config)
        text = (
            f"msg/s gap {uniform.rate_difference_percent:.0f} % of the lowest broker (threshold "
            f"{config.msg_rate_difference_shedder_threshold:g} %), throughput ratio "
            f"{uniform.throughput_multiplier:.2f} (threshold "
            f"{config.msg_throughput_multiplier_difference_shedder_threshold:g})"
        )
        return text, not (uniform.rate_hit or uniform.throughput_hit)
    if strategy == "ThresholdShedder":
        percentage = config.broker_threshold_shedder_percentage
        return f"threshold {percentage} points over the cluster's average usage (score spread {score_spread:.1f})", True
    highest = max(broker.score_before for broker in brokers)
    overloaded = config.broker_overloaded_threshold_percentage
    return f"highest score {highest:.1f} (overloaded from {overloaded} %)", highest < overloaded


def _report(
    balanced: bool,
    summary: str,
    score_spread: float,
    msg_rate_spread: float,
    thresholds: dict[str, float],
    waiting: tuple[str, ...],
) -> BalanceReport:
    # The spreads are kept to three decimals: figures for the reviewer, not inputs.
    return BalanceReport(
        balanced=balanced,
        summary=summary,
        score_spread=round(score_spread, 3),
        msg_rate_spread=round(msg_rate_spread, 3),
        thresholds=thresholds,
        waiting=waiting,
    )


def balance_report(
    strategy: str,
    config: PulsarConfig,
    load_data: LoadData,
    brokers: Sequence[BrokerForecast],
    pairs: Sequence[PairEvaluation],
    notes: Sequence[str],
    planned: int,
) -> BalanceReport:
    score_spread = spread([broker.score_before for broker in brokers])
    msg_rate_spread = spread([broker.msg_rate_before for broker in brokers])
    waiting = tuple(_waiting_pairs(pairs, config)) if strategy in AVG_SHEDDERS else ()
    balanced = False
    if planned:
        summary = f"{planned} action(s) planned by {strategy}"
    elif len(brokers) < 2:
        summary = f"Nothing to balance: {len(brokers)} broker(s) reported"
    elif waiting:
        summary = f"Nothing to do yet: {len(waiting)} pair(s) over a threshold wait for their consecutive hits"
    else:
        measured, within = _measured(strategy, config, load_data, brokers, pairs)
        notes = [note for note in notes if note not in BALANCED_REASONS]
        # The strategy's reasons say why nothing moved although a threshold was crossed (a broker with one
        # bundle, a budget no bundle fits, traffic below minUnloadMessage).
        balanced = within and not notes
        summary = (
            f"Balanced, nothing to do: {measured}" if balanced else "; ".join([f"Nothing planned: {measured}", *notes])
        )
    return _report(balanced, summary, score_spread, msg_rate_spread, _thresholds(strategy, config), waiting)


def transfer_balance_report(
    outcome: TransferOutcome, config: PulsarConfig, brokers: Sequence[BrokerForecast], splits: int
) -> BalanceReport:
    """TransferShedder's measure: the standard deviation of the brokers' weightedMaxEMA against its target, and
    the consecutive cycles its shedding condition held; then the splits the split strategy planned beside."""
    thresholds = {
        "loadBalancerBrokerLoadTargetStd": config.broker_load_target_std,
        "loadBalancerSheddingConditionHitCountThreshold": config.shedding_condition_hit_count_threshold,
        "loadBalancerBrokerOverloadedThresholdPercentage": config.broker_overloaded_threshold_percentage,
    }
    score_spread = spread([broker.score_before for broker in brokers])
    msg_rate_spread = spread([broker.msg_rate_before for broker in brokers])
    measured = f"load std {outcome.std:.3f} (target {config.broker_load_target_std:g}), mean {outcome.average:.3f}"
    nothing = "No transfers" if splits else "Nothing planned"
    balanced = False
    waiting: tuple[str, ...] = ()
    if outcome.decisions:
        summary = f"{len(outcome.decisions)} unload(s) planned by {transfer_shedder.NAME}: {measured}"
    elif len(brokers) < 2:
        summary = f"Nothing to balance: {len(brokers)} broker(s) reported"
    elif outcome.skipped is transfer_shedder.Reason.HIT_COUNT and outcome.state.hit_count == 0:
        balanced = not splits
        summary = f"Balanced: {measured}, no broker under- or overloaded"
    elif outcome.skipped is transfer_shedder.Reason.HIT_COUNT:
        needed = config.shedding_condition_hit_count_threshold + 1
        waiting = (f"the shedding condition held {outcome.state.hit_count} of {needed} consecutive cycles",)
        summary = f"{nothing} yet: {measured}; {waiting[0]}"
    elif outcome.skipped in _STOPPED_BEFORE_MEASURING:
        # The cycle stopped before it measured the brokers' load: there is no std to show.
        why = _STOPPED_BEFORE_MEASURING[outcome.skipped].format(config=config)
        summary = "; ".join([f"{nothing} ({outcome.skipped.value}): {why}", *outcome.notes])
    else:
        reason = outcome.skipped.value if outcome.skipped else "nothing to move"
        summary = "; ".join([f"{nothing} ({reason}): {measured}", *outcome.notes])
    if splits:
        summary += f"; {splits} split(s) planned by the split strategy"
    elif balanced:
        summary = f"Balanced, nothing to do: {measured}, no broker under- or overloaded"
    return _report(balanced, summary, score_spread, msg_rate_spread, thresholds, waiting)


_STOPPED_BEFORE_MEASURING = {
    transfer_shedder.Reason.COOL_DOWN: "a broker was unloaded less than loadBalanceSheddingDelayInSeconds "
    "({config.shedding_delay_seconds} s) before its load data",
    transfer_shedder.Reason.OUTDATED_DATA: "every broker's load data is older than "
    "loadBalancerBrokerLoadDataTTLInSeconds ({config.broker_load_data_ttl_seconds} s)",
    transfer_shedder.Reason.NO_LOAD_DATA: "an available broker has no load data",
    transfer_shedder.Reason.NO_BROKERS: "no broker has load data",
}
