"""Why a run planned what it planned, in the strategy's own terms: the spread it measures against its
thresholds, and for AvgShedder the pairs over a threshold still waiting for their hits.

A run that plans nothing stores this with its empty plan, so "balanced, nothing to do" is a recorded
answer with its figures (shown on the cluster page and in the plan DAG's log), not a silence. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.plan.document import BalanceReport, BrokerForecast, PairEvaluation
from planner.plan.shedding import avg_shedder, transfer_shedder, uniform_load_shedder
from planner.plan.shedding.registry import shedding_strategy
from planner.plan.shedding.transfer_shedder import TransferOutcome
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import LoadData

# The strategies' own words for "within the thresholds": the summary says that with figures instead.
BALANCED_REASONS = frozenset({avg_shedder.NO_PAIR, uniform_load_shedder.WITHIN_THRESHOLDS})


def spread(values: Sequence[float]) -> float:
    """Highest minus lowest (0 with no values)."""
    return max(values) - min(values) if values else 0.0


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
    terms = shedding_strategy(strategy).balance
    waiting = tuple(terms.waiting(pairs, config)) if terms.waiting is not None else ()
    balanced = False
    if planned:
        summary = f"{planned} action(s) planned by {strategy}"
    elif len(brokers) < 2:
        summary = f"Nothing to balance: {len(brokers)} broker(s) reported"
    elif waiting:
        summary = f"Nothing to do yet: {len(waiting)} pair(s) over a threshold wait for their consecutive hits"
    else:
        measured, within = terms.measured(config, load_data, brokers, pairs, score_spread)
        notes = [note for note in notes if note not in BALANCED_REASONS]
        # The strategy's reasons say why nothing moved although a threshold was crossed (a broker with one
        # bundle, a budget no bundle fits, traffic below minUnloadMessage).
        balanced = within and not notes
        summary = (
            f"Balanced, nothing to do: {measured}" if balanced else "; ".join([f"Nothing planned: {measured}", *notes])
        )
    return _report(balanced, summary, score_spread, msg_rate_spread, terms.thresholds(config), waiting)


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
