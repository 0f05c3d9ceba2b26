"""What executed plans teach the usage model: per broker, kind of fit and resource, a scale on its traffic costs.

A plan's forecast (`planner.plan.forecast`) anchors each broker at its measured usage and adds the moved
traffic's cost from the broker's usage model (`planner.plan.usage_model`). The background cancels out of
that prediction, so what an executed plan can correct is the cost: a broker given the cluster-wide fit
while its hardware is faster or slower than the pool, or a broker whose cost drifted since the history
its fit covers. Per broker, kind of fit and resource this module fits one factor `scale` such that

    measured usage change ≈ scale * (the model's cost of the measured traffic change)

over the executed plans' before/after measurements. Taking the measured traffic change (the moved traffic
plus what changed on its own) rather than the predicted one is the correction for traffic that changed
by itself: the model costs it too, and only the cost per msg/s and per byte/s is judged.

The fit is least squares through the origin with a prior of `prior_plans` observations of a
`REFERENCE_CHANGE`-point change at scale 1 (ridge towards 1): a broker seen in few plans, or only in plans
that moved little on it, keeps a scale near 1; an exact model gets exactly 1 back. Recent plans weigh more
(`half_life` plans), so a broker whose cost drifted is followed. The scale is bounded to
[`MIN_SCALE`, `MAX_SCALE`]: a wild factor is a measurement problem, not hardware.

A scale belongs to the kind of fit it was learnt on (the broker's own, the cluster-wide one, the one-snapshot
estimate) and applies only to a fit of that kind: a broker whose own fit comes and goes as its history's R²
crosses the bound is predicted with each kind's own scale, learnt from the plans predicted with that kind.
The one-snapshot estimate charges the background to the traffic (no history to tell them apart), so it is
the fit calibration corrects most.

Disturbed plans teach nothing: a plan whose outcome says a broker restarted, a snapshot was partial,
traffic changed past the bound or a bundle landed elsewhere is skipped, and the calibration says how many
it skipped and why.

Pure and deterministic: the simulator and the plan run compute it with this module, and the same
observations always give the same calibration and version.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planner.plan.usage_model import RESOURCES, ResourceFit, Traffic, UsageModels, resolved_models

if TYPE_CHECKING:
    from planner.pulsar.model import LoadData

# The prior: as many observations at scale 1 as `prior_plans` plans that each changed a broker's usage by
# this many points. A plan moving 5 points onto a broker is a usual rebalancing move.
REFERENCE_CHANGE = 5.0
PRIOR_PLANS = 2.0
HALF_LIFE_PLANS = 5.0
MIN_SCALE = 0.25
MAX_SCALE = 4.0
# Scales this close to 1 are written as 1: they change no prediction by a visible amount.
_ROUND = 4

# Why a plan or a broker's measurement was not learnt from (the counts `Calibration.skipped` keeps).
NO_MODEL = "broker without a model"
NO_MEASUREMENT = "broker not measured after the plan"


@dataclass(frozen=True, slots=True)
class BrokerObservation:
    """One broker around one executed plan: its usage percent per resource and its traffic, before the plan
    and as measured once the moves settled."""

    broker: str
    usage_before: Mapping[str, float]
    usage_after: Mapping[str, float]
    traffic_before: Traffic
    traffic_after: Traffic


@dataclass(frozen=True, slots=True)
class PlanObservation:
    """An executed plan's outcome as calibration reads it.

    `models` is the usage model the plan's forecast was made with, before any calibration (what the plan
    document carries, with each broker the plan saw resolved as the forecast resolved it): the scale learnt is
    relative to those costs. `disturbances` are the reasons the outcome is not a clean measurement of the plan
    (none: learn from it).
    """

    plan: str
    models: UsageModels
    brokers: tuple[BrokerObservation, ...]
    disturbances: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per broker, kind of fit (broker, cluster or snapshot) and resource, the factor on that fit's costs; a
    broker, kind or resource absent keeps scale 1.

    `plans` are the plans learnt from (oldest first), `skipped` the disturbed plans and the brokers' measurements
    not learnt from, by reason; `evidence` per broker, kind and resource what the scale rests on (the weighted sum
    of squared modelled changes, points²), not part of its identity.
    """

    scales: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)
    plans: tuple[str, ...] = ()
    skipped: Mapping[str, int] = field(default_factory=dict)
    evidence: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict, compare=False)

    @property
    def version(self) -> str:
        """A content hash of the scales and the plans they came from: the same calibration, the same version."""
        content = json.dumps(self._content(), sort_keys=True)
        return "cal-" + hashlib.sha256(content.encode()).hexdigest()[:12]

    @property
    def identity(self) -> bool:
        """True when applying it changes nothing."""
        return all(scale == 1.0 for kinds in self.scales.values() for fits in kinds.values() for scale in fits.values())

    def scale(self, broker: str, resource: str, kind: str | None = None) -> float:
        """The factor on `broker`'s `kind` of fit for `resource`; without a kind, that of the kind most learnt."""
        kinds = self.scales.get(broker, {})
        if kind is None:
            evidence = self.evidence.get(broker, {})
            learnt = sorted(kinds, key=lambda each: -evidence.get(each, {}).get(resource, 0.0))
            kind = next((each for each in learnt if resource in kinds[each]), None)
        return kinds.get(kind, {}).get(resource, 1.0) if kind is not None else 1.0

    def apply(self, models: UsageModels, load_data: LoadData | None = None) -> UsageModels:
        """The models with each broker's costs scaled by the scale of its fit's kind; backgrounds and the
        cluster-wide fit itself unchanged.

        Given the snapshot the plan is made on, every broker of it is resolved first (a broker without a fit gets
        the one-snapshot estimate, as the forecast would give it), so that estimate is calibrated too. A broker
        predicted with a shared fit gets its own scaled copy of it, so the scale stays its own.
        """
        resolved = resolved_models(load_data, models) if load_data is not None else None
        brokers: dict[str, Mapping[str, ResourceFit]] = dict(resolved if resolved is not None else models.brokers)
        for broker, kinds in self.scales.items():
            if resolved is not None and broker not in resolved:
                continue
            fits = dict(brokers.get(broker, {}))
            for resource in RESOURCES:
                fit = fits.get(resource) or models.fit(broker, resource)
                scale = kinds.get(fit.source, {}).get(resource, 1.0) if fit is not None else 1.0
                if fit is not None and scale != 1.0:
                    fits[resource] = replace(fit, per_msg=fit.per_msg * scale, per_byte=fit.per_byte * scale)
            if fits:
                brokers[broker] = fits
        return UsageModels(brokers=brokers, cluster=models.cluster)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, **self._content(), "skipped": dict(sorted(self.skipped.items()))}

    def _content(self) -> dict[str, Any]:
        return {
            "scales": {
                broker: {kind: dict(sorted(fits.items())) for kind, fits in sorted(kinds.items())}
                for broker, kinds in sorted(self.scales.items())
            },
            "plans": list(self.plans),
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Calibration:
        return cls(
            scales={
                str(broker): {
                    str(kind): {str(resource): float(scale) for resource, scale in fits.items()}
                    for kind, fits in kinds.items()
                }
                for broker, kinds in document.get("scales", {}).items()
            },
            plans=tuple(str(plan) for plan in document.get("plans", ())),
            skipped={str(reason): int(count) for reason, count in document.get("skipped", {}).items()},
        )


NO_CALIBRATION = Calibration()


def calibrate(
    observations: Sequence[PlanObservation],
    *,
    half_life: float = HALF_LIFE_PLANS,
    prior_plans: float = PRIOR_PLANS,
    min_scale: float = MIN_SCALE,
    max_scale: float = MAX_SCALE,
) -> Calibration:
    """The calibration learnt from `observations`, oldest first (the caller's window: the last plans it keeps).

    The newest plan has weight 1, each older one `0.5 ** (1 / half_life)` of the next.
    """
    if half_life <= 0 or prior_plans < 0 or not 0 < min_scale <= 1 <= max_scale:
        raise ValueError("calibrate: half_life > 0, prior_plans >= 0 and min_scale <= 1 <= max_scale")
    decay = 0.5 ** (1.0 / half_life)
    prior = prior_plans * REFERENCE_CHANGE**2
    cross: dict[tuple[str, str, str], float] = {}
    square: dict[tuple[str, str, str], float] = {}
    skipped: dict[str, int] = {}
    learnt: list[str] = []
    for age, observation in enumerate(reversed(observations)):
        if observation.disturbances:
            for reason in sorted(set(observation.disturbances)):
                skipped[reason] = skipped.get(reason, 0) + 1
            continue
        weight = decay**age
        used = False
        for measured in observation.brokers:
            reasons = set()
            for resource in RESOURCES:
                pair = _pair(observation.models, measured, resource)
                if isinstance(pair, str):
                    reasons.add(pair)
                    continue
                kind, modelled, actual = pair
                key = (measured.broker, kind, resource)
                cross[key] = cross.get(key, 0.0) + weight * modelled * actual
                square[key] = square.get(key, 0.0) + weight * modelled * modelled
                used = True
            for reason in reasons:  # one count per broker measurement, whatever the resources
                skipped[reason] = skipped.get(reason, 0) + 1
        if used:
            learnt.append(observation.plan)
    scales: dict[str, dict[str, dict[str, float]]] = {}
    evidence: dict[str, dict[str, dict[str, float]]] = {}
    for (broker, kind, resource), information in sorted(square.items()):
        scale = (cross[(broker, kind, resource)] + prior) / (information + prior) if information + prior > 0 else 1.0
        scales.setdefault(broker, {}).setdefault(kind, {})[resource] = round(
            min(max_scale, max(min_scale, scale)), _ROUND
        )
        evidence.setdefault(broker, {}).setdefault(kind, {})[resource] = information
    return Calibration(scales=scales, plans=tuple(reversed(learnt)), skipped=skipped, evidence=evidence)


def _pair(models: UsageModels, measured: BrokerObservation, resource: str) -> tuple[str, float, float] | str:
    """(the kind of fit, the model's cost of the measured traffic change, the measured usage change), or why
    there is none."""
    fit = models.fit(measured.broker, resource)
    if fit is None:
        return NO_MODEL
    before, after = measured.usage_before.get(resource), measured.usage_after.get(resource)
    if before is None or after is None or not (math.isfinite(before) and math.isfinite(after)):
        return NO_MEASUREMENT
    modelled = fit.cost(measured.traffic_after, resource) - fit.cost(measured.traffic_before, resource)
    return fit.source, modelled, after - before


def model_version(models: UsageModels | None) -> str | None:
    """A content hash of fitted usage models: which fit a plan predicted with (None: no fitted history)."""
    if models is None:
        return None
    content = json.dumps(models.to_json(), sort_keys=True)
    return "fit-" + hashlib.sha256(content.encode()).hexdigest()[:12]


def skipped_text(calibration: Calibration) -> str:
    """`3 plans (2 restart, 1 traffic changed)`-style summary of what was not learnt from."""
    if not calibration.skipped:
        return "none skipped"
    return ", ".join(f"{count} {reason}" for reason, count in sorted(calibration.skipped.items()))


def observed_brokers(
    usage_before: Mapping[str, Mapping[str, float]],
    usage_after: Mapping[str, Mapping[str, float]],
    traffic_before: Mapping[str, Traffic],
    traffic_after: Mapping[str, Traffic],
) -> Iterable[BrokerObservation]:
    """The brokers measured both before and after, in broker order (one absent afterwards: not measured)."""
    for broker in sorted(usage_before):
        if broker in usage_after and broker in traffic_before and broker in traffic_after:
            yield BrokerObservation(
                broker, usage_before[broker], usage_after[broker], traffic_before[broker], traffic_after[broker]
            )
