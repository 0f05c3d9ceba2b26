"""Applying split positions to a namespace's bundle boundaries (NamespaceBundleFactory.splitBundles)."""

from __future__ import annotations

from collections.abc import Sequence

from planner.errors import InputError
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import validate_boundaries
from planner.pulsar.bundle_range import BundleRange


def can_split(bundle: BundleRange) -> bool:
    """A bundle one hash wide cannot be split."""
    return bundle.upper - bundle.lower > 1


def equal_positions(bundle: BundleRange, parts: int) -> list[int]:
    """Positions that split `bundle` into `parts` equal ranges (`seg = (hi - lo) // parts`)."""
    segment = (bundle.upper - bundle.lower) // parts
    return [bundle.lower + segment * index for index in range(1, parts)]


def apply_split(boundaries: Sequence[int], bundle: BundleRange, positions: Sequence[int]) -> list[int]:
    """The namespace's boundaries after splitting `bundle` at `positions` (sorted, strictly inside)."""
    validate_boundaries(boundaries)
    if (
        bundle.lower not in boundaries
        or bundle.upper not in boundaries
        or (boundaries.index(bundle.upper) != boundaries.index(bundle.lower) + 1)
    ):
        raise InputError(f"bundle {bundle} is not a bundle of these boundaries")
    inside = sorted(positions)
    if any(not bundle.lower < position < bundle.upper for position in inside):
        raise InputError(f"split positions must lie strictly inside {bundle}")
    if len(set(inside)) != len(inside):
        raise InputError(f"split positions for {bundle} repeat a position; Pulsar rejects the split")
    at = boundaries.index(bundle.upper)
    return [*boundaries[:at], *inside, *boundaries[at:]]
