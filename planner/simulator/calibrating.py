"""Calibration in the offline loop: the executed plans' outcomes feed the next plan's usage models.

As the plan run does against the store (`planner.plan.calibration`): each executed plan that moved bundles
is measured the minute after (every broker's usage and traffic before the plan and then), skipped when
brokers started or stopped in between, and the calibration learnt from the last `window` plans scales the
costs of the models the next plan fits. Off, the loop records nothing and the models pass unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.plan.calibration import (
    NO_CALIBRATION,
    Calibration,
    PlanObservation,
    calibrate,
    observed_brokers,
)
from planner.plan.usage_model import Traffic, UsageModels
from planner.pulsar.model import LoadData

DEFAULT_WINDOW = 20  # plans, as the plan run's default (`planner.settings`)
BROKERS_CHANGED = "brokers started or stopped"


@dataclass(frozen=True, slots=True)
class BrokerState:
    """A broker's reported usage percent per resource and its traffic, at one minute."""

    usage: Mapping[str, float]
    traffic: Traffic


@dataclass(frozen=True, slots=True)
class _Pending:
    minute: int
    models: UsageModels  # as fitted, before calibration, resolved for every broker the plan saw
    before: Mapping[str, BrokerState]


class CalibrationLoop:
    """What one simulated run learns from its own executed plans."""

    def __init__(self, enabled: bool, window: int = DEFAULT_WINDOW) -> None:
        self.enabled = enabled
        self.window = window
        self.calibration: Calibration = NO_CALIBRATION
        self._observations: list[PlanObservation] = []
        self._pending: _Pending | None = None

    def models(self, fitted: UsageModels, snapshot: LoadData) -> UsageModels:
        """The models the next plan, made on `snapshot`, predicts with."""
        return self.calibration.apply(fitted, snapshot) if self.enabled else fitted

    def executed(self, minute: int, models: UsageModels, before: Mapping[str, BrokerState]) -> None:
        """A plan executed at `minute` with moves; `models` are its fitted (uncalibrated) models per broker."""
        if self.enabled:
            self._pending = _Pending(minute, models, before)

    def measured(self, minute: int, after: Mapping[str, BrokerState], brokers_changed: bool) -> None:
        """The minute after a plan: its outcome becomes an observation and the calibration is learnt again."""
        pending = self._pending
        if pending is None or minute != pending.minute + 1:
            return
        self._pending = None
        brokers = tuple(
            observed_brokers(
                {broker: state.usage for broker, state in pending.before.items()},
                {broker: state.usage for broker, state in after.items()},
                {broker: state.traffic for broker, state in pending.before.items()},
                {broker: state.traffic for broker, state in after.items()},
            )
        )
        disturbances = (BROKERS_CHANGED,) if brokers_changed else ()
        self._observations.append(PlanObservation(f"minute-{pending.minute}", pending.models, brokers, disturbances))
        del self._observations[: -self.window]
        self.calibration = calibrate(self._observations)
