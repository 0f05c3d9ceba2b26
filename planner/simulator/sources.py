"""Where a simulation's cluster and traffic come from: one protocol, two sources.

- `SyntheticSource`: a named scenario (`planner.simulator.scenario`), its brokers and bundles generated from the
  seed, its traffic drawn minute by minute (`planner.simulator.traffic.Traffic`);
- `planner.simulator.replay.RecordedSource`: a cluster's recorded history, its brokers with their fitted costs and
  its bundles' recorded traffic.

`run_source` runs one policy on any source through the same engine loop, so a strategy is judged the same way on a
scenario and on a cluster's own history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from planner.errors import InputError
from planner.pulsar.config import PulsarConfig
from planner.simulator.engine import Policy, RunResult, Simulation, base_config, parse_policy
from planner.simulator.scenario import Scenario, World, build_world
from planner.simulator.traffic import MinuteSource, Traffic


class ScenarioSource(Protocol):
    """What the engine needs from a source: the world and its traffic for a seed, the brokers' configuration, and
    the run's defaults (length, offline cadence, balanced spread)."""

    @property
    def scenario(self) -> Scenario: ...

    @property
    def minutes(self) -> int: ...

    def world(self, seed: int, minutes: int) -> World: ...

    def traffic(self, world: World, seed: int) -> MinuteSource: ...

    def config(self, overrides: Mapping[str, Any] | None) -> PulsarConfig: ...


@dataclass(frozen=True)
class SyntheticSource:
    """A scenario: generated brokers, bundles and traffic."""

    scenario: Scenario

    @property
    def minutes(self) -> int:
        return self.scenario.minutes

    def world(self, seed: int, minutes: int) -> World:
        return build_world(self.scenario, seed, minutes=minutes)

    def traffic(self, world: World, seed: int) -> MinuteSource:
        return Traffic(world.bundles, seed)

    def config(self, overrides: Mapping[str, Any] | None) -> PulsarConfig:
        return base_config(self.scenario, overrides)


def run_source(
    source: ScenarioSource,
    policy: str | Policy,
    *,
    seed: int = 1,
    minutes: int | None = None,
    cadence_minutes: int | None = None,
    target_spread: float | None = None,
    overrides: Mapping[str, Any] | None = None,
    ignore_cluster_policies: bool = False,
    calibration: bool = False,
) -> RunResult:
    """One policy on one source; deterministic for the source and the seed."""
    parsed = parse_policy(policy) if isinstance(policy, str) else policy
    length = minutes or source.minutes
    if length < 1:
        raise InputError(f"invalid --minutes {length}: must be at least 1")
    world = source.world(seed, length)
    scenario = source.scenario
    simulation = Simulation(
        world,
        parsed,
        source.config(overrides),
        seed=seed,
        minutes=length,
        cadence_minutes=cadence_minutes or scenario.offline_cadence_minutes,
        target_spread=target_spread or scenario.target_spread,
        ignore_cluster_policies=ignore_cluster_policies,
        traffic=source.traffic(world, seed),
        calibration=calibration,
    )
    return simulation.run()
