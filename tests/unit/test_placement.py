"""Placement strategies and filters (`ModularLoadManagerImpl.selectBroker`) against Pulsar's tests: V15
`testRemoveMostServicingBrokersForNamespace`, V16 `testRoundRobinBrokerSelector`, V17 `testLeastLongTermMessageRate`,
V18 `testLeastResourceUsageWithWeight`."""

from __future__ import annotations

import random

from planner.plan.placement import least_long_term_message_rate, least_resource_usage_with_weight
from planner.plan.placement.least_resource_usage_with_weight import LeastResourceUsageWithWeightState
from planner.plan.placement.pipeline import select_broker as place
from planner.plan.placement.round_robin_broker_selector import RoundRobinState, select_broker
from planner.plan.placement.strategy import PlacementSession
from planner.pulsar.config import PulsarConfig
from planner.pulsar.java_numbers import INT_MAX
from planner.pulsar.load_manager_shared import remove_most_servicing_brokers_for_namespace
from tests.builders import broker, bundle, bundle_data, load_data


def test_v15_even_distribution_keeps_the_brokers_with_fewest_bundles_of_the_namespace():
    assert remove_most_servicing_brokers_for_namespace([], {}) == []
    assert remove_most_servicing_brokers_for_namespace(["broker1"], {}) == ["broker1"]
    assert remove_most_servicing_brokers_for_namespace(["broker1"], {"broker1": 1}) == ["broker1"]
    assert remove_most_servicing_brokers_for_namespace(["broker1", "broker2"], {"broker1": 1}) == ["broker2"]
    owned = {"broker1": 1, "broker2": 1}
    assert remove_most_servicing_brokers_for_namespace(["broker1", "broker2"], owned) == ["broker1", "broker2"]
    owned["broker2"] = 2
    assert remove_most_servicing_brokers_for_namespace(["broker1", "broker2"], owned) == ["broker1"]
    owned["broker3"] = 1
    assert remove_most_servicing_brokers_for_namespace(["broker1", "broker2", "broker3"], owned) == [
        "broker1",
        "broker3",
    ]


def test_v16_round_robin_keeps_its_cached_order_until_the_candidates_change():
    state = RoundRobinState()
    picks = []
    for _ in range(10):
        chosen, state = select_broker(["1", "2", "3"], state)
        picks.append(chosen)
    assert picks == [str(i % 3 + 1) for i in range(10)]
    picks = []
    for _ in range(10, 20):
        chosen, state = select_broker(["2", "3", "1"], state)
        picks.append(chosen)
    assert picks == [str(i % 3 + 1) for i in range(10, 20)]
    picks = []
    for _ in range(6):
        chosen, state = select_broker(["1", "2", "4"], state)
        picks.append(chosen)
    assert picks == ["4", "1", "2", "4", "1", "2"]
    picks = []
    for _ in range(4):
        chosen, state = select_broker(["2", "4"], state)
        picks.append(chosen)
    assert picks == ["2", "4", "2", "4"]
    assert select_broker([], state) == (None, state)
    chosen, state = select_broker(["1", "2", "3"], RoundRobinState(INT_MAX))
    assert chosen == str(INT_MAX % 3 + 1) and state.counter == 0


def lltmr_data(rates, cpu=None):
    brokers, bundles = {}, {}
    for broker_id, rate in rates.items():
        name = bundle(int(broker_id))
        bundles[name] = bundle_data(long_rate=rate)
        usage = (cpu or {}).get(broker_id, 0)
        brokers[f"{broker_id}:8080"] = broker(cpu=(usage, 100), bundles=[name])
    return load_data(brokers, bundles)


def test_v17_least_long_term_message_rate():
    rng = random.Random(1)
    candidates = ["1:8080", "2:8080", "3:8080"]
    select = least_long_term_message_rate.select_broker
    assert select(candidates, lltmr_data({"1": 100, "2": 200, "3": 300}), PulsarConfig(), rng) == "1:8080"
    assert select(candidates, lltmr_data({"1": 400, "2": 200, "3": 300}), PulsarConfig(), rng) == "2:8080"
    overloaded = lltmr_data({"1": 400, "2": 200, "3": 300}, cpu={"2": 90})
    assert select(candidates, overloaded, PulsarConfig(), rng) == "3:8080"
    no_cpu = PulsarConfig.from_settings({"loadBalancerCPUResourceWeight": "0"})
    assert select(candidates, overloaded, no_cpu, rng) == "2:8080"


def test_least_long_term_message_rate_counts_preallocated_bundles_and_unknown_bundles_as_defaults():
    data = lltmr_data({"1": 100, "2": 150})
    preallocated = {"1:8080": [bundle_data(long_rate=100)]}
    select = least_long_term_message_rate.select_broker
    assert select(["1:8080", "2:8080"], data, PulsarConfig(), random.Random(0), preallocated) == "2:8080"
    # A reported bundle without bundle data counts 50 + 50 msg/s.
    unknown = broker(bundles=[bundle(77)])
    data = load_data({"1:8080": unknown, "2:8080": broker(bundles=[bundle(2)])}, {bundle(2): bundle_data(long_rate=99)})
    assert least_long_term_message_rate.long_term_message_rate(data, "1:8080") == 100.0
    assert select(["1:8080", "2:8080"], data, PulsarConfig(), random.Random(0)) == "2:8080"


def lruww_data(usages, empty=()):
    brokers = {}
    for broker_id, x in usages.items():
        resource = (x, 100)
        brokers[f"{broker_id}:8080"] = broker(
            cpu=resource,
            memory=resource,
            direct_memory=resource,
            bandwidth_in=resource,
            bandwidth_out=resource,
            rate_in=100,
            rate_out=100,
            bundles=[] if broker_id in empty else [bundle(int(broker_id))],
        )
    return load_data(brokers)


def test_v18_least_resource_usage_with_weight_sequence():
    config = PulsarConfig.from_settings(
        {
            "loadBalancerCPUResourceWeight": "1.0",
            "loadBalancerMemoryResourceWeight": "0.1",
            "loadBalancerDirectMemoryResourceWeight": "0.1",
            "loadBalancerBandwidthInResourceWeight": "1.0",
            "loadBalancerBandwidthOutResourceWeight": "1.0",
            "loadBalancerHistoryResourcePercentage": "0.5",
            "loadBalancerAverageResourceUsageDifferenceThresholdPercentage": "5",
        }
    )
    rng = random.Random(5)
    select = least_resource_usage_with_weight.select_broker
    chosen, state = select(
        ["1:8080", "2:8080", "3:8080", "4:8080"],
        lruww_data({"1": 10, "2": 30, "3": 60, "4": 5}),
        config,
        LeastResourceUsageWithWeightState(),
        rng,
    )
    assert chosen in {"1:8080", "4:8080"}
    three = ["1:8080", "2:8080", "3:8080"]
    steps = [((10, 30, 60), "1"), ((20, 30, 50), "1"), ((30, 30, 40), "1"), ((30, 30, 40), "1"), ((35, 20, 45), "2")]
    for (x1, x2, x3), expected in steps:
        chosen, state = select(three, lruww_data({"1": x1, "2": x2, "3": x3}), config, state, rng)
        assert chosen == f"{expected}:8080"
    chosen, state = select(three, lruww_data({"1": 35, "2": 20, "3": 0}, empty={"3"}), config, state, rng)
    assert chosen == "3:8080"
    assert abs(state.broker_avg_resource_usage["1:8080"] - 0.328125) < 1e-6  # float32 percentages

    preset = LeastResourceUsageWithWeightState({"1:8080": 0.1, "2:8080": 0.3, "4:8080": 0.05})
    chosen, _ = select(three, lruww_data({"1": 10, "2": 30, "3": 60}), config, preset, rng)
    assert chosen == "1:8080"


def test_an_excluded_namespaces_round_robin_pick_that_is_overloaded_is_picked_again_by_the_placement_strategy():
    """selectBroker checks whichever pick it made against the overload threshold, round robin's too, and picks again
    with the placement strategy over all allowed brokers (Pulsar 4.2.4's ModularLoadManagerImpl)."""
    data = load_data(
        {
            "a:8080": broker(cpu=(95, 100), rate_in=100),  # round robin's first pick, over the threshold
            "b:8080": broker(cpu=(10, 100), rate_in=50),
            "c:8080": broker(cpu=(10, 100), rate_in=10),  # the least traffic
        }
    )
    settings = {"pulsarVersion": "4.2.4", "loadBalancerSheddingExcludedNamespaces": "tenant/pinned"}
    config = PulsarConfig.from_settings(settings)
    session = PlacementSession(random.Random(0), round_robin=RoundRobinState(0))
    assert place(bundle(1, "tenant/pinned"), data, config, session, preallocate=False) == "c:8080"
    # Under the threshold round robin's pick stands.
    calm = PulsarConfig.from_settings({**settings, "loadBalancerBrokerOverloadedThresholdPercentage": "99"})
    session = PlacementSession(random.Random(0), round_robin=RoundRobinState(0))
    assert place(bundle(1, "tenant/pinned"), data, calm, session, preallocate=False) == "a:8080"


def test_even_distribution_counts_a_bundle_its_broker_still_reports_once():
    """The leader's `brokerToNamespaceToBundleRange` holds each broker's ranges as a set: a lookup placing a bundle
    on the broker whose last report still lists it (right after its unload) adds nothing there, so the next lookup
    in the namespace still finds both brokers even (`preallocateBundle`; the differential's placement cases compare
    it with Pulsar)."""

    class Lowest(random.Random):  # every broker scores alike here: the draw takes the lowest
        def choice(self, seq):
            return min(seq)

    reported = bundle(1)
    data = load_data(
        {"a:8080": broker(bundles=[reported, bundle(2)]), "b:8080": broker(bundles=[bundle(3), bundle(4)])},
        {reported: bundle_data()},  # no traffic: its preallocation leaves a's score as it was
    )
    config = PulsarConfig.from_settings({"pulsarVersion": "4.2.4"})
    session = PlacementSession(Lowest())
    assert place(reported, data, config, session) == "a:8080"
    assert place(bundle(5), data, config, session) == "a:8080"  # a holds 2 ranges of tenant/ns, as b does
    assert place(bundle(6), data, config, session) == "b:8080"  # now a holds 3


def test_system_bundles_are_spread_evenly_whatever_the_setting_from_the_releases_that_do_so():
    """PR #22953 (3.0.6, 3.2.4, 3.3): `pulsar/system` bundles are spread evenly even with
    `loadBalancerDistributeBundlesEvenlyEnabled=false`; 3.1.x and 3.2.3 place them by load alone (the slow run's
    differential found it on 3.0.2, 3.1.x and 3.2.x)."""

    class Lowest(random.Random):  # every broker scores alike here: the draw takes the lowest
        def choice(self, seq):
            return min(seq)

    first, second = "pulsar/system/0x00000000_0x80000000", "pulsar/system/0x80000000_0xffffffff"
    # No traffic: a preallocation leaves its broker's score as it was, so only the even spread tells them apart.
    data = load_data({"a:8080": broker(), "b:8080": broker()}, {first: bundle_data(), second: bundle_data()})
    placed = {}
    for version in ("3.0.2", "3.0.7", "3.1.2", "3.2.3", "3.3.2", "4.2.4"):
        config = PulsarConfig.from_settings(
            {"pulsarVersion": version, "loadBalancerDistributeBundlesEvenlyEnabled": "false"}
        )
        session = PlacementSession(Lowest())
        placed[version] = (place(first, data, config, session), place(second, data, config, session))
    assert placed == {
        "3.0.2": ("a:8080", "a:8080"),
        "3.0.7": ("a:8080", "b:8080"),
        "3.1.2": ("a:8080", "a:8080"),
        "3.2.3": ("a:8080", "a:8080"),
        "3.3.2": ("a:8080", "b:8080"),
        "4.2.4": ("a:8080", "b:8080"),
    }
