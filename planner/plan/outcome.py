"""What an executed plan's prediction came to: each broker's predicted load beside the load measured once the
moves took effect, and what disturbed the comparison.

A plan's preview (`PlanDocument.brokers`) predicts each broker's msg/s, bytes/s and score after the moves, from the
plan's snapshot and the usage models. After the execution the report task (or the CLI) collects again and records
the measured snapshot, and the plan's own snapshot read the same way (`planner.store.plans.Measurement`). This
module rebuilds the outcome from those and the plan alone, with no I/O, so the accuracy figures, the review pages and
the calibration all read the same outcome.

A miss is not always the model's: traffic that changed between the plan's snapshot and the measurement, a bundle
Pulsar placed elsewhere, an action that did not take effect, a broker that joined, left or was predicted with the
snapshot-only model, a broker that restarted, or a measurement missing brokers. Each is a `Disturbance` with a
one-line detail; a disturbed outcome says why it missed, and the calibration must not learn from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from planner.actions import ActionKind
from planner.lifecycle import APPLIED_ATTEMPT_STATUSES, AttemptStatus
from planner.plan.document import BrokerForecast, PlanDocument, PlannedAction
from planner.plan.forecast import weighted_score
from planner.plan.usage_model import SNAPSHOT, Traffic
from planner.pulsar.config import PulsarConfig, ResourceWeights
from planner.store.models import as_utc
from planner.store.plans import BrokerSample, Measurement, PlanRecord, SnapshotLoad

# Cluster traffic (msg/s or bytes/s, in + out) that moved more than this share between the plan's snapshot and the
# measurement: the prediction was made for another load. Moving bundles leaves the cluster's total unchanged, so
# anything past the brokers' own noise (a few percent at a steady rate) is the traffic's doing.
TRAFFIC_CHANGE_BOUND = 0.2
# Below these cluster totals the relative change is noise (an idle test cluster): no verdict on traffic.
MIN_CLUSTER_MSG_RATE = 10.0
MIN_CLUSTER_THROUGHPUT = 10_000.0


class Disturbance(StrEnum):
    """Why a plan's measured load may differ from its prediction for reasons other than the model's."""

    TRAFFIC_CHANGED = "traffic-changed"
    LANDED_ELSEWHERE = "landed-elsewhere"
    NOT_APPLIED = "not-applied"
    OUTSIDE_MODEL = "outside-model"
    BROKER_RESTARTED = "broker-restarted"
    PARTIAL_SNAPSHOT = "partial-snapshot"
    # Predicted with the one-snapshot estimate (no usable history): it explains a miss, but the miss is the model's
    # own, what the preview showed and what calibration corrects most; so it does not disturb the measurement.
    SNAPSHOT_MODEL = "snapshot-model"

    @property
    def disturbs(self) -> bool:
        """The measurement is not a clean test of the model: left out of its figures, its alert and calibration."""
        return self is not Disturbance.SNAPSHOT_MODEL


@dataclass(frozen=True, slots=True)
class DisturbanceNote:
    """One disturbance and its one-line detail (the brokers or bundle it concerns are named in it)."""

    reason: Disturbance
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """A broker's usage of each scored resource, percent of its limit."""

    cpu: float
    bandwidth_in: float
    bandwidth_out: float
    direct_memory: float

    def score(self, weights: ResourceWeights) -> float:
        """The weighted max usage (percent points), as the forecast scores it."""
        return weighted_score(self.cpu, self.direct_memory, self.bandwidth_in, self.bandwidth_out, weights)

    def to_json(self) -> dict[str, float]:
        return {
            "cpu": self.cpu,
            "bandwidthIn": self.bandwidth_in,
            "bandwidthOut": self.bandwidth_out,
            "directMemory": self.direct_memory,
        }

    @classmethod
    def of(cls, sample: BrokerSample) -> ResourceUsage | None:
        values = (sample.cpu, sample.bandwidth_in, sample.bandwidth_out, sample.direct_memory)
        if any(value is None for value in values):
            return None
        cpu, bandwidth_in, bandwidth_out, direct_memory = (float(value or 0.0) for value in values)
        return cls(cpu, bandwidth_in, bandwidth_out, direct_memory)


def _traffic_of(sample: BrokerSample) -> Traffic | None:
    values = (sample.msg_rate_in, sample.msg_rate_out, sample.throughput_in, sample.throughput_out)
    if any(value is None for value in values):
        return None
    return Traffic(*(float(value or 0.0) for value in values))


def _traffic_json(traffic: Traffic | None) -> dict[str, float] | None:
    if traffic is None:
        return None
    return {
        "msgRateIn": traffic.msg_rate_in,
        "msgRateOut": traffic.msg_rate_out,
        "throughputIn": traffic.throughput_in,
        "throughputOut": traffic.throughput_out,
    }


@dataclass(frozen=True, slots=True)
class BrokerOutcome:
    """One broker: its load before the plan (the plan's snapshot), as predicted after it, and as measured after it
    (None: not measured, the broker missing from the measurement or gone). Usage and traffic are None where the
    measurement did not record them (measurements taken before they were kept)."""

    broker: str
    score_before: float
    score_predicted: float
    score_measured: float | None
    msg_rate_before: float
    msg_rate_predicted: float
    msg_rate_measured: float | None
    throughput_before: float
    throughput_predicted: float
    throughput_measured: float | None
    usage_before: ResourceUsage | None
    usage_measured: ResourceUsage | None
    traffic_before: Traffic | None
    traffic_measured: Traffic | None
    moved_in: Traffic  # what the plan predicted would arrive on the broker
    moved_out: Traffic  # ... and leave it
    model: str  # the usage model the prediction used: broker, cluster or snapshot

    @property
    def measured(self) -> bool:
        return self.score_measured is not None

    @property
    def score_error(self) -> float | None:
        """Measured minus predicted score, percent points: positive when the broker ended busier than previewed."""
        return None if self.score_measured is None else self.score_measured - self.score_predicted

    @property
    def msg_rate_error(self) -> float | None:
        return None if self.msg_rate_measured is None else self.msg_rate_measured - self.msg_rate_predicted

    @property
    def throughput_error(self) -> float | None:
        return None if self.throughput_measured is None else self.throughput_measured - self.throughput_predicted

    def to_json(self) -> dict[str, object]:
        return {
            "broker": self.broker,
            "model": self.model,
            "score": {
                "before": self.score_before,
                "predicted": self.score_predicted,
                "measured": self.score_measured,
                "error": self.score_error,
            },
            "msgRate": {
                "before": self.msg_rate_before,
                "predicted": self.msg_rate_predicted,
                "measured": self.msg_rate_measured,
                "error": self.msg_rate_error,
            },
            "throughput": {
                "before": self.throughput_before,
                "predicted": self.throughput_predicted,
                "measured": self.throughput_measured,
                "error": self.throughput_error,
            },
            "usageBefore": self.usage_before.to_json() if self.usage_before else None,
            "usageMeasured": self.usage_measured.to_json() if self.usage_measured else None,
            "trafficBefore": _traffic_json(self.traffic_before),
            "trafficMeasured": _traffic_json(self.traffic_measured),
            "movedIn": _traffic_json(self.moved_in),
            "movedOut": _traffic_json(self.moved_out),
        }


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """An executed plan's prediction against what was measured, per broker, and what disturbed it."""

    plan_id: int
    cluster: str
    strategy: str
    mode: str
    created_at: datetime
    executed_at: datetime | None  # when its last action ended
    measured_at: datetime
    plan_snapshot: int | None
    measured_snapshot: int
    brokers: tuple[BrokerOutcome, ...]
    disturbances: tuple[DisturbanceNote, ...]

    @property
    def disturbed(self) -> bool:
        """Something other than the model may explain the miss: the calibration skips such outcomes."""
        return any(note.reason.disturbs for note in self.disturbances)

    @property
    def reasons(self) -> tuple[Disturbance, ...]:
        """The distinct reasons, in the order they were found."""
        return tuple(dict.fromkeys(note.reason for note in self.disturbances))

    @property
    def measured_brokers(self) -> tuple[BrokerOutcome, ...]:
        return tuple(broker for broker in self.brokers if broker.measured)

    def broker(self, name: str) -> BrokerOutcome | None:
        return next((broker for broker in self.brokers if broker.broker == name), None)

    def to_json(self) -> dict[str, object]:
        """As `accuracy plan --json` prints it and the review API serves it."""
        return {
            "plan": self.plan_id,
            "cluster": self.cluster,
            "strategy": self.strategy,
            "mode": self.mode,
            "createdAt": self.created_at.isoformat(),
            "executedAt": self.executed_at.isoformat() if self.executed_at else None,
            "measuredAt": self.measured_at.isoformat(),
            "planSnapshot": self.plan_snapshot,
            "measuredSnapshot": self.measured_snapshot,
            "disturbed": self.disturbed,
            "disturbances": [note.to_json() for note in self.disturbances],
            "brokers": [broker.to_json() for broker in self.brokers],
        }


@dataclass(frozen=True, slots=True)
class OutcomeBounds:
    """The thresholds that classify a disturbance (the module's constants by default)."""

    traffic_change: float = TRAFFIC_CHANGE_BOUND
    min_msg_rate: float = MIN_CLUSTER_MSG_RATE
    min_throughput: float = MIN_CLUSTER_THROUGHPUT


def plan_weights(document: PlanDocument) -> ResourceWeights:
    """The score weights the plan was made with (its cluster view's), so measured scores compare with predicted
    ones; Pulsar's defaults for a plan made before plans recorded their configuration."""
    view = document.cluster_view
    if view is None:
        return PulsarConfig().resource_weights
    settings: dict[str, object] = {
        value.key: value.value for value in view.configuration if value.key.endswith("ResourceWeight")
    }
    if view.release:
        settings["pulsarVersion"] = view.release
    return PulsarConfig.from_settings(settings, source=f"plan of {document.cluster}: cluster view").resource_weights


def _split(total: float | None, forward: float, backward: float) -> tuple[float, float]:
    """`total` shared as `forward` and `backward` are in the snapshot (evenly when neither is known)."""
    if total is None:
        return forward, backward
    whole = forward + backward
    if whole <= 0:
        return total / 2, total / 2
    return total * forward / whole, total * backward / whole


def moved_traffic(action: PlannedAction, snapshot: SnapshotLoad | None) -> Traffic:
    """The traffic an unload moves as the plan predicted it (the action's msg/s and bytes/s, the short-term averages
    the forecast moved), shared between in and out as the bundle's rates were in the plan's snapshot."""
    rates = (snapshot.moved if snapshot is not None else {}).get(action.bundle, {})
    msg_in, msg_out = _split(action.msg_rate, rates.get("msgRateIn", 0.0), rates.get("msgRateOut", 0.0))
    bytes_in, bytes_out = _split(action.throughput, rates.get("throughputIn", 0.0), rates.get("throughputOut", 0.0))
    return Traffic(msg_in, msg_out, bytes_in, bytes_out)


def _final_status(attempts: Sequence[AttemptStatus]) -> AttemptStatus | None:
    return attempts[-1] if attempts else None


def plan_outcome(record: PlanRecord, measurement: Measurement, bounds: OutcomeBounds | None = None) -> PlanOutcome:
    """The outcome of an executed plan from its stored record and its measurement."""
    bounds = bounds or OutcomeBounds()
    document = PlanDocument.parse(record.document, f"plan {record.id}")
    weights = plan_weights(document)
    planned, measured = measurement.planned, measurement.measured
    moves = [
        action for action in document.actions if action.kind is ActionKind.UNLOAD and action.destination is not None
    ]
    moved_in: dict[str, Traffic] = {}
    moved_out: dict[str, Traffic] = {}
    for action in moves:
        traffic = moved_traffic(action, planned)
        destination = str(action.destination)
        moved_out[action.source] = moved_out.get(action.source, Traffic()).plus(traffic)
        moved_in[destination] = moved_in.get(destination, Traffic()).plus(traffic)
    brokers = tuple(
        _broker_outcome(forecast, planned, measured, weights, moved_in, moved_out) for forecast in document.brokers
    )
    finished = [attempt.finished_at for action in record.actions for attempt in action.attempts if attempt.finished_at]
    executed_at = as_utc(max(finished)) if finished else None
    notes = [
        *_traffic_notes(document.brokers, planned, measured, bounds),
        *_action_notes(record),
        *_model_notes(document.brokers, measured),
        *_restart_notes(planned, measured),
        *_partial_notes(planned, measured, executed_at),
    ]
    return PlanOutcome(
        plan_id=record.id,
        cluster=record.cluster,
        strategy=document.strategy,
        mode=document.mode,
        created_at=as_utc(record.created_at),
        executed_at=executed_at,
        measured_at=measurement.measured_at,
        plan_snapshot=record.snapshot_id,
        measured_snapshot=measurement.snapshot_id,
        brokers=brokers,
        disturbances=tuple(notes),
    )


def _broker_outcome(
    forecast: BrokerForecast,
    planned: SnapshotLoad | None,
    measured: SnapshotLoad,
    weights: ResourceWeights,
    moved_in: Mapping[str, Traffic],
    moved_out: Mapping[str, Traffic],
) -> BrokerOutcome:
    before = planned.brokers.get(forecast.broker) if planned is not None else None
    after = None if forecast.broker in measured.missing else measured.brokers.get(forecast.broker)
    usage_after = ResourceUsage.of(after) if after is not None else None
    score_after: float | None = None
    if after is not None:
        # Scored with the plan's weights, as the prediction was; a sample without its usages keeps its own score.
        score_after = usage_after.score(weights) if usage_after is not None else after.score
    return BrokerOutcome(
        broker=forecast.broker,
        score_before=forecast.score_before,
        score_predicted=forecast.score_after,
        score_measured=score_after,
        msg_rate_before=forecast.msg_rate_before,
        msg_rate_predicted=forecast.msg_rate_after,
        msg_rate_measured=after.msg_rate if after is not None else None,
        throughput_before=forecast.throughput_before,
        throughput_predicted=forecast.throughput_after,
        throughput_measured=after.throughput if after is not None else None,
        usage_before=ResourceUsage.of(before) if before is not None else None,
        usage_measured=usage_after,
        traffic_before=_traffic_of(before) if before is not None else None,
        traffic_measured=_traffic_of(after) if after is not None else None,
        moved_in=moved_in.get(forecast.broker, Traffic()),
        moved_out=moved_out.get(forecast.broker, Traffic()),
        model=forecast.model,
    )


def _relative_change(before: float, after: float, floor: float) -> float | None:
    """(after - before) / before, or None when both are under `floor` (too little traffic to tell)."""
    if max(before, after) < floor:
        return None
    return (after - before) / max(before, floor)


def _traffic_notes(
    forecasts: Sequence[BrokerForecast], planned: SnapshotLoad | None, measured: SnapshotLoad, bounds: OutcomeBounds
) -> list[DisturbanceNote]:
    """The cluster's traffic in the plan's snapshot against the measured one. Moves, and brokers that join or leave,
    redistribute the traffic without changing its total; a measurement missing brokers has no total to compare (it
    is a partial snapshot)."""
    if measured.missing:
        return []
    before = [(forecast.msg_rate_before, forecast.throughput_before) for forecast in forecasts]
    if planned is not None and not planned.missing:
        before = [(sample.msg_rate, sample.throughput) for sample in planned.brokers.values()]
    after = [(sample.msg_rate, sample.throughput) for sample in measured.brokers.values()]
    for index, (what, unit, floor) in enumerate(
        (("messages", "msg/s", bounds.min_msg_rate), ("bytes", "bytes/s", bounds.min_throughput))
    ):
        total_before = sum(rates[index] for rates in before)
        total_after = sum(rates[index] for rates in after)
        change = _relative_change(total_before, total_after, floor)
        if change is not None and abs(change) > bounds.traffic_change:
            # One line says the traffic changed: the bytes usually follow the messages.
            return [
                DisturbanceNote(
                    Disturbance.TRAFFIC_CHANGED,
                    f"the cluster's {what} went from {total_before:,.0f} to {total_after:,.0f} {unit} "
                    f"({change:+.0%}, more than {bounds.traffic_change:.0%}) between the plan's snapshot and the "
                    "measurement",
                )
            ]
    return []


def _action_notes(record: PlanRecord) -> list[DisturbanceNote]:
    """Unloads that took effect elsewhere than planned, and actions that did not take effect."""
    notes = []
    for action in record.actions:
        runs = action.runs
        final = _final_status([attempt.status for attempt in action.attempts])
        if final is AttemptStatus.PLACED_ELSEWHERE:
            error = action.attempts[-1].error or f"not on {runs.destination}"
            notes.append(DisturbanceNote(Disturbance.LANDED_ELSEWHERE, f"{runs.bundle}: {error}"))
        elif final not in APPLIED_ATTEMPT_STATUSES:
            what = final.value if final is not None else "not attempted"
            notes.append(DisturbanceNote(Disturbance.NOT_APPLIED, f"{runs.kind} of {runs.bundle}: {what}"))
    return notes


def _model_notes(forecasts: Sequence[BrokerForecast], measured: SnapshotLoad) -> list[DisturbanceNote]:
    """Brokers the prediction did not cover as it covers the others: joined since the plan or gone since; and those
    predicted with the snapshot-only model (no usable history), which explains a miss without disturbing it."""
    predicted = {forecast.broker for forecast in forecasts}
    joined = sorted(set(measured.brokers) - predicted)
    left = sorted(predicted - set(measured.brokers) - set(measured.missing))
    snapshot_only = sorted(forecast.broker for forecast in forecasts if forecast.model == SNAPSHOT)
    notes = []
    if joined:
        notes.append(DisturbanceNote(Disturbance.OUTSIDE_MODEL, f"joined after the plan: {', '.join(joined)}"))
    if left:
        notes.append(DisturbanceNote(Disturbance.OUTSIDE_MODEL, f"gone since the plan: {', '.join(left)}"))
    if snapshot_only:
        notes.append(
            DisturbanceNote(
                Disturbance.SNAPSHOT_MODEL,
                f"predicted with the snapshot-only model (no usable history): {', '.join(snapshot_only)}",
            )
        )
    return notes


def _restart_notes(planned: SnapshotLoad | None, measured: SnapshotLoad) -> list[DisturbanceNote]:
    """Brokers whose report says they started after the plan's snapshot: their caches, connections and JIT are cold,
    and their usage is not the model's."""
    restarted = []
    for broker, after in sorted(measured.brokers.items()):
        started = after.start_timestamp
        if not started:
            continue
        before = planned.brokers.get(broker) if planned is not None else None
        if before is not None and before.start_timestamp:
            if started > before.start_timestamp:
                restarted.append(broker)
        elif planned is not None and started > as_utc(planned.taken_at).timestamp() * 1000:
            restarted.append(broker)
    if not restarted:
        return []
    return [
        DisturbanceNote(Disturbance.BROKER_RESTARTED, f"restarted since the plan's snapshot: {', '.join(restarted)}")
    ]


def _partial_notes(
    planned: SnapshotLoad | None, measured: SnapshotLoad, executed_at: datetime | None
) -> list[DisturbanceNote]:
    """A measurement (or a plan's snapshot) missing brokers, or holding reports from before the moves."""
    notes = []
    if measured.missing:
        notes.append(
            DisturbanceNote(
                Disturbance.PARTIAL_SNAPSHOT,
                f"missing from the measurement, snapshot {measured.snapshot_id}: "
                + ", ".join(sorted(measured.missing)),
            )
        )
    if planned is not None and planned.missing:
        notes.append(
            DisturbanceNote(
                Disturbance.PARTIAL_SNAPSHOT,
                f"missing from the plan's snapshot {planned.snapshot_id}: {', '.join(sorted(planned.missing))}",
            )
        )
    if executed_at is not None:
        ended = executed_at.timestamp() * 1000
        stale = sorted(
            broker
            for broker, sample in measured.brokers.items()
            if sample.last_update is not None and sample.last_update < ended
        )
        if stale:
            notes.append(
                DisturbanceNote(
                    Disturbance.PARTIAL_SNAPSHOT,
                    f"reports from before the execution ended (the moves are not in them): {', '.join(stale)}",
                )
            )
    return notes
