"""What a split algorithm is (Pulsar's `NamespaceBundleSplitAlgorithm`): where it cuts a bundle, what a plan can
say of that ahead of the broker, and whether Pulsar checks the positions it returns.

Each algorithm is one module implementing `SplitAlgorithm`, listed once in `planner.plan.bundles.registry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import PulsarConfig


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """A loaded topic's current traffic: message rate (in + out) and throughput (in + out, bytes/s)."""

    name: str
    msg_rate: float = 0.0
    throughput: float = 0.0


@dataclass(frozen=True, slots=True)
class SplitInputs:
    """What a broker's split algorithm reads: the bundle, its loaded topics, the broker's settings, and from a split
    request the positions it names (`splitBoundaries`) and whether it forces the split."""

    bundle: BundleRange
    topics: Sequence[TopicLoad]
    config: PulsarConfig
    requested: Sequence[int] | None = None
    force: bool = False

    @property
    def topic_names(self) -> list[str]:
        return [topic.name for topic in self.topics]


class SplitAlgorithm(Protocol):
    @property
    def name(self) -> str:
        """Pulsar's name for it, as `defaultNamespaceBundleSplitAlgorithm` and a split request write it."""
        ...

    @property
    def takes_requested_positions(self) -> bool:
        """It cuts where the split request says (`splitBoundaries`), not where it computes."""
        ...

    @property
    def runs_only_as_default(self) -> bool:
        """Brokers run it only when `defaultNamespaceBundleSplitAlgorithm` names it; a REST call naming it fails."""
        ...

    @property
    def pulsar_checks_positions(self) -> bool:
        """Pulsar's algorithm returns only positions strictly inside the bundle. The others can return one outside,
        and Pulsar's split then fails as a whole: the planner validates their positions and plans no split."""
        ...

    def positions(self, inputs: SplitInputs) -> list[int]:
        """Where Pulsar cuts the bundle, in ascending order; empty when it does not split it."""
        ...

    def planned_positions(self, bundle: BundleRange, topics: Sequence[str] | None) -> list[int] | None:
        """The positions a plan carries for a split of `bundle` (`topics`: its loaded topics, None when unknown);
        None when Pulsar computes them itself as it splits, from what it has loaded."""
        ...
