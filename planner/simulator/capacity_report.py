"""The capacity advice checked against the simulator, for the evaluation (`docs/evaluation.md`) and its test.

A simulated cluster runs the product's offline plans for half a day while its reports are collected every 5
minutes, as the collect DAG does, and written with the samples dataset's own writer. The capacity advice
(`planner.plan.capacity`) is asked of that recording; then the recording is replayed (`planner.simulator.replay`)
without the advised broker, and without it and one more. The advice holds when the first replay keeps the p95 score
under the target and the second does not.

Two p95 figures per replay: the busiest live broker's score per minute, its p95 over the minutes (what the advice
predicts), and the replay's own `p95_score` (every live broker's score, every minute).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from planner.plan.capacity import CapacityAdvice, advise_capacity, capacity_inputs
from planner.samples.dataset import read_samples, write_snapshot_samples
from planner.simulator.engine import COLLECT_MINUTES, EPOCH_MILLIS, Simulation, _Live, base_config, parse_policy
from planner.simulator.replay import RECORDED_BUNDLE_COLUMNS, RecordedHistory, p95_score, replay, replay_config
from planner.simulator.scenario import Scenario, build_world, parse_scenario

CLUSTER = "capacity-check"
TARGET = 65.0
POLICY = "offline:AvgShedderPredictive"
CADENCE_MINUTES = 60
# Five brokers of one kind at about 42 % (4 of background), traffic up to 15 % over its mean over the half day and
# 5 % noise a minute: about 210 points of CPU at the p95, so four brokers run at about 57 and three at about 75.
SCENARIO = """
name = "capacity-check"
description = "Five equal brokers at about 42 %, a daily cycle: four of them serve the traffic under 65, three do not."
minutes = 720

[[brokers]]
name = "broker"
count = 5
background = 4

[[bundles]]
namespace = "tenant/events"
count = 100
owners = ["broker"]
score = 38
sizeSpread = 0.4
diurnal = 0.15
noise = 0.05
"""
START = datetime.fromtimestamp(EPOCH_MILLIS / 1000, UTC)


class _Recording(Simulation):
    """The simulated cluster, each collect also written to the samples dataset under `root`."""

    root: Path
    cluster: str

    def _collect(self, minute: int, live: Mapping[int, _Live]) -> None:
        super()._collect(minute, live)
        reports = {self.ids[b]: entry.report for b, entry in sorted(live.items())}
        taken_at = START + timedelta(minutes=minute)
        write_snapshot_samples(self.root, self.cluster, minute // COLLECT_MINUTES + 1, taken_at, reports)


def record(root: Path, scenario: Scenario, *, cluster: str = CLUSTER, policy: str = POLICY, seed: int = 1) -> None:
    """Run `scenario` under an offline policy and write every collect's snapshot under `root`."""
    simulation = _Recording(
        build_world(scenario, seed),
        parse_policy(policy),
        base_config(scenario),
        seed=seed,
        minutes=scenario.minutes,
        cadence_minutes=CADENCE_MINUTES,
        target_spread=scenario.target_spread,
    )
    simulation.root, simulation.cluster = root, cluster
    simulation.run()


def busiest_p95(scores: np.ndarray) -> float:
    """The p95 over the minutes of the busiest live broker's score: the figure the advice compares with the target."""
    return float(np.percentile(np.nanmax(scores, axis=1), 95))


@dataclass(frozen=True, slots=True)
class ReplayFigures:
    removed: tuple[str, ...]
    busiest_p95: float
    p95_score: float


@dataclass(frozen=True, slots=True)
class CapacityCheck:
    advice: CapacityAdvice
    snapshots: int
    advised: ReplayFigures  # without the advised broker
    one_more: ReplayFigures  # without it and one more

    @property
    def holds(self) -> bool:
        target = self.advice.target
        return (
            max(self.advised.busiest_p95, self.advised.p95_score)
            < target
            < min(self.one_more.busiest_p95, self.one_more.p95_score)
        )


def history_of(root: Path, cluster: str = CLUSTER) -> RecordedHistory:
    """Every snapshot of the recording under `root`, without a store (all of them are published)."""
    bundles = read_samples(root, "bundles", cluster, columns=RECORDED_BUNDLE_COLUMNS)
    return RecordedHistory(cluster, read_samples(root, "brokers", cluster), bundles)


def check_replayed(
    history: RecordedHistory, advice: CapacityAdvice, *, policy: str = POLICY, seed: int = 1
) -> CapacityCheck:
    """Replay `history` without the advised broker, then without it and one more (the first other broker)."""
    removal = advice.removal
    if removal is None:
        raise ValueError(f"capacity of cluster {advice.cluster!r}: the advice names no broker to remove")
    without = replay(history, policy, remove=[removal.broker], seed=seed, cadence_minutes=CADENCE_MINUTES)
    another = next(broker for broker in without.brokers if broker != removal.broker)
    removed = (removal.broker, another)
    without_two = replay(history, policy, remove=removed, seed=seed, cadence_minutes=CADENCE_MINUTES)
    return CapacityCheck(
        advice=advice,
        snapshots=len(history.snapshot_ids),
        advised=ReplayFigures((removal.broker,), busiest_p95(without.scores), p95_score(without)),
        one_more=ReplayFigures(removed, busiest_p95(without_two.scores), p95_score(without_two)),
    )


def check_capacity(*, target: float = TARGET, seed: int = 1) -> CapacityCheck:
    """The whole check on the built-in half day: record, advise, replay."""
    scenario = parse_scenario(SCENARIO, "capacity-check")
    with tempfile.TemporaryDirectory(prefix="capacity-check-") as directory:
        root = Path(directory)
        record(root, scenario, seed=seed)
        history = history_of(root)
        inputs = capacity_inputs(CLUSTER, history.brokers.to_pydict(), history.bundles.to_pydict())
        weights = replay_config(history).resource_weights
        advice = advise_capacity(inputs, weights, target=target, window=(history.start, history.end))
        return check_replayed(history, advice, seed=seed)


def capacity_markdown(check: CapacityCheck) -> str:
    """The evaluation's capacity section."""
    advice = check.advice
    removal = advice.removal
    assert removal is not None  # check_replayed refuses an advice without one
    counts = ", ".join(f"{count.kind}: {count.recorded} recorded, {count.needed} needed" for count in advice.counts)
    rows = [
        ("all five", advice.p95, None, None),
        (f"without {removal.broker} (advised)", removal.p95, check.advised.busiest_p95, check.advised.p95_score),
        (
            f"without {' and '.join(check.one_more.removed)}",
            removal.one_down_p95,
            check.one_more.busiest_p95,
            check.one_more.p95_score,
        ),
    ]

    def cell(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    table = [
        "| brokers | advice: p95 of the busiest | replay: p95 of the busiest | replay: p95 of every broker |",
        "| :-- | --: | --: | --: |",
        *(f"| {name} | {cell(a)} | {cell(b)} | {cell(c)} |" for name, a, b, c in rows),
    ]
    return "\n".join(
        [
            "## Capacity advice against a replay",
            "",
            f"`planner/simulator/capacity_report.py`: five equal brokers run `{POLICY}` for 12 hours while every "
            f"5-minute collect is written to the samples dataset ({check.snapshots} snapshots); the capacity advice "
            f"(`planner/plan/capacity.py`, what `pulsar-rebalance capacity` prints) is asked of that recording with a "
            f"target of {advice.target:g}, then the recording is replayed "
            "without the advised broker and without it and one more (the same policy, hourly). The advice's figure "
            "is the p95 over the snapshots of the busiest broker's predicted score after a largest-first placement; "
            "the replay's are measured in the simulator every minute, with the policy's own moves. The advice's figure "
            "for one more broker gone is with the worst of the others down.",
            "",
            f"Advice: {counts}; remove **{removal.broker}** ({removal.bundles} bundles, {removal.share:.0%} of the "
            "traffic). The advice holds when the replay without it stays under the target and the one without one more "
            f"does not: **{'it holds' if check.holds else 'it does not hold'}**.",
            "",
            *table,
            "",
        ]
    )
