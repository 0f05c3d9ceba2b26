"""`range_equally_divide` (Pulsar's default split algorithm): split at the middle of the range."""

from __future__ import annotations

from planner.pulsar.bundle_range import BundleRange

NAME = "range_equally_divide"


def split_positions(bundle: BundleRange) -> list[int]:
    return [bundle.lower + (bundle.upper - bundle.lower) // 2]
