"""The shedding strategies by name: the short name or the Java class name written in broker.conf."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.errors import InputError
from planner.plan.shedding import (
    avg_shedder,
    avg_shedder_predictive,
    overload_shedder,
    threshold_shedder,
    transfer_shedder,
    uniform_load_shedder,
)
from planner.plan.shedding.outcome import SheddingOutcome
from planner.plan.usage_model import UsageModels
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import ExtensibleLoadData, LoadData


@dataclass(frozen=True, slots=True)
class SheddingStrategy:
    name: str
    java_class: str
    find_bundles_for_unloading: Callable[..., SheddingOutcome[Any]]
    state_from_json: Callable[[Mapping[str, Any]], Any] | None = None
    # Offline planning modes of this product predict with the brokers' usage models; Pulsar's do not.
    uses_usage_models: bool = False
    in_pulsar: bool = True
    # Which load manager runs it: ModularLoadManagerImpl's shedders take LoadData; the extensible load manager's
    # TransferShedder takes ExtensibleLoadData (`run_extensible`).
    extensible: bool = False

    def initial_state(self) -> Any:
        return self.state_from_json({}) if self.state_from_json else None

    def load_state(self, document: Mapping[str, Any] | None) -> Any:
        """A stored state, checked to belong to this strategy; None gives the initial state."""
        if not document:
            return self.initial_state()
        if not isinstance(document, Mapping):
            raise InputError(f"invalid {self.name} state: expected a JSON object")
        stored_for = document.get("strategy", self.name)
        if stored_for != self.name:
            raise InputError(f"invalid {self.name} state: field strategy is {stored_for!r}, not {self.name!r}")
        return self.state_from_json(document) if self.state_from_json else None

    def dump_state(self, state: Any) -> dict[str, Any]:
        return state.to_json() if state is not None else {"strategy": self.name}

    def run(
        self, load_data: LoadData, config: PulsarConfig, state: Any, usage_models: UsageModels | None = None
    ) -> SheddingOutcome[Any]:
        if self.extensible:
            raise InputError(f"{self.name} runs on the extensible load manager: it takes ExtensibleLoadData")
        self.require_available(config)
        if self.uses_usage_models:
            return self.find_bundles_for_unloading(load_data, config, state, usage_models)
        return self.find_bundles_for_unloading(load_data, config, state)

    def require_available(self, config: PulsarConfig) -> None:
        """Refuse a strategy the configured release does not ship, as its broker fails to start with it."""
        if self.name == avg_shedder.NAME and not config.pulsar_version.has_avg_shedder:
            raise InputError(f"AvgShedder does not exist in Pulsar {config.pulsar_version} (3.0.6, 3.2.4, 3.3.1, 4.x)")

    def run_extensible(
        self, load_data: ExtensibleLoadData, config: PulsarConfig, state: Any, now_millis: int
    ) -> transfer_shedder.TransferOutcome:
        if not self.extensible:
            raise InputError(f"{self.name} runs on ModularLoadManagerImpl: it takes LoadData, not ExtensibleLoadData")
        return transfer_shedder.find_bundles_for_unloading(load_data, config, state, now_millis)


STRATEGIES: tuple[SheddingStrategy, ...] = (
    SheddingStrategy(
        avg_shedder.NAME,
        avg_shedder.JAVA_CLASS,
        avg_shedder.find_bundles_for_unloading,
        avg_shedder.AvgShedderState.from_json,
    ),
    SheddingStrategy(
        uniform_load_shedder.NAME, uniform_load_shedder.JAVA_CLASS, uniform_load_shedder.find_bundles_for_unloading
    ),
    SheddingStrategy(
        threshold_shedder.NAME,
        threshold_shedder.JAVA_CLASS,
        threshold_shedder.find_bundles_for_unloading,
        threshold_shedder.ThresholdShedderState.from_json,
    ),
    SheddingStrategy(overload_shedder.NAME, overload_shedder.JAVA_CLASS, overload_shedder.find_bundles_for_unloading),
    SheddingStrategy(
        avg_shedder_predictive.NAME,
        avg_shedder_predictive.JAVA_CLASS,
        avg_shedder_predictive.find_bundles_for_unloading,
        avg_shedder_predictive.PredictiveState.from_json,
        uses_usage_models=True,
        in_pulsar=False,
    ),
    SheddingStrategy(
        transfer_shedder.NAME,
        transfer_shedder.JAVA_CLASS,
        transfer_shedder.find_bundles_for_unloading,
        transfer_shedder.TransferShedderState.from_json,
        extensible=True,
    ),
)

# The strategies of ModularLoadManagerImpl, which take LoadData.
MODULAR_STRATEGIES = tuple(strategy for strategy in STRATEGIES if not strategy.extensible)


def shedding_strategy(name: str) -> SheddingStrategy:
    """Look a strategy up by short name or Java class name."""
    for strategy in STRATEGIES:
        if name in (strategy.name, strategy.java_class):
            return strategy
    known = ", ".join(strategy.name for strategy in STRATEGIES)
    raise InputError(f"unknown strategy {name!r}: expected one of {known} or their Java class names")
