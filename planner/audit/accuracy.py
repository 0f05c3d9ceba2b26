"""How right the previews are: prediction errors per broker, per plan and per cluster over a window.

Pure: the outcomes come in (`planner.plan.outcome`, read by `planner.audit.outcomes`), figures go out.

- A broker's error is measured minus predicted (score points, msg/s, bytes/s): positive when it ended busier than
  the preview said.
- A plan's error is its largest absolute broker score error (the broker an approver would have been wrong about),
  with the mean absolute error and the bias (the mean signed error) beside it.
- A cluster's distribution is over its plans measured in a window: p50, p90 and max of the plans' errors, the mean
  bias, and a trend (the recent half's p90 against the older half's, and the least-squares slope per week). The
  undisturbed plans' distribution is the model's accuracy, the one the alert watches; every plan's is shown beside
  it, with the plans that missed most and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from planner.plan.outcome import Disturbance, DisturbanceNote, PlanOutcome

# A trend needs this many undisturbed plans (two per half): fewer say nothing about a direction.
MIN_PLANS_FOR_TREND = 4
# The p90 of fewer undisturbed plans than this is one or two plans' error: the alert waits for more.
MIN_PLANS_FOR_ALERT = 3
# A change of the p90 between the halves smaller than this (score points) is steady.
STEADY_CHANGE = 1.0
MISSES_SHOWN = 5
WEEK = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class BrokerError:
    broker: str
    score: float  # measured minus predicted, points
    msg_rate: float
    throughput: float
    score_predicted: float
    score_measured: float

    def to_json(self) -> dict[str, object]:
        return {
            "broker": self.broker,
            "scorePredicted": round(self.score_predicted, 3),
            "scoreMeasured": round(self.score_measured, 3),
            "scoreError": round(self.score, 3),
            "msgRateError": round(self.msg_rate, 3),
            "throughputError": round(self.throughput, 3),
        }


@dataclass(frozen=True, slots=True)
class PlanError:
    """One measured plan's errors and what disturbed it."""

    plan_id: int
    strategy: str
    mode: str
    measured_at: datetime
    score: float  # the largest absolute broker score error
    mean_score: float  # mean absolute broker score error
    bias: float  # mean signed broker score error
    msg_rate: float  # the largest absolute broker msg/s error
    throughput: float  # the largest absolute broker bytes/s error
    brokers: tuple[BrokerError, ...]
    disturbances: tuple[DisturbanceNote, ...]

    @property
    def disturbed(self) -> bool:
        return any(note.reason.disturbs for note in self.disturbances)

    def to_json(self) -> dict[str, object]:
        return {
            "plan": self.plan_id,
            "strategy": self.strategy,
            "mode": self.mode,
            "measuredAt": self.measured_at.isoformat(),
            "scoreError": round(self.score, 3),
            "meanScoreError": round(self.mean_score, 3),
            "bias": round(self.bias, 3),
            "msgRateError": round(self.msg_rate, 3),
            "throughputError": round(self.throughput, 3),
            "disturbed": self.disturbed,
            "disturbances": [note.to_json() for note in self.disturbances],
            "brokers": [broker.to_json() for broker in self.brokers],
        }


def broker_errors(outcome: PlanOutcome) -> tuple[BrokerError, ...]:
    """The measured brokers' errors (a broker missing from the measurement has none)."""
    errors = []
    for broker in outcome.brokers:
        if broker.score_measured is None:
            continue
        errors.append(
            BrokerError(
                broker.broker,
                broker.score_error or 0.0,
                broker.msg_rate_error or 0.0,
                broker.throughput_error or 0.0,
                broker.score_predicted,
                broker.score_measured,
            )
        )
    return tuple(errors)


def plan_error(outcome: PlanOutcome) -> PlanError | None:
    """The plan's errors; None when no broker was measured."""
    brokers = broker_errors(outcome)
    if not brokers:
        return None
    scores = [broker.score for broker in brokers]
    return PlanError(
        plan_id=outcome.plan_id,
        strategy=outcome.strategy,
        mode=outcome.mode,
        measured_at=outcome.measured_at,
        score=max(abs(score) for score in scores),
        mean_score=sum(abs(score) for score in scores) / len(scores),
        bias=sum(scores) / len(scores),
        msg_rate=max(abs(broker.msg_rate) for broker in brokers),
        throughput=max(abs(broker.throughput) for broker in brokers),
        brokers=brokers,
        disturbances=outcome.disturbances,
    )


def percentile(values: Sequence[float], fraction: float) -> float:
    """The `fraction` quantile with linear interpolation between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


@dataclass(frozen=True, slots=True)
class Distribution:
    """The plans' errors (score points): how many, p50, p90, max, and the mean bias. None without plans."""

    count: int
    p50: float | None
    p90: float | None
    max: float | None
    bias: float | None

    @classmethod
    def of(cls, plans: Sequence[PlanError]) -> Distribution:
        if not plans:
            return cls(0, None, None, None, None)
        errors = [plan.score for plan in plans]
        return cls(
            len(plans),
            percentile(errors, 0.5),
            percentile(errors, 0.9),
            max(errors),
            sum(plan.bias for plan in plans) / len(plans),
        )

    def to_json(self) -> dict[str, object]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {
            "count": self.count,
            "p50": rounded(self.p50),
            "p90": rounded(self.p90),
            "max": rounded(self.max),
            "bias": rounded(self.bias),
        }


class Direction(StrEnum):
    IMPROVING = "improving"
    WORSENING = "worsening"
    STEADY = "steady"
    UNKNOWN = "unknown"  # too few plans


@dataclass(frozen=True, slots=True)
class Trend:
    """The recent half's p90 against the older half's, and the error's least-squares slope (points per week)."""

    older_p90: float | None
    recent_p90: float | None
    slope_per_week: float | None
    direction: Direction

    def to_json(self) -> dict[str, object]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {
            "olderP90": rounded(self.older_p90),
            "recentP90": rounded(self.recent_p90),
            "slopePerWeek": rounded(self.slope_per_week),
            "direction": self.direction.value,
        }


def trend(plans: Sequence[PlanError]) -> Trend:
    """Of plans in the order they were measured."""
    if len(plans) < MIN_PLANS_FOR_TREND:
        return Trend(None, None, None, Direction.UNKNOWN)
    ordered = sorted(plans, key=lambda plan: plan.measured_at)
    half = len(ordered) // 2
    older = percentile([plan.score for plan in ordered[:half]], 0.9)
    recent = percentile([plan.score for plan in ordered[half:]], 0.9)
    start = ordered[0].measured_at
    weeks = [(plan.measured_at - start) / WEEK for plan in ordered]
    errors = [plan.score for plan in ordered]
    mean_weeks, mean_error = sum(weeks) / len(weeks), sum(errors) / len(errors)
    spread = sum((week - mean_weeks) ** 2 for week in weeks)
    slope = (
        sum((week - mean_weeks) * (error - mean_error) for week, error in zip(weeks, errors, strict=True)) / spread
        if spread > 0
        else None
    )
    change = recent - older
    direction = Direction.STEADY
    if change <= -STEADY_CHANGE:
        direction = Direction.IMPROVING
    elif change >= STEADY_CHANGE:
        direction = Direction.WORSENING
    return Trend(older, recent, slope, direction)


@dataclass(frozen=True, slots=True)
class ClusterAccuracy:
    """A cluster's prediction accuracy over its plans measured in a window."""

    cluster: str
    since: datetime
    until: datetime
    plans: tuple[PlanError, ...]  # in the order they were measured
    undisturbed: Distribution  # the model's accuracy: what the alert watches
    overall: Distribution  # every measured plan, disturbed ones included
    trend: Trend  # of the undisturbed plans
    misses: tuple[PlanError, ...]  # the plans that missed most, largest error first
    reasons: dict[Disturbance, int]  # how many plans each reason disturbed

    def to_json(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "undisturbed": self.undisturbed.to_json(),
            "all": self.overall.to_json(),
            "trend": self.trend.to_json(),
            "reasons": {reason.value: count for reason, count in sorted(self.reasons.items())},
            "misses": [
                {
                    "plan": plan.plan_id,
                    "measuredAt": plan.measured_at.isoformat(),
                    "scoreError": round(plan.score, 3),
                    "disturbances": [note.to_json() for note in plan.disturbances],
                }
                for plan in self.misses
            ],
            "plans": [
                {
                    "plan": plan.plan_id,
                    "strategy": plan.strategy,
                    "mode": plan.mode,
                    "measuredAt": plan.measured_at.isoformat(),
                    "scoreError": round(plan.score, 3),
                    "meanScoreError": round(plan.mean_score, 3),
                    "bias": round(plan.bias, 3),
                    "msgRateError": round(plan.msg_rate, 3),
                    "disturbed": plan.disturbed,
                    "reasons": list(dict.fromkeys(note.reason.value for note in plan.disturbances)),
                }
                for plan in self.plans
            ],
        }


def cluster_accuracy(
    cluster: str, outcomes: Sequence[PlanOutcome], since: datetime, until: datetime, misses: int = MISSES_SHOWN
) -> ClusterAccuracy:
    """The cluster's figures from its outcomes measured in [since, until] (others are left out)."""
    errors = [
        error
        for outcome in sorted(outcomes, key=lambda outcome: outcome.measured_at)
        if since <= outcome.measured_at <= until and (error := plan_error(outcome)) is not None
    ]
    undisturbed = [plan for plan in errors if not plan.disturbed]
    reasons: Counter[Disturbance] = Counter()
    for plan in errors:
        reasons.update(set(note.reason for note in plan.disturbances))
    return ClusterAccuracy(
        cluster=cluster,
        since=since,
        until=until,
        plans=tuple(errors),
        undisturbed=Distribution.of(undisturbed),
        overall=Distribution.of(errors),
        trend=trend(undisturbed),
        misses=tuple(sorted(errors, key=lambda plan: (-plan.score, plan.plan_id))[:misses]),
        reasons=dict(reasons),
    )


# --- the alert --------------------------------------------------------------------------------------------------


class AlertState(StrEnum):
    WITHIN = "within"
    OUTSIDE = "outside"


@dataclass(frozen=True, slots=True)
class AccuracyBound:
    """The p90 error the cluster should keep within (score points), over a window of measured plans."""

    p90: float
    window: timedelta
    min_plans: int = MIN_PLANS_FOR_ALERT


@dataclass(frozen=True, slots=True)
class AccuracyAlert:
    """A crossing of the bound: the p90 left it (OUTSIDE) or came back within it (WITHIN)."""

    cluster: str
    state: AlertState
    p90: float
    bound: float
    plans: int

    @property
    def text(self) -> str:
        if self.state is AlertState.OUTSIDE:
            return (
                f"{self.cluster}: the p90 prediction error is {self.p90:.1f} score points over {self.plans} "
                f"undisturbed plans, above the bound of {self.bound:g}: the previews are not to be trusted as they are"
            )
        return (
            f"{self.cluster}: the p90 prediction error is back within the bound of {self.bound:g} score points "
            f"({self.p90:.1f} over {self.plans} undisturbed plans)"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "state": self.state.value,
            "p90": round(self.p90, 3),
            "bound": self.bound,
            "plans": self.plans,
            "text": self.text,
        }


def bound_state(accuracy: ClusterAccuracy, bound: AccuracyBound) -> AlertState | None:
    """Where the undisturbed p90 is against the bound; None with too few plans to say."""
    figures = accuracy.undisturbed
    if figures.p90 is None or figures.count < bound.min_plans:
        return None
    return AlertState.OUTSIDE if figures.p90 > bound.p90 else AlertState.WITHIN


def crossing(previous: AlertState | None, accuracy: ClusterAccuracy, bound: AccuracyBound) -> AccuracyAlert | None:
    """The alert to send when the state changed since `previous` (None: never judged, taken as within): once per
    crossing, not on every measurement."""
    state = bound_state(accuracy, bound)
    if state is None or state is (previous or AlertState.WITHIN):
        return None
    p90 = accuracy.undisturbed.p90
    assert p90 is not None  # bound_state judged it
    return AccuracyAlert(accuracy.cluster, state, p90, bound.p90, accuracy.undisturbed.count)
