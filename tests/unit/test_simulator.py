"""The cluster simulator: determinism, Pulsar's report and averaging mechanics, and the qualitative
results each strategy is known for (PIP-364's motivation; docs/evaluation.md has them per scenario)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from planner.cli import main
from planner.errors import InputError
from planner.pulsar.model import NUM_LONG_SAMPLES, NamespaceBundleStats, TimeAverageMessageData
from planner.samples.time_average import update_time_average
from planner.simulator.engine import (
    EPOCH_MILLIS,
    MINUTE_MILLIS,
    Simulation,
    base_config,
    parse_policy,
    simulate,
)
from planner.simulator.leader import BundleAverages, fold_samples
from planner.simulator.maintenance import compare_drain, compare_fill
from planner.simulator.scenario import (
    build_world,
    builtin_scenarios,
    load_scenario,
    random_scenario,
    scenario_from_mapping,
)


def small_cluster(**overrides):
    document = {
        "name": "small",
        "minutes": 60,
        "brokers": [{"name": "a"}, {"name": "b"}],
        "bundles": [
            {"namespace": "t/ns", "count": 8, "owners": ["a"], "score": 60},
            {"namespace": "t/ns", "count": 8, "owners": ["b"], "score": 30},
        ],
    }
    document.update(overrides)
    return scenario_from_mapping(document, "test")


# --- determinism -----------------------------------------------------------------------------------


def test_same_seed_same_run_and_other_seed_other_traffic():
    scenario = random_scenario(7)
    first = simulate(scenario, "UniformLoadShedder", seed=3, minutes=90)
    second = simulate(scenario, "UniformLoadShedder", seed=3, minutes=90)
    other = simulate(scenario, "UniformLoadShedder", seed=4, minutes=90)
    assert first.metrics == second.metrics
    assert first.moves == second.moves
    np.testing.assert_array_equal(first.scores, second.scores)
    assert not np.array_equal(np.nan_to_num(first.scores), np.nan_to_num(other.scores))


def test_random_scenarios_are_a_function_of_their_seed():
    assert random_scenario(11) == random_scenario(11)
    assert random_scenario(11) != random_scenario(12)
    assert load_scenario("random:11") == random_scenario(11)


def test_every_shipped_scenario_loads():
    names = builtin_scenarios()
    for required in (
        "threshold-over-unloading",
        "multi-hit-80-80-20",
        "spike",
        "heterogeneous",
        "scale-out",
        "rolling-restart",
    ):
        assert required in names
    for name in names:
        assert load_scenario(name).name == name


# --- Pulsar's mechanics ----------------------------------------------------------------------------


def test_vectorised_averages_match_planner_time_average_bit_for_bit():
    rng = random.Random(5)
    count, steps = 6, 1200  # past 1000 samples, so the long-term average turns into an EMA
    averages = np.tile([50.0, 50.0, 50000.0, 50000.0], (count, 1))
    counts = np.zeros(count, dtype=np.int64)
    reference = [TimeAverageMessageData(max_samples=NUM_LONG_SAMPLES) for _ in range(count)]
    for _ in range(steps):
        mask = np.array([rng.random() < 0.8 for _ in range(count)])
        sample = np.array([[rng.uniform(0, 1e4) for _ in range(4)] for _ in range(count)])
        fold_samples(averages, counts, NUM_LONG_SAMPLES, mask, sample)
        for row in np.flatnonzero(mask):
            stats = NamespaceBundleStats(
                msg_rate_in=sample[row, 0],
                msg_rate_out=sample[row, 1],
                msg_throughput_in=sample[row, 2],
                msg_throughput_out=sample[row, 3],
            )
            reference[row] = update_time_average(reference[row], stats)
    for row in range(count):
        expected = reference[row]
        assert counts[row] == expected.num_samples
        assert averages[row].tolist() == [
            expected.msg_rate_in,
            expected.msg_rate_out,
            expected.msg_throughput_in,
            expected.msg_throughput_out,
        ]


def test_a_bundle_in_two_reports_gets_two_samples_and_unreported_bundles_are_dropped():
    averages = BundleAverages(["t/ns/0x00000000_0x80000000", "t/ns/0x80000000_0xffffffff"])
    stats = np.array([[10.0, 0.0, 0.0, 0.0]])
    averages.update_all([(np.array([0]), stats, np.array([1])), (np.array([0]), stats * 3, np.array([1]))])
    assert averages.short_count[0] == 2
    assert averages.short[0, 0] == 20.0  # mean of 10 and 30
    assert averages.present.tolist() == [True, False]
    averages.update_all([(np.array([1]), stats, np.array([1]))])
    assert averages.present.tolist() == [False, True]
    averages.update_all([(np.array([0]), stats, np.array([1]))])
    assert averages.short_count[0] == 1  # came back: Pulsar's defaults, then the first sample overwrites
    assert averages.short[0, 0] == 10.0


def test_reports_are_written_on_a_10_percent_change_or_every_15_minutes():
    scenario = small_cluster(
        bundles=[
            {"namespace": "t/ns", "count": 4, "owners": ["a"], "score": 40},
            {
                "namespace": "t/ns",
                "count": 4,
                "owners": ["b"],
                "score": 40,
                "spikes": [{"at": 20, "minutes": 3, "factor": 1.05}, {"at": 40, "minutes": 2, "factor": 1.5}],
            },
        ],
    )
    policy = parse_policy("OverloadShedder")  # nothing is over 85 %: no moves disturb the reports
    world = build_world(scenario, seed=1)
    simulation = Simulation(
        world, policy, base_config(scenario), seed=1, minutes=60, cadence_minutes=60, target_spread=20
    )
    written = {0: [], 1: []}
    for minute in range(60):
        simulation.step(minute)
        for broker, entry in simulation.written.items():
            if entry.minute == minute:
                written[broker].append(minute)
    assert written[0] == [0, 15, 30, 45]  # steady: only the maximum interval
    # b: +5 % at 20 is below the threshold; +50 % at 40 and back at 42 are not.
    assert written[1] == [0, 15, 30, 40, 42, 57]
    report = simulation.written[1].report
    assert report.last_update == EPOCH_MILLIS + 57 * MINUTE_MILLIS
    assert report.num_bundles == len(report.last_stats) == 4


def test_recently_unloaded_bundles_are_not_moved_again_within_the_grace_period():
    result = simulate(load_scenario("scale-out"), "UniformLoadShedder", minutes=120)
    last_move: dict[str, int] = {}
    assert result.metrics.moves > 10
    for move in result.moves:
        if move.bundle in last_move:
            assert move.minute - last_move[move.bundle] > 30
        last_move[move.bundle] = move.minute


def test_a_stopped_broker_s_bundles_are_reassigned_and_it_comes_back_empty():
    scenario = small_cluster(events=[{"at": 10, "kind": "restart", "brokers": ["b"], "down": 3}])
    result = simulate(scenario, "AvgShedder", minutes=20)
    forced = [move for move in result.moves if move.forced]
    assert len(forced) == 8
    assert {(m.minute, m.source, m.destination) for m in forced} == {(10, "b:8080", "a:8080")}
    b = result.brokers.index("b:8080")
    assert np.isnan(result.scores[10:13, b]).all()
    assert result.scores[13, b] == pytest.approx(2.0, abs=0.01)  # back, empty: background load only
    assert result.metrics.forced_moves == 8
    assert result.metrics.moves == len(result.moves) - 8


# --- what each strategy is known for ---------------------------------------------------------------


def test_threshold_shedder_over_unloads_the_hot_broker_of_90_10():
    scenario = load_scenario("threshold-over-unloading")
    threshold = simulate(scenario, "ThresholdShedder", minutes=40)
    assert threshold.metrics.over_unloading > 0
    a = threshold.brokers.index("broker-a:8080")
    assert threshold.scores[0, a] == pytest.approx(90, abs=1)
    assert threshold.scores[-1, a] < 40  # pushed far below the average of 50
    avg = simulate(scenario, "AvgShedder", minutes=40)
    assert avg.metrics.over_unloading == 0
    assert avg.scores[-1, a] > 50


def test_uniform_load_shedder_moves_traffic_onto_the_slow_brokers():
    scenario = load_scenario("heterogeneous")
    uniform = simulate(scenario, "UniformLoadShedder", minutes=30)
    assert uniform.metrics.moves > 0
    assert {(m.source, m.destination.split("-")[0]) for m in uniform.moves} == {("fast:8080", "slow")}
    slow = [index for index, broker in enumerate(uniform.brokers) if broker.startswith("slow")]
    assert uniform.scores[-1, slow].max() > uniform.scores[0, slow].max() + 5
    avg = simulate(scenario, "AvgShedder", minutes=30)
    assert not [m for m in avg.moves if m.destination.startswith("slow")]


def test_avg_shedder_ignores_a_two_minute_spike_that_uniform_load_shedder_chases():
    scenario = load_scenario("spike")
    avg = simulate(scenario, "AvgShedder", minutes=60)
    assert avg.metrics.moves == 0
    assert avg.metrics.spike_moves == 0
    uniform = simulate(scenario, "UniformLoadShedder", minutes=60)
    assert uniform.metrics.spike_moves >= 1
    assert all(move.minute in (30, 31) for move in uniform.moves)


def test_avg_shedder_balances_scale_out_in_fewer_rounds_than_uniform_load_shedder():
    scenario = load_scenario("scale-out")
    avg = simulate(scenario, "AvgShedder", minutes=120)
    uniform = simulate(scenario, "UniformLoadShedder", minutes=120)
    assert avg.metrics.plans_to_balance is not None
    assert uniform.metrics.plans_to_balance is not None
    assert avg.metrics.plans_to_balance < uniform.metrics.plans_to_balance
    assert avg.metrics.minutes_to_balance < uniform.metrics.minutes_to_balance


def test_a_week_of_a_stable_noisy_cluster_gets_no_plan_and_every_hourly_run_says_it_is_balanced():
    scenario = load_scenario("stable-7-days")
    week = simulate(scenario, "offline:AvgShedder")
    assert week.minutes == 7 * 24 * 60
    assert week.metrics.rounds == 0 and week.metrics.moves == 0 and week.plans == ()
    # One scheduled run an hour, every plan empty; nearly all found the cluster within the thresholds (the plan's
    # `balance`), the others saw a gap the noise opened, waiting for hits it never got.
    assert week.metrics.empty_plans == 7 * 24
    assert 7 * 24 * 0.9 < week.metrics.balanced_plans < 7 * 24
    # The noise is real: the broker's own UniformLoadShedder, every minute, moves bundles on it.
    chased = simulate(scenario, "UniformLoadShedder", minutes=24 * 60)
    assert chased.metrics.moves > 0


def test_offline_plans_carry_the_hit_counters_between_hourly_runs():
    scenario = load_scenario("threshold-over-unloading")
    result = simulate(scenario, "offline:AvgShedder", minutes=130)
    # Plan 1 (minute 0) counts a high hit, plan 2 (minute 60) fires, plan 3 (minute 120) counts again.
    assert {move.minute for move in result.moves} == {60}
    assert {(m.source, m.destination) for m in result.moves} == {("broker-a:8080", "broker-b:8080")}
    faster = simulate(scenario, "offline:AvgShedder@10", minutes=30)
    assert {move.minute for move in faster.moves} == {10}


# --- input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"brokers": [{"name": "a", "cpus": 4}]}, "brokers[0].cpus"),
        ({"bundles": [{"namespace": "t/ns", "count": 2, "owners": ["nobody"], "rate": 5}]}, "no broker"),
        ({"bundles": [{"namespace": "t/ns", "count": 2, "owners": ["a"]}]}, "exactly one of rate and score"),
        ({"minutes": "60"}, "minutes"),
    ],
)
def test_bad_scenarios_name_the_field(change, message):
    with pytest.raises(InputError, match="scenario test") as error:
        small_cluster(**change)
    assert message in str(error.value)


def test_unknown_policies_and_scenarios_are_refused():
    with pytest.raises(InputError, match="unknown strategy"):
        parse_policy("LeastBusyShedder")
    with pytest.raises(InputError, match="AvgShedder placement"):
        parse_policy("ThresholdShedder+AvgShedder")
    with pytest.raises(InputError, match="cadence"):
        parse_policy("offline:AvgShedder@0")
    with pytest.raises(InputError, match="unknown scenario"):
        load_scenario("no-such-scenario")


# --- command line ---------------------------------------------------------------------------------


def test_cli_prints_the_metrics_as_json(capsys):
    policies = ["--policy", "AvgShedder", "--policy", "UniformLoadShedder"]
    code = main(["simulate", "--scenario", "spike", *policies, "--minutes", "40", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    assert set(document["policies"]) == {"AvgShedder", "UniformLoadShedder"}
    for metrics in document["policies"].values():
        for key in ("minutesToBalance", "plansToBalance", "moves", "spikeMoves", "overUnloading", "overPlacement"):
            assert key in metrics
        assert "finalSpread" in metrics


def test_cli_prints_a_table_and_writes_a_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "spike.png"
    arguments = ["--scenario", "spike", "--policy", "AvgShedder", "--minutes", "35", "--plot", str(plot)]
    code = main(["simulate", *arguments, "--format", "table"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "AvgShedder" in captured.out and "min to balance" in captured.out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "arguments",
    [
        ["--scenario", "nope"],
        ["--scenario", "spike", "--policy", "Nope"],
        ["--scenario", "spike", "--minutes", "0"],
        ["--scenario", "spike", "--set", "maxUnloadPercentage=2"],
        [],
    ],
)
def test_cli_bad_input_exits_2_and_writes_nothing(capsys, tmp_path, arguments):
    plot = tmp_path / "out.png"
    code = main(["simulate", *arguments, "--plot", str(plot)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
    assert not plot.exists()


def test_a_paced_drain_moves_no_more_than_its_pace_where_pulsars_shutdown_moves_everything_at_once():
    scenario = load_scenario("drain-1-of-10")
    shutdown, drain = compare_drain(scenario, pace=4)
    assert shutdown.moves == drain.moves == 20  # the drained broker's bundles, one way or the other
    assert shutdown.peak_moves_per_minute == 20 and drain.peak_moves_per_minute == 4
    assert drain.minutes_to_empty == 5  # 20 bundles at 4 a minute
    assert drain.peak_score <= shutdown.peak_score and drain.final_spread < shutdown.final_spread


def test_one_fill_plan_balances_new_brokers_that_pulsars_threshold_shedder_leaves_empty():
    runs = {run.label: run for run in compare_fill(load_scenario("fill-10-to-12"))}
    fill, threshold = runs["fill, 6 unloads/min"], runs["Pulsar ThresholdShedder"]
    assert threshold.moves == 0 and threshold.minutes_to_balance is None
    assert fill.minutes_to_balance is not None and fill.final_spread < 20
    assert fill.minutes_to_balance < min(r.minutes_to_balance or 10**9 for r in runs.values() if r is not fill)
    assert fill.peak_moves_per_minute <= 6 and fill.over_placement == 0


def test_maintenance_comparisons_need_their_event():
    with pytest.raises(InputError, match="has no `loss` event"):
        compare_drain(load_scenario("spike"))
    with pytest.raises(InputError, match="has no broker with joinAt"):
        compare_fill(load_scenario("spike"))
