"""Drain and fill in simulation, against what Pulsar does on its own.

- **Drain.** Pulsar's way to empty a broker is its graceful shutdown: every bundle is unloaded at once and each
  client's lookup has the leader place it (a lookup storm; apache/pulsar #20753). In the simulator that is the
  scenario's `loss` event: the broker stops and the next minute the placement pipeline places all its bundles.
  This product's drain plans every bundle on predicted load at that minute instead, executes `pace` unloads a
  minute, and stops the broker once it owns nothing: no bundle is orphaned.
- **Fill.** After new brokers join (`joinAt`), Pulsar's in-broker shedders bring load to them over many cycles.
  This product's fill plans once, the minute after they joined, and executes at the same pace, with in-broker
  shedding off.

Both sides run the same scenario, traffic and seed; the figures are those of `planner.simulator.metrics` plus the
peak number of bundles moved in one minute and, for a drain, the minutes until the broker is empty. A scenario with
cluster policies has them obeyed by the maintenance plan and its executor, and can run once more with this
product ignoring them (`ClusterPolicyMode`); its runs then count what was left against them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.plan.document import PlannedAction
from planner.plan.maintenance import MaintenanceMode, MaintenanceRequest, maintenance_plan
from planner.simulator.engine import (
    IGNORED_SUFFIX,
    ClusterPolicyMode,
    RunResult,
    Simulation,
    base_config,
    ignoring_policies,
    parse_policy,
    simulate,
)
from planner.simulator.scenario import BrokerEvent, Scenario, World, build_world
from planner.simulator.violations import PolicyViolations

DEFAULT_PACE = 6  # unloads a minute
MAINTENANCE_SCENARIOS = {"drain": "drain-1-of-10", "fill": "fill-10-to-12"}  # the shipped scenarios for each
# Pulsar's side of a fill: its in-broker shedders, each with the placement deployments pair it with.
FILL_BASELINES = ("ThresholdShedder", "UniformLoadShedder", "AvgShedder")
DRAIN_BASELINE = "ThresholdShedder"  # the cluster's shedder while Pulsar's shutdown empties the broker


@dataclass(frozen=True, slots=True)
class MaintenanceRun:
    label: str
    moves: int  # bundles moved, by the policy or reassigned after the stop
    peak_moves_per_minute: int
    minutes_to_empty: int | None  # drain: from the start until the broker owns nothing
    minutes_to_balance: int | None
    peak_score: float  # the highest live broker score from the start of the maintenance on
    over_placement: int
    final_spread: float
    policy_violations: PolicyViolations | None = None  # scenarios with cluster policies only

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "label": self.label,
            "moves": self.moves,
            "peakMovesPerMinute": self.peak_moves_per_minute,
            "minutesToEmpty": self.minutes_to_empty,
            "minutesToBalance": self.minutes_to_balance,
            "peakScore": round(self.peak_score, 1),
            "overPlacement": self.over_placement,
            "finalSpread": round(self.final_spread, 1),
        }
        violations = self.policy_violations
        if violations is not None:
            document["isolationViolations"] = violations.isolation
            document["antiAffinityViolations"] = violations.anti_affinity
            document["forbiddenMoves"] = violations.forbidden_moves
            document["refusedMoves"] = violations.refused_moves
        return document


class _MaintenanceSimulation(Simulation):
    """In-broker shedding off; at `start`, one maintenance plan on what a collect sees, then `pace` of its unloads
    a minute, each only if its bundle is still on the planned source and the destination is up (the executor's
    preconditions). A drained broker is stopped once it owns nothing."""

    def __init__(
        self, world: World, scenario: Scenario, request: MaintenanceRequest, start: int, pace: int, **options: Any
    ) -> None:
        offline = parse_policy("offline:AvgShedder")  # an offline policy: no in-broker shedding
        super().__init__(world, offline, base_config(scenario), cadence_minutes=10**9, **options)
        self.policy = dataclasses.replace(offline, name=f"this product's {request.mode.value}")
        self.request, self.start, self.pace = request, start, pace
        self.queue: list[PlannedAction] = []
        self.emptied_at: int | None = None

    def _act(self, minute: int, now_millis: int, live: Mapping[int, Any]) -> None:
        if minute == self.start:
            plan = maintenance_plan(
                "simulated",
                self._snapshot(live),
                self.plan_config,
                self.request,
                self._usage_models(),
                policies=self.plan_policies,
            )
            self.queue = list(plan.actions)
        if minute < self.start:
            return
        index = {broker_id: b for b, broker_id in enumerate(self.ids)}
        owners = self._owners() if self.plan_policies is not None else {}
        for action in self.queue[: self.pace]:
            row, target = self.averages.index[action.bundle], index[action.destination or ""]
            owner = int(self.owner[row])
            preconditions = owner >= 0 and self.ids[owner] == action.source and self.alive[target]
            if preconditions and not self.refuses(action.bundle, self.ids[target], owners):
                self._move(row, target, minute, forced=False)
        self.queue = self.queue[self.pace :]
        if self.request.mode is MaintenanceMode.DRAIN and not self.queue and self.emptied_at is None:
            drained = [index[broker] for broker in self.request.brokers]
            if not np.isin(self.owner, drained).any():
                self.emptied_at = minute
                stops = tuple(BrokerEvent(minute + 1, b, False) for b in drained)
                self.world = dataclasses.replace(self.world, events=self.world.events + stops)


def _run(result: RunResult, label: str, start: int, minutes_to_empty: int | None) -> MaintenanceRun:
    per_minute = Counter(move.minute for move in result.moves if move.minute >= start)
    return MaintenanceRun(
        label=label,
        moves=sum(per_minute.values()),
        peak_moves_per_minute=max(per_minute.values(), default=0),
        minutes_to_empty=minutes_to_empty,
        minutes_to_balance=result.metrics.minutes_to_balance,
        peak_score=float(np.nanmax(result.scores[start:])),
        over_placement=result.metrics.over_placement,
        final_spread=result.metrics.final_spread,
        policy_violations=result.metrics.policy_violations,
    )


def compare_drain(
    scenario: Scenario,
    *,
    seed: int = 1,
    pace: int = DEFAULT_PACE,
    cluster_policies: ClusterPolicyMode = ClusterPolicyMode.OBEY,
) -> list[MaintenanceRun]:
    """The scenario's first `loss` event as Pulsar's shutdown, against this product's paced drain of the same
    brokers from the same minute."""
    world = build_world(scenario, seed)
    losses = [event for event in world.events if not event.up]
    if not losses:
        raise InputError(f"scenario {scenario.name!r} has no `loss` event: nothing to drain")
    start = losses[0].minute
    drained = sorted({event.broker for event in losses if event.minute == start})
    shutdown = simulate(scenario, DRAIN_BASELINE, seed=seed)
    runs = [_run(shutdown, f"Pulsar shutdown ({DRAIN_BASELINE} running)", start, 1)]
    ours_world = dataclasses.replace(world, events=tuple(e for e in world.events if e not in losses))
    request = MaintenanceRequest(MaintenanceMode.DRAIN, tuple(world.brokers.ids[b] for b in drained))
    for ignored in ignoring_policies(cluster_policies, scenario):
        simulation = _MaintenanceSimulation(
            ours_world,
            scenario,
            request,
            start,
            pace,
            seed=seed,
            minutes=scenario.minutes,
            target_spread=scenario.target_spread,
            ignore_cluster_policies=ignored,
        )
        result = simulation.run()
        emptied = None if simulation.emptied_at is None else simulation.emptied_at - start + 1
        label = f"drain, {pace} unloads/min" + (IGNORED_SUFFIX if ignored else "")
        runs.append(_run(result, label, start, emptied))
    return runs


def compare_fill(
    scenario: Scenario,
    *,
    seed: int = 1,
    pace: int = DEFAULT_PACE,
    cluster_policies: ClusterPolicyMode = ClusterPolicyMode.OBEY,
) -> list[MaintenanceRun]:
    """Pulsar's in-broker shedders after brokers join, against one fill plan the minute after they joined."""
    world = build_world(scenario, seed)
    joined = [b for b, minute in enumerate(world.brokers.join_at) if minute > 0]
    if not joined:
        raise InputError(f"scenario {scenario.name!r} has no broker with joinAt: nothing to fill")
    start = int(max(world.brokers.join_at)) + 1
    runs = [_run(simulate(scenario, policy, seed=seed), f"Pulsar {policy}", start, None) for policy in FILL_BASELINES]
    request = MaintenanceRequest(MaintenanceMode.FILL, tuple(world.brokers.ids[b] for b in joined))
    for ignored in ignoring_policies(cluster_policies, scenario):
        simulation = _MaintenanceSimulation(
            world,
            scenario,
            request,
            start,
            pace,
            seed=seed,
            minutes=scenario.minutes,
            target_spread=scenario.target_spread,
            ignore_cluster_policies=ignored,
        )
        label = f"fill, {pace} unloads/min" + (IGNORED_SUFFIX if ignored else "")
        runs.append(_run(simulation.run(), label, start, None))
    return runs
