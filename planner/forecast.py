"""Predicted per-broker load before and after a plan's moves.

Message rate and throughput move with the bundles (their short-term averages, what the strategies
rank by). Resource usage is predicted with the cluster's average cost: percent of CPU per msg/s and
percent of NIC per byte/s in and out, measured over all brokers of the snapshot. Direct memory does
not follow traffic and stays as reported. It is a first-order estimate, shown to reviewers as such.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.broker_score import percent_usage
from planner.config import PulsarConfig
from planner.model import LoadData


@dataclass(frozen=True, slots=True)
class Move:
    bundle: str
    source: str
    destination: str


@dataclass(frozen=True, slots=True)
class BrokerForecast:
    broker: str
    msg_rate_before: float
    msg_rate_after: float
    throughput_before: float
    throughput_after: float
    score_before: float  # weighted max usage, percent points
    score_after: float

    def to_json(self) -> dict[str, float | str]:
        return {
            "broker": self.broker,
            "msgRateBefore": self.msg_rate_before,
            "msgRateAfter": self.msg_rate_after,
            "throughputBefore": self.throughput_before,
            "throughputAfter": self.throughput_after,
            "scoreBefore": self.score_before,
            "scoreAfter": self.score_after,
        }


@dataclass(frozen=True, slots=True)
class _Usage:
    cpu: float
    direct_memory: float
    bandwidth_in: float
    bandwidth_out: float

    def score(self, config: PulsarConfig) -> float:
        weights = config.resource_weights
        return max(
            self.cpu * weights.cpu,
            self.direct_memory * weights.direct_memory,
            self.bandwidth_in * weights.bandwidth_in,
            self.bandwidth_out * weights.bandwidth_out,
        )


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0


def forecast(load_data: LoadData, config: PulsarConfig, moves: Iterable[Move]) -> list[BrokerForecast]:
    brokers = load_data.brokers
    usage = {
        broker_id: _Usage(
            percent_usage(report.cpu),
            percent_usage(report.direct_memory),
            percent_usage(report.bandwidth_in),
            percent_usage(report.bandwidth_out),
        )
        for broker_id, report in brokers.items()
    }
    cpu_per_msg = _ratio(sum(u.cpu for u in usage.values()), sum(b.msg_rate for b in brokers.values()))
    bw_in_per_byte = _ratio(
        sum(u.bandwidth_in for u in usage.values()), sum(b.msg_throughput_in for b in brokers.values())
    )
    bw_out_per_byte = _ratio(
        sum(u.bandwidth_out for u in usage.values()), sum(b.msg_throughput_out for b in brokers.values())
    )

    delta_rate: dict[str, float] = dict.fromkeys(brokers, 0.0)
    delta_in: dict[str, float] = dict.fromkeys(brokers, 0.0)
    delta_out: dict[str, float] = dict.fromkeys(brokers, 0.0)
    for move in moves:
        short = load_data.bundle_data[move.bundle].short_term_data if move.bundle in load_data.bundle_data else None
        if short is None:
            continue
        for broker_id, sign in ((move.source, -1.0), (move.destination, 1.0)):
            if broker_id in brokers:
                delta_rate[broker_id] += sign * short.total_msg_rate
                delta_in[broker_id] += sign * short.msg_throughput_in
                delta_out[broker_id] += sign * short.msg_throughput_out

    forecasts = []
    for broker_id in sorted(brokers):
        report, before = brokers[broker_id], usage[broker_id]
        after = _Usage(
            max(0.0, before.cpu + delta_rate[broker_id] * cpu_per_msg),
            before.direct_memory,
            max(0.0, before.bandwidth_in + delta_in[broker_id] * bw_in_per_byte),
            max(0.0, before.bandwidth_out + delta_out[broker_id] * bw_out_per_byte),
        )
        forecasts.append(
            BrokerForecast(
                broker=broker_id,
                msg_rate_before=report.msg_rate,
                msg_rate_after=max(0.0, report.msg_rate + delta_rate[broker_id]),
                throughput_before=report.msg_throughput,
                throughput_after=max(0.0, report.msg_throughput + delta_in[broker_id] + delta_out[broker_id]),
                score_before=before.score(config),
                score_after=after.score(config),
            )
        )
    return forecasts
