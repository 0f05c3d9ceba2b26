"""What ModularLoadManagerImpl.doLoadShedding and checkNamespaceBundleSplit do around the strategies (Pulsar
4.2.4's source): the one-broker guards and `loadBalancerSheddingExcludedNamespaces` (PIP-380, from 4.1.0)."""

from __future__ import annotations

import pytest

from planner.config import PulsarConfig
from planner.model import NamespaceBundleStats
from planner.plan.planning import make_plan
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
