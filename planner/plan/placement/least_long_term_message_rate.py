"""LeastLongTermMessageRate placement, as `impl/LeastLongTermMessageRate.java` decides.

A broker's score is its long-term message rate (bundle averages plus bundles already assigned to it
but not yet reported), or +inf when its usage is over the overload threshold; the lowest wins and
exact ties are broken at random.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

from planner.plan.placement.strategy import PlacementSession
from planner.pulsar.broker_score import overload_usage
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import BundleData, LoadData, default_bundle_data

NAME = "LeastLongTermMessageRate"
JAVA_CLASS = "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate"


def long_term_message_rate(load_data: LoadData, broker_id: str) -> float:
    """`TimeAverageBrokerData` long-term msgRateIn + msgRateOut: the sum over the broker's reported bundles."""
    default = default_bundle_data()
    # TimeAverageBrokerData sums the in and out rates separately and adds the two totals at the end.
    rate_in = rate_out = 0.0
    for bundle in load_data.brokers[broker_id].last_stats:
        long_term = load_data.bundle_data.get(bundle, default).long_term_data
        rate_in += long_term.msg_rate_in
        rate_out += long_term.msg_rate_out
    return rate_in + rate_out


def score(
    load_data: LoadData,
    broker_id: str,
    config: PulsarConfig,
    preallocated: Mapping[str, Sequence[BundleData]] | None = None,
) -> float:
    if overload_usage(load_data.brokers[broker_id], config) > config.overload_threshold:
        return math.inf
    pending = 0.0  # summed one bundle at a time, as Java does (`sum` of floats is compensated from Python 3.12)
    for data in (preallocated or {}).get(broker_id, ()):
        pending += data.long_term_data.total_msg_rate
    return pending + long_term_message_rate(load_data, broker_id)


def select_broker(
    candidates: Sequence[str],
    load_data: LoadData,
    config: PulsarConfig,
    rng: random.Random,
    preallocated: Mapping[str, Sequence[BundleData]] | None = None,
) -> str | None:
    best: list[str] = []
    best_score = math.inf
    for broker_id in candidates:
        broker_score = score(load_data, broker_id, config, preallocated)
        if broker_score < best_score:
            best, best_score = [broker_id], broker_score
        elif broker_score == best_score:
            best.append(broker_id)
    # Overloaded candidates score +inf and tie with each other, so all-overloaded still picks one.
    return rng.choice(best) if best else None


class LeastLongTermMessageRate:
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
        preallocated = {broker: [data for _, data in items] for broker, items in session.preallocated.items()}
        return select_broker(candidates, load_data, config, session.rng, preallocated)
