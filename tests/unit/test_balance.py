"""A run that plans nothing says why, in the strategy's terms: "balanced, nothing to do" is recorded with figures."""

from __future__ import annotations

from planner.plan.planning import make_plan
from planner.pulsar.config import PulsarConfig
from tests.builders import broker, bundle, bundle_data, load_data

CONFIG = PulsarConfig()


def cluster(cpu_percents: dict[str, float]):
    """One broker per entry at the CPU percent given, each with two bundles of 100 msg/s."""
    brokers, bundles = {}, {}
    for index, (name, percent) in enumerate(cpu_percents.items()):
        names = [bundle(2 * index), bundle(2 * index + 1)]
        brokers[name] = broker(cpu=(percent, 100), rate_in=200, throughput_in=2e5, bundles=names)
        bundles |= {name: bundle_data(100, 0, 1e5, 0) for name in names}
    return load_data(brokers, bundles)


def balance_of(data, strategy, state=None):
    return make_plan("c", data, CONFIG, strategy, state, include_splits=False).to_json()


def test_a_balanced_cluster_records_why_nothing_is_to_do_with_the_spread_and_the_thresholds():
    plan = balance_of(cluster({"a:8080": 50, "b:8080": 45, "c:8080": 55}), "AvgShedder")
    assert plan["actions"] == []
    balance = plan["balance"]
    assert balance["balanced"] and balance["waiting"] == []
    assert balance["summary"] == (
        "Balanced, nothing to do: no broker pair's score gap reaches the low threshold 15 (score spread 10.0)"
    )
    assert balance["scoreSpread"] == 10.0 and balance["thresholds"]["loadBalancerAvgShedderLowThreshold"] == 15.0


def test_a_gap_over_the_threshold_waits_for_its_hits_and_says_how_many_it_has():
    data = cluster({"a:8080": 80, "b:8080": 50})
    first = balance_of(data, "AvgShedder")
    assert first["actions"] == [] and first["balance"]["balanced"] is False
    assert first["balance"]["waiting"] == [
        "a:8080 → b:8080: gap 30.0 points over the low threshold 15, 1 of 8 consecutive hits"
    ]
    second = balance_of(data, "AvgShedder", first["stateAfter"])
    assert second["balance"]["waiting"] == [
        "a:8080 → b:8080: gap 30.0 points over the low threshold 15, 2 of 8 consecutive hits"
    ]
    high = balance_of(cluster({"a:8080": 95, "b:8080": 50}), "AvgShedder")
    assert high["balance"]["waiting"] == [
        "a:8080 → b:8080: gap 45.0 points over the high threshold 40, 1 of 2 consecutive hits"
    ]


def test_uniform_load_shedder_says_its_gap_and_ratio_against_its_thresholds():
    plan = balance_of(cluster({"a:8080": 50, "b:8080": 50}), "UniformLoadShedder")
    assert plan["balance"]["summary"] == (
        "Balanced, nothing to do: msg/s gap 0 % of the lowest broker (threshold 50 %), throughput ratio 1.00 "
        "(threshold 4)"
    )


def two_brokers(hot_bundles: tuple[float, ...]):
    """a:8080 with bundles of these msg/s, b:8080 with one of 1,000 msg/s."""
    names = [bundle(index) for index in range(len(hot_bundles) + 1)]
    rates = dict(zip(names, (*hot_bundles, 1000), strict=True))
    hot = sum(hot_bundles)
    return load_data(
        {
            "a:8080": broker(cpu=(90, 100), rate_in=hot, throughput_in=hot * 100, bundles=names[:-1]),
            "b:8080": broker(cpu=(10, 100), rate_in=1000, throughput_in=1e5, bundles=names[-1:]),
        },
        {name: bundle_data(rate, 0, rate * 100, 0) for name, rate in rates.items()},
    )


def test_a_gap_nothing_can_close_is_not_called_balanced_and_a_plan_with_actions_says_so():
    # 8,000 msg/s apart: UniformLoadShedder may move 20 % of that (1,600), and every bundle is bigger.
    stuck = balance_of(two_brokers((2000, 2000, 5000)), "UniformLoadShedder")
    assert stuck["actions"] == [] and stuck["balance"]["balanced"] is False
    assert stuck["balance"]["summary"] == (
        "Nothing planned: msg/s gap 800 % of the lowest broker (threshold 50 %), throughput ratio 9.00 (threshold 4); "
        "a:8080: no bundle fits the msgRate to move (1600)"
    )
    moved = balance_of(two_brokers((1000, 1000, 7000)), "UniformLoadShedder")
    assert len(moved["actions"]) == 1 and moved["balance"]["summary"] == "1 action(s) planned by UniformLoadShedder"
    assert moved["balance"]["balanced"] is False
