"""AvgShedder (PIP-364), shedding and placement, as `impl/AvgShedder.java` decides.

Each run: score brokers by weighted max usage (percent points), sort ascending, pair the i-th lowest
with the i-th highest. A pair whose gap reaches the low threshold counts a "low hit" for both brokers,
one that reaches the high threshold also a "high hit"; a smaller gap clears both brokers' counters.
A pair fires when either broker has enough high or low hits: its counters reset and the overloaded
broker sheds bundles worth `(max - min) * maxUnloadPercentage` of message rate (or, failing the
minimum, of throughput) to the underloaded one.

The hit counters are the strategy's state; they are passed in and returned, never kept here.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.errors import InputError
from planner.plan.document import BrokerForecast, PairEvaluation
from planner.plan.placement.strategy import PlacementSession
from planner.plan.shedding.outcome import SheddingOutcome, Unload
from planner.pulsar.broker_score import broker_usage
from planner.pulsar.config import PulsarConfig
from planner.pulsar.java_numbers import java_int, java_sort
from planner.pulsar.load_manager_shared import Candidate, ranked_by_traffic, sheddable_bundles
from planner.pulsar.model import LoadData

NAME = "AvgShedder"
NO_PAIR = "no broker pair reaches the low threshold"  # the reason of a balanced run
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.impl.AvgShedder"


@dataclass(frozen=True, slots=True)
class AvgShedderState:
    """Consecutive-run hit counters per broker (absent = 0)."""

    high_hit_count: Mapping[str, int] = field(default_factory=dict)
    low_hit_count: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": NAME,
            "highHitCount": dict(sorted(self.high_hit_count.items())),
            "lowHitCount": dict(sorted(self.low_hit_count.items())),
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> AvgShedderState:
        return cls(
            high_hit_count=_counters(document, "highHitCount"),
            low_hit_count=_counters(document, "lowHitCount"),
        )


def _counters(document: Mapping[str, Any], key: str) -> dict[str, int]:
    counters = document.get(key, {})
    if not isinstance(counters, Mapping) or not all(
        isinstance(broker, str) and isinstance(count, int) and not isinstance(count, bool) and count >= 0
        for broker, count in counters.items()
    ):
        raise InputError(f"invalid AvgShedder state: {key} must map broker ids to non-negative integers")
    return dict(counters)


@dataclass(frozen=True, slots=True)
class AvgShedderOutcome(SheddingOutcome[AvgShedderState]):
    pairs: tuple[PairEvaluation, ...] = ()


def broker_scores(load_data: LoadData, config: PulsarConfig) -> dict[str, float]:
    """Weighted max usage in percent points (0..100+) per broker with a load report."""
    return {broker_id: broker_usage(broker, config) * 100 for broker_id, broker in load_data.brokers.items()}


def sort_brokers(scores: Mapping[str, float], config: PulsarConfig, arrival: Sequence[str] | None = None) -> list[str]:
    """Brokers by ascending score. The sort starts from `arrival`, the order the scores reach it (in Pulsar its
    HashMap's, which a plan cannot know: by broker id when not given), which decides ties (README, "Exact ties")
    and, with the truncating comparator, the order of near-ties."""
    start = list(arrival) if arrival is not None else sorted(scores)
    if config.pulsar_version.avg_shedder_truncating_comparator:
        # Releases before PR #24954 compare `(int)(a - b)`: scores less than a point apart are "equal". The cast
        # saturates in Java (an infinite score is Integer.MAX_VALUE above the rest, NaN compares equal), and the
        # sort must be Java's: with such a comparator, sort algorithms disagree.
        def compare(first: str, second: str) -> int:
            return java_int(scores[first] - scores[second])

        return java_sort(start, compare)
    return sorted(start, key=lambda broker: scores[broker])


def find_bundles_for_unloading(
    load_data: LoadData, config: PulsarConfig, state: AvgShedderState | None = None
) -> AvgShedderOutcome:
    state = state or AvgShedderState()
    high = dict(state.high_hit_count)
    low = dict(state.low_hit_count)
    scores = broker_scores(load_data, config)
    brokers = sort_brokers(scores, config)

    pairs: list[tuple[str, str, float]] = []
    i, j = 0, len(brokers) - 1
    while i <= j:
        underloaded, overloaded = brokers[i], brokers[j]
        gap = scores[overloaded] - scores[underloaded]
        if gap < config.avg_shedder_low_threshold:
            for counters in (high, low):
                counters.pop(overloaded, None)
                counters.pop(underloaded, None)
        else:
            pairs.append((underloaded, overloaded, gap))
            low[underloaded] = low.get(underloaded, 0) + 1
            low[overloaded] = low.get(overloaded, 0) + 1
            if gap < config.avg_shedder_high_threshold:
                high.pop(overloaded, None)
                high.pop(underloaded, None)
            else:
                high[underloaded] = high.get(underloaded, 0) + 1
                high[overloaded] = high.get(overloaded, 0) + 1
        i += 1
        j -= 1

    if not pairs:
        return AvgShedderOutcome(unloads=(), state=AvgShedderState(), reasons=(NO_PAIR,))

    unloads: list[Unload] = []
    evaluations: list[PairEvaluation] = []
    reasons: list[str] = []
    for underloaded, overloaded, gap in pairs:
        low_hits = max(low.get(underloaded, 0), low.get(overloaded, 0))
        high_hits = max(high.get(underloaded, 0), high.get(overloaded, 0))
        fired = (
            high.get(underloaded, 0) >= config.avg_shedder_hit_count_high_threshold
            or high.get(overloaded, 0) >= config.avg_shedder_hit_count_high_threshold
            or low.get(underloaded, 0) >= config.avg_shedder_hit_count_low_threshold
            or low.get(overloaded, 0) >= config.avg_shedder_hit_count_low_threshold
        )
        if not fired:
            evaluations.append(
                PairEvaluation(
                    underloaded=underloaded,
                    overloaded=overloaded,
                    gap=gap,
                    low_hits=low_hits,
                    high_hits=high_hits,
                    fired=False,
                    budget=0.0,
                )
            )
            continue
        for counters in (high, low):
            counters.pop(underloaded, None)
            counters.pop(overloaded, None)
        mode, budget, selected = _select_bundles(load_data, config, underloaded, overloaded)
        evaluations.append(
            PairEvaluation(
                underloaded=underloaded,
                overloaded=overloaded,
                gap=gap,
                low_hits=low_hits,
                high_hits=high_hits,
                fired=True,
                mode=mode,
                budget=budget,
            )
        )
        if mode is None:
            reasons.append(
                f"{overloaded}->{underloaded}: fired but the traffic gap is below minUnloadMessage(Throughput)"
            )
        unloads.extend(Unload(overloaded, bundle, underloaded) for bundle in selected)

    return AvgShedderOutcome(
        unloads=tuple(unloads),
        state=AvgShedderState(high_hit_count=high, low_hit_count=low),
        reasons=tuple(reasons),
        pairs=tuple(evaluations),
    )


def _select_bundles(
    load_data: LoadData, config: PulsarConfig, underloaded: str, overloaded: str
) -> tuple[str | None, float, list[str]]:
    """Greedy first-fit of the overloaded broker's bundles into the budget (`AvgShedder.selectBundleForUnloading`)."""
    low_broker = load_data.brokers[underloaded]
    high_broker = load_data.brokers[overloaded]
    msg_rate_needed = (high_broker.msg_rate - low_broker.msg_rate) * config.max_unload_percentage
    throughput_needed = (high_broker.msg_throughput - low_broker.msg_throughput) * config.max_unload_percentage
    if msg_rate_needed > config.min_unload_message:
        mode, budget = "msgRate", msg_rate_needed
        candidates = [
            Candidate(bundle, data.short_term_data.total_msg_rate)
            for bundle, data in sheddable_bundles(load_data, overloaded, config.pulsar_version)
        ]
    elif throughput_needed > config.min_unload_message_throughput:
        mode, budget = "throughput", throughput_needed
        candidates = [
            Candidate(bundle, data.short_term_data.total_msg_throughput)
            for bundle, data in sheddable_bundles(load_data, overloaded, config.pulsar_version)
        ]
    else:
        return None, 0.0, []

    remaining = budget
    selected: list[str] = []
    for candidate in ranked_by_traffic(candidates):
        if 0 < candidate.traffic <= remaining:
            selected.append(candidate.bundle)
            remaining -= candidate.traffic
    return mode, budget, selected


# --- placement -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AvgShedderPlacementState:
    """Destination per bundle: planned by shedding (with the broker it is shed from), or drawn at random for fresh
    bundles (remembered before 5.0)."""

    bundle_broker: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)


def _expected_broker(candidates: Sequence[str], rng: random.Random) -> str:
    """`getExpectedBroker`: Pulsar hashes a random int with CRC-32, a uniform pick over the sorted candidates; drawn
    with `rng.choice`, as the placement strategies draw among equally good brokers (so a caller decides every draw)."""
    return rng.choice(sorted(candidates))


def select_broker(
    candidates: Sequence[str],
    bundle: str,
    state: AvgShedderPlacementState,
    rng: random.Random,
    load_data: LoadData,
    config: PulsarConfig,
) -> tuple[str | None, AvgShedderPlacementState]:
    """AvgShedder as placement strategy (`AvgShedder.selectBroker`): the planned broker if a candidate, else random.

    Before 5.0 (`selectBroker`) a random pick is remembered for the bundle. Pulsar keys that memory by the
    BundleData value; the planner keys it by bundle name, which is what a shedding cycle's immediate lookup
    effectively sees. From 5.0 (`selectBrokerForBundle`, PR #26246, read in the 5.0.1 jar) nothing is remembered,
    a planned destination that is no longer a candidate is re-drawn among the candidates other than the bundle's
    source, and one over `loadBalancerBrokerOverloadedThresholdPercentage` (its weighted usage now) is re-drawn
    among the other candidates under it, or kept when there are none.
    """
    if not candidates:
        return None, state
    planned = state.bundle_broker.get(bundle)
    if not config.pulsar_version.avg_shedder_pending_unloads:
        if planned is not None and planned in candidates:
            return planned, state
        chosen = _expected_broker(candidates, rng)
        return chosen, dataclasses.replace(state, bundle_broker={**state.bundle_broker, bundle: chosen})
    if planned is None:
        return _expected_broker(candidates, rng), state
    source = state.sources.get(bundle)
    if planned not in candidates:
        others = [broker for broker in candidates if broker != source]
        return (_expected_broker(others, rng) if others else None), state
    threshold = config.broker_overloaded_threshold_percentage

    def overloaded(broker: str) -> bool:
        return broker_usage(load_data.brokers[broker], config) * 100 > threshold

    if planned in load_data.brokers and overloaded(planned):
        healthy = [
            broker
            for broker in candidates
            if broker not in (planned, source) and broker in load_data.brokers and not overloaded(broker)
        ]
        return (_expected_broker(healthy, rng) if healthy else planned), state
    return planned, state


class AvgShedderPlacement:
    """AvgShedder as `loadBalancerLoadPlacementStrategy`: the placement side of the instance that sheds too."""

    name = NAME
    java_class = JAVA_CLASS
    bound_shedder = NAME

    def select(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        config: PulsarConfig,
        session: PlacementSession,
    ) -> str | None:
        state = session.memory(AvgShedderPlacementState)
        chosen, state = select_broker(candidates, bundle, state, session.rng, load_data, config)
        session.remember(state)
        return chosen


def placement_state_after_shedding(outcome: SheddingOutcome[AvgShedderState]) -> AvgShedderPlacementState:
    """The planned destinations of a shedding run (and the brokers they are shed from), as the placement side
    holds them."""
    destinations = {unload.bundle: unload.destination for unload in outcome.unloads if unload.destination is not None}
    return AvgShedderPlacementState(
        destinations, {unload.bundle: unload.broker for unload in outcome.unloads if unload.bundle in destinations}
    )


# --- the plan's balance report -------------------------------------------------------------------


def balance_thresholds(config: PulsarConfig) -> dict[str, float]:
    return {
        "loadBalancerAvgShedderLowThreshold": config.avg_shedder_low_threshold,
        "loadBalancerAvgShedderHighThreshold": config.avg_shedder_high_threshold,
        "loadBalancerAvgShedderHitCountLowThreshold": config.avg_shedder_hit_count_low_threshold,
        "loadBalancerAvgShedderHitCountHighThreshold": config.avg_shedder_hit_count_high_threshold,
    }


def balance_measured(
    config: PulsarConfig,
    load_data: LoadData,
    brokers: Sequence[BrokerForecast],
    pairs: Sequence[PairEvaluation],
    score_spread: float,
) -> tuple[str, bool]:
    threshold = config.avg_shedder_low_threshold
    if not pairs:
        return (
            f"no broker pair's score gap reaches the low threshold {threshold:g} (score spread {score_spread:.1f})",
            True,
        )
    return f"{len(pairs)} broker pair(s) over the low threshold {threshold:g}", False


def waiting_pairs(pairs: Sequence[PairEvaluation], config: PulsarConfig) -> list[str]:
    """The pairs over the low threshold that did not fire: how many hits they have and need."""
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
