"""How a broker's resource usage follows its traffic, fitted from its load-report history.

Each scored resource that follows traffic (CPU, NIC in, NIC out; direct memory does not) is modelled
per broker as

    usage percent = intercept + per_msg * msg/s + per_byte * byte/s

with ordinary least squares over the broker's samples. The intercept is the background load (GC,
replication, other tenants of the host); the two costs are the broker's own hardware. CPU is driven
by all messages and bytes, NIC in by inbound and NIC out by outbound traffic only.

A broker's own fit is used when it has enough samples and explains its usage well (R²); otherwise
the broker gets the cluster-wide fit (all brokers' samples pooled), with its own background where it
has any samples. Without usable history, `snapshot_models` gives the first-order estimate from one
snapshot: the cluster's usage divided by its traffic, no background.

With each fit goes the broker's recent load (`RecentLoad`): its usage and traffic averaged over the
samples of the `RECENT_WINDOW_SECONDS` up to the snapshot the plan is made on. The forecast starts from it rather than
from the one report of the snapshot: a single report carries that minute's noise (a GC pause, a
neighbour's burst) into every prediction made from it.

Pure and deterministic: the simulator, the CLI and the Spark job all fit with this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.pulsar.java_numbers import percent_usage

if TYPE_CHECKING:  # executors fit the models with only numpy, pandas and pyarrow: no pydantic there
    from planner.pulsar.model import LoadData

RESOURCES = ("cpu", "bandwidthIn", "bandwidthOut")
# One hour of 5-minute collections: fewer samples say little about a broker's costs.
MIN_SAMPLES = 12
MIN_R_SQUARED = 0.8
# The forecast's starting load averages the samples of the last 15 minutes (three 5-minute collections): short
# enough that a broker's background has not moved, long enough to divide one report's noise by about 1.7.
RECENT_WINDOW_SECONDS = 15 * 60
# Below this relative variation the traffic is "constant" and the costs cannot be told from the background.
_MIN_RELATIVE_VARIATION = 1e-9

BROKER, CLUSTER, SNAPSHOT = "broker", "cluster", "snapshot"


@dataclass(frozen=True, slots=True)
class Traffic:
    """Message and byte rates of a broker or a bundle."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0

    def drivers(self, resource: str) -> tuple[float, float]:
        """(msg/s, byte/s) that drive `resource`."""
        return _drivers(resource, self.msg_rate_in, self.msg_rate_out, self.throughput_in, self.throughput_out)

    def scaled(self, factor: float) -> Traffic:
        return Traffic(
            self.msg_rate_in * factor,
            self.msg_rate_out * factor,
            self.throughput_in * factor,
            self.throughput_out * factor,
        )

    def plus(self, other: Traffic) -> Traffic:
        return Traffic(
            self.msg_rate_in + other.msg_rate_in,
            self.msg_rate_out + other.msg_rate_out,
            self.throughput_in + other.throughput_in,
            self.throughput_out + other.throughput_out,
        )


@dataclass(frozen=True, slots=True)
class RecentLoad:
    """One resource of a broker over its recent samples: mean usage percent and the mean traffic driving it."""

    usage: float  # percent
    messages: float  # msg/s that drive the resource
    volume: float  # byte/s that drive the resource
    samples: int

    def to_json(self) -> dict[str, Any]:
        return {"usage": self.usage, "messages": self.messages, "volume": self.volume, "samples": self.samples}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RecentLoad:
        return cls(
            usage=float(document["usage"]),
            messages=float(document["messages"]),
            volume=float(document["volume"]),
            samples=int(document["samples"]),
        )


@dataclass(frozen=True, slots=True)
class ResourceFit:
    """One resource's usage model; `r_squared` and `samples` describe the fit actually used. `recent` is the
    broker's recent load of that resource (None for a fit that is not one broker's, or without samples)."""

    intercept: float  # percent
    per_msg: float  # percent per msg/s
    per_byte: float  # percent per byte/s
    r_squared: float | None
    samples: int
    source: str  # BROKER, CLUSTER or SNAPSHOT
    recent: RecentLoad | None = None

    def cost(self, traffic: Traffic, resource: str) -> float:
        """Percent of the resource that `traffic` uses on this broker, background excluded."""
        messages, volume = traffic.drivers(resource)
        return self.per_msg * messages + self.per_byte * volume

    def usage_now(self, reported: float, traffic: Traffic, resource: str) -> float:
        """The broker's usage at its current `traffic`: its recent samples' mean usage, moved by the cost of the
        traffic's change since them, or the `reported` percent when there are none."""
        if self.recent is None:
            return reported
        messages, volume = traffic.drivers(resource)
        change = self.per_msg * (messages - self.recent.messages) + self.per_byte * (volume - self.recent.volume)
        return max(0.0, self.recent.usage + change)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "intercept": self.intercept,
            "perMsg": self.per_msg,
            "perByte": self.per_byte,
            "rSquared": self.r_squared,
            "samples": self.samples,
            "source": self.source,
        }
        if self.recent is not None:
            document["recent"] = self.recent.to_json()
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ResourceFit:
        r_squared = document.get("rSquared")
        recent = document.get("recent")
        return cls(
            intercept=float(document["intercept"]),
            per_msg=float(document["perMsg"]),
            per_byte=float(document["perByte"]),
            r_squared=None if r_squared is None else float(r_squared),
            samples=int(document["samples"]),
            source=str(document["source"]),
            recent=None if recent is None else RecentLoad.from_json(recent),
        )


@dataclass(frozen=True, slots=True)
class UsageModels:
    """Per broker and resource, the fit to predict with; `cluster` is the pooled fit per resource.

    A resource missing from a broker's entry (and from `cluster`) had no usable fit at all.
    """

    brokers: Mapping[str, Mapping[str, ResourceFit]] = field(default_factory=dict)
    cluster: Mapping[str, ResourceFit] = field(default_factory=dict)

    def fit(self, broker: str, resource: str) -> ResourceFit | None:
        own = self.brokers.get(broker, {}).get(resource)
        return own if own is not None else self.cluster.get(resource)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokers": {
                broker: {resource: fit.to_json() for resource, fit in sorted(fits.items())}
                for broker, fits in sorted(self.brokers.items())
            },
            "cluster": {resource: fit.to_json() for resource, fit in sorted(self.cluster.items())},
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> UsageModels:
        return cls(
            brokers={
                broker: {resource: ResourceFit.from_json(fit) for resource, fit in fits.items()}
                for broker, fits in document.get("brokers", {}).items()
            },
            cluster={resource: ResourceFit.from_json(fit) for resource, fit in document.get("cluster", {}).items()},
        )


@dataclass(frozen=True, slots=True)
class BrokerHistory:
    """One broker's samples, oldest first: when each was taken (seconds), traffic and usage percent of each
    resource."""

    taken_at: np.ndarray  # seconds since the epoch
    msg_rate_in: np.ndarray
    msg_rate_out: np.ndarray
    throughput_in: np.ndarray
    throughput_out: np.ndarray
    usage: Mapping[str, np.ndarray]  # resource -> percent

    def __len__(self) -> int:
        return len(self.msg_rate_in)

    def drivers(self, resource: str) -> tuple[np.ndarray, np.ndarray]:
        return _drivers(resource, self.msg_rate_in, self.msg_rate_out, self.throughput_in, self.throughput_out)


def _drivers(resource: str, msg_in: Any, msg_out: Any, bytes_in: Any, bytes_out: Any) -> tuple[Any, Any]:
    """(messages, bytes) that drive `resource`: inbound for NIC in, outbound for NIC out, all for CPU."""
    if resource == "bandwidthIn":
        return msg_in, bytes_in
    if resource == "bandwidthOut":
        return msg_out, bytes_out
    return msg_in + msg_out, bytes_in + bytes_out


def _pooled(histories: Mapping[str, BrokerHistory]) -> BrokerHistory:
    """All brokers' samples as one history: what the cluster-wide fit is fitted on."""
    parts = list(histories.values())
    return BrokerHistory(
        taken_at=np.concatenate([h.taken_at for h in parts]),
        msg_rate_in=np.concatenate([h.msg_rate_in for h in parts]),
        msg_rate_out=np.concatenate([h.msg_rate_out for h in parts]),
        throughput_in=np.concatenate([h.throughput_in for h in parts]),
        throughput_out=np.concatenate([h.throughput_out for h in parts]),
        usage={resource: np.concatenate([h.usage[resource] for h in parts]) for resource in RESOURCES},
    )


def percent_of_limit(usage: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """usage / limit * 100, 0 where the limit is unknown (as Pulsar's percentUsage)."""
    safe = np.where(limit > 0, limit, 1.0)
    return np.where(limit > 0, usage / safe * 100.0, 0.0)


# The `brokers` table columns `histories_from_columns` reads.
HISTORY_COLUMNS = (
    "broker",
    "snapshot_id",
    "taken_at",
    "cpu_usage",
    "cpu_limit",
    "bandwidth_in_usage",
    "bandwidth_in_limit",
    "bandwidth_out_usage",
    "bandwidth_out_limit",
    "msg_rate_in",
    "msg_rate_out",
    "msg_throughput_in",
    "msg_throughput_out",
)


def histories_from_columns(columns: Mapping[str, Sequence[Any]]) -> dict[str, BrokerHistory]:
    """Group rows of the samples dataset's `brokers` table (column name -> values) by broker.

    Rows are ordered by snapshot id within each broker, so the result does not depend on the order
    the rows were read in.
    """
    brokers = np.asarray(columns["broker"], dtype=object)
    snapshots = np.asarray(columns["snapshot_id"], dtype=np.int64)

    def column(name: str) -> np.ndarray:
        return np.asarray(columns[name], dtype=float)

    taken_at = _epoch_seconds(columns["taken_at"])
    usage = {
        "cpu": percent_of_limit(column("cpu_usage"), column("cpu_limit")),
        "bandwidthIn": percent_of_limit(column("bandwidth_in_usage"), column("bandwidth_in_limit")),
        "bandwidthOut": percent_of_limit(column("bandwidth_out_usage"), column("bandwidth_out_limit")),
    }
    traffic = {
        name: column(name) for name in ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
    }
    histories = {}
    for broker in sorted(set(brokers.tolist())):
        rows = np.flatnonzero(brokers == broker)
        rows = rows[np.argsort(snapshots[rows], kind="stable")]
        histories[broker] = BrokerHistory(
            taken_at=taken_at[rows],
            msg_rate_in=traffic["msg_rate_in"][rows],
            msg_rate_out=traffic["msg_rate_out"][rows],
            throughput_in=traffic["msg_throughput_in"][rows],
            throughput_out=traffic["msg_throughput_out"][rows],
            usage={resource: values[rows] for resource, values in usage.items()},
        )
    return histories


def _epoch_seconds(values: Sequence[Any]) -> np.ndarray:
    """Seconds since the epoch of timestamps as pyarrow (datetimes) or pandas (datetime64 or Timestamps) give them."""
    array = np.asarray(values)
    if np.issubdtype(array.dtype, np.datetime64):
        return array.astype("datetime64[ms]").astype(np.int64) / 1000.0
    return np.array([moment.timestamp() for moment in array.tolist()], dtype=float)


def newest_sample(histories: Mapping[str, BrokerHistory]) -> float | None:
    """When the newest of the histories' samples was taken: the snapshot a plan on the newest samples is made on."""
    return max((float(history.taken_at.max()) for history in histories.values() if len(history)), default=None)


def _recent_loads(histories: Mapping[str, BrokerHistory], now: float) -> dict[str, dict[str, RecentLoad]]:
    """Per broker and resource, the mean of its samples taken in the `RECENT_WINDOW_SECONDS` up to `now` (the
    snapshot a plan is made on, itself one of the samples): a broker with no sample in that window has none."""
    loads: dict[str, dict[str, RecentLoad]] = {}
    for broker, history in sorted(histories.items()):
        recent = (history.taken_at > now - RECENT_WINDOW_SECONDS) & (history.taken_at <= now)
        count = int(np.count_nonzero(recent))
        if not count:
            continue
        loads[broker] = {}
        for resource in RESOURCES:
            messages, volume = history.drivers(resource)
            loads[broker][resource] = RecentLoad(
                float(np.mean(history.usage[resource][recent])),
                float(np.mean(messages[recent])),
                float(np.mean(volume[recent])),
                count,
            )
    return loads


def _least_squares(
    messages: np.ndarray, volume: np.ndarray, usage: np.ndarray
) -> tuple[float, float, float, float | None] | None:
    """(intercept, per_msg, per_byte, R²), or None when the traffic does not vary.

    Centred and scaled columns keep the problem well conditioned (byte rates are 10^3-10^6 times message
    rates). When messages and bytes move in proportion (one message size) they cannot be told apart:
    numpy's minimum-norm solution then splits the cost between them, which predicts exactly for traffic
    of that same mix.
    """
    drivers = np.column_stack([messages, volume]) - np.array([messages.mean(), volume.mean()])
    scale = np.abs(drivers).max(axis=0)
    reference = np.maximum(np.abs([messages.mean(), volume.mean()]), 1.0)
    if not np.any(scale > _MIN_RELATIVE_VARIATION * reference):
        return None
    scale = np.where(scale > 0, scale, 1.0)
    centred_usage = usage - usage.mean()
    solution, *_ = np.linalg.lstsq(drivers / scale, centred_usage, rcond=None)
    per_msg, per_byte = (solution / scale).tolist()
    intercept = float(usage.mean() - per_msg * messages.mean() - per_byte * volume.mean())
    total = float(centred_usage @ centred_usage)
    residual = centred_usage - (drivers / scale) @ solution
    r_squared = 1.0 - float(residual @ residual) / total if total > 0 else None
    return intercept, per_msg, per_byte, r_squared


def _usable(r_squared: float | None, samples: int, min_samples: int, min_r_squared: float) -> bool:
    return samples >= min_samples and r_squared is not None and r_squared >= min_r_squared


def fit_usage_models(
    histories: Mapping[str, BrokerHistory],
    *,
    now: float | None = None,
    min_samples: int = MIN_SAMPLES,
    min_r_squared: float = MIN_R_SQUARED,
) -> UsageModels:
    """Per broker and resource: its own fit if usable, else the cluster-wide fit with its own background.

    `now` (seconds since the epoch) is when the snapshot a plan is made on was taken: each fit then carries its
    broker's recent load up to it. Without it (fits for costs only) there is none and predictions start from
    the reports.
    """
    cluster: dict[str, ResourceFit] = {}
    pooled = _pooled(histories) if histories else None
    for resource in RESOURCES:
        if pooled is None or not len(pooled):
            break
        fitted = _least_squares(*pooled.drivers(resource), pooled.usage[resource])
        if fitted is not None and _usable(fitted[3], len(pooled), min_samples, min_r_squared):
            cluster[resource] = ResourceFit(*fitted, samples=len(pooled), source=CLUSTER)

    recent_loads = _recent_loads(histories, now) if now is not None else {}
    brokers: dict[str, dict[str, ResourceFit]] = {}
    for broker, history in sorted(histories.items()):
        fits: dict[str, ResourceFit] = {}
        for resource in RESOURCES:
            messages, volume = history.drivers(resource)
            usage = history.usage[resource]
            recent = recent_loads.get(broker, {}).get(resource)
            fitted = _least_squares(messages, volume, usage) if len(history) else None
            if fitted is not None and _usable(fitted[3], len(history), min_samples, min_r_squared):
                fits[resource] = ResourceFit(*fitted, samples=len(history), source=BROKER, recent=recent)
            elif resource in cluster:
                shared = cluster[resource]
                # The cluster's costs, this broker's background: what it uses beyond its traffic's cost.
                background = float(np.mean(usage - shared.per_msg * messages - shared.per_byte * volume))
                fits[resource] = ResourceFit(
                    background, shared.per_msg, shared.per_byte, shared.r_squared, shared.samples, CLUSTER, recent
                )
        brokers[broker] = fits
    return UsageModels(brokers=brokers, cluster=cluster)


def planning_models(columns: Mapping[str, Sequence[Any]]) -> UsageModels:
    """The usage models a plan on the newest snapshot of these `brokers` table rows predicts with: fitted on all of
    them, each broker's recent load up to that snapshot (the plan job and the replay's check of a live plan)."""
    histories = histories_from_columns(columns)
    return fit_usage_models(histories, now=newest_sample(histories))


def broker_traffic(load_data: LoadData, broker: str) -> Traffic:
    report = load_data.brokers[broker]
    return Traffic(report.msg_rate_in, report.msg_rate_out, report.msg_throughput_in, report.msg_throughput_out)


def snapshot_models(load_data: LoadData) -> UsageModels:
    """One snapshot, no history: the cluster's usage over its traffic per resource, no background.

    CPU is charged per message, NIC in and out per byte, as the planner's first forecast did.
    """
    brokers = load_data.brokers.values()
    cpu = sum(percent_usage(b.cpu) for b in brokers)
    bandwidth_in = sum(percent_usage(b.bandwidth_in) for b in brokers)
    bandwidth_out = sum(percent_usage(b.bandwidth_out) for b in brokers)
    messages = sum(b.msg_rate for b in brokers)
    bytes_in = sum(b.msg_throughput_in for b in brokers)
    bytes_out = sum(b.msg_throughput_out for b in brokers)
    count = len(load_data.brokers)
    return UsageModels(
        cluster={
            "cpu": ResourceFit(0.0, _ratio(cpu, messages), 0.0, None, count, SNAPSHOT),
            "bandwidthIn": ResourceFit(0.0, 0.0, _ratio(bandwidth_in, bytes_in), None, count, SNAPSHOT),
            "bandwidthOut": ResourceFit(0.0, 0.0, _ratio(bandwidth_out, bytes_out), None, count, SNAPSHOT),
        }
    )


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0


def resolved_models(load_data: LoadData, models: UsageModels | None) -> dict[str, dict[str, ResourceFit]]:
    """Every broker of `load_data`, every resource: the fitted model, else the one-snapshot estimate."""
    snapshot = snapshot_models(load_data)
    resolved = {}
    for broker in sorted(load_data.brokers):
        fits = {}
        for resource in RESOURCES:
            fitted = models.fit(broker, resource) if models is not None else None
            fits[resource] = fitted if fitted is not None else snapshot.cluster[resource]
        resolved[broker] = fits
    return resolved
