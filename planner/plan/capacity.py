"""Capacity advice: how many brokers a cluster needs, which one it can spare, and how its headroom moves.

From a window of the samples dataset (the `brokers` and `bundles` tables) and the brokers' fitted usage models
(`planner.plan.usage_model`: per broker and resource, background plus a cost per msg/s and per byte/s):

- **Kinds.** Brokers with the same hardware: the same resource limits (CPU, NIC in, NIC out, direct memory, each
  broker's median over the window) and, per resource, the same cost of the cluster's mean broker traffic within a
  relative tolerance (default 20 %, with a floor of `COST_FLOOR_POINTS` so that resources nearly free on every broker
  do not split kinds). Costs are compared on a reference traffic, not coefficient by coefficient: when message and
  byte rates move together the fit can split the cost between them in any proportion, and only the sum is known.
  A broker joins the first kind (in name order) all of whose members it matches; background (what a broker uses
  beyond its traffic) does not tell kinds apart: it is load, not hardware.
- **The score of a set of brokers at a moment.** Every bundle the moment recorded is placed anew, largest first,
  each on the broker whose score would be lowest with it (a good placement, not the current one); a broker's score is
  Pulsar's weighted maximum of its resources' percent usage (`getMaxResourceUsageWithWeight`), each resource
  predicted as background plus the cost of the traffic placed on it; direct memory, which does not follow traffic,
  keeps the broker's median. The score of the set is the busiest broker's; its p95 over the window's moments is what
  is compared with the target.
- **N+1 counts.** Per kind, the fewest brokers such that with the worst single broker down (one of any kind
  present) the p95 score stays at or under the target. Virtual brokers of a kind carry the kind's mean model.
  Several kinds: starting from the recorded counts, a broker is removed while the requirement holds (the kind
  whose removal leaves the lowest score first), or added while it does not (the kind that lowers it most).
- **Removal.** For each recorded broker, the p95 score of the others (its bundles placed on them); the advised one
  is the one whose removal keeps the p95 under the target at the least cost to move (its share of the cluster's
  traffic in the latest moment, then its bundle count), with the drain plan command that does it.
- **Headroom trend.** Per day (UTC), the target minus the p95 score of the recorded brokers; its least-squares
  slope per day, and the date it reaches zero if it falls.

A window longer than `max_moments` snapshots is evaluated on that many of them, evenly spaced (the output says
how many): the CLI and the review page stay fast on a week of 5-minute snapshots.

Pure and deterministic: no I/O, inputs are the tables' columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.plan.usage_model import (
    RESOURCES,
    SNAPSHOT,
    ResourceFit,
    Traffic,
    UsageModels,
    fit_usage_models,
    histories_from_columns,
    percent_of_limit,
)
from planner.pulsar.config import ResourceWeights

DEFAULT_TARGET = 80.0
DEFAULT_TOLERANCE = 0.2
DEFAULT_MAX_MOMENTS = 288  # a day of 5-minute snapshots; a week is sampled every 35 minutes
COST_FLOOR_POINTS = 1.0  # costs under this many percent points at the reference traffic count as equal
PERCENTILE = 95.0
# The limits that tell hardware apart, as columns of the `brokers` table.
LIMIT_COLUMNS = ("cpu_limit", "bandwidth_in_limit", "bandwidth_out_limit", "direct_memory_limit")
_LIMIT_NAMES = {
    "cpu_limit": "cpu",
    "bandwidth_in_limit": "bandwidthIn",
    "bandwidth_out_limit": "bandwidthOut",
    "direct_memory_limit": "directMemory",
}
_TRAFFIC_COLUMNS = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")


@dataclass(frozen=True, slots=True)
class BrokerModel:
    """What predicts one broker's score: a fit per traffic-driven resource, and its direct memory percent."""

    fits: Mapping[str, ResourceFit]
    direct_memory_percent: float


@dataclass(frozen=True, slots=True)
class Moment:
    """One snapshot: its bundles' traffic (msg/s in, out, byte/s in, out; one row per bundle) and owners."""

    snapshot_id: int
    taken_at: datetime
    bundles: tuple[str, ...]
    owners: tuple[str, ...]
    traffic: np.ndarray  # shape (bundles, 4)


@dataclass(frozen=True, slots=True)
class CapacityInputs:
    """The window's moments and the recorded brokers' models, limits and latest traffic."""

    cluster: str
    moments: tuple[Moment, ...]
    snapshots: int  # in the window, before sampling
    models: Mapping[str, BrokerModel]
    limits: Mapping[str, Mapping[str, float]]  # broker -> limit column -> value
    current: tuple[str, ...]  # the brokers of the latest snapshot
    latest: Mapping[str, Traffic]  # each current broker's traffic in the latest snapshot
    latest_bundles: Mapping[str, int]
    estimated: tuple[str, ...] = ()  # "broker resource" whose model is the window's estimate, no fit being usable


@dataclass(frozen=True, slots=True)
class BrokerKind:
    name: str
    brokers: tuple[str, ...]
    limits: Mapping[str, float]
    reference_cost: Mapping[str, float]  # percent points the reference traffic costs, per resource (kind mean)
    background: Mapping[str, float]  # percent, kind mean
    model: BrokerModel  # the kind's mean: what a virtual broker of it carries

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "brokers": list(self.brokers),
            "limits": {_LIMIT_NAMES[column]: value for column, value in self.limits.items()},
            "referenceCost": {resource: round(value, 3) for resource, value in self.reference_cost.items()},
            "background": {resource: round(value, 3) for resource, value in self.background.items()},
        }


@dataclass(frozen=True, slots=True)
class KindCount:
    kind: str
    recorded: int
    needed: int  # N+1: the fewest that keep the p95 under the target with the worst single broker down

    @property
    def spare(self) -> int:
        """Brokers that may go (negative: brokers to add)."""
        return self.recorded - self.needed

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "recorded": self.recorded, "needed": self.needed, "spare": self.spare}


@dataclass(frozen=True, slots=True)
class RemovalOption:
    broker: str
    p95: float  # the p95 score of the others, its bundles placed on them
    meets_target: bool
    one_down_p95: float | None  # then the worst single one of the others down too (told of the advised one only)
    bundles: int  # what a drain moves: its bundles in the latest snapshot
    msg_rate: float
    throughput: float
    share: float  # its share of the cluster's traffic (the larger of msg/s and byte/s), 0..1

    def to_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "p95": _points(self.p95),
            "meetsTarget": self.meets_target,
            "oneDownP95": _points(self.one_down_p95),
            "bundles": self.bundles,
            "msgRate": round(self.msg_rate, 3),
            "throughput": round(self.throughput, 3),
            "share": round(self.share, 4),
        }


@dataclass(frozen=True, slots=True)
class DayHeadroom:
    day: date
    p95: float
    moments: int

    def headroom(self, target: float) -> float:
        return target - self.p95


@dataclass(frozen=True, slots=True)
class HeadroomTrend:
    days: tuple[DayHeadroom, ...]
    slope: float | None  # headroom points per day; None with fewer than two days
    zero_on: date | None  # when the fitted line reaches zero headroom, if it falls

    def to_json(self, target: float) -> dict[str, Any]:
        return {
            "days": [
                {
                    "date": day.day.isoformat(),
                    "p95": round(day.p95, 2),
                    "headroom": round(day.headroom(target), 2),
                    "moments": day.moments,
                }
                for day in self.days
            ],
            "slopePerDay": None if self.slope is None else round(self.slope, 3),
            "zeroOn": None if self.zero_on is None else self.zero_on.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class CapacityAdvice:
    cluster: str
    target: float
    tolerance: float
    window: tuple[datetime, datetime]
    snapshots: int
    moments: int
    kinds: tuple[BrokerKind, ...]
    counts: tuple[KindCount, ...]
    p95: float  # the recorded brokers, all up
    one_down_p95: float | None  # the recorded brokers, the worst single one down
    worst_down: str | None  # which broker that is
    removals: tuple[RemovalOption, ...]  # cheapest first, those meeting the target before the others
    trend: HeadroomTrend
    estimated: tuple[str, ...] = ()  # "broker resource" predicted with the window's estimate (no usable fit)
    explanation: tuple[str, ...] = field(default=())

    @property
    def removal(self) -> RemovalOption | None:
        """The broker removable at least cost, if any may go."""
        first = self.removals[0] if self.removals else None
        return first if first is not None and first.meets_target else None

    def drain_command(self) -> str | None:
        removal = self.removal
        if removal is None:
            return None
        return f"pulsar-rebalance plan run --cluster {self.cluster} --mode drain --brokers {removal.broker}"

    def to_json(self) -> dict[str, Any]:
        removal = self.removal
        return {
            "cluster": self.cluster,
            "target": self.target,
            "window": {"from": self.window[0].isoformat(), "to": self.window[1].isoformat()},
            "snapshots": self.snapshots,
            "moments": self.moments,
            "kinds": [kind.to_json() for kind in self.kinds],
            "kindTolerance": self.tolerance,
            "counts": [count.to_json() for count in self.counts],
            "p95": _points(self.p95),
            "oneDownP95": _points(self.one_down_p95),
            "worstDown": self.worst_down,
            "removal": None if removal is None else removal.to_json(),
            "drainCommand": self.drain_command(),
            "removals": [option.to_json() for option in self.removals],
            "headroom": self.trend.to_json(self.target),
            "estimated": list(self.estimated),
            "explanation": list(self.explanation),
        }


def _points(value: float | None) -> float | None:
    """A score for JSON: None where there is none (no broker left to serve the traffic)."""
    return None if value is None or not math.isfinite(value) else round(value, 2)


# --- inputs -------------------------------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float))) if len(values) else 0.0


def capacity_inputs(
    cluster: str,
    brokers: Mapping[str, Sequence[Any]],
    bundles: Mapping[str, Sequence[Any]],
    *,
    models: UsageModels | None = None,
    max_moments: int = DEFAULT_MAX_MOMENTS,
) -> CapacityInputs:
    """The window's inputs from the `brokers` and `bundles` tables' columns (all of `BROKER_SCHEMA`'s that the
    usage model and the limits read, and the bundles' traffic). Without `models`, the window's own fit."""
    if max_moments < 1:
        raise InputError(f"capacity of cluster {cluster!r}: max_moments must be at least 1, not {max_moments}")
    snapshot_ids = [int(value) for value in brokers["snapshot_id"]]
    if not snapshot_ids:
        raise InputError(f"capacity of cluster {cluster!r}: the window holds no snapshot (from, to)")
    if models is None:
        models = fit_usage_models(histories_from_columns(brokers))
    names = [str(value) for value in brokers["broker"]]
    taken = {
        int(snapshot): moment for snapshot, moment in zip(brokers["snapshot_id"], brokers["taken_at"], strict=True)
    }
    latest_snapshot = max(snapshot_ids)

    per_broker: dict[str, list[int]] = {}
    for row, broker in enumerate(names):
        per_broker.setdefault(broker, []).append(row)
    limits: dict[str, dict[str, float]] = {}
    broker_models: dict[str, BrokerModel] = {}
    estimated: list[str] = []
    window_estimate: dict[str, ResourceFit] | None = None
    for broker, rows in sorted(per_broker.items()):
        limits[broker] = {column: _median([float(brokers[column][row]) for row in rows]) for column in LIMIT_COLUMNS}
        direct = _median(
            percent_of_limit(
                np.asarray([brokers["direct_memory_usage"][row] for row in rows], dtype=float),
                np.asarray([brokers["direct_memory_limit"][row] for row in rows], dtype=float),
            ).tolist()
        )
        fits = {resource: fit for resource in RESOURCES if (fit := models.fit(broker, resource)) is not None}
        for resource in RESOURCES:
            if resource not in fits:
                # Neither its own fit nor the cluster's is usable (noisy hosts, traffic that hardly varied): the
                # window's usage over its traffic stands in, as one snapshot's estimate does for a plan.
                window_estimate = window_estimate or _window_estimate(brokers)
                fits[resource] = window_estimate[resource]
                estimated.append(f"{broker} {resource}")
        broker_models[broker] = BrokerModel(fits=fits, direct_memory_percent=direct)

    current = tuple(sorted({names[row] for row, snapshot in enumerate(snapshot_ids) if snapshot == latest_snapshot}))
    latest = {
        names[row]: Traffic(*(float(brokers[column][row]) for column in _TRAFFIC_COLUMNS))
        for row, snapshot in enumerate(snapshot_ids)
        if snapshot == latest_snapshot
    }
    latest_bundles = {broker: 0 for broker in current}

    bundle_snapshots = np.asarray(bundles["snapshot_id"], dtype=np.int64)
    bundle_traffic = np.column_stack([np.asarray(bundles[column], dtype=float) for column in _TRAFFIC_COLUMNS])
    bundle_names = [str(value) for value in bundles["bundle"]]
    bundle_owners = [str(value) for value in bundles["broker"]]
    for row in np.flatnonzero(bundle_snapshots == latest_snapshot).tolist():
        if bundle_owners[row] in latest_bundles:
            latest_bundles[bundle_owners[row]] += 1

    chosen = capacity_moments(snapshot_ids, bundle_snapshots.tolist(), max_moments)
    order = np.argsort(bundle_snapshots, kind="stable")
    ordered = bundle_snapshots[order]
    moments = []
    for snapshot in chosen:
        rows = order[np.searchsorted(ordered, snapshot) : np.searchsorted(ordered, snapshot, side="right")].tolist()
        moments.append(
            Moment(
                snapshot_id=snapshot,
                taken_at=_utc(taken[snapshot]),
                bundles=tuple(bundle_names[row] for row in rows),
                owners=tuple(bundle_owners[row] for row in rows),
                traffic=bundle_traffic[rows] if rows else np.zeros((0, 4)),
            )
        )
    return CapacityInputs(
        cluster=cluster,
        moments=tuple(moments),
        snapshots=len(set(snapshot_ids)),
        models=broker_models,
        limits=limits,
        current=current,
        latest=latest,
        latest_bundles=latest_bundles,
        estimated=tuple(estimated),
    )


def _window_estimate(brokers: Mapping[str, Sequence[Any]]) -> dict[str, ResourceFit]:
    """The whole window's usage over its traffic, no background (`usage_model.snapshot_models` over every row): CPU
    per message, NIC in and out per byte."""

    def total(usage: str, limit: str) -> float:
        percents = percent_of_limit(np.asarray(brokers[usage], dtype=float), np.asarray(brokers[limit], dtype=float))
        return float(np.sum(percents))

    def driven(*columns: str) -> float:
        return sum(float(value) for column in columns for value in brokers[column])

    def ratio(numerator: float, denominator: float) -> float:
        return numerator / denominator if denominator > 0 else 0.0

    rows = len(brokers["broker"])
    cpu = ratio(total("cpu_usage", "cpu_limit"), driven("msg_rate_in", "msg_rate_out"))
    nic_in = ratio(total("bandwidth_in_usage", "bandwidth_in_limit"), driven("msg_throughput_in"))
    nic_out = ratio(total("bandwidth_out_usage", "bandwidth_out_limit"), driven("msg_throughput_out"))
    return {
        "cpu": ResourceFit(0.0, cpu, 0.0, None, rows, SNAPSHOT),
        "bandwidthIn": ResourceFit(0.0, 0.0, nic_in, None, rows, SNAPSHOT),
        "bandwidthOut": ResourceFit(0.0, 0.0, nic_out, None, rows, SNAPSHOT),
    }


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def capacity_moments(broker_snapshots: Iterable[int], bundle_snapshots: Iterable[int], max_moments: int) -> list[int]:
    """The snapshots the advice is evaluated on: at most `max_moments` of those with both tables' rows, evenly spaced.
    Of the `bundles` table, only these and the latest snapshot's rows are read (`capacity_inputs`)."""
    return _evenly(sorted(set(broker_snapshots) & set(bundle_snapshots)), max_moments)


def _evenly(values: Sequence[int], count: int) -> list[int]:
    """At most `count` of `values`, evenly spaced, the first and the last among them."""
    if len(values) <= count:
        return list(values)
    if count == 1:
        return [values[-1]]
    picks = np.linspace(0, len(values) - 1, count).round().astype(int)
    return [values[index] for index in sorted(set(picks.tolist()))]


# --- scores -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fleet:
    """A set of brokers as arrays: per broker and resource, background and costs; direct memory per broker."""

    intercept: np.ndarray  # (brokers, 3)
    per_msg: np.ndarray  # (brokers, 3)
    per_byte: np.ndarray  # (brokers, 3)
    direct: np.ndarray  # (brokers,)


def _fleet(models: Sequence[BrokerModel]) -> _Fleet:
    def column(attribute: str) -> np.ndarray:
        return np.array([[getattr(model.fits[resource], attribute) for resource in RESOURCES] for model in models])

    return _Fleet(
        intercept=column("intercept"),
        per_msg=column("per_msg"),
        per_byte=column("per_byte"),
        direct=np.array([model.direct_memory_percent for model in models]),
    )


def _drivers(traffic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row and resource (cpu, NIC in, NIC out): the msg/s and byte/s that drive it (`usage_model._drivers`)."""
    msg_in, msg_out, bytes_in, bytes_out = traffic[:, 0], traffic[:, 1], traffic[:, 2], traffic[:, 3]
    messages = np.column_stack([msg_in + msg_out, msg_in, msg_out])
    volume = np.column_stack([bytes_in + bytes_out, bytes_in, bytes_out])
    return messages, volume


def _weights(weights: ResourceWeights) -> tuple[np.ndarray, float]:
    return np.array([weights.cpu, weights.bandwidth_in, weights.bandwidth_out]), weights.direct_memory


# Moments are placed together, bundle rank by bundle rank; a chunk holds at most this many (moment, bundle) cells.
_CHUNK_CELLS = 1 << 20


def busiest_scores(fleet: _Fleet, traffic: Sequence[np.ndarray], weights: ResourceWeights) -> np.ndarray:
    """Per moment (its bundles' traffic, one row each), the busiest broker's score (percent) after placing the
    bundles largest first, each on the broker whose score it leaves lowest.

    The moments are independent, so they are placed side by side: one step per bundle rank, over every moment at
    once (a moment with fewer bundles places empty ones, which change nothing)."""
    resource_weights, direct_weight = _weights(weights)
    floor = fleet.direct * direct_weight  # (brokers,)
    mean_msg, mean_byte = fleet.per_msg.mean(axis=0), fleet.per_byte.mean(axis=0)
    busiest = np.empty(len(traffic))
    widest = max((len(rows) for rows in traffic), default=0)
    step = max(1, _CHUNK_CELLS // max(widest, 1))
    for start in range(0, len(traffic), step):
        chunk = traffic[start : start + step]
        padded = np.zeros((len(chunk), widest, 4))
        for index, rows in enumerate(chunk):
            padded[index, : len(rows)] = rows
        messages, volume = _drivers(padded.reshape(-1, 4))
        messages = messages.reshape(len(chunk), widest, 3)
        volume = volume.reshape(len(chunk), widest, 3)
        # Largest first, by what a bundle costs on the fleet's mean broker (its weighted largest resource).
        size = ((messages * mean_msg + volume * mean_byte) * resource_weights).max(axis=2)
        order = np.argsort(-size, axis=1, kind="stable")
        messages = np.take_along_axis(messages, order[:, :, None], axis=1)
        volume = np.take_along_axis(volume, order[:, :, None], axis=1)
        usage = np.repeat(np.maximum(fleet.intercept, 0.0)[None, :, :], len(chunk), axis=0)  # (moments, brokers, 3)
        moments = np.arange(len(chunk))
        for rank in range(widest):
            cost = messages[:, rank, None, :] * fleet.per_msg[None] + volume[:, rank, None, :] * fleet.per_byte[None]
            candidate = usage + np.maximum(cost, 0.0)
            scores = np.maximum((candidate * resource_weights).max(axis=2), floor)
            chosen = np.argmin(scores, axis=1)
            usage[moments, chosen] = candidate[moments, chosen]
        scores = np.maximum((usage * resource_weights).max(axis=2), floor)
        busiest[start : start + len(chunk)] = scores.max(axis=1)
    return busiest


def _p95(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), PERCENTILE, method="linear")) if values else 0.0


class _Scorer:
    """p95 scores of sets of brokers over the moments, cached by the set."""

    def __init__(self, inputs: CapacityInputs, weights: ResourceWeights) -> None:
        self.inputs = inputs
        self.weights = weights
        self._cache: dict[tuple[Any, ...], list[float]] = {}

    def series(self, key: tuple[Any, ...], models: Callable[[], Sequence[BrokerModel]]) -> list[float]:
        """The busiest score per moment of the brokers `models` gives (cached under `key`)."""
        if key not in self._cache:
            chosen = models()
            if not chosen:
                self._cache[key] = [math.inf for _ in self.inputs.moments]
            else:
                fleet = _fleet(chosen)
                traffic = [moment.traffic for moment in self.inputs.moments]
                self._cache[key] = busiest_scores(fleet, traffic, self.weights).tolist()
        return self._cache[key]

    def brokers(self, brokers: Sequence[str]) -> list[float]:
        names = tuple(sorted(brokers))
        return self.series(("brokers", names), lambda: [self.inputs.models[name] for name in names])

    def kinds(self, kinds: Sequence[BrokerKind], counts: Sequence[int]) -> list[float]:
        return self.series(
            ("kinds", tuple(counts)),
            lambda: [kind.model for kind, count in zip(kinds, counts, strict=True) for _ in range(count)],
        )


def p95_score(inputs: CapacityInputs, brokers: Sequence[str], weights: ResourceWeights) -> float:
    """The p95 over the window of the busiest broker's score when only `brokers` serve the recorded bundles."""
    return _p95(_Scorer(inputs, weights).brokers(brokers))


# --- kinds --------------------------------------------------------------------------------------------------------


def _reference_traffic(inputs: CapacityInputs) -> Traffic:
    """The cluster's mean traffic per broker over the moments: the traffic kinds' costs are compared on."""
    if not inputs.moments:
        return Traffic()
    totals = np.mean([moment.traffic.sum(axis=0) for moment in inputs.moments], axis=0) / max(len(inputs.current), 1)
    return Traffic(*(float(value) for value in totals))


def _same_kind(a: str, b: str, inputs: CapacityInputs, reference: Traffic, tolerance: float) -> bool:
    for column in LIMIT_COLUMNS:
        left, right = inputs.limits[a][column], inputs.limits[b][column]
        if abs(left - right) > 1e-9 * max(abs(left), abs(right), 1.0):
            return False
    for resource in RESOURCES:
        left = inputs.models[a].fits[resource].cost(reference, resource)
        right = inputs.models[b].fits[resource].cost(reference, resource)
        if abs(left - right) > max(tolerance * max(abs(left), abs(right)), COST_FLOOR_POINTS):
            return False
    return True


def _mean_model(models: Sequence[BrokerModel]) -> BrokerModel:
    fits = {}
    for resource in RESOURCES:
        members = [model.fits[resource] for model in models]
        fits[resource] = ResourceFit(
            intercept=float(np.mean([fit.intercept for fit in members])),
            per_msg=float(np.mean([fit.per_msg for fit in members])),
            per_byte=float(np.mean([fit.per_byte for fit in members])),
            r_squared=None,
            samples=sum(fit.samples for fit in members),
            source=members[0].source if len({fit.source for fit in members}) == 1 else "mixed",
        )
    return BrokerModel(fits=fits, direct_memory_percent=float(np.mean([m.direct_memory_percent for m in models])))


def broker_kinds(inputs: CapacityInputs, tolerance: float = DEFAULT_TOLERANCE) -> tuple[BrokerKind, ...]:
    """The current brokers grouped by hardware (the module's docstring says how)."""
    reference = _reference_traffic(inputs)
    groups: list[list[str]] = []
    for broker in inputs.current:
        for group in groups:
            if all(_same_kind(broker, member, inputs, reference, tolerance) for member in group):
                group.append(broker)
                break
        else:
            groups.append([broker])
    kinds = []
    for index, group in enumerate(groups, start=1):
        model = _mean_model([inputs.models[broker] for broker in group])
        kinds.append(
            BrokerKind(
                name=f"kind-{index}",
                brokers=tuple(group),
                limits=dict(inputs.limits[group[0]]),
                reference_cost={resource: model.fits[resource].cost(reference, resource) for resource in RESOURCES},
                background={resource: model.fits[resource].intercept for resource in RESOURCES},
                model=model,
            )
        )
    return tuple(kinds)


# --- N+1 ----------------------------------------------------------------------------------------------------------


def _one_down(scorer: _Scorer, kinds: Sequence[BrokerKind], counts: Sequence[int]) -> float:
    """The p95 with the worst single broker down (one of any kind present)."""
    if sum(counts) <= 1:
        return math.inf
    worst = 0.0
    for index, count in enumerate(counts):
        if count:
            fewer = list(counts)
            fewer[index] -= 1
            worst = max(worst, _p95(scorer.kinds(kinds, fewer)))
    return worst


def needed_counts(scorer: _Scorer, kinds: Sequence[BrokerKind], target: float, max_brokers: int) -> tuple[int, ...]:
    """The fewest brokers per kind (from the recorded counts) whose p95 score stays under the target with the worst
    single broker down; the recorded counts grown up to `max_brokers` in all when even that does not hold."""
    counts = [len(kind.brokers) for kind in kinds]
    if _one_down(scorer, kinds, counts) > target:
        while sum(counts) < max_brokers and _one_down(scorer, kinds, counts) > target:
            trials = []
            for index in range(len(kinds)):
                more = list(counts)
                more[index] += 1
                trials.append((_one_down(scorer, kinds, more), -counts[index], index, more))
            counts = min(trials)[3]
        return tuple(counts)
    while True:
        trials = []
        for index, count in enumerate(counts):
            if count:
                fewer = list(counts)
                fewer[index] -= 1
                score = _one_down(scorer, kinds, fewer)
                if score <= target:
                    trials.append((score, -count, index, fewer))
        if not trials:
            return tuple(counts)
        counts = min(trials)[3]


# --- trend --------------------------------------------------------------------------------------------------------


def headroom_trend(inputs: CapacityInputs, series: Sequence[float], target: float) -> HeadroomTrend:
    """Per UTC day, the p95 of `series` (one score per moment); the headroom's slope and the day it reaches 0."""
    per_day: dict[date, list[float]] = {}
    for moment, score in zip(inputs.moments, series, strict=True):
        per_day.setdefault(moment.taken_at.date(), []).append(score)
    days = tuple(DayHeadroom(day, _p95(scores), len(scores)) for day, scores in sorted(per_day.items()))
    if len(days) < 2:
        return HeadroomTrend(days, None, None)
    first = days[0].day
    offsets = np.array([(day.day - first).days for day in days], dtype=float)
    headroom = np.array([day.headroom(target) for day in days])
    slope, intercept = np.polyfit(offsets, headroom, 1)
    zero_on = None
    if slope < 0:
        crossing = round(float(-intercept / slope), 6)  # the fit's rounding must not push a whole day on
        zero_on = first + timedelta(days=math.ceil(crossing)) if math.isfinite(crossing) else None
    return HeadroomTrend(days, float(slope), zero_on)


# --- the advice ---------------------------------------------------------------------------------------------------


def _removal_options(inputs: CapacityInputs, scorer: _Scorer, target: float) -> tuple[RemovalOption, ...]:
    total_messages = sum(t.msg_rate_in + t.msg_rate_out for t in inputs.latest.values())
    total_bytes = sum(t.throughput_in + t.throughput_out for t in inputs.latest.values())
    options = []
    for broker in inputs.current:
        others = [name for name in inputs.current if name != broker]
        p95 = _p95(scorer.brokers(others)) if others else math.inf
        traffic = inputs.latest.get(broker, Traffic())
        messages = traffic.msg_rate_in + traffic.msg_rate_out
        volume = traffic.throughput_in + traffic.throughput_out
        share = max(
            messages / total_messages if total_messages > 0 else 0.0, volume / total_bytes if total_bytes > 0 else 0.0
        )
        options.append(
            RemovalOption(
                broker=broker,
                p95=p95,
                meets_target=p95 <= target,
                one_down_p95=None,
                bundles=inputs.latest_bundles.get(broker, 0),
                msg_rate=messages,
                throughput=volume,
                share=share,
            )
        )
    ranked = sorted(options, key=lambda o: (not o.meets_target, o.share, o.bundles, o.p95, o.broker))
    if ranked and ranked[0].meets_target and len(inputs.current) > 2:
        # Only the advised removal's own N+1 is told: each one costs as many placements as brokers remain.
        advised = ranked[0]
        others = [name for name in inputs.current if name != advised.broker]
        one_down = max(_p95(scorer.brokers([name for name in others if name != down])) for down in others)
        ranked[0] = replace(advised, one_down_p95=one_down)
    return tuple(ranked)


def advise_capacity(
    inputs: CapacityInputs,
    weights: ResourceWeights,
    *,
    target: float = DEFAULT_TARGET,
    tolerance: float = DEFAULT_TOLERANCE,
    window: tuple[datetime, datetime] | None = None,
) -> CapacityAdvice:
    """The capacity advice for the window's inputs (the module's docstring says how each figure is made)."""
    if not (math.isfinite(target) and target > 0):
        raise InputError(f"capacity of cluster {inputs.cluster!r}: target must be a score above 0, not {target}")
    if not inputs.moments:
        raise InputError(
            f"capacity of cluster {inputs.cluster!r}: the window holds no snapshot with bundles (from, to)"
        )
    scorer = _Scorer(inputs, weights)
    kinds = broker_kinds(inputs, tolerance)
    recorded = len(inputs.current)
    needed = needed_counts(scorer, kinds, target, max(2 * recorded, recorded + 10))
    counts = tuple(KindCount(kind.name, len(kind.brokers), count) for kind, count in zip(kinds, needed, strict=True))

    series = scorer.brokers(inputs.current)
    p95 = _p95(series)
    one_down, worst = None, None
    if recorded > 1:
        one_down, worst = max(
            (_p95(scorer.brokers([name for name in inputs.current if name != down])), down) for down in inputs.current
        )
    removals = _removal_options(inputs, scorer, target)
    trend = headroom_trend(inputs, series, target)
    moments = inputs.moments
    advice = CapacityAdvice(
        cluster=inputs.cluster,
        target=target,
        tolerance=tolerance,
        window=window or (moments[0].taken_at, moments[-1].taken_at),
        snapshots=inputs.snapshots,
        moments=len(moments),
        kinds=kinds,
        counts=counts,
        p95=p95,
        one_down_p95=one_down,
        worst_down=worst,
        removals=removals,
        trend=trend,
        estimated=inputs.estimated,
    )
    return _explained(advice)


def _explained(advice: CapacityAdvice) -> CapacityAdvice:
    target = advice.target
    lines = [
        f"Scores are Pulsar's weighted maximum of CPU, NIC and direct memory usage (percent), predicted per broker "
        f"from its fitted background and costs per msg/s and byte/s, with every bundle placed anew (largest first, "
        f"each on the broker it leaves least loaded); the figure is the busiest broker's score, its p95 over "
        f"{advice.moments} of the window's {advice.snapshots} snapshots.",
        f"{len(advice.kinds)} broker kind(s): same limits and costs of the mean broker traffic within "
        f"{advice.tolerance:.0%}.",
    ]
    if advice.estimated:
        lines.append(
            f"No usable fit (too few snapshots, traffic that hardly varied, or usage that does not follow it) for "
            f"{', '.join(advice.estimated)}: the window's usage over its traffic stands in, without background; "
            "widen the window for better figures."
        )
    lines += [
        f"All {sum(c.recorded for c in advice.counts)} brokers up: p95 score {advice.p95:.1f} against the target "
        f"{target:g}.",
    ]
    if advice.one_down_p95 is not None:
        state = "holds" if advice.one_down_p95 <= target else "does not hold"
        lines.append(
            f"With the worst single broker down ({advice.worst_down}): p95 {advice.one_down_p95:.1f}; N+1 {state}."
        )
    for count in advice.counts:
        if count.spare > 0:
            verdict = f"{count.spare} can go"
        elif count.spare < 0:
            verdict = f"{-count.spare} more needed"
        else:
            verdict = "none to spare"
        lines.append(f"{count.kind}: {count.recorded} recorded, {count.needed} keep N+1 under the target ({verdict}).")
    removal = advice.removal
    if removal is None:
        lines.append("No broker can be removed: without any one of them the p95 score exceeds the target.")
    else:
        after = (
            f"; with one more down it would be {removal.one_down_p95:.1f}"
            + (" (no spare left for a failure)" if removal.one_down_p95 > target else "")
            if removal.one_down_p95 is not None
            else ""
        )
        lines.append(
            f"Cheapest removal: {removal.broker} ({removal.bundles} bundles, {removal.share:.0%} of the traffic "
            f"to move): "
            f"the others' p95 would be {removal.p95:.1f}{after}. Drain it with: {advice.drain_command()}"
        )
    trend = advice.trend
    if trend.slope is None:
        lines.append("Headroom trend: one day of data, no slope yet.")
    else:
        change = "falls" if trend.slope < 0 else "rises" if trend.slope > 0 else "stays"
        reach = f"; it reaches zero around {trend.zero_on.isoformat()}" if trend.zero_on is not None else ""
        lines.append(
            f"Headroom (target minus the day's p95) {change} by {abs(trend.slope):.2f} points a day over "
            f"{len(trend.days)} days{reach}."
        )
    return replace(advice, explanation=tuple(lines))
