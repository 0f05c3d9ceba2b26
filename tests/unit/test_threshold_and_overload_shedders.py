"""ThresholdShedder and OverloadShedder against Pulsar's tests: V10 ThresholdShedderTest's
`testBrokerWithMultipleBundles` and `testFilterRecentlyUnloaded`, V12 `testLowerBoundaryShedding` and the like, V13
its small cases and `testBrokerReachThreshold`."""

from __future__ import annotations

import sys

from planner.plan.shedding import overload_shedder, threshold_shedder
from planner.plan.shedding.threshold_shedder import ThresholdShedderState
from planner.pulsar.config import PulsarConfig
from tests.builders import MIB, broker, bundle, bundle_data, load_data


def threshold(data, settings=None, state=None):
    return threshold_shedder.find_bundles_for_unloading(data, PulsarConfig.from_settings(settings or {}), state)


def v10_load_data(recently_unloaded=None):
    own = {f"bundle-{i}": bundle(i) for i in range(1, 11)}
    other = {f"bundle-{i}": bundle(i, "tenant/other") for i in range(1, 11)}
    bundles = {
        name: bundle_data(throughput_in=i * MIB, throughput_out=i * MIB) for i, name in enumerate(own.values(), 1)
    }
    bundles |= {
        name: bundle_data(throughput_in=i * MIB, throughput_out=i * MIB) for i, name in enumerate(other.values(), 1)
    }
    return (
        load_data(
            {
                "broker-1:8080": broker(
                    bandwidth_in=(999, 1000),
                    bandwidth_out=(999, 1000),
                    throughput_in=55 * MIB,
                    throughput_out=55 * MIB,
                    bundles=own.values(),
                ),
                "broker-2:8080": broker(bundles=other.values()),
            },
            bundles,
            recently_unloaded,
        ),
        own,
    )


def test_v10_biggest_bundles_until_the_offload_is_reached():
    data, own = v10_load_data()
    outcome = threshold(data)
    assert [unload.bundle for unload in outcome.unloads] == [own["bundle-10"], own["bundle-9"], own["bundle-8"]]
    assert {unload.broker for unload in outcome.unloads} == {"broker-1:8080"}


def test_v10_recently_unloaded_bundles_are_skipped():
    _, own = v10_load_data()
    data, _ = v10_load_data({own["bundle-10"]: 1, own["bundle-9"]: 1})
    outcome = threshold(data)
    assert [unload.bundle for unload in outcome.unloads] == [own[f"bundle-{i}"] for i in (8, 7, 6, 5)]


def v12_load_data(idle_broker=True, multi_bundle_brokers=range(10)):
    brokers, bundles = {}, {}
    for index in range(11):
        names = [bundle(i, f"tenant/ns{index}") for i in range(20)]
        with_data = names[:10]
        idle = idle_broker and index == 10
        traffic = 0 if idle else 200 * MIB
        for name in with_data:
            bundles[name] = bundle_data(throughput_in=traffic / 2, throughput_out=traffic / 2)
        owned = names if index in multi_bundle_brokers or idle else names[:1]
        brokers[f"broker-{index}:8080"] = broker(
            bandwidth_in=(0 if idle else 80, 100),
            bandwidth_out=(0 if idle else 80, 100),
            throughput_in=0 if idle else 100 * MIB,
            throughput_out=0 if idle else 100 * MIB,
            bundles=owned,
        )
    return load_data(brokers, bundles)


def test_v12_lower_boundary_off_sheds_nothing():
    assert threshold(v12_load_data()).unloads == ()


def test_v12_lower_boundary_on_sheds_exactly_one_bundle():
    outcome = threshold(v12_load_data(), {"lowerBoundarySheddingEnabled": "true"})
    assert len(outcome.unloads) == 1


def test_v12_no_broker_below_the_lower_bound_sheds_nothing():
    data = v12_load_data(idle_broker=False)
    assert threshold(data, {"lowerBoundarySheddingEnabled": "true"}).unloads == ()
    assert threshold(data).unloads == ()


def test_v12_lower_boundary_picks_the_only_broker_with_several_bundles():
    outcome = threshold(v12_load_data(multi_bundle_brokers=[3]), {"lowerBoundarySheddingEnabled": "true"})
    assert [unload.broker for unload in outcome.unloads] == ["broker-3:8080"]


def test_lower_boundary_folds_the_sample_in_twice():
    data = load_data({"a:8080": broker(cpu=(50, 100)), "b:8080": broker(cpu=(10, 100))})
    state = ThresholdShedderState({"a:8080": 0.0, "b:8080": 0.0})
    once = threshold(data, {}, state).state.broker_avg_resource_usage
    twice = threshold(data, {"lowerBoundarySheddingEnabled": "true"}, state).state.broker_avg_resource_usage
    assert abs(once["a:8080"] - 0.05) < 1e-12
    assert abs(twice["a:8080"] - (0.05 * 0.9 + 0.1 * 0.5)) < 1e-12


def test_v13_small_cases_shed_nothing():
    assert threshold(load_data({})).unloads == ()
    no_bundles = load_data({"b:8080": broker(cpu=(999, 1000), throughput_in=100 * MIB)})
    assert threshold(no_bundles).unloads == ()
    sole = load_data(
        {"b:8080": broker(cpu=(999, 1000), throughput_in=100 * MIB, bundles=[bundle(1)])},
        {bundle(1): bundle_data(throughput_in=100 * MIB)},
    )
    assert threshold(sole).unloads == ()
    half = load_data(
        {"b:8080": broker(cpu=(50, 100), throughput_in=100 * MIB, bundles=[bundle(1)])},
        {bundle(1): bundle_data(throughput_in=100 * MIB)},
    )
    assert threshold(half).unloads == ()


def test_v13_broker_over_100_percent_sheds_its_only_bundle_with_data():
    data = load_data(
        {
            "broker-2:8080": broker(
                cpu=(140, 100),
                memory=(10, 100),
                direct_memory=(10, 100),
                bandwidth_in=(500, 1000),
                bandwidth_out=(500, 1000),
                throughput_in=sys.float_info.max,
                bundles=[bundle(1), bundle(2)],
            ),
            "broker-3:8080": broker(
                cpu=(10, 100), bandwidth_in=(500, 1000), bandwidth_out=(500, 1000), bundles=[bundle(3), bundle(4)]
            ),
        },
        {bundle(2): bundle_data(throughput_in=1000, throughput_out=1000)},
    )
    assert [unload.bundle for unload in threshold(data).unloads] == [bundle(2)]


def overload(data, settings=None):
    return overload_shedder.find_bundles_for_unloading(data, PulsarConfig.from_settings(settings or {}))


def test_overload_sheds_until_the_margin_is_reached():
    names = [bundle(i) for i in range(1, 5)]
    data = load_data(
        {
            "hot:8080": broker(cpu=(95, 100), throughput_in=100 * MIB, bundles=names),
            "cool:8080": broker(cpu=(20, 100)),
        },
        {name: bundle_data(throughput_in=i * 10 * MIB) for i, name in enumerate(names, 1)},
    )
    # minimum = 100 MiB * (0.95 - 0.85 + 0.05) = 15 MiB: 40 MiB alone reaches it.
    outcome = overload(data)
    assert [unload.bundle for unload in outcome.unloads] == [bundle(4)]


def test_overload_needs_more_than_one_bundle_and_the_threshold():
    data = load_data(
        {
            "hot:8080": broker(cpu=(95, 100), bundles=[bundle(1)]),
            "warm:8080": broker(cpu=(84, 100), bundles=[bundle(2), bundle(3)]),
        },
        {bundle(1): bundle_data(throughput_in=MIB), bundle(2): bundle_data(throughput_in=MIB)},
    )
    assert overload(data).unloads == ()


def test_overload_uses_the_unweighted_maximum_before_4_0():
    names = [bundle(1), bundle(2)]
    data = load_data(
        {"hot:8080": broker(cpu=(90, 100), bundles=names)}, {name: bundle_data(throughput_in=MIB) for name in names}
    )
    weightless = {"loadBalancerCPUResourceWeight": "0.5"}
    assert overload(data, weightless).unloads == ()
    assert len(overload(data, {**weightless, "pulsarVersion": "3.3.9"}).unloads) == 1
