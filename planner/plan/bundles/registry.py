"""The split algorithms by name (`defaultNamespaceBundleSplitAlgorithm`, a split request's algorithm)."""

from __future__ import annotations

from planner.plan.bundles.flow_or_qps_equally_divide import FlowOrQpsEquallyDivide
from planner.plan.bundles.range_equally_divide import RangeEquallyDivide
from planner.plan.bundles.specified_positions_divide import SpecifiedPositionsDivide
from planner.plan.bundles.split_algorithm import SplitAlgorithm
from planner.plan.bundles.topic_count_equally_divide import TopicCountEquallyDivide

# In the order of Pulsar's names (`planner.pulsar.config.SPLIT_ALGORITHMS`).
SPLIT_ALGORITHMS: tuple[SplitAlgorithm, ...] = (
    RangeEquallyDivide(),
    TopicCountEquallyDivide(),
    SpecifiedPositionsDivide(),
    FlowOrQpsEquallyDivide(),
)


def split_algorithm(name: str) -> SplitAlgorithm | None:
    """The algorithm Pulsar knows by `name`; None for a name it does not know."""
    return next((algorithm for algorithm in SPLIT_ALGORITHMS if algorithm.name == name), None)
