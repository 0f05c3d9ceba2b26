"""AvgShedder against `impl/AvgShedder.java`: V1 is AvgShedderTest's `testHitHighThreshold`, V4 the AvgShedder
placement of ModularLoadManagerStrategyTest."""

from __future__ import annotations

import random

import pytest

from planner.plan.shedding import avg_shedder
from planner.plan.shedding.avg_shedder import AvgShedderPlacementState, AvgShedderState
from planner.pulsar.config import PulsarConfig
from tests.builders import broker, bundle, bundle_data, load_data

MIB = 1024 * 1024


def v1_load_data():
    """broker1 80 % with 11 bundles of 900 msg/s, broker2 30 %, broker3 50 %."""
    bundles = [bundle(i) for i in range(11)]
    return load_data(
        {
            "broker1:8080": broker(cpu=(80, 100), rate_in=10000, rate_out=10000, bundles=bundles),
            "broker2:8080": broker(cpu=(30, 100), rate_in=1000, rate_out=1000),
            "broker3:8080": broker(cpu=(50, 100), rate_in=5000, rate_out=5000),
        },
        {name: bundle_data(450, 450) for name in bundles},
    )


def run(data, config, runs):
    state = AvgShedderState()
    outcomes = []
    for _ in range(runs):
        outcome = avg_shedder.find_bundles_for_unloading(data, config, state)
        state = outcome.state
        outcomes.append(outcome)
    return outcomes


def test_v1_high_gap_fires_on_second_run_and_moves_ten_bundles_to_the_coolest_broker():
    config = PulsarConfig.from_settings({"maxUnloadPercentage": "0.5"})
    first, second = run(v1_load_data(), config, 2)
    assert first.unloads == ()
    assert first.state.high_hit_count == {"broker1:8080": 1, "broker2:8080": 1}
    assert len(second.unloads) == 10
    assert {unload.broker for unload in second.unloads} == {"broker1:8080"}
    assert {unload.destination for unload in second.unloads} == {"broker2:8080"}
    # Firing reset both brokers' counters.
    assert second.state.high_hit_count == {} and second.state.low_hit_count == {}


def test_v1_with_default_max_unload_percentage_moves_four_bundles():
    _, second = run(v1_load_data(), PulsarConfig.from_settings({}), 2)
    assert len(second.unloads) == 4


def test_moderate_gap_fires_on_the_eighth_consecutive_run():
    data = load_data(
        {
            "a:8080": broker(cpu=(50, 100), rate_in=5000, rate_out=5000, bundles=[bundle(1), bundle(2)]),
            "b:8080": broker(cpu=(30, 100), rate_in=1000, rate_out=1000),
        },
        {bundle(1): bundle_data(500, 500), bundle(2): bundle_data(300, 300)},
    )
    outcomes = run(data, PulsarConfig(), 8)
    assert [len(outcome.unloads) for outcome in outcomes] == [0] * 7 + [2]
    assert outcomes[6].state.low_hit_count == {"a:8080": 7, "b:8080": 7}
    # Budget (10000 - 2000) * 0.2 = 1600 msg/s holds exactly the 1000 and the 600 msg/s bundles.
    assert [unload.bundle for unload in outcomes[7].unloads] == [bundle(1), bundle(2)]


def test_budget_stops_a_bundle_that_no_longer_fits():
    data = load_data(
        {
            "a:8080": broker(cpu=(50, 100), rate_in=4000, rate_out=4000, bundles=[bundle(1), bundle(2)]),
            "b:8080": broker(cpu=(30, 100), rate_in=1000, rate_out=1000),
        },
        {bundle(1): bundle_data(500, 500), bundle(2): bundle_data(300, 300)},
    )
    last = run(data, PulsarConfig(), 8)[-1]
    # Budget (8000 - 2000) * 0.2 = 1200: after 1000, the 600 msg/s bundle exceeds the 200 left.
    assert [unload.bundle for unload in last.unloads] == [bundle(1)]


def test_a_run_without_pairs_clears_every_counter_including_departed_brokers():
    state = AvgShedderState(high_hit_count={"gone:8080": 1}, low_hit_count={"gone:8080": 5, "a:8080": 3})
    data = load_data({"a:8080": broker(cpu=(40, 100)), "b:8080": broker(cpu=(30, 100))})
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), state)
    assert outcome.state == AvgShedderState()


def test_departed_brokers_counters_linger_while_other_pairs_exist():
    state = AvgShedderState(low_hit_count={"gone:8080": 5})
    data = load_data({"a:8080": broker(cpu=(60, 100)), "b:8080": broker(cpu=(30, 100))})
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), state)
    assert outcome.state.low_hit_count == {"gone:8080": 5, "a:8080": 1, "b:8080": 1}


def test_gap_between_low_and_high_resets_high_counters():
    state = AvgShedderState(high_hit_count={"a:8080": 1, "b:8080": 1})
    data = load_data({"a:8080": broker(cpu=(50, 100)), "b:8080": broker(cpu=(30, 100))})
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), state)
    assert outcome.state.high_hit_count == {}
    assert outcome.state.low_hit_count == {"a:8080": 1, "b:8080": 1}


def test_odd_broker_count_pairs_the_middle_broker_with_itself_and_clears_it():
    state = AvgShedderState(low_hit_count={"m:8080": 4})
    data = load_data(
        {"lo:8080": broker(cpu=(10, 100)), "m:8080": broker(cpu=(50, 100)), "hi:8080": broker(cpu=(90, 100))}
    )
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), state)
    assert "m:8080" not in outcome.state.low_hit_count
    assert [(pair.underloaded, pair.overloaded) for pair in outcome.pairs] == [("lo:8080", "hi:8080")]


def test_non_positive_low_threshold_counts_the_self_pair_twice_and_moves_nothing():
    config = PulsarConfig.from_settings({"loadBalancerAvgShedderLowThreshold": "0"})
    data = load_data(
        {"only:8080": broker(cpu=(50, 100), rate_in=1e6, bundles=[bundle(1)])}, {bundle(1): bundle_data(10)}
    )
    outcome = avg_shedder.find_bundles_for_unloading(data, config, AvgShedderState())
    assert outcome.state.low_hit_count == {"only:8080": 2}
    assert outcome.unloads == ()


def test_greedy_first_fit_skips_too_big_bundles_and_never_takes_idle_ones():
    bundles = {
        bundle(1): bundle_data(3000, 0),
        bundle(2): bundle_data(1500, 0),
        bundle(3): bundle_data(400, 0),
        bundle(4): bundle_data(200, 0),
        bundle(5): bundle_data(0, 0),
    }
    data = load_data(
        {
            "hot:8080": broker(cpu=(90, 100), rate_in=12000, bundles=bundles),
            "cold:8080": broker(cpu=(10, 100), rate_in=2000),
        },
        bundles,
    )
    state = AvgShedderState(high_hit_count={"hot:8080": 1, "cold:8080": 1})
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), state)
    # Budget (12000 - 2000) * 0.2 = 2000: 3000 skipped, 1500 taken, 400 taken, 200 no longer fits... 100 left.
    assert [unload.bundle for unload in outcome.unloads] == [bundle(2), bundle(3)]


def test_throughput_mode_when_message_rate_gap_is_not_above_the_minimum():
    bundles = {bundle(1): bundle_data(throughput_in=2 * MIB), bundle(2): bundle_data(throughput_in=MIB // 2)}
    data = load_data(
        {
            "hot:8080": broker(cpu=(90, 100), rate_in=5000, throughput_in=20 * MIB, bundles=bundles),
            "cold:8080": broker(cpu=(10, 100), rate_in=0),
        },
        bundles,
    )
    state = AvgShedderState(high_hit_count={"hot:8080": 1})
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), state)
    # 5000 * 0.2 = 1000 is not > 1000 (strict), so throughput: 20 MiB * 0.2 = 4 MiB budget.
    assert outcome.pairs[0].mode == "throughput"
    assert [unload.bundle for unload in outcome.unloads] == [bundle(1), bundle(2)]


def test_fired_pair_below_both_minimums_moves_nothing_but_resets_counters():
    data = load_data(
        {"hot:8080": broker(cpu=(90, 100), bundles=[bundle(1)]), "cold:8080": broker(cpu=(10, 100))},
        {bundle(1): bundle_data(10)},
    )
    state = AvgShedderState(high_hit_count={"hot:8080": 1})
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), state)
    assert outcome.unloads == ()
    assert outcome.pairs[0].fired and outcome.pairs[0].mode is None
    assert outcome.state.high_hit_count == {}


def test_a_sole_bundle_can_be_selected():
    data = load_data(
        {
            "hot:8080": broker(cpu=(90, 100), rate_in=20000, bundles=[bundle(1)]),
            "cold:8080": broker(cpu=(10, 100)),
        },
        {bundle(1): bundle_data(1000)},
    )
    outcome = avg_shedder.find_bundles_for_unloading(
        data, PulsarConfig(), AvgShedderState(high_hit_count={"hot:8080": 1})
    )
    assert [unload.bundle for unload in outcome.unloads] == [bundle(1)]


def test_scores_use_float32_percentages_at_the_threshold_boundary():
    # 60/100 is 60.00000381469727 in float32 percent: the gap to 45 exceeds 15 by a hair.
    data = load_data({"a:8080": broker(cpu=(60, 100)), "b:8080": broker(cpu=(45, 100))})
    outcome = avg_shedder.find_bundles_for_unloading(data, PulsarConfig(), AvgShedderState())
    assert outcome.state.low_hit_count == {"a:8080": 1, "b:8080": 1}


def test_pre_4_2_comparator_treats_scores_within_one_point_as_equal():
    scores = {"a:8080": 10.5, "b:8080": 10.0, "c:8080": 50.0}
    latest = avg_shedder.sort_brokers(scores, PulsarConfig())
    older = avg_shedder.sort_brokers(scores, PulsarConfig.from_settings({"pulsarVersion": "4.0.3"}))
    assert latest == ["b:8080", "a:8080", "c:8080"]
    assert older == ["a:8080", "b:8080", "c:8080"]


def test_state_round_trips_through_json_and_rejects_bad_counters():
    state = AvgShedderState(high_hit_count={"a:8080": 1}, low_hit_count={"a:8080": 2, "b:8080": 2})
    assert AvgShedderState.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="lowHitCount"):
        AvgShedderState.from_json({"lowHitCount": {"a:8080": -1}})


V4 = PulsarConfig.from_settings({"pulsarVersion": "4.2.4"})
V5 = PulsarConfig.from_settings({"pulsarVersion": "5.0.1"})


def three(cpu: tuple[float, float, float] = (90, 50, 10)):
    """Brokers a:8080, b:8080 and c:8080 at the CPU percentages given."""
    names = ("a:8080", "b:8080", "c:8080")
    return load_data({name: broker(cpu=(percent, 100)) for name, percent in zip(names, cpu, strict=True)}, {})


def test_v4_placement_prefers_the_remembered_broker_while_it_is_a_candidate():
    rng = random.Random(7)
    state = AvgShedderPlacementState({"b": "1"})
    chosen, state = avg_shedder.select_broker(["1", "2", "3"], "b", state, rng, three(), V4)
    assert chosen == "1" and state.bundle_broker == {"b": "1"}
    chosen, state = avg_shedder.select_broker(["2"], "b", state, rng, three(), V4)
    assert chosen == "2" and state.bundle_broker == {"b": "2"}


def test_v4_placement_without_memory_picks_a_candidate_and_remembers_it():
    rng = random.Random(3)
    data = three()
    first, state = avg_shedder.select_broker(["1", "2", "3"], "b", AvgShedderPlacementState(), rng, data, V4)
    assert first in {"1", "2", "3"} and state.bundle_broker == {"b": first}
    others = [broker_id for broker_id in ["1", "2", "3"] if broker_id != first]
    second, state = avg_shedder.select_broker(others, "b", state, rng, data, V4)
    assert second in others and state.bundle_broker == {"b": second}
    # Random, not a hash of the bundle: over many draws every candidate comes up.
    fresh = AvgShedderPlacementState()
    picks = {avg_shedder.select_broker(["1", "2", "3"], f"x{i}", fresh, rng, data, V4)[0] for i in range(60)}
    assert picks == {"1", "2", "3"}


def test_v5_placement_keeps_a_healthy_planned_destination_and_redraws_an_overloaded_or_gone_one():
    """selectBrokerForBundle (5.0.1): a sheds bundle x to c; nothing is remembered for bundles it did not plan."""
    rng = random.Random(5)
    planned = AvgShedderPlacementState({"x": "c:8080"}, {"x": "a:8080"})
    everyone = ["a:8080", "b:8080", "c:8080"]
    assert avg_shedder.select_broker(everyone, "x", planned, rng, three(), V5) == ("c:8080", planned)
    # c is over 85 %: the other candidate under it that is not the source, b
    assert avg_shedder.select_broker(everyone, "x", planned, rng, three((90, 50, 95)), V5)[0] == "b:8080"
    # every other candidate overloaded too: the planned one is kept
    assert avg_shedder.select_broker(everyone, "x", planned, rng, three((90, 90, 95)), V5)[0] == "c:8080"
    # exactly on the threshold is not over it
    assert avg_shedder.select_broker(everyone, "x", planned, rng, three((90, 50, 85)), V5)[0] == "c:8080"
    # the planned destination is no longer a candidate: drawn among the others but the source
    assert avg_shedder.select_broker(["a:8080", "b:8080"], "x", planned, rng, three(), V5)[0] == "b:8080"
    assert avg_shedder.select_broker(["a:8080"], "x", planned, rng, three(), V5)[0] is None
    # not planned: a random pick, not remembered
    chosen, after = avg_shedder.select_broker(everyone, "fresh", planned, rng, three(), V5)
    assert chosen in everyone and after == planned
