"""Topic → bundle assignment (Pulsar's `ConsistentHashingTopicBundleAssigner`).

A topic's hash is the unsigned CRC-32 of its full UTF-8 name (each partition hashed on its own);
its bundle is the one whose lower boundary is the largest boundary not above the hash.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from collections.abc import Sequence

from planner.pulsar.bundle_range import FULL_RANGE_UPPER, BundleRange


def topic_hash(topic: str) -> int:
    """Unsigned 32-bit CRC-32 of the topic's full name, as Pulsar hashes it."""
    return zlib.crc32(topic.encode("utf-8"))


def initial_boundaries(num_bundles: int) -> list[int]:
    """Boundaries of a namespace created with `num_bundles` bundles: steps of 2^32 // N, last 0xffffffff."""
    if num_bundles < 1:
        raise ValueError(f"numBundles must be at least 1, got {num_bundles}")
    step = (FULL_RANGE_UPPER + 1) // num_bundles
    return [i * step for i in range(num_bundles)] + [FULL_RANGE_UPPER]


def validate_boundaries(boundaries: Sequence[int]) -> None:
    """Boundaries must start at 0, end at 0xffffffff and strictly increase."""
    if len(boundaries) < 2 or boundaries[0] != 0 or boundaries[-1] != FULL_RANGE_UPPER:
        raise ValueError("boundaries must start at 0x00000000 and end at 0xffffffff")
    for previous, current in itertools.pairwise(boundaries):
        if current <= previous:
            raise ValueError(f"boundaries out of order: 0x{previous:08x} then 0x{current:08x}")


def bundle_for_hash(hash_value: int, boundaries: Sequence[int]) -> BundleRange:
    """The bundle range of `boundaries` holding `hash_value` (the last range is closed)."""
    validate_boundaries(boundaries)
    # Java would index past the list for a hash equal to the final 0xffffffff; it belongs to the last bundle.
    index = min(bisect.bisect_right(boundaries, hash_value) - 1, len(boundaries) - 2)
    return BundleRange(boundaries[index], boundaries[index + 1])


def bundle_for_topic(topic: str, boundaries: Sequence[int]) -> BundleRange:
    """The bundle range that owns `topic` in a namespace with these boundaries."""
    return bundle_for_hash(topic_hash(topic), boundaries)
