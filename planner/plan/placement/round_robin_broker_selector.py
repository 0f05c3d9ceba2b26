"""RoundRobinBrokerSelector, as `impl/RoundRobinBrokerSelector.java` decides: Pulsar's placement for
shedding-excluded namespaces.

A global counter picks `counter % len(candidates)` from a cached copy of the candidate list; the cache
is refreshed only when the candidate count changed, the index is out of range, or the cached broker at
the index is no longer a candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.pulsar.java_numbers import INT_MAX


@dataclass(frozen=True, slots=True)
class RoundRobinState:
    counter: int = 0
    cached_candidates: tuple[str, ...] = ()


def select_broker(candidates: Sequence[str], state: RoundRobinState) -> tuple[str | None, RoundRobinState]:
    if not candidates:
        return None, state
    index = state.counter % len(candidates)
    cached = state.cached_candidates
    if len(cached) != len(candidates) or index >= len(cached) or cached[index] not in candidates:
        cached = tuple(candidates)
    # AtomicInteger wraps from Integer.MAX_VALUE to 0 in Pulsar's selector.
    next_counter = 0 if state.counter >= INT_MAX else state.counter + 1
    return cached[index], RoundRobinState(next_counter, cached)
