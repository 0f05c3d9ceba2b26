"""What a placement strategy is (Pulsar's `ModularLoadManagerStrategy`, `loadBalancerLoadPlacementStrategy`), and
the placement memory of one plan or one leader (`PlacementSession`) its picks read and keep.

Each strategy is one module implementing `PlacementStrategy`, listed once in `planner.plan.placement.registry`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from planner.plan.placement.round_robin_broker_selector import RoundRobinState
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import BundleData, LoadData

Memory = TypeVar("Memory")


@dataclass
class PlacementSession:
    """Placement state across the moves of one plan: the bundles already assigned, the round-robin selector's
    counter, and each strategy's own memory (one per type: a strategy keeps its memory in a type of its own)."""

    rng: random.Random
    preallocated: dict[str, list[tuple[str, BundleData]]] = field(default_factory=dict)
    round_robin: RoundRobinState = field(default_factory=RoundRobinState)
    memories: dict[type, object] = field(default_factory=dict)

    def record(self, broker: str, bundle: str, data: BundleData) -> None:
        self.preallocated.setdefault(broker, []).append((bundle, data))

    def memory(self, kind: type[Memory]) -> Memory:
        """The strategy memory of type `kind` so far: a fresh one before the strategy's first pick."""
        kept = self.memories.get(kind)
        return kept if isinstance(kept, kind) else kind()

    def remember(self, memory: object) -> None:
        self.memories[type(memory)] = memory

    def forget(self, kind: type) -> None:
        self.memories.pop(kind, None)


class PlacementStrategy(Protocol):
    @property
    def name(self) -> str:
        """The class name without its package, as the planner names it (LeastLongTermMessageRate)."""
        ...

    @property
    def java_class(self) -> str:
        """The class `loadBalancerLoadPlacementStrategy` names in broker.conf."""
        ...

    @property
    def bound_shedder(self) -> str | None:
        """The shedding strategy this class is the placement side of (one Java instance sheds and places: AvgShedder,
        PIP-364): it places only that strategy's unloads, at the destinations it planned. None: it places any."""
        ...

    def select(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        config: PulsarConfig,
        session: PlacementSession,
    ) -> str | None:
        """The candidate it picks for `bundle` (None with no candidate), keeping its memory in `session`."""
        ...
