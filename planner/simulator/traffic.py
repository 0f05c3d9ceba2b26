"""Per-minute bundle traffic: base rate x daily cycle x growth x noise x spikes.

Traffic does not depend on the policy: every policy of a comparison sees exactly the same minutes,
drawn from the same seed, so differences in the results come from the policy alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from planner.simulator.scenario import MINUTES_PER_DAY, Bundles, diurnal_factor

# Columns of a stats array, as NamespaceBundleStats names them.
RATE_IN, RATE_OUT, THROUGHPUT_IN, THROUGHPUT_OUT = range(4)


@dataclass(frozen=True, slots=True)
class Minute:
    """One minute of traffic: stats[bundle] = (msgRateIn, msgRateOut, msgThroughputIn, msgThroughputOut)."""

    stats: np.ndarray
    spiking: np.ndarray  # bool per bundle: inside a spike window this minute


class MinuteSource(Protocol):
    """Where a run's traffic comes from, one minute after the other: a scenario's generated traffic (`Traffic`) or a
    cluster's recorded history (`planner.simulator.replay.RecordedTraffic`)."""

    def minute(self, t: int) -> Minute: ...


class Traffic:
    """Generates the minutes in order; `minute(t)` must be called with t = 0, 1, 2, ..."""

    def __init__(self, bundles: Bundles, seed: int) -> None:
        self._bundles = bundles
        self._rng = np.random.default_rng([seed, 0x5EED])
        self._next = 0
        self._factor = np.ones(len(bundles.names))
        self._active: dict[int, list[float]] = {}
        self._spiking = np.zeros(len(bundles.names), dtype=bool)
        self._starts: dict[int, list[tuple[int, float]]] = {}
        self._ends: dict[int, list[tuple[int, float]]] = {}
        for bundle, start, end, factor in bundles.spikes:
            self._starts.setdefault(start, []).append((bundle, factor))
            self._ends.setdefault(end, []).append((bundle, factor))
        self._noisy = bool(np.any(bundles.noise > 0))

    def minute(self, t: int) -> Minute:
        if t != self._next:
            raise ValueError(f"traffic minutes must be generated in order: expected {self._next}, got {t}")
        self._next += 1
        b = self._bundles
        changed = set()
        for bundle, factor in self._ends.get(t, ()):
            self._active[bundle].remove(factor)
            changed.add(bundle)
        for bundle, factor in self._starts.get(t, ()):
            self._active.setdefault(bundle, []).append(factor)
            changed.add(bundle)
        for bundle in sorted(changed):
            # Recomputed from the active spikes, so the factor is exactly 1 again once they all ended.
            self._factor[bundle] = float(np.prod(self._active[bundle])) if self._active[bundle] else 1.0
            self._spiking[bundle] = bool(self._active[bundle])
        scale = diurnal_factor(t, b.diurnal, b.diurnal_peak_minute)
        scale = scale * np.power(1.0 + b.growth_per_day, t / MINUTES_PER_DAY) * self._factor
        if self._noisy:
            # Drawn every minute for every bundle so the sequence never depends on which bundles are noisy.
            scale = scale * np.exp(self._rng.normal(0.0, 1.0, len(b.names)) * b.noise)
        rate_in = b.rate_in * scale
        rate_out = rate_in * b.fanout
        stats = np.empty((len(b.names), 4))
        stats[:, RATE_IN] = rate_in
        stats[:, RATE_OUT] = rate_out
        stats[:, THROUGHPUT_IN] = rate_in * b.message_size
        stats[:, THROUGHPUT_OUT] = rate_out * b.message_size
        return Minute(stats, self._spiking.copy())
