"""`range_equally_divide` (Pulsar's default split algorithm): split at the middle of the range."""

from __future__ import annotations

from collections.abc import Sequence

from planner.plan.bundles.split_algorithm import SplitInputs
from planner.pulsar.bundle_range import BundleRange

NAME = "range_equally_divide"


def split_positions(bundle: BundleRange) -> list[int]:
    return [bundle.lower + (bundle.upper - bundle.lower) // 2]


class RangeEquallyDivide:
    name = NAME
    takes_requested_positions = False
    runs_only_as_default = False
    pulsar_checks_positions = True  # the middle of a splittable range is always inside it

    def positions(self, inputs: SplitInputs) -> list[int]:
        return split_positions(inputs.bundle)

    def planned_positions(self, bundle: BundleRange, topics: Sequence[str] | None) -> list[int] | None:
        return split_positions(bundle)
