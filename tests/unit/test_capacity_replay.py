"""The capacity advice checked against the simulator (issue #36's proof): half a day of the simulator's snapshots
written with the samples dataset's own writer, the advice asked of the `capacity` command, then the window replayed
(`planner.simulator.replay`) without the advised broker (the p95 score stays under the target) and without one more
(it does not)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from planner.cli import main
from planner.samples.dataset import read_samples, write_snapshot_samples
from planner.simulator.engine import EPOCH_MILLIS, Simulation, _Live, base_config, parse_policy
from planner.simulator.replay import RecordedHistory, p95_score, replay
from planner.simulator.scenario import build_world, parse_scenario

CLUSTER = "east"
TARGET = 65.0
POLICY = "offline:AvgShedderPredictive"
# Five brokers of one kind at about 42 % (4 of background), traffic up to 15 % over its mean over the half day and
# 5 % noise a minute: about 210 points of CPU at the p95, so four brokers run at about 57 and three at about 75.
SCENARIO = """
name = "capacity-proof"
description = "five equal brokers, a daily cycle"
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
    """The simulated cluster, collected as the collect DAG does (every 5 minutes), into the samples dataset."""

    root: Path

    def _collect(self, minute: int, live: Mapping[int, _Live]) -> None:
        super()._collect(minute, live)
        reports = {self.ids[b]: entry.report for b, entry in sorted(live.items())}
        write_snapshot_samples(self.root, CLUSTER, minute // 5 + 1, START + timedelta(minutes=minute), reports)


def record_half_day(root: Path) -> None:
    scenario = parse_scenario(SCENARIO, "capacity-proof")
    simulation = _Recording(
        build_world(scenario, 1),
        parse_policy(POLICY),
        base_config(scenario),
        seed=1,
        minutes=scenario.minutes,
        cadence_minutes=60,
        target_spread=scenario.target_spread,
    )
    simulation.root = root
    simulation.run()


def busiest_p95(scores: np.ndarray) -> float:
    """The p95 over the minutes of the busiest live broker's score: the figure the advice compares with the target."""
    busiest = np.nanmax(scores, axis=1)
    return float(np.percentile(busiest, 95))


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("capacity")
    record_half_day(root)
    return root


def test_removing_the_advised_broker_keeps_the_replayed_p95_under_the_target_and_one_more_does_not(
    day: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(day))
    end = START + timedelta(hours=12)
    code = main(
        [
            "capacity",
            CLUSTER,
            "--target",
            str(TARGET),
            "--from",
            START.isoformat(),
            "--to",
            end.isoformat(),
            "--json",
            "--db",
            f"sqlite:///{day}/planner.db",
        ]
    )
    assert code == 0
    advice = json.loads(capsys.readouterr().out)
    assert [kind["brokers"] for kind in advice["kinds"]] == [[f"broker-{index}:8080" for index in range(1, 6)]]
    # Four brokers serve the day under 65, three do not: N+1 needs all five, yet one can go if the team accepts
    # losing the spare (the advice says so).
    assert advice["counts"] == [{"kind": "kind-1", "recorded": 5, "needed": 5, "spare": 0}]
    advised = advice["removal"]["broker"]
    assert advice["removal"]["p95"] < TARGET < advice["removal"]["oneDownP95"]

    history = RecordedHistory(CLUSTER, read_samples(day, "brokers", CLUSTER), read_samples(day, "bundles", CLUSTER))
    without = replay(history, POLICY, remove=[advised])
    another = next(broker for broker in without.brokers if broker != advised)
    without_two = replay(history, POLICY, remove=[advised, another])
    figures = {
        "advised": (p95_score(without), busiest_p95(without.scores)),
        "one more": (p95_score(without_two), busiest_p95(without_two.scores)),
        "advice": (advice["removal"]["p95"], advice["removal"]["oneDownP95"]),
    }
    print(json.dumps(figures))  # the figures docs/evaluation.md quotes
    assert busiest_p95(without.scores) < TARGET and p95_score(without) < TARGET
    assert busiest_p95(without_two.scores) > TARGET and p95_score(without_two) > TARGET
