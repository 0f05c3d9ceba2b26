"""More vectors from Pulsar's own unit tests (AvgShedderTest, UniformLoadShedderTest, OverloadShedderTest,
split-algorithm tests), read from Pulsar's source, beyond the other test modules' vectors."""

from __future__ import annotations

from planner.plan.bundles import flow_or_qps_equally_divide, range_equally_divide, topic_count_equally_divide
from planner.plan.bundles.consistent_hashing_topic_bundle_assigner import topic_hash
from planner.plan.bundles.split_algorithm import TopicLoad
from planner.plan.shedding import avg_shedder, overload_shedder, uniform_load_shedder
from planner.plan.shedding.avg_shedder import AvgShedderState
from planner.pulsar.bundle_range import BundleRange
from planner.pulsar.config import PulsarConfig
from tests.builders import MIB, broker, bundle, bundle_data, load_data


def avg_runs(data, settings, runs):
    config, state, outcomes = PulsarConfig.from_settings(settings), AvgShedderState(), []
    for _ in range(runs):
        outcome = avg_shedder.find_bundles_for_unloading(data, config, state)
        state = outcome.state
        outcomes.append(outcome)
    return outcomes


def test_avg_shedder_low_threshold_fires_on_the_configured_hit_count():
    names = [bundle(i) for i in range(11)]
    data = load_data(
        {
            "broker1:8080": broker(cpu=(60, 100), rate_in=10000, rate_out=10000, bundles=names),
            "broker2:8080": broker(cpu=(40, 100), rate_in=1000, rate_out=1000),
            "broker3:8080": broker(cpu=(50, 100), rate_in=5000, rate_out=5000),
        },
        {name: bundle_data(450, 450) for name in names},
    )
    settings = {
        "maxUnloadPercentage": "0.5",
        "loadBalancerAvgShedderLowThreshold": "20",
        "loadBalancerAvgShedderHitCountLowThreshold": "6",
    }
    outcomes = avg_runs(data, settings, 6)
    assert [len(outcome.unloads) for outcome in outcomes] == [0, 0, 0, 0, 0, 10]
    assert {unload.destination for unload in outcomes[-1].unloads} == {"broker2:8080"}


def test_avg_shedder_two_pairs_fire_together_in_pair_order():
    b1 = [bundle(i, "t/ns1") for i in range(11)]
    b3 = [bundle(i, "t/ns3") for i in range(11)]
    data = load_data(
        {
            "broker1:8080": broker(cpu=(80, 100), rate_in=10000, rate_out=10000, bundles=b1),
            "broker2:8080": broker(cpu=(30, 100), rate_in=1000, rate_out=1000),
            "broker3:8080": broker(cpu=(75, 100), rate_in=10000, rate_out=10000, bundles=b3),
            "broker4:8080": broker(cpu=(35, 100), rate_in=1000, rate_out=1000),
        },
        {name: bundle_data(450, 450) for name in [*b1, *b3]},
    )
    first, second = avg_runs(data, {"maxUnloadPercentage": "0.5"}, 2)
    assert first.unloads == ()
    moves = [(unload.broker, unload.destination) for unload in second.unloads]
    assert moves == [("broker1:8080", "broker2:8080")] * 10 + [("broker3:8080", "broker4:8080")] * 10


def uniform_brokers():
    brokers, bundles = {}, {}
    rates = [50000, 60000, 70000, 10000, 20000]
    throughputs = [50, 60, 70, 80, 10]
    for index, (rate, throughput) in enumerate(zip(rates, throughputs, strict=True)):
        names = [bundle(i, f"t/ns{index}") for i in range(5)]
        for name in names:
            bundles[name] = bundle_data(rate / 5, 0, throughput * MIB / 5, 0)
        brokers[f"broker{index}:8080"] = broker(rate_in=rate, throughput_in=throughput * MIB, bundles=names)
    return load_data(brokers, bundles)


def test_uniform_picks_the_rate_broker_first_then_the_throughput_broker():
    data = uniform_brokers()
    cases = [(50, 0, "broker2:8080"), (0, 2, "broker3:8080"), (50, 2, "broker2:8080")]
    for rate_threshold, multiplier, expected in cases:
        settings = {
            "maxUnloadBundleNumPerShedding": "1",
            "maxUnloadPercentage": "0.5",
            "loadBalancerMsgRateDifferenceShedderThreshold": str(rate_threshold),
            "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": str(multiplier),
        }
        unloads = uniform_load_shedder.find_bundles_for_unloading(data, PulsarConfig.from_settings(settings)).unloads
        assert [unload.broker for unload in unloads] == [expected]


def test_uniform_throughput_mode_takes_only_the_biggest_bundle_when_the_rest_do_not_fit():
    names = [bundle(i) for i in range(1, 11)]
    data = load_data(
        {
            "broker-1:8080": broker(throughput_in=55 * MIB, throughput_out=55 * MIB, bundles=names),
            "broker2:8080": broker(),
        },
        {name: bundle_data(throughput_in=i * MIB, throughput_out=i * MIB) for i, name in enumerate(names, 1)},
    )
    unloads = uniform_load_shedder.find_bundles_for_unloading(data, PulsarConfig()).unloads
    assert [unload.bundle for unload in unloads] == [bundle(10)]


def test_uniform_takes_zero_traffic_bundles_as_pulsar_master_does():
    names = [bundle(i, "t/b1") for i in range(5)]
    data = load_data(
        {
            "broker-0:8080": broker(rate_in=10000, bundles=[bundle(0, "t/b0")]),
            "broker-1:8080": broker(rate_in=100000, bundles=names),
        },
        {name: bundle_data(rate) for name, rate in zip(names, [60000, 20000, 20000, 0, 0], strict=True)}
        | {bundle(0, "t/b0"): bundle_data(10000)},
    )
    settings = {
        "maxUnloadBundleNumPerShedding": "5",
        "maxUnloadPercentage": "0.5",
        "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": "0",
    }
    unloads = uniform_load_shedder.find_bundles_for_unloading(data, PulsarConfig.from_settings(settings)).unloads
    # need = 45000: 60000 does not fit, both 20000s do, and so do both idle bundles.
    assert sorted(unload.bundle for unload in unloads) == sorted(names[1:])


def test_overload_shedder_picks_and_skips_recently_unloaded():
    names = [bundle(i) for i in range(1, 11)]
    others = [bundle(i, "t/other") for i in range(1, 3)]

    def data(recent=None):
        return load_data(
            {
                "broker-1:8080": broker(
                    bandwidth_in=(999, 1000),
                    bandwidth_out=(999, 1000),
                    throughput_in=55 * MIB,
                    throughput_out=55 * MIB,
                    bundles=names,
                ),
                "broker-2:8080": broker(bundles=others),
            },
            {name: bundle_data(throughput_in=i * MIB, throughput_out=i * MIB) for i, name in enumerate(names, 1)},
            recent,
        )

    unloads = overload_shedder.find_bundles_for_unloading(data(), PulsarConfig()).unloads
    assert [unload.bundle for unload in unloads] == [bundle(10), bundle(9)]
    recent = {bundle(10): 1, bundle(9): 1}
    unloads = overload_shedder.find_bundles_for_unloading(data(recent), PulsarConfig()).unloads
    assert [unload.bundle for unload in unloads] == [bundle(8), bundle(7)]


def test_topic_count_position_of_three_topics():
    assert topic_count_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), ["a", "b", "c"]) == [0x3C3C67B4]


def test_flow_or_qps_first_topic_over_the_limit():
    config = PulsarConfig.from_settings(
        {"loadBalancerNamespaceBundleMaxMsgRate": "1010", "loadBalancerNamespaceBundleMaxBandwidthMbytes": "100"}
    )
    names = [f"persistent://test-tenant1/test-namespace1/test-partition-{i}" for i in range(5)]
    lowest = min(names, key=topic_hash)
    topics = [TopicLoad(name, 2000 if name == lowest else 49.5, 2000) for name in names]
    assert flow_or_qps_equally_divide.split_positions(BundleRange(0, 0xFFFFFFFF), topics, config) == [0x43FC608C]


def test_chained_halvings():
    halve = range_equally_divide.split_positions
    assert halve(BundleRange(0, 0xFFFFFFFF)) == [0x7FFFFFFF]
    assert halve(BundleRange(0, 0x7FFFFFFF)) == [0x3FFFFFFF]
    assert halve(BundleRange(0x7FFFFFFF, 0xFFFFFFFF)) == [0xBFFFFFFF]
    assert halve(BundleRange(0x7FFFFFFF, 0xBFFFFFFF)) == [0x9FFFFFFF]
    assert halve(BundleRange(0xBFFFFFFF, 0xFFFFFFFF)) == [0xDFFFFFFF]
