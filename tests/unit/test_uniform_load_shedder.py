"""UniformLoadShedder against Pulsar's UniformLoadShedderTest: V5 and V6 its `testSmallTrafficShedding`, V7
`testMaxUnloadBundleNumPerShedding`."""

from __future__ import annotations

from planner.plan.shedding import uniform_load_shedder
from planner.pulsar.config import PulsarConfig
from tests.builders import MIB, broker, bundle, bundle_data, load_data

SMALL_TRAFFIC = {
    "minUnloadMessage": "0",
    "minUnloadMessageThroughput": "0",
    "maxUnloadPercentage": "0.5",
    "maxUnloadBundleNumPerShedding": "-1",
}


def shed(data, settings=None):
    return uniform_load_shedder.find_bundles_for_unloading(data, PulsarConfig.from_settings(settings or {}))


def test_v5_small_message_rate_moves_two_bundles():
    names = [bundle(i) for i in range(1, 6)]
    data = load_data(
        {"broker-1:8080": broker(rate_in=250, rate_out=250, bundles=names), "broker-2:8080": broker()},
        {name: bundle_data(50, 50) for name in names},
    )
    outcome = shed(data, SMALL_TRAFFIC)
    assert len(outcome.unloads) == 2
    assert {unload.broker for unload in outcome.unloads} == {"broker-1:8080"}
    assert all(unload.destination is None for unload in outcome.unloads)


def test_v6_small_throughput_moves_two_bundles():
    names = [bundle(i) for i in range(1, 6)]
    data = load_data(
        {"broker-1:8080": broker(throughput_in=5120, throughput_out=5120, bundles=names), "broker-2:8080": broker()},
        {name: bundle_data(throughput_in=1024, throughput_out=1024) for name in names},
    )
    assert len(shed(data, SMALL_TRAFFIC).unloads) == 2


def v7_load_data():
    names = [bundle(i) for i in range(1, 21)]
    return load_data(
        {
            "broker-1:8080": broker(throughput_in=20 * MIB, throughput_out=20 * MIB, bundles=names),
            "broker2:8080": broker(),
        },
        {name: bundle_data(throughput_in=MIB, throughput_out=MIB) for name in names},
    )


def test_v7_per_run_cap_limits_the_bundles():
    assert len(shed(v7_load_data(), {"maxUnloadBundleNumPerShedding": "2"}).unloads) == 2


def test_v7_without_cap_takes_what_fits_the_truncated_budget():
    # need = int((41943040 - 1) * 0.2) = 8388607: three 2 MiB bundles fit, the fourth does not.
    assert len(shed(v7_load_data()).unloads) == 3


def test_3_0_releases_allow_a_thousand_over_the_budget():
    names = [bundle(i) for i in range(1, 4)]
    data = load_data(
        {"hot:8080": broker(rate_in=11000, bundles=names), "cold:8080": broker(rate_in=1000)},
        {bundle(1): bundle_data(2000), bundle(2): bundle_data(2500), bundle(3): bundle_data(100)},
    )
    # need = int(10000 * 0.2) = 2000: 2500 exceeds it, unless the 3.0.x +1000 slack applies.
    assert [u.bundle for u in shed(data).unloads] == [bundle(1)]
    older = shed(data, {"pulsarVersion": "3.0.8"}).unloads
    assert [u.bundle for u in older] == [bundle(2), bundle(3)]


def test_message_rate_criterion_has_priority_and_picks_its_own_broker():
    data = load_data(
        {
            "rate-heavy:8080": broker(rate_in=10000, throughput_in=1 * MIB, bundles=[bundle(1), bundle(2)]),
            "thr-heavy:8080": broker(rate_in=1000, throughput_in=100 * MIB, bundles=[bundle(3), bundle(4)]),
            "idle:8080": broker(rate_in=1000, throughput_in=1 * MIB),
        },
        {bundle(1): bundle_data(1500), bundle(2): bundle_data(8500), bundle(3): bundle_data(throughput_in=50 * MIB)},
    )
    outcome = shed(data)
    assert {unload.broker for unload in outcome.unloads} == {"rate-heavy:8080"}
    assert [unload.bundle for unload in outcome.unloads] == [bundle(1)]


def test_a_single_bundle_broker_and_a_small_budget_shed_nothing():
    single = load_data(
        {"hot:8080": broker(rate_in=100000, bundles=[bundle(1)]), "cold:8080": broker(rate_in=10)},
        {bundle(1): bundle_data(100)},
    )
    assert shed(single).unloads == ()
    small = load_data(
        {"hot:8080": broker(rate_in=5000, bundles=[bundle(1), bundle(2)]), "cold:8080": broker(rate_in=1)},
        {bundle(1): bundle_data(10), bundle(2): bundle_data(10)},
    )
    # int((5000 - 1) * 0.2) = 999 < minUnloadMessage 1000.
    assert shed(small).unloads == ()


def test_zero_traffic_bundles_are_taken_while_budget_remains():
    names = [bundle(1), bundle(2)]
    data = load_data(
        {"hot:8080": broker(rate_in=20000, bundles=names), "cold:8080": broker(rate_in=1000)},
        {bundle(1): bundle_data(1000), bundle(2): bundle_data(0)},
    )
    assert [u.bundle for u in shed(data).unloads] == [bundle(1), bundle(2)]


def test_disabled_thresholds_shed_nothing():
    data = v7_load_data()
    settings = {
        "loadBalancerMsgRateDifferenceShedderThreshold": "0",
        "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": "0",
    }
    assert shed(data, settings).unloads == ()


def issue_21016_cluster():
    """apache/pulsar#21016's five brokers (msg/s and MB/s): broker2 leads both, broker3 has the most bytes."""
    loads = {0: (50000, 50), 1: (60000, 60), 2: (70000, 70), 3: (10000, 80), 4: (20000, 10)}
    brokers, bundles = {}, {}
    for index, (rate, megabytes) in loads.items():
        names = [bundle(2 * index), bundle(2 * index + 1)]
        brokers[f"broker{index}:8080"] = broker(rate_in=rate, throughput_in=megabytes * MIB, bundles=names)
        bundles.update({names[0]: bundle_data(rate * 0.6, 0, megabytes * MIB * 0.6, 0)})
        bundles.update({names[1]: bundle_data(rate * 0.4, 0, megabytes * MIB * 0.4, 0)})
    return load_data(brokers, bundles)


def test_before_pr_21025_the_extremes_depend_on_the_leaders_map_order():
    """3.0.0, 3.0.1 and 3.1.0 take as overloaded the last broker, in ConcurrentHashMap order (broker4, 1, 2, 3, 0
    here), that beats the highest msg rate OR throughput so far, and as underloaded likewise: both end at broker0,
    so the spread seen is none and nothing is unloaded. From 3.0.2 and 3.1.1 broker2, the busiest, sheds."""
    settings = {**SMALL_TRAFFIC, "maxUnloadPercentage": "0.9"}
    for version, sources in [("3.0.0", set()), ("3.1.0", set()), ("3.0.2", {"broker2:8080"}),
                             ("3.1.1", {"broker2:8080"}), ("4.2.4", {"broker2:8080"})]:  # fmt: skip
        outcome = shed(issue_21016_cluster(), {**settings, "pulsarVersion": version})
        assert {unload.broker for unload in outcome.unloads} == sources, version
