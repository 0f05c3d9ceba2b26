"""`specified_positions_divide`: split at the positions the caller gives, those strictly inside the range."""

from __future__ import annotations

from collections.abc import Sequence

from planner.errors import InputError
from planner.plan.bundles.split_algorithm import SplitInputs
from planner.pulsar.bundle_range import BundleRange

NAME = "specified_positions_divide"


def split_positions(
    bundle: BundleRange, positions: Sequence[int] | None, topics: Sequence[str] = (), *, force: bool = False
) -> list[int]:
    """Positions sorted, outside ones dropped, duplicates kept (as Pulsar does; applying them then fails).

    The REST call (not forced) also needs two loaded topics.
    """
    if not positions:
        raise InputError(f"{NAME} needs split positions (splitBoundaries) for bundle {bundle}")
    if not force and len(topics) <= 1:
        return []
    return sorted(position for position in positions if bundle.lower < position < bundle.upper)


class SpecifiedPositionsDivide:
    name = NAME
    takes_requested_positions = True
    runs_only_as_default = False
    pulsar_checks_positions = True  # it drops the positions outside the range

    def positions(self, inputs: SplitInputs) -> list[int]:
        return split_positions(inputs.bundle, inputs.requested, inputs.topic_names, force=inputs.force)

    def planned_positions(self, bundle: BundleRange, topics: Sequence[str] | None) -> list[int] | None:
        return None  # the load manager's own splits name none: the plan leaves them to the broker
