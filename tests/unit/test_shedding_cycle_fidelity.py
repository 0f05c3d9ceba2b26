"""What ModularLoadManagerImpl.doLoadShedding and checkNamespaceBundleSplit do around the strategies (Pulsar
4.2.4's source): the one-broker guards and `loadBalancerSheddingExcludedNamespaces` (PIP-380, from 4.1.0)."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.plan.planning import make_plan
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER, PulsarConfig
from planner.pulsar.model import NamespaceBundleStats
from tests.builders import broker, bundle, bundle_data, load_data


def skewed(excluded_first: bool = False):
    """a:8080 with four bundles of 2,000 msg/s (the first in tenant/system when asked), b:8080 with one."""
    hot = [bundle(index, "tenant/system" if excluded_first and index == 0 else "tenant/app") for index in range(4)]
    cold = [bundle(9, "tenant/app")]
    return load_data(
        {
            "a:8080": broker(cpu=(90, 100), rate_in=8000, throughput_in=8e5, bundles=hot),
            "b:8080": broker(cpu=(10, 100), rate_in=2000, throughput_in=2e5, bundles=cold),
        },
        # The excluded one is the biggest: UniformLoadShedder's budget (3,000 msg/s) goes to it alone.
        {name: bundle_data(3000 if "system" in name else 2000, 0, 2e5, 0) for name in (*hot, *cold)},
    )


def config(version: str, **settings: str) -> PulsarConfig:
    return PulsarConfig.from_settings(
        {"pulsarVersion": version, "minUnloadMessage": "0", "maxUnloadPercentage": "0.5", **settings}
    )


@pytest.mark.parametrize(("version", "skipped"), [("4.2.4", True), ("4.1.0", True), ("4.0.8", False), ("3.0.7", False)])
def test_excluded_namespaces_are_dropped_after_the_strategy_chose_them_on_the_releases_that_read_the_key(
    version, skipped
):
    excluded = config(version, loadBalancerSheddingExcludedNamespaces="tenant/system, other/ns")
    plain = make_plan("c", skewed(True), config(version), "UniformLoadShedder", None, include_splits=False)
    plan = make_plan("c", skewed(True), excluded, "UniformLoadShedder", None, include_splits=False)
    chosen = [action.bundle for action in plain.actions]
    assert chosen == [bundle(0, "tenant/system")]  # the strategy picks it
    kept = [action.bundle for action in plan.actions]
    if skipped:
        # Dropped, and its share of the budget is not spent on another bundle (Pulsar returns, it does not re-plan).
        assert kept == [name for name in chosen if not name.startswith("tenant/system/")]
        assert any("loadBalancerSheddingExcludedNamespaces" in note for note in plan.notes)
    else:
        assert kept == chosen


@pytest.mark.parametrize("strategy", ["AvgShedder", "UniformLoadShedder", "ThresholdShedder"])
def test_one_broker_neither_sheds_nor_splits_and_the_strategy_state_stays(strategy):
    names = ["tenant/app/0x00000000_0x80000000", "tenant/app/0x80000000_0xffffffff"]
    alone = load_data(
        {
            "a:8080": broker(
                cpu=(99, 100),
                rate_in=9e5,
                throughput_in=9e8,
                bundles=names,
                last_stats={name: NamespaceBundleStats(topics=2000) for name in names},
            )
        },
        {name: bundle_data(4.5e5, 0, 4.5e8, 0, topics=2000) for name in names},
    )
    state = make_plan("c", skewed(), config("4.2.4"), strategy, None, include_splits=False).state_after
    plan = make_plan("c", alone, config("4.2.4"), strategy, state, include_splits=True)
    assert plan.actions == () and plan.state_after == plan.state_before == state
    assert plan.balance is not None and plan.balance.summary == "Nothing to balance: 1 broker(s) reported"
    # With two brokers the same hot bundles are split.
    two = load_data({**alone.brokers, "b:8080": broker(cpu=(1, 100))}, alone.bundle_data)
    assert any(action.kind == "split" for action in make_plan("c", two, config("4.2.4"), strategy, None).actions)


def three_brokers():
    """a:8080 carries four bundles of 2,000 msg/s at 90 % CPU; b:8080 none at 30 %; c:8080 one of 1,000 msg/s at
    10 %: by usage (AvgShedder) c:8080 is the coldest, by traffic (LeastLongTermMessageRate) b:8080, until it is
    given one of a:8080's bundles."""
    hot = [bundle(index, "tenant/app") for index in range(4)]
    warm = [bundle(8, "tenant/app")]
    return load_data(
        {
            "a:8080": broker(cpu=(90, 100), rate_in=8000, throughput_in=8e5, bundles=hot),
            "b:8080": broker(cpu=(30, 100)),
            "c:8080": broker(cpu=(10, 100), rate_in=1000, throughput_in=1e5, bundles=warm),
        },
        {name: bundle_data(2000 if name in hot else 1000, 0, 2e5, 0) for name in (*hot, *warm)},
    )


def test_a_shedding_cycle_places_every_unload_on_the_same_view_of_the_cluster():
    """doLoadShedding's selectBroker does not preallocate: LeastLongTermMessageRate sends both unloads of the cycle
    to the broker with the least traffic, as Pulsar does, instead of spreading them."""
    lltmr = config("4.2.4", maxUnloadPercentage="0.6", loadBalancerDistributeBundlesEvenlyEnabled="false")
    plan = make_plan("c", three_brokers(), lltmr, "UniformLoadShedder", None, include_splits=False)
    unloads = [action for action in plan.actions if action.kind == "unload"]
    assert len(unloads) == 2 and {action.source for action in unloads} == {"a:8080"}
    assert [action.destination for action in unloads] == ["b:8080", "b:8080"]


@pytest.mark.parametrize(
    ("b_report", "destination"),
    [
        ({}, "b:8080"),
        ({"load_manager": EXTENSIBLE_LOAD_MANAGER}, "c:8080"),  # BrokerLoadManagerClassFilter
        ({"load_manager": None}, "c:8080"),  # a report without the class name is left out too
        ({"persistent_topics": False}, "c:8080"),  # applyNamespacePolicies: it loads non-persistent topics only
    ],
)
def test_brokers_of_another_load_manager_or_without_persistent_topics_are_no_destination(b_report, destination):
    lltmr = config("4.2.4", maxUnloadPercentage="0.3", loadBalancerDistributeBundlesEvenlyEnabled="false")
    data = three_brokers()
    data.brokers["b:8080"] = broker(cpu=(30, 100), **b_report)
    plan = make_plan("c", data, lltmr, "UniformLoadShedder", None, include_splits=False)
    assert [action.destination for action in plan.actions if action.kind == "unload"] == [destination]


def test_no_unload_when_no_other_broker_may_own_the_bundle():
    """shouldNamespacePoliciesUnload: with b and c for non-persistent topics only, a keeps its bundles."""
    data = three_brokers()
    for name in ("b:8080", "c:8080"):
        data.brokers[name] = data.brokers[name].model_copy(update={"persistent_topics_enabled": False})
    plan = make_plan("c", data, config("4.2.4", maxUnloadPercentage="0.3"), "UniformLoadShedder", None)
    assert [action for action in plan.actions if action.kind == "unload"] == []
    assert any("no broker but a:8080 loads its topics" in note for note in plan.notes)


def test_avg_shedder_destinations_are_its_own_only_when_it_is_the_placement_strategy_too():
    data = three_brokers()
    at_once = {
        "loadBalancerAvgShedderHitCountHighThreshold": "0",
        "loadBalancerAvgShedderHitCountLowThreshold": "0",
        "loadBalancerDistributeBundlesEvenlyEnabled": "false",
    }
    paired = make_plan("c", data, config("4.2.4", **at_once), "AvgShedder", None, include_splits=False)
    pairs = {(pair["overloaded"], pair["underloaded"]) for pair in paired.to_json()["pairs"] if pair["fired"]}
    # No placement named: AvgShedder's documented setup (shedding and placement), its paired destinations.
    assert paired.actions and all((a.source, a.destination) in pairs for a in paired.actions)
    assert all(a.reason.endswith("the overloaded side of a fired pair") for a in paired.actions)
    # Another placement named: Pulsar places AvgShedder's unloads with it, and so does the plan.
    by_usage = config(
        "4.2.4",
        **at_once,
        loadBalancerLoadPlacementStrategy="org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate",
    )
    placed = make_plan("c", data, by_usage, "AvgShedder", None, include_splits=False)
    assert [a.bundle for a in placed.actions] == [a.bundle for a in paired.actions]
    assert {a.destination for a in paired.actions} == {"c:8080"}  # the coldest by usage
    assert {a.destination for a in placed.actions} == {"b:8080"}  # the least traffic, whatever the pair
    assert all("placed by LeastLongTermMessageRate" in a.reason for a in placed.actions)
    # A plan binds the pair's destination even where Pulsar's even-distribution filter (on by default) would leave
    # it out before AvgShedder's placement and draw anew (a deliberate difference, docs/fidelity.md).
    evenly = config("4.2.4", **{**at_once, "loadBalancerDistributeBundlesEvenlyEnabled": "true"})
    bound = make_plan("c", data, evenly, "AvgShedder", None, include_splits=False)
    assert {a.destination for a in bound.actions} == {"c:8080"}


def test_avg_shedder_placement_under_another_shedder_is_refused_as_pulsar_refuses_it():
    avg_placement = config(
        "4.2.4", loadBalancerLoadPlacementStrategy="org.apache.pulsar.broker.loadbalance.impl.AvgShedder"
    )
    with pytest.raises(InputError, match="loadBalancerLoadPlacementStrategy: AvgShedder places only what AvgShedder"):
        make_plan("c", three_brokers(), avg_placement, "UniformLoadShedder", None, include_splits=False)
    # From 5.0 the broker warns and places with LeastLongTermMessageRate instead; so does the plan.
    on_5 = avg_placement.with_settings(
        {"pulsarVersion": "5.0.1", "loadBalancerDistributeBundlesEvenlyEnabled": "false"}
    )
    plan = make_plan("c", three_brokers(), on_5, "UniformLoadShedder", None, include_splits=False)
    assert plan.actions and all("destination chosen by LeastLongTermMessageRate" in a.reason for a in plan.actions)
    assert {a.destination for a in plan.actions} == {"b:8080"}
