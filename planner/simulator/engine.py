"""The simulation loop: one-minute steps of traffic, load reports, leader averages and a policy.

Each minute, in this order:

1. broker events (stops reassign the broker's bundles through the placement pipeline, as the
   clients' lookups do; starts bring an empty broker that writes its first report);
2. traffic for the minute, each live broker's load (its own cores and costs), live scores recorded;
3. each broker writes its report if it changed by more than the report threshold or is older than the
   maximum interval (`ModularLoadManagerImpl.needBrokerDataUpdate`); each write is one leader `updateAll()`
   that samples every bundle (`ModularLoadManagerImpl.updateBundleData`);
4. the policy: an in-broker shedding cycle (`ModularLoadManagerImpl.doLoadShedding`) on the leader's view with
   Pulsar's placement (`selectBroker`, `planner.plan.placement.pipeline`), or, at its cadence, one of this product's
   offline plans
   (`planner.plan.planning.make_plan` on freshly collected reports), approved at once and executed.
   Offline policies also collect every broker's report every 5 minutes, as the collect DAG does:
   the history each plan fits the brokers' usage models on (`planner.plan.usage_model`).

A moved bundle serves its traffic from the destination from the next minute on.

A scenario that declares cluster policies (`[policies]`: isolation, failure domains, anti-affinity) has them obeyed
by the simulated leader (its placement and its checks of each unload, as Pulsar always obeys them) and by this
product's plans and executor, unless the run ignores them (`ClusterPolicyMode`): then the plans are made and
executed as if the cluster had none, what this product did before it read them. Every such run counts what was
left against the policies (`planner.simulator.violations`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from planner.actions import ActionKind
from planner.errors import InputError
from planner.plan.document import PredictedMove
from planner.plan.placement.pipeline import select_broker
from planner.plan.placement.registry import PLACEMENT_STRATEGIES, placement_strategy
from planner.plan.placement.strategy import PlacementSession, PlacementStrategy
from planner.plan.planning import make_plan
from planner.plan.shedding.registry import MODULAR_STRATEGIES, SheddingStrategy, shedding_strategy
from planner.plan.usage_model import (
    RESOURCES,
    BrokerHistory,
    UsageModels,
    fit_usage_models,
    newest_sample,
    resolved_models,
)
from planner.plan.usage_model import Traffic as BrokerTraffic
from planner.pulsar.broker_score import broker_usage
from planner.pulsar.config import MIB, PulsarConfig
from planner.pulsar.java_numbers import percent_usage
from planner.pulsar.model import LoadData, LocalBrokerData
from planner.pulsar.policies import destination_refusal
from planner.simulator.calibrating import BrokerState, CalibrationLoop
from planner.simulator.leader import BundleAverages, BundleDataView, full_report, unload_refusal, usage_report
from planner.simulator.metrics import Metrics, MoveRecord, RoundRecord, compute_metrics
from planner.simulator.move_bound import fewest_moves_lower_bound
from planner.simulator.scenario import Scenario, World, build_world
from planner.simulator.traffic import Minute, MinuteSource, Traffic
from planner.simulator.violations import PolicyJudge, PolicyViolations

# 2026-01-01T00:00:00Z: a fixed clock, so recently-unloaded timestamps and results are reproducible.
EPOCH_MILLIS = 1_767_225_600_000
MINUTE_MILLIS = 60_000
KBIT_PER_BYTE = 8 / 1024
OFFLINE_PREFIX = "offline:"
# The collect DAG's schedule, and how much of the collected history a plan fits usage models on.
COLLECT_MINUTES = 5
HISTORY_MINUTES = 24 * 60

DEFAULT_POLICIES = (
    "ThresholdShedder",
    "UniformLoadShedder",
    "OverloadShedder",
    "AvgShedder",
    "offline:AvgShedder",
    "offline:UniformLoadShedder",
    "offline:AvgShedderPredictive",
)


class ClusterPolicyMode(StrEnum):
    """Whether this product's plans obey a scenario's cluster policies, ignore them, or both, side by side.
    Pulsar's own leader obeys them in every mode: only this product's side changes."""

    OBEY = "obey"
    IGNORE = "ignore"
    BOTH = "both"


IGNORED_SUFFIX = " (cluster policies ignored)"


def ignoring_policies(mode: ClusterPolicyMode, scenario: Scenario) -> tuple[bool, ...]:
    """The runs of this product's side to make, by whether each ignores the cluster policies: one obeying them, one
    ignoring them, or both (a scenario without policies: one, there is nothing to ignore)."""
    if scenario.policies is None or mode is ClusterPolicyMode.OBEY:
        return (False,)
    return (True,) if mode is ClusterPolicyMode.IGNORE else (False, True)


@dataclass(frozen=True, slots=True)
class Policy:
    """`Strategy[+Placement]`: Pulsar's in-broker shedding every minute; `offline:Strategy[@MINUTES]`:
    this product's plans at a cadence, approved immediately."""

    name: str
    strategy: SheddingStrategy
    offline: bool
    placement: PlacementStrategy | None = None
    cadence_minutes: int | None = None

    def cluster_config(self, base: PulsarConfig) -> PulsarConfig:
        """The brokers' configuration: the shedder and placement for in-broker policies (the placement deployments
        run the shedder with, unless the policy names one), else as given."""
        if self.offline:
            return base
        placement = self.placement or self.strategy.usual_placement
        return base.with_settings(
            {
                "loadBalancerLoadSheddingStrategy": self.strategy.java_class,
                "loadBalancerLoadPlacementStrategy": placement.java_class,
            }
        )


def parse_policy(text: str) -> Policy:
    text = text.strip()
    if text.startswith(OFFLINE_PREFIX):
        body, _, cadence_text = text[len(OFFLINE_PREFIX) :].partition("@")
        cadence = None
        if cadence_text:
            try:
                cadence = int(cadence_text.removesuffix("m"))
            except ValueError:
                cadence = 0
            if cadence < 1:
                raise InputError(f"invalid policy {text!r}: the cadence after @ must be a positive number of minutes")
        strategy = _modular(shedding_strategy(body), text)
        suffix = f"@{cadence}" if cadence else ""
        return Policy(f"{OFFLINE_PREFIX}{strategy.name}{suffix}", strategy, True, cadence_minutes=cadence)
    body, _, placement = text.partition("+")
    strategy = _modular(shedding_strategy(body), text)
    if not strategy.in_pulsar:
        raise InputError(f"invalid policy {text!r}: {strategy.name} is an offline plan; use offline:{strategy.name}")
    if placement:
        placement = placement.rsplit(".", 1)[-1]
        chosen = placement_strategy(placement)
        if chosen is None:
            known = ", ".join(sorted(each.name for each in PLACEMENT_STRATEGIES))
            raise InputError(f"invalid policy {text!r}: placement {placement!r} is not one of {known}")
        # Pulsar refuses to start with AvgShedder placement under another shedder (`ModularLoadManagerImpl`); the
        # simulator runs AvgShedder shedding with its own placement only.
        bound = chosen.bound_shedder or (strategy.name if strategy.binds_own_placement else None)
        if bound is not None and not chosen.bound_shedder == strategy.name == bound:
            raise InputError(f"invalid policy {text!r}: {bound} placement needs {bound} shedding")
        return Policy(f"{strategy.name}+{chosen.name}", strategy, False, placement=chosen)
    return Policy(strategy.name, strategy, False)


def _modular(strategy: SheddingStrategy, text: str) -> SheddingStrategy:
    if strategy.extensible:
        raise InputError(f"invalid policy {text!r}: the simulator models ModularLoadManagerImpl, not {strategy.name}")
    return strategy


def known_policies() -> list[str]:
    # the simulator models ModularLoadManagerImpl only
    return [s.name for s in MODULAR_STRATEGIES if s.in_pulsar] + [OFFLINE_PREFIX + s.name for s in MODULAR_STRATEGIES]


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """An executed offline plan that moved bundles, with what it predicted."""

    minute: int
    moves: int
    predicted_scores: Mapping[str, float]  # every broker's predicted score after the plan
    predicted_moves: tuple[PredictedMove, ...]  # the strategy's per-move predictions, if it makes them


@dataclass(frozen=True)
class RunResult:
    scenario: str
    policy: str
    seed: int
    minutes: int
    target_spread: float
    brokers: tuple[str, ...]
    scores: np.ndarray  # (minutes + 1, brokers): live score per minute; the last row after the last moves
    moves: tuple[MoveRecord, ...]
    rounds: tuple[RoundRecord, ...]
    metrics: Metrics
    plans: tuple[PlanRecord, ...] = ()
    cluster_policies_ignored: bool = False  # this product planned and executed as if the cluster had none

    @property
    def label(self) -> str:
        return self.policy + (IGNORED_SUFFIX if self.cluster_policies_ignored else "")


@dataclass
class _Live:
    """A broker's load this minute; the full report is built only when it is written or collected."""

    usage: float  # weighted max usage (fraction), as the strategies compute it
    msg_rate: float
    throughput: float
    totals: list[float]  # msgRateIn, msgRateOut, msgThroughputIn, msgThroughputOut
    rows: np.ndarray
    stats: np.ndarray
    topics: np.ndarray
    names: list[str]
    usage_report: LocalBrokerData
    now_millis: int
    _report: LocalBrokerData | None = None

    @property
    def report(self) -> LocalBrokerData:
        if self._report is None:
            self._report = full_report(
                self.usage_report, names=self.names, stats=self.stats, topics=self.topics, now_millis=self.now_millis
            )
        return self._report


@dataclass
class _Written:
    """A broker's last written report (what the leader sees) and the minute it was written."""

    live: _Live
    minute: int

    @property
    def report(self) -> LocalBrokerData:
        return self.live.report


@dataclass
class _LeaderMemory:
    """What the leader keeps in memory and loses when leadership moves (Pulsar keeps one strategy per leader)."""

    session: PlacementSession
    shedding_state: Any
    recently_unloaded: dict[str, int] = field(default_factory=dict)


class Simulation:
    """One scenario under one policy; `run()` returns the trace and the metrics."""

    def __init__(
        self,
        world: World,
        policy: Policy,
        config: PulsarConfig,
        *,
        seed: int,
        minutes: int,
        cadence_minutes: int,
        target_spread: float,
        ignore_cluster_policies: bool = False,
        traffic: MinuteSource | None = None,
        calibration: bool = False,
    ) -> None:
        self.world = world
        self.policy = policy
        self.config = policy.cluster_config(config)
        self.plan_config = config
        self.seed = seed
        self.minutes = minutes
        self.cadence = (
            (policy.cadence_minutes or cadence_minutes) if policy.offline else self.config.shedding_interval_minutes
        )
        self.target_spread = target_spread
        # Pulsar's leader obeys the cluster's policies always; this product's plans and executor unless ignored
        # (an in-broker policy has no plans: ignoring changes nothing there).
        self.cluster_policies = world.policies
        self.plan_policies = None if ignore_cluster_policies and policy.offline else world.policies
        self.judge = (
            None if world.policies is None else PolicyJudge(world.policies, self.config.failure_domains_enabled)
        )
        self.forbidden_moves = self.refused_moves = 0
        brokers, bundles = world.brokers, world.bundles
        self.ids = brokers.ids
        self.names = bundles.names
        # The scenario's generated traffic, or a source's own (a recorded history's: `planner.simulator.replay`).
        self.traffic: MinuteSource = traffic or Traffic(bundles, seed)
        self.owner = bundles.initial_owner.copy()
        self.alive = brokers.join_at == 0
        self.up_since = np.where(self.alive, 0, -1)
        self.written: dict[int, _Written] = {}
        self.force_write: set[int] = set(np.flatnonzero(self.alive).tolist())
        self.averages = BundleAverages(self.names)
        self.bundle_view = BundleDataView(self.averages)
        self.rng = random.Random(seed * 7919 + 17)
        self.leader: int | None = None
        self.memory = self._fresh_memory()
        self.offline_state: Mapping[str, Any] | None = None
        self.offline_recent: dict[str, int] = {}
        self.scores = np.full((minutes + 1, len(self.ids)), np.nan)
        self.last_spike = np.full(len(self.ids), -(10**9))
        self.moves: list[MoveRecord] = []
        self.orphaned_from: dict[int, int] = {}
        self.rounds: list[RoundRecord] = []
        self.plans: list[PlanRecord] = []
        self.empty_plans = self.balanced_plans = 0  # offline runs that planned nothing; found it balanced
        self.history: dict[str, list[list[float]]] = {}
        # Offline plans learn from their own executed plans when calibrating (`planner.plan.calibration`).
        self.calibration = CalibrationLoop(calibration and policy.offline)
        self.cpu_noise = np.random.default_rng([seed, 0xC0DE])
        # Live scores, and every bundle's owner and points, just before the first round that moved bundles.
        self._first_round_before: tuple[dict[str, float], dict[str, tuple[str, float]]] | None = None
        self._last_traffic: Minute | None = None
        self._elect()

    # --- leader ---------------------------------------------------------------------------------

    def _fresh_memory(self) -> _LeaderMemory:
        return _LeaderMemory(PlacementSession(self.rng), self.policy.strategy.initial_state())

    def _elect(self) -> None:
        """The longest-running broker leads; a new leader starts with empty strategy memory."""
        candidates = np.flatnonzero(self.alive).tolist()
        leader = min(candidates, key=lambda b: (self.up_since[b], self.ids[b])) if candidates else None
        if leader != self.leader:
            self.leader = leader
            self.memory = self._fresh_memory()

    def _leader_view(self) -> LoadData:
        return LoadData.model_construct(
            brokers={self.ids[b]: w.report for b, w in sorted(self.written.items())},
            bundle_data=self.bundle_view,
            recently_unloaded_bundles=dict(self.memory.recently_unloaded),
        )

    def _update_all(self) -> None:
        reports = [(w.live.rows, w.live.stats, w.live.topics) for _, w in sorted(self.written.items())]
        self.averages.update_all(reports)
        # A bundle stops being "preallocated" once its new owner reports it (ModularLoadManagerImpl).
        session = self.memory.session
        kept: dict[str, list[Any]] = {}
        for broker_id, items in session.preallocated.items():
            written = next((w for b, w in self.written.items() if self.ids[b] == broker_id), None)
            if written is None:
                continue
            remaining = [item for item in items if item[0] not in written.report.bundles]
            if remaining:
                kept[broker_id] = remaining
        session.preallocated = kept

    # --- moves ----------------------------------------------------------------------------------

    def _up(self) -> tuple[str, ...]:
        return tuple(self.ids[b] for b in np.flatnonzero(self.alive).tolist())

    def _owners(self) -> dict[str, str]:
        """Every owned bundle's broker, now."""
        return {self.names[row]: self.ids[b] for row, b in enumerate(self.owner.tolist()) if b >= 0}

    def _move(self, row: int, destination: int, minute: int, forced: bool) -> None:
        if self.judge is not None and self.judge.forbids(self.names[row], self.ids[destination], self._up()):
            self.forbidden_moves += 1
        source = int(self.owner[row])
        if source < 0:
            source = self.orphaned_from.pop(row, -1)
        self.owner[row] = destination
        spike = not forced and source >= 0 and self.last_spike[source] >= minute - self.world.scenario.spike_lag_minutes
        self.moves.append(
            MoveRecord(
                minute=minute,
                bundle=self.names[row],
                source=self.ids[source] if source >= 0 else None,
                destination=self.ids[destination],
                topics=int(self.world.bundles.topics[row]),
                forced=forced,
                spike=bool(spike),
            )
        )

    def _place_orphans(self, minute: int) -> None:
        """Bundles without an owner are looked up by their clients: the leader places each (`selectBroker`)."""
        orphans = np.flatnonzero(self.owner < 0).tolist()
        if not orphans or self.leader is None:
            return
        view = self._leader_view()
        if not view.brokers:
            return
        index = {broker_id: b for b, broker_id in enumerate(self.ids)}
        for row in orphans:
            chosen = select_broker(
                self.names[row], view, self.config, self.memory.session, policies=self.cluster_policies
            )
            if chosen is not None:
                self._move(row, index[chosen], minute, forced=True)

    # --- one minute -----------------------------------------------------------------------------

    def _apply_events(self, minute: int) -> None:
        changed = False
        for event in self.world.events:
            if event.minute != minute:
                continue
            b = event.broker
            if event.up and not self.alive[b]:
                self.alive[b] = True
                self.up_since[b] = minute
                self.force_write.add(b)
                changed = True
            elif not event.up and self.alive[b]:
                self.alive[b] = False
                self.up_since[b] = -1
                self.written.pop(b, None)
                self.force_write.discard(b)
                for row in np.flatnonzero(self.owner == b).tolist():
                    self.orphaned_from[row] = b
                    self.owner[row] = -1
                changed = True
        if changed:
            self._elect()
            if self.written:
                self._update_all()  # the broker's znode change is a metadata notification too

    def _live(self, traffic: Minute, now_millis: int) -> dict[int, _Live]:
        brokers, bundles = self.world.brokers, self.world.bundles
        stats = traffic.stats
        owned = self.owner >= 0
        owner = self.owner[owned]
        messages = stats[owned, 0] + stats[owned, 1]
        throughput = stats[owned, 2] + stats[owned, 3]
        cost = messages * brokers.cpu_per_msg[owner] + throughput / MIB * brokers.cpu_per_mib[owner]
        count = len(self.ids)
        factors = brokers.cost_factors((now_millis - EPOCH_MILLIS) // MINUTE_MILLIS)
        if factors is not None:
            cost = cost * factors[owner]
        cpu_points = np.bincount(owner, weights=cost, minlength=count) + brokers.background * brokers.cores
        if brokers.cpu_noise is not None:
            noise = self.cpu_noise.normal(0.0, 1.0, count) * brokers.cpu_noise * brokers.cores
            cpu_points = np.maximum(0.0, cpu_points + noise)
        cpu = cpu_points.tolist()
        bandwidth_in = (np.bincount(owner, weights=stats[owned, 2], minlength=count) * KBIT_PER_BYTE).tolist()
        bandwidth_out = (np.bincount(owner, weights=stats[owned, 3], minlength=count) * KBIT_PER_BYTE).tolist()
        order = np.argsort(self.owner, kind="stable")
        bounds = np.searchsorted(self.owner[order], np.arange(count + 1)).tolist()
        cpu_limit = (brokers.cores * 100).tolist()
        nic_limit = (brokers.nic_gbps * 1024 * 1024).tolist()
        live: dict[int, _Live] = {}
        for b in np.flatnonzero(self.alive).tolist():
            rows = order[bounds[b] : bounds[b + 1]]
            row_stats = stats[rows]
            totals = row_stats.sum(axis=0).tolist() if len(rows) else [0.0, 0.0, 0.0, 0.0]
            report = usage_report(
                cpu_usage=cpu[b],
                cpu_limit=cpu_limit[b],
                bandwidth_in=bandwidth_in[b],
                bandwidth_out=bandwidth_out[b],
                bandwidth_limit=nic_limit[b],
            )
            live[b] = _Live(
                usage=broker_usage(report, self.config),
                msg_rate=totals[0] + totals[1],
                throughput=totals[2] + totals[3],
                totals=totals,
                rows=rows,
                stats=row_stats,
                topics=bundles.topics[rows],
                names=[self.names[row] for row in rows.tolist()],
                usage_report=report,
                now_millis=now_millis,
            )
        return live

    def _needs_write(self, b: int, live: _Live, minute: int) -> bool:
        """`ModularLoadManagerImpl.needBrokerDataUpdate`: the max interval passed, or a change beyond the threshold."""
        old = self.written.get(b)
        if old is None or b in self.force_write:
            return True
        if minute - old.minute >= self.config.report_update_max_interval_minutes:
            return True
        before = old.live
        change = max(
            100.0 * abs(before.usage - live.usage),
            _percent_change(before.msg_rate, live.msg_rate),
            _percent_change(before.throughput, live.throughput),
            _percent_change(len(before.rows), len(live.rows)),
        )
        return change > self.config.report_update_threshold_percentage

    def _write_reports(self, live: Mapping[int, _Live], minute: int) -> None:
        for b in sorted(live):
            if self._needs_write(b, live[b], minute):
                self.written[b] = _Written(live[b], minute)
                self.force_write.discard(b)
                self._update_all()

    def _record(self, row: int, live: Mapping[int, _Live]) -> None:
        for b, entry in live.items():
            self.scores[row, b] = entry.usage * 100

    def _collect(self, minute: int, live: Mapping[int, _Live]) -> None:
        """One collection of every live broker's report: traffic and resource usage (percent)."""
        for b, entry in sorted(live.items()):
            report = entry.usage_report
            usage = [percent_usage(report.cpu), percent_usage(report.bandwidth_in), percent_usage(report.bandwidth_out)]
            self.history.setdefault(self.ids[b], []).append([minute, *entry.totals, *usage])
        oldest = minute - HISTORY_MINUTES
        for samples in self.history.values():
            while samples and samples[0][0] <= oldest:
                samples.pop(0)

    def _usage_models(self) -> UsageModels:
        histories = {}
        for broker_id, samples in sorted(self.history.items()):
            if not samples:
                continue
            columns = np.array(samples, dtype=float)
            histories[broker_id] = BrokerHistory(
                taken_at=columns[:, 0] * 60.0,  # the simulation's minutes, in seconds
                msg_rate_in=columns[:, 1],
                msg_rate_out=columns[:, 2],
                throughput_in=columns[:, 3],
                throughput_out=columns[:, 4],
                usage={resource: columns[:, 5 + index] for index, resource in enumerate(RESOURCES)},
            )
        return fit_usage_models(histories, now=newest_sample(histories))

    def _capture_before_round(self, minute: int) -> None:
        """Until the first round with moves: the live scores and bundle points it starts from.

        A bundle's points are the CPU it costs its owner (cores and costs of the owner's hardware), the
        figure the lower bound on moves works with.
        """
        if self.rounds or self._last_traffic is None:
            return
        brokers, stats = self.world.brokers, self._last_traffic.stats
        live = [b for b in range(len(self.ids)) if not np.isnan(self.scores[minute, b])]
        rows = np.flatnonzero(self.owner >= 0)
        owner = self.owner[rows]
        messages = stats[rows, 0] + stats[rows, 1]
        volume = stats[rows, 2] + stats[rows, 3]
        cost = messages * brokers.cpu_per_msg[owner] + volume / MIB * brokers.cpu_per_mib[owner]
        points = cost / brokers.cores[owner]
        self._first_round_before = (
            {self.ids[b]: float(self.scores[minute, b]) for b in live},
            {
                self.names[row]: (self.ids[b], value)
                for row, b, value in zip(rows.tolist(), owner.tolist(), points.tolist(), strict=True)
            },
        )

    def _plan_errors(self) -> tuple[float, ...]:
        """Per executed plan, the largest |measured - predicted| score over its brokers the minute after it."""
        column = {broker_id: b for b, broker_id in enumerate(self.ids)}
        errors = []
        for plan in self.plans:
            gaps = [
                abs(float(self.scores[plan.minute + 1, column[broker_id]]) - predicted)
                for broker_id, predicted in plan.predicted_scores.items()
                if not np.isnan(self.scores[plan.minute + 1, column[broker_id]])
            ]
            if gaps:
                errors.append(max(gaps))
        return tuple(errors)

    def _states(self, live: Mapping[int, _Live]) -> dict[str, BrokerState]:
        """Every live broker's usage percent per resource and traffic, as a plan's outcome measures them."""
        states = {}
        for b, entry in sorted(live.items()):
            report = entry.usage_report
            usage = (percent_usage(report.cpu), percent_usage(report.bandwidth_in), percent_usage(report.bandwidth_out))
            states[self.ids[b]] = BrokerState(dict(zip(RESOURCES, usage, strict=True)), BrokerTraffic(*entry.totals))
        return states

    def _first_round_lower_bound(self) -> int | None:
        """The fewest moves that reach the spread the first round's own moves give on the load of that minute.

        Judged on that minute's load, not the next minute's measurement, so that traffic drift cannot make
        the round look better than any plan could be: its moves are one of the plans the bound ranges over.
        The bound assumes a bundle costs the same points on every broker: only for identical hardware.
        """
        if not self.rounds or self._first_round_before is None:
            return None
        brokers = self.world.brokers
        hardware = np.column_stack([brokers.cores, brokers.cpu_per_msg, brokers.cpu_per_mib, brokers.nic_gbps])
        if len(np.unique(hardware, axis=0)) > 1:
            return None
        scores, bundles = self._first_round_before
        after = dict(scores)
        first = self.rounds[0].minute
        for move in self.moves:
            if move.minute == first and not move.forced and move.bundle in bundles:
                source, points = bundles[move.bundle]
                after[source] -= points
                after[move.destination] += points
        order = sorted(scores)
        owned = {broker_id: [p for b, p in bundles.values() if b == broker_id] for broker_id in order}
        spread = max(after.values()) - min(after.values())
        return fewest_moves_lower_bound([scores[b] for b in order], [owned[b] for b in order], spread)

    def step(self, minute: int) -> None:
        now_millis = EPOCH_MILLIS + minute * MINUTE_MILLIS
        self._apply_events(minute)
        self._place_orphans(minute)
        traffic = self.traffic.minute(minute)
        self._last_traffic = traffic
        live = self._live(traffic, now_millis)
        self._record(minute, live)
        if self.calibration.enabled:
            changed = any(event.minute == minute for event in self.world.events)
            self.calibration.measured(minute, self._states(live), brokers_changed=changed)
        spiking_owners = self.owner[traffic.spiking & (self.owner >= 0)]
        self.last_spike[np.unique(spiking_owners)] = minute
        self._write_reports(live, minute)
        if self.policy.offline and minute % COLLECT_MINUTES == 0:
            self._collect(minute, live)
        self._act(minute, now_millis, live)

    def _act(self, minute: int, now_millis: int, live: Mapping[int, _Live]) -> None:
        """The policy's turn, after the minute's traffic and reports."""
        if self.leader is None or len(live) <= 1 or minute % self.cadence != 0:
            return
        self._capture_before_round(minute)
        if self.policy.offline:
            self._offline_plan(minute, now_millis, live)
        elif self.written:
            self._shedding_cycle(minute, now_millis)

    def run(self) -> RunResult:
        for minute in range(self.minutes):
            self.step(minute)
        # The final row: the load after the last minute's moves, with the last minute's traffic.
        assert self._last_traffic is not None  # minutes >= 1
        final = self._live(self._last_traffic, EPOCH_MILLIS + self.minutes * MINUTE_MILLIS)
        self._record(self.minutes, final)
        scenario = self.world.scenario
        metrics = compute_metrics(
            self.scores,
            self.moves,
            self.rounds,
            target_spread=self.target_spread,
            threshold=float(self.config.broker_threshold_shedder_percentage),
            broker_ids=self.ids,
            moves_lower_bound=self._first_round_lower_bound(),
            plan_errors=self._plan_errors(),
            empty_plans=self.empty_plans if self.policy.offline else None,
            balanced_plans=self.balanced_plans if self.policy.offline else None,
            policy_violations=self.policy_violations(),
        )
        return RunResult(
            scenario=scenario.name,
            policy=self.policy.name,
            seed=self.seed,
            minutes=self.minutes,
            target_spread=self.target_spread,
            brokers=self.ids,
            scores=self.scores,
            moves=tuple(self.moves),
            rounds=tuple(self.rounds),
            metrics=metrics,
            plans=tuple(self.plans),
            cluster_policies_ignored=self.plan_policies is None and self.cluster_policies is not None,
        )

    # --- policies -------------------------------------------------------------------------------

    def _shedding_cycle(self, minute: int, now_millis: int) -> None:
        """`ModularLoadManagerImpl.doLoadShedding` on the leader, with the placement pipeline choosing destinations."""
        memory = self.memory
        grace = self.config.shedding_grace_period_millis
        memory.recently_unloaded = {
            bundle: at for bundle, at in memory.recently_unloaded.items() if now_millis - at <= grace
        }
        view = self._leader_view()
        outcome = self.policy.strategy.run(view, self.config, memory.shedding_state)
        memory.shedding_state = outcome.state
        session = memory.session
        # A shedder bound to its placement hands it the destinations it planned (one Java instance: AvgShedder).
        remember = self.policy.strategy.placement_memory
        planned = remember(outcome) if remember is not None else None
        if planned is not None:
            session.remember(planned)
        index = {broker_id: b for b, broker_id in enumerate(self.ids)}
        sources, destinations = [], []
        policies = self.cluster_policies
        for unload in outcome.unloads:
            if policies is not None and unload_refusal(
                unload.bundle, unload.broker, view, session, self.config, policies
            ):
                continue
            destination = select_broker(unload.bundle, view, self.config, session, preallocate=False, policies=policies)
            if destination is None or destination == unload.broker:
                continue  # Pulsar skips an unload whose destination is its source
            row = self.averages.index[unload.bundle]
            memory.recently_unloaded[unload.bundle] = now_millis
            if self.owner[row] == index[destination]:
                continue
            self._move(row, index[destination], minute, forced=False)
            sources.append(self.moves[-1].source or unload.broker)
            destinations.append(destination)
        if planned is not None:
            # Planned destinations serve one shedding attempt (PR #26246; earlier releases lose them soon too).
            session.forget(type(planned))
        if sources:
            self.rounds.append(RoundRecord(minute, tuple(sources), tuple(destinations)))

    def _snapshot(self, live: Mapping[int, _Live]) -> LoadData:
        """What a collect sees now: every live broker's report, with the leader's bundle averages."""
        return LoadData.model_construct(
            brokers={self.ids[b]: entry.report for b, entry in sorted(live.items())},
            bundle_data=self.bundle_view,
            recently_unloaded_bundles=dict(self.offline_recent),
        )

    def _offline_plan(self, minute: int, now_millis: int, live: Mapping[int, _Live]) -> None:
        """This product's scheduled run: collect reports, plan, approve, execute the unloads."""
        snapshot, fitted = self._snapshot(live), self._usage_models()
        plan = make_plan(
            "simulated",
            snapshot,
            self.plan_config,
            self.policy.strategy.name,
            self.offline_state,
            now_millis=now_millis,
            include_splits=False,
            seed=self.seed * 100_003 + minute,
            usage_models=self.calibration.models(fitted, snapshot),
            policies=self.plan_policies,
        )
        self.offline_state = plan.state_after
        if not plan.actions:
            self.empty_plans += 1
            self.balanced_plans += plan.balance is not None and plan.balance.balanced
        grace = self.plan_config.shedding_grace_period_millis
        self.offline_recent = {b: at for b, at in self.offline_recent.items() if now_millis - at <= grace}
        index = {broker_id: b for b, broker_id in enumerate(self.ids)}
        sources, destinations = [], []
        owners = self._owners() if self.plan_policies is not None else {}
        for action in plan.actions:
            if action.kind is not ActionKind.UNLOAD or action.destination is None:
                continue
            row = self.averages.index[action.bundle]
            target = index.get(action.destination)
            owner = int(self.owner[row])
            # The executor's preconditions: still owned by the planned source, destination still active.
            if target is None or not self.alive[target] or owner < 0 or self.ids[owner] != action.source:
                continue
            if self.refuses(action.bundle, action.destination, owners):
                continue
            self._move(row, target, minute, forced=False)
            self.offline_recent[action.bundle] = now_millis
            sources.append(action.source)
            destinations.append(action.destination)
        if sources:
            self.rounds.append(RoundRecord(minute, tuple(sources), tuple(destinations)))
            if self.calibration.enabled:
                resolved = UsageModels(brokers=resolved_models(snapshot, fitted))
                self.calibration.executed(minute, resolved, self._states(live))
            self.plans.append(
                PlanRecord(
                    minute=minute,
                    moves=len(sources),
                    predicted_scores={broker.broker: broker.score_after for broker in plan.brokers},
                    predicted_moves=plan.predicted_moves,
                )
            )

    def refuses(self, bundle: str, destination: str, owners: dict[str, str]) -> bool:
        """The executor's check of a destination against the policies in force (none when this product ignores
        them); `owners` follows the moves it lets through."""
        if self.plan_policies is None:
            return False
        refusal = destination_refusal(
            bundle, destination, self.plan_policies, owners, brokers=self._up(), config=self.plan_config
        )
        if refusal is not None:
            self.refused_moves += 1
            return True
        owners[bundle] = destination
        return False

    def policy_violations(self) -> PolicyViolations | None:
        """What the run left against the cluster's policies (None: the scenario declares none)."""
        if self.judge is None:
            return None
        owners, up = self._owners(), self._up()
        return PolicyViolations(
            isolation=self.judge.isolation_violations(owners, up),
            anti_affinity=self.judge.anti_affinity_violations(owners, up),
            forbidden_moves=self.forbidden_moves,
            refused_moves=self.refused_moves,
        )


def _percent_change(old: float, new: float) -> float:
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return 100.0 * abs((old - new) / old)


def base_config(scenario: Scenario, overrides: Mapping[str, Any] | None = None) -> PulsarConfig:
    """The scenario's Pulsar settings with the caller's on top (e.g. the CLI's --set)."""
    settings = {key: value for key, value in scenario.settings.items()}
    settings.update(overrides or {})
    return PulsarConfig.from_settings(settings, source=f"settings of scenario {scenario.name}")


def simulate(
    scenario: Scenario,
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
    """Run one policy on one scenario; deterministic for a seed. `ignore_cluster_policies`: this product plans and
    executes as if the cluster declared no policies (Pulsar's leader still obeys them)."""
    return run_source(
        SyntheticSource(scenario),
        policy,
        seed=seed,
        minutes=minutes,
        cadence_minutes=cadence_minutes,
        target_spread=target_spread,
        overrides=overrides,
        ignore_cluster_policies=ignore_cluster_policies,
        calibration=calibration,
    )


# --- where a run's cluster and traffic come from -----------------------------------------------------------------
# One protocol, two sources: `SyntheticSource`, a named scenario (its brokers and bundles generated from the seed,
# its traffic drawn minute by minute), and `planner.simulator.replay.RecordedSource`, a cluster's recorded history.
# `run_source` runs one policy on either through the same loop, so a strategy is judged the same way on both.


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
