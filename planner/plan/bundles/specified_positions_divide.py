"""`specified_positions_divide`: split at the positions the caller gives, those strictly inside the range."""

from __future__ import annotations

from collections.abc import Sequence

from planner.errors import InputError
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
