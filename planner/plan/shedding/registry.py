"""The shedding strategies by name: the short name or the Java class name written in broker.conf.

Each entry says what sets its strategy apart: the releases that ship it, the placement deployments pair it with,
whether it is its own placement strategy too, whether it is this product's own or runs on the extensible load
manager. Adding a strategy is one module and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from planner.errors import InputError
from planner.plan.document import BrokerForecast, PairEvaluation
from planner.plan.placement.least_resource_usage_with_weight import LeastResourceUsageWithWeight
from planner.plan.placement.registry import DEFAULT_PLACEMENT
from planner.plan.placement.strategy import PlacementStrategy
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
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.model import ExtensibleLoadData, LoadData
from planner.pulsar.versions import PulsarVersion


@dataclass(frozen=True, slots=True)
class Releases:
    """The Pulsar releases that ship a strategy: each release listed and the later patches of its line, and every
    release from the last one listed on. Nothing listed: every release the planner models."""

    firsts: tuple[PulsarVersion, ...] = ()

    @classmethod
    def of(cls, *firsts: str) -> Releases:
        return cls(tuple(PulsarVersion.parse(first) for first in firsts))

    def include(self, version: PulsarVersion) -> bool:
        if not self.firsts or version >= self.firsts[-1]:
            return True
        return any(
            version >= first and (version.major, version.minor) == (first.major, first.minor) for first in self.firsts
        )

    def __str__(self) -> str:
        return ", ".join(str(first) for first in self.firsts) + " and later"


EVERY_RELEASE = Releases()

# What a strategy measured of the cluster (its config, the LoadData, the brokers' forecasts, its pairs, the brokers'
# score spread), in its own words, and whether that is within its thresholds.
Measured = Callable[
    [PulsarConfig, LoadData, Sequence[BrokerForecast], Sequence[PairEvaluation], float], tuple[str, bool]
]


@dataclass(frozen=True, slots=True)
class BalanceTerms:
    """How a strategy explains a run in the plan's balance report: its thresholds under Pulsar's key names, what it
    measured, and for a strategy that counts hits, the pairs over a threshold still waiting for theirs."""

    thresholds: Callable[[PulsarConfig], dict[str, float]]
    measured: Measured
    waiting: Callable[[Sequence[PairEvaluation], PulsarConfig], list[str]] | None = None


AVG_SHEDDER_TERMS = BalanceTerms(
    avg_shedder.balance_thresholds, avg_shedder.balance_measured, avg_shedder.waiting_pairs
)
# The overload threshold, which every modular shedder's broker also watches: the terms of a strategy without its own.
OVERLOAD_TERMS = BalanceTerms(overload_shedder.balance_thresholds, overload_shedder.balance_measured)


@dataclass(frozen=True, slots=True)
class SheddingStrategy:
    name: str
    java_class: str
    # ModularLoadManagerImpl's shedders return a SheddingOutcome, TransferShedder its TransferOutcome.
    find_bundles_for_unloading: Callable[..., SheddingOutcome[Any] | transfer_shedder.TransferOutcome]
    state_from_json: Callable[[Mapping[str, Any]], Any] | None = None
    # Offline planning modes of this product predict with the brokers' usage models; Pulsar's do not.
    uses_usage_models: bool = False
    # A strategy that plans its destinations with the cluster's policies takes them (`run`'s `policies`); the others'
    # unloads are checked and placed against them by the plan (`planner.plan.planning`).
    plans_with_policies: bool = False
    in_pulsar: bool = True
    # Which load manager runs it: ModularLoadManagerImpl's shedders take LoadData; the extensible load manager's
    # TransferShedder takes ExtensibleLoadData (`run_extensible`).
    extensible: bool = False
    releases: Releases = EVERY_RELEASE
    # The placement strategy deployments run it with (the simulator's in-broker policies, unless one names another).
    usual_placement: PlacementStrategy = DEFAULT_PLACEMENT
    # A strategy whose Java class is a placement strategy too (AvgShedder, PIP-364): when the placement names the
    # same class, Pulsar binds the two into one instance, whose placement side keeps what this returns of a shedding
    # run (the destinations it planned) and places there. A plan with it and no placement named takes that setup.
    placement_memory: Callable[[SheddingOutcome[Any]], object] | None = None
    balance: BalanceTerms = OVERLOAD_TERMS

    @property
    def binds_own_placement(self) -> bool:
        return self.placement_memory is not None

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
        self,
        load_data: LoadData,
        config: PulsarConfig,
        state: Any,
        usage_models: UsageModels | None = None,
        policies: ClusterPolicies | None = None,
    ) -> SheddingOutcome[Any]:
        if self.extensible:
            raise InputError(f"{self.name} runs on the extensible load manager: it takes ExtensibleLoadData")
        self.require_available(config)
        # Not extensible: its entry's function is one of ModularLoadManagerImpl's shedders.
        models = (usage_models,) if self.uses_usage_models else ()
        options = {"policies": policies} if self.plans_with_policies else {}
        return cast(SheddingOutcome[Any], self.find_bundles_for_unloading(load_data, config, state, *models, **options))

    def require_available(self, config: PulsarConfig) -> None:
        """Refuse a strategy the configured release does not ship, as its broker fails to start with it."""
        if not self.releases.include(config.pulsar_version):
            raise InputError(f"{self.name} does not exist in Pulsar {config.pulsar_version} ({self.releases})")

    def run_extensible(
        self,
        load_data: ExtensibleLoadData,
        config: PulsarConfig,
        state: Any,
        now_millis: int,
        transferable: transfer_shedder.Transferable | None = None,
    ) -> transfer_shedder.TransferOutcome:
        if not self.extensible:
            raise InputError(f"{self.name} runs on ModularLoadManagerImpl: it takes LoadData, not ExtensibleLoadData")
        return cast(
            transfer_shedder.TransferOutcome,
            self.find_bundles_for_unloading(load_data, config, state, now_millis, transferable),
        )


STRATEGIES: tuple[SheddingStrategy, ...] = (
    SheddingStrategy(
        avg_shedder.NAME,
        avg_shedder.JAVA_CLASS,
        avg_shedder.find_bundles_for_unloading,
        avg_shedder.AvgShedderState.from_json,
        releases=Releases.of("3.0.6", "3.2.4", "3.3.1"),  # and every 4.x
        usual_placement=avg_shedder.AvgShedderPlacement(),
        placement_memory=avg_shedder.placement_state_after_shedding,
        balance=AVG_SHEDDER_TERMS,
    ),
    SheddingStrategy(
        uniform_load_shedder.NAME,
        uniform_load_shedder.JAVA_CLASS,
        uniform_load_shedder.find_bundles_for_unloading,
        balance=BalanceTerms(uniform_load_shedder.balance_thresholds, uniform_load_shedder.balance_measured),
    ),
    SheddingStrategy(
        threshold_shedder.NAME,
        threshold_shedder.JAVA_CLASS,
        threshold_shedder.find_bundles_for_unloading,
        threshold_shedder.ThresholdShedderState.from_json,
        usual_placement=LeastResourceUsageWithWeight(),
        balance=BalanceTerms(threshold_shedder.balance_thresholds, threshold_shedder.balance_measured),
    ),
    SheddingStrategy(overload_shedder.NAME, overload_shedder.JAVA_CLASS, overload_shedder.find_bundles_for_unloading),
    SheddingStrategy(
        avg_shedder_predictive.NAME,
        avg_shedder_predictive.JAVA_CLASS,
        avg_shedder_predictive.find_bundles_for_unloading,
        avg_shedder_predictive.PredictiveState.from_json,
        uses_usage_models=True,
        plans_with_policies=True,
        in_pulsar=False,
        balance=AVG_SHEDDER_TERMS,
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
