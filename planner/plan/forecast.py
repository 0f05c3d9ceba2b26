"""Predicted per-broker load before and after a plan's moves.

Message rate and throughput move with the bundles (their short-term averages, what the strategies
rank by). Resource usage starts from what each broker used lately (`starting_loads`: its last
samples' mean usage, brought to its current traffic by its costs; the reported usage when it has no
samples) and changes by the moved traffic's cost on that broker, from its usage model
(`planner.plan.usage_model`): its own fitted costs, the cluster-wide fit, or without history the
snapshot's average cost. Anchoring at measured usage keeps what no model explains (a busy neighbour
on the host) in the prediction; averaging a few samples keeps one report's noise out of it. The
"before" of a forecast stays the reported load. Direct memory does not follow traffic and stays as
reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from planner.plan.document import BrokerForecast
from planner.plan.usage_model import ResourceFit, Traffic, UsageModels, broker_traffic, resolved_models
from planner.pulsar.config import PulsarConfig, ResourceWeights
from planner.pulsar.java_numbers import percent_usage
from planner.pulsar.model import LoadData


def weighted_score(
    cpu: float, direct_memory: float, bandwidth_in: float, bandwidth_out: float, weights: ResourceWeights
) -> float:
    """A broker's score from its usage percents: the weighted max, as predictions and measurements are scored."""
    return max(
        cpu * weights.cpu,
        direct_memory * weights.direct_memory,
        bandwidth_in * weights.bandwidth_in,
        bandwidth_out * weights.bandwidth_out,
    )


@dataclass(frozen=True, slots=True)
class Move:
    bundle: str
    source: str
    destination: str


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """A broker's resource usage in percent and its traffic, as reported or as predicted."""

    cpu: float
    direct_memory: float
    bandwidth_in: float
    bandwidth_out: float
    traffic: Traffic

    def score(self, weights: ResourceWeights) -> float:
        return weighted_score(self.cpu, self.direct_memory, self.bandwidth_in, self.bandwidth_out, weights)

    def changed_by(self, traffic: Traffic, sign: float, fits: Mapping[str, ResourceFit]) -> BrokerLoad:
        """The load after `traffic` arrives (sign +1) or leaves (-1), costed with this broker's fits."""
        return replace(
            self,
            cpu=max(0.0, self.cpu + sign * fits["cpu"].cost(traffic, "cpu")),
            bandwidth_in=max(0.0, self.bandwidth_in + sign * fits["bandwidthIn"].cost(traffic, "bandwidthIn")),
            bandwidth_out=max(0.0, self.bandwidth_out + sign * fits["bandwidthOut"].cost(traffic, "bandwidthOut")),
            traffic=self.traffic.plus(traffic.scaled(sign)),
        )


def measured_loads(load_data: LoadData) -> dict[str, BrokerLoad]:
    """Every broker's reported usage and traffic."""
    return {
        broker_id: BrokerLoad(
            percent_usage(report.cpu),
            percent_usage(report.direct_memory),
            percent_usage(report.bandwidth_in),
            percent_usage(report.bandwidth_out),
            broker_traffic(load_data, broker_id),
        )
        for broker_id, report in sorted(load_data.brokers.items())
    }


def starting_loads(load_data: LoadData, fits: Mapping[str, Mapping[str, ResourceFit]]) -> dict[str, BrokerLoad]:
    """Every broker's load that predictions start from: per resource its usage at its current traffic, from its
    recent samples (`ResourceFit.usage_now`); `fits` are the resolved models of every broker of `load_data`."""
    loads = {}
    for broker_id, reported in measured_loads(load_data).items():
        own = fits[broker_id]
        loads[broker_id] = replace(
            reported,
            cpu=own["cpu"].usage_now(reported.cpu, reported.traffic, "cpu"),
            bandwidth_in=own["bandwidthIn"].usage_now(reported.bandwidth_in, reported.traffic, "bandwidthIn"),
            bandwidth_out=own["bandwidthOut"].usage_now(reported.bandwidth_out, reported.traffic, "bandwidthOut"),
        )
    return loads


def bundle_traffic(load_data: LoadData, bundle: str) -> Traffic:
    """A bundle's short-term averages: the traffic that moves with it."""
    data = load_data.bundle_data.get(bundle)
    if data is None:
        return Traffic()
    short = data.short_term_data
    return Traffic(short.msg_rate_in, short.msg_rate_out, short.msg_throughput_in, short.msg_throughput_out)


def after_move(
    loads: Mapping[str, BrokerLoad],
    move: Move,
    traffic: Traffic,
    fits: Mapping[str, Mapping[str, ResourceFit]],
) -> dict[str, BrokerLoad]:
    """The loads after one move; brokers not in `loads` (gone since the snapshot) are left out."""
    result = dict(loads)
    for broker_id, sign in ((move.source, -1.0), (move.destination, 1.0)):
        if broker_id in result:
            result[broker_id] = result[broker_id].changed_by(traffic, sign, fits[broker_id])
    return result


def forecast(
    load_data: LoadData,
    config: PulsarConfig,
    moves: Iterable[Move],
    usage_models: UsageModels | None = None,
) -> list[BrokerForecast]:
    fits = resolved_models(load_data, usage_models)
    before = measured_loads(load_data)
    start = after = starting_loads(load_data, fits)
    for move in moves:
        if move.bundle in load_data.bundle_data:
            after = after_move(after, move, bundle_traffic(load_data, move.bundle), fits)
    weights = config.resource_weights
    return [
        BrokerForecast(
            broker=broker_id,
            msg_rate_before=load_data.brokers[broker_id].msg_rate,
            msg_rate_after=max(0.0, after[broker_id].traffic.msg_rate_in + after[broker_id].traffic.msg_rate_out),
            throughput_before=load_data.brokers[broker_id].msg_throughput,
            throughput_after=max(0.0, after[broker_id].traffic.throughput_in + after[broker_id].traffic.throughput_out),
            score_before=before[broker_id].score(weights),
            score_after=after[broker_id].score(weights),
            model=fits[broker_id]["cpu"].source,
            score_start=start[broker_id].score(weights),
        )
        for broker_id in sorted(load_data.brokers)
    ]
