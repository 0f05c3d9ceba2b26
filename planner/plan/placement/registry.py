"""The placement strategies of the modular load manager by name: `loadBalancerLoadPlacementStrategy`, with or
without its package."""

from __future__ import annotations

from planner.plan.placement.least_long_term_message_rate import LeastLongTermMessageRate
from planner.plan.placement.least_resource_usage_with_weight import LeastResourceUsageWithWeight
from planner.plan.placement.strategy import PlacementStrategy
from planner.plan.shedding.avg_shedder import AvgShedderPlacement
from planner.pulsar.config import PulsarConfig

# Pulsar's default, and what it places with when it cannot create the configured class.
DEFAULT_PLACEMENT: PlacementStrategy = LeastLongTermMessageRate()

PLACEMENT_STRATEGIES: tuple[PlacementStrategy, ...] = (
    DEFAULT_PLACEMENT,
    LeastResourceUsageWithWeight(),
    AvgShedderPlacement(),
)


def placement_strategy(name: str) -> PlacementStrategy | None:
    """The strategy of a class name, with or without its package; None for a class the planner does not model."""
    short = name.rsplit(".", 1)[-1]
    return next((strategy for strategy in PLACEMENT_STRATEGIES if strategy.name == short), None)


def configured_placement(config: PulsarConfig) -> PlacementStrategy:
    """The strategy `loadBalancerLoadPlacementStrategy` names; another class places as the default does."""
    return placement_strategy(config.placement_strategy) or DEFAULT_PLACEMENT
