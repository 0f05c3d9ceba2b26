"""Invariants of the strategies and bundle functions over generated inputs (hypothesis)."""

from __future__ import annotations

import random
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.plan.bundles import range_equally_divide, specified_positions_divide, topic_count_equally_divide
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import (
    bundle_for_topic,
    initial_boundaries,
    topic_hash,
)
from planner.plan.shedding import avg_shedder, uniform_load_shedder
from planner.plan.shedding.registry import MODULAR_STRATEGIES
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import PulsarConfig
from planner.pulsar.java_numbers import java_int
from planner.pulsar.model import LoadData, load_data_from_json
from tests.builders import broker, bundle_data, load_data

rates = st.floats(min_value=0, max_value=1e6, allow_nan=False)
percent = st.floats(min_value=0, max_value=120, allow_nan=False)


@st.composite
def load_datas(draw):
    broker_count = draw(st.integers(min_value=1, max_value=8))
    brokers, bundles, recent = {}, {}, {}
    next_bundle = 0
    for index in range(broker_count):
        names = []
        for _ in range(draw(st.integers(min_value=0, max_value=8))):
            name = f"tenant/ns{next_bundle % 3}/0x{next_bundle:08x}_0x{next_bundle + 1:08x}"
            next_bundle += 1
            names.append(name)
            if draw(st.booleans()) or draw(st.booleans()):
                bundles[name] = bundle_data(draw(rates), draw(rates), draw(rates), draw(rates))
            if draw(st.integers(min_value=0, max_value=9)) == 0:
                recent[name] = 1
        brokers[f"10.0.0.{index}:8080"] = broker(
            cpu=(draw(percent), 100),
            bandwidth_in=(draw(percent), 100),
            rate_in=draw(rates) * 5,
            rate_out=draw(rates) * 5,
            throughput_in=draw(rates) * 50,
            throughput_out=draw(rates) * 50,
            bundles=names,
        )
    return load_data(brokers, bundles, recent)


configs = st.builds(
    lambda percentage, low, high, version: PulsarConfig.from_settings(
        {
            "maxUnloadPercentage": str(percentage),
            "loadBalancerAvgShedderLowThreshold": str(low),
            "loadBalancerAvgShedderHighThreshold": str(low + high),
            "loadBalancerAvgShedderHitCountHighThreshold": "1",
            "loadBalancerAvgShedderHitCountLowThreshold": "1",
            "minUnloadMessage": "10",
            "minUnloadMessageThroughput": "100",
            "pulsarVersion": version,
        }
    ),
    st.sampled_from([0.1, 0.2, 0.5, 1.0]),
    st.integers(min_value=0, max_value=30),
    st.integers(min_value=0, max_value=40),
    st.sampled_from(["4.2.4", "4.0.5", "3.3.9"]),
)


@settings(max_examples=150, deadline=None)
@given(load_datas(), configs)
def test_every_strategy_selects_owned_bundles_that_were_not_recently_unloaded(data, config):
    for strategy in MODULAR_STRATEGIES:
        state = strategy.initial_state()
        for _ in range(2):
            outcome = strategy.run(data, config, state)
            state = outcome.state
            for unload in outcome.unloads:
                assert unload.bundle in data.brokers[unload.broker].bundles
                assert unload.bundle not in data.recently_unloaded_bundles
                assert unload.bundle in data.bundle_data
            assert len({unload.bundle for unload in outcome.unloads}) == len(outcome.unloads)


@settings(max_examples=150, deadline=None)
@given(load_datas(), configs)
def test_avg_shedder_stays_within_each_pairs_budget(data, config):
    outcome = avg_shedder.find_bundles_for_unloading(data, config, avg_shedder.AvgShedderState())
    for pair in outcome.pairs:
        moved = [unload.bundle for unload in outcome.unloads if unload.broker == pair.overloaded]
        if pair.mode is None:
            assert moved == []
            continue
        short = [data.bundle_data[bundle].short_term_data for bundle in moved]
        traffic = [s.total_msg_rate if pair.mode == "msgRate" else s.total_msg_throughput for s in short]
        assert all(value > 0 for value in traffic)
        assert sum(traffic) <= pair.budget * (1 + 1e-12)
        assert {unload.destination for unload in outcome.unloads if unload.broker == pair.overloaded} <= {
            pair.underloaded
        }


@settings(max_examples=150, deadline=None)
@given(load_datas(), st.sampled_from([0.2, 0.5]), st.sampled_from([-1, 1, 3]))
def test_uniform_shedder_stays_within_its_truncated_budget(data, percentage, cap):
    config = PulsarConfig.from_settings(
        {"maxUnloadPercentage": str(percentage), "maxUnloadBundleNumPerShedding": str(cap), "minUnloadMessage": "1"}
    )
    outcome = uniform_load_shedder.find_bundles_for_unloading(data, config)
    if not outcome.unloads:
        return
    sources = {unload.broker for unload in outcome.unloads}
    assert len(sources) == 1
    if cap != -1:
        assert len(outcome.unloads) <= cap
    rates_all = [b.msg_rate for b in data.brokers.values()]
    throughputs = [b.msg_throughput for b in data.brokers.values()]
    low_rate = 1.0 if abs(min(rates_all)) <= 1e-6 else min(rates_all)
    low_throughput = 1.0 if abs(min(throughputs)) <= 1e-6 else min(throughputs)
    rate_budget = java_int((max(rates_all) - low_rate) * percentage)
    throughput_budget = java_int((max(throughputs) - low_throughput) * percentage)
    shorts = [data.bundle_data[unload.bundle].short_term_data for unload in outcome.unloads]
    by_rate = sum(java_int(s.total_msg_rate) for s in shorts)
    by_throughput = sum(java_int(s.total_msg_throughput) for s in shorts)
    assert by_rate <= rate_budget or by_throughput <= throughput_budget


@settings(max_examples=60, deadline=None)
@given(load_datas(), configs, st.randoms(use_true_random=False))
def test_strategies_are_deterministic_whatever_the_input_order(data, config, rnd: random.Random):
    brokers = list(data.brokers.items())
    bundles = list(data.bundle_data.items())
    rnd.shuffle(brokers)
    rnd.shuffle(bundles)
    shuffled = LoadData(
        brokers=dict(brokers), bundle_data=dict(bundles), recently_unloaded_bundles=data.recently_unloaded_bundles
    )
    for strategy in MODULAR_STRATEGIES:
        first = strategy.run(data, config, strategy.initial_state())
        again = strategy.run(data, config, strategy.initial_state())
        reordered = strategy.run(shuffled, config, strategy.initial_state())
        assert first.unloads == again.unloads == reordered.unloads
        assert first.state == reordered.state


@settings(max_examples=60, deadline=None)
@given(load_datas())
def test_load_data_round_trips_through_pulsar_json(data):
    assert load_data_from_json(data.model_dump_json(by_alias=True)) == data


ranges = (
    st.tuples(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF))
    .filter(lambda r: r[1] - r[0] > 1)
    .map(lambda r: BundleRange(*r))
)


@given(ranges, st.lists(st.integers(-10, 2**32 + 10)), st.lists(st.text(min_size=1), max_size=6))
def test_split_positions_lie_strictly_inside_the_range(bundle, positions, topics):
    found = range_equally_divide.split_positions(bundle)
    found += topic_count_equally_divide.split_positions(bundle, topics)
    if positions:
        found += specified_positions_divide.split_positions(bundle, positions, topics, force=True)
    assert all(bundle.lower < position < bundle.upper for position in found)


@given(st.text(), st.integers(min_value=1, max_value=64))
def test_topic_hashing_matches_zlib_and_lands_in_the_right_bundle(topic, count):
    assert topic_hash(topic) == zlib.crc32(topic.encode("utf-8"))
    found = bundle_for_topic(topic, initial_boundaries(count))
    assert found.lower <= topic_hash(topic) and (topic_hash(topic) < found.upper or found.upper == 0xFFFFFFFF)
