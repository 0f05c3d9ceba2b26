"""The replay of a recorded history (`planner.simulator.replay`): a small history written with the samples dataset's
own writer, read back through the dataset's reader, compiled for the engine and run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from planner.errors import InputError
from planner.pulsar.model import NamespaceBundleStats
from planner.samples.dataset import read_samples, write_snapshot_samples
from planner.simulator.replay import (
    Interpolation,
    RecordedHistory,
    build_replay_world,
    p95_score,
    replay,
)
from tests.builders import broker, bundle

CLUSTER = "east"
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
# Each broker's hardware: cores, CPU percent of the whole broker per msg/s, background percent.
HARDWARE = {"a:8080": (8, 0.04, 3.0), "b:8080": (8, 0.02, 2.0), "c:8080": (16, 0.01, 1.0)}
JOINS = {"c:8080": 6}  # broker c appears in the 7th snapshot
MISSING = {4: "b:8080"}  # the collect could not read b in the 5th snapshot


@dataclass(frozen=True)
class Recorded:
    root: Path
    snapshots: int
    # bundle -> (owner, msg/s in per snapshot)
    traffic: dict[str, tuple[str, list[float]]]

    def history(self, missing: dict[int, frozenset[str]] | None = None) -> RecordedHistory:
        return RecordedHistory(
            CLUSTER,
            read_samples(self.root, "brokers", CLUSTER),
            read_samples(self.root, "bundles", CLUSTER),
            missing=missing if missing is not None else {k + 1: frozenset([b]) for k, b in MISSING.items()},
        )


def record(root: Path, snapshots: int = 14, interval: int = 5) -> Recorded:
    """`snapshots` snapshots `interval` minutes apart: a hot broker a, a cool b, c joining empty; traffic varies so
    the costs can be fitted; a partial snapshot misses b."""
    traffic: dict[str, tuple[str, list[float]]] = {}
    for index in range(6):
        owner = "a:8080" if index < 4 else "b:8080"
        rates = [100.0 + 40 * index + 30 * ((k * (index + 1)) % 5) for k in range(snapshots)]
        traffic[bundle(index)] = (owner, rates)
    for k in range(snapshots):
        reports = {}
        for broker_id, (cores, per_msg, background) in HARDWARE.items():
            if JOINS.get(broker_id, 0) > k or MISSING.get(k) == broker_id:
                continue
            stats = {
                name: NamespaceBundleStats(
                    msg_rate_in=rates[k], msg_rate_out=rates[k], msg_throughput_in=rates[k] * 1024, topics=2
                )
                for name, (owner, rates) in traffic.items()
                if owner == broker_id
            }
            messages = sum(2 * rates[k] for owner, rates in traffic.values() if owner == broker_id)
            cpu = (background + per_msg * messages) * cores  # usage in percent of one core, limit cores * 100
            reports[broker_id] = broker(
                cpu=(cpu, cores * 100),
                rate_in=messages / 2,
                rate_out=messages / 2,
                bundles=stats,
                last_stats=stats,
            )
        write_snapshot_samples(root, CLUSTER, k + 1, START + timedelta(minutes=interval * k), reports)
    return Recorded(root, snapshots, traffic)


@pytest.fixture
def recorded(tmp_path: Path) -> Recorded:
    return record(tmp_path)


def test_brokers_get_their_recorded_hardware_and_fitted_costs(recorded):
    world = build_replay_world(recorded.history()).world
    brokers = world.brokers
    assert brokers.ids == ("a:8080", "b:8080", "c:8080")
    assert brokers.cores.tolist() == [8, 8, 16]
    # a and b have traffic enough to fit their own costs: percent of one core per msg/s = whole-broker percent * cores
    assert brokers.cpu_per_msg[0] == pytest.approx(0.04 * 8, rel=1e-6)
    assert brokers.cpu_per_msg[1] == pytest.approx(0.02 * 8, rel=1e-6)
    assert brokers.background[:2] == pytest.approx([3.0, 2.0], rel=1e-6)


def test_first_minute_scores_are_the_recorded_ones_and_joins_leaves_follow_the_snapshots(recorded):
    result = replay(recorded.history(), "offline:AvgShedder")
    a, b, c = 0, 1, 2
    assert result.minutes == 5 * (recorded.snapshots - 1) + 1
    cpu_a = HARDWARE["a:8080"][2] + HARDWARE["a:8080"][1] * sum(
        2 * r[0] for o, r in recorded.traffic.values() if o == "a:8080"
    )
    assert result.scores[0, a] == pytest.approx(cpu_a, rel=1e-6)
    # c joins in the 7th snapshot's minute (30), not before
    assert np.isnan(result.scores[29, c]) and np.isfinite(result.scores[30, c])
    # b was not read in the 5th snapshot (minute 20): still up, with its bundles' last traffic
    assert np.isfinite(result.scores[20:25, b]).all()
    assert result.scores[20, b] == pytest.approx(result.scores[19, b])


def test_a_broker_absent_from_a_snapshot_that_was_read_stops_then_comes_back(recorded):
    history = recorded.history(missing={})  # nobody says b was unreadable: absent means down
    result = replay(history, "offline:AvgShedder")
    assert np.isnan(result.scores[20:25, 1]).all()
    assert np.isfinite(result.scores[25, 1])
    forced = [move for move in result.moves if move.forced]
    assert forced and all(move.minute >= 20 for move in forced)


def test_traffic_between_snapshots_is_held_or_interpolated(recorded):
    history = recorded.history()
    held = build_replay_world(history).traffic
    linear = build_replay_world(history, interpolation=Interpolation.LINEAR).traffic
    row = build_replay_world(history).world.bundles.names.index(bundle(0))
    rates = recorded.traffic[bundle(0)][1]
    assert held.minute(7).stats[row, 0] == rates[1]
    assert linear.minute(7).stats[row, 0] == pytest.approx(rates[1] + (rates[2] - rates[1]) * 2 / 5)
    assert linear.minute(5).stats[row, 0] == rates[1]


def test_a_bundle_two_brokers_reported_in_one_snapshot_counts_the_row_read_last(recorded):
    history = recorded.history()
    table = history.bundles
    rows = table.filter(pc.and_(pc.equal(table["snapshot_id"], 3), pc.equal(table["bundle"], bundle(0))))
    moving = rows.set_column(rows.schema.get_field_index("broker"), "broker", pa.array(["b:8080"]))
    moving = moving.set_column(moving.schema.get_field_index("msg_rate_in"), "msg_rate_in", pa.array([999.0]))
    rates = recorded.traffic[bundle(0)][1]
    for bundles, expected in (((table, moving), 999.0), ((moving, table), rates[2])):
        world = build_replay_world(replace(history, bundles=pa.concat_tables(bundles)))
        row = world.world.bundles.names.index(bundle(0))
        assert world.traffic.minute(10).stats[row, 0] == expected  # the 3rd snapshot
        assert world.traffic.minute(5).stats[row, 0] == rates[1]
        assert world.world.bundles.initial_owner[row] == 0  # a:8080, its first record


def test_replay_is_deterministic(recorded):
    first = replay(recorded.history(), "offline:AvgShedder", cadence_minutes=10)
    second = replay(recorded.history(), "offline:AvgShedder", cadence_minutes=10)
    assert np.array_equal(first.scores, second.scores, equal_nan=True)
    assert first.moves == second.moves
    assert first.metrics == second.metrics


def test_removing_a_broker_places_its_bundles_elsewhere_and_raises_the_p95(recorded):
    history = recorded.history()
    whole = replay(history, "ThresholdShedder")
    without = replay(history, "ThresholdShedder", remove=["b:8080"])
    assert without.brokers == ("a:8080", "c:8080")
    placed = {move.bundle for move in without.moves if move.forced}
    assert placed == {name for name, (owner, _) in recorded.traffic.items() if owner == "b:8080"}
    assert p95_score(without) > p95_score(whole)
    with pytest.raises(InputError, match=r"remove: x:8080 is not a recorded broker"):
        replay(history, "ThresholdShedder", remove=["x:8080"])


def test_p95_score_is_over_brokers_and_minutes(recorded):
    result = replay(recorded.history(), "OverloadShedder")
    live = result.scores[np.isfinite(result.scores)]
    assert p95_score(result) == pytest.approx(float(np.percentile(live, 95)))
    assert np.isnan(result.scores).any()  # broker c before it joined: not counted as zero


def test_an_empty_window_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"replay of cluster 'east': no snapshots recorded in the window"):
        RecordedHistory(CLUSTER, read_samples(tmp_path, "brokers", CLUSTER), read_samples(tmp_path, "bundles", CLUSTER))


def test_one_protocol_runs_a_scenario_and_a_recorded_history_alike(recorded):
    from planner.simulator.engine import SyntheticSource, run_source, simulate
    from planner.simulator.replay import RecordedSource
    from planner.simulator.scenario import load_scenario

    scenario = load_scenario("spike")
    through_source = run_source(SyntheticSource(scenario), "AvgShedder", seed=3, minutes=40)
    direct = simulate(scenario, "AvgShedder", seed=3, minutes=40)
    assert np.array_equal(through_source.scores, direct.scores, equal_nan=True)
    assert through_source.moves == direct.moves
    history = recorded.history()
    source = RecordedSource(history)
    assert run_source(source, "AvgShedder").moves == replay(history, "AvgShedder").moves
    assert source.minutes == 5 * (recorded.snapshots - 1) + 1
