"""`topic_count_equally_divide`: split between the two middle topic hashes, so each half holds as many topics."""

from __future__ import annotations

from collections.abc import Sequence

from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import topic_hash
from planner.plan.bundles.split_algorithm import SplitInputs
from planner.pulsar.bundle_range import BundleRange

NAME = "topic_count_equally_divide"


def split_positions(bundle: BundleRange, topics: Sequence[str]) -> list[int]:
    """No split (empty list) with fewer than two topics loaded in the bundle."""
    if len(topics) <= 1:
        return []
    hashes = sorted(topic_hash(topic) for topic in topics)
    split_start = hashes[max(len(hashes) // 2 - 1, 0)]
    split_end = hashes[len(hashes) // 2]
    position = split_start + (split_end - split_start) // 2
    # Pulsar does not check this and its split then fails; the planner plans no split instead.
    return [position] if bundle.lower < position < bundle.upper else []


class TopicCountEquallyDivide:
    name = NAME
    takes_requested_positions = False
    runs_only_as_default = False
    pulsar_checks_positions = False

    def positions(self, inputs: SplitInputs) -> list[int]:
        return split_positions(inputs.bundle, inputs.topic_names)

    def planned_positions(self, bundle: BundleRange, topics: Sequence[str] | None) -> list[int] | None:
        return split_positions(bundle, topics) if topics is not None else None
