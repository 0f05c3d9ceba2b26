"""Placement, shedding cycles and maintenance plans with the cluster's policies (`select_broker(policies=...)`,
`make_plan(policies=...)`, `maintenance_plan(policies=...)`): what the modular load manager's `selectBroker` and
`doLoadShedding` do with isolation policies, anti-affinity groups, failure domains and `preferLaterVersions`, the
notes naming each bundle the policies hold or place elsewhere, and a drain that never plans onto a broker its
earlier drain left fenced."""

from __future__ import annotations

import random

import pytest

from planner.plan.cluster_plan import ClusterLoad, plan_cluster
from planner.plan.maintenance import MaintenanceMode, MaintenanceRequest, drain_plan, fill_plan, maintenance_plan
from planner.plan.placement.pipeline import allowed_brokers, select_broker
from planner.plan.placement.strategy import PlacementSession
from planner.plan.planning import make_plan
from planner.plan.request import ClusterInputs
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import (
    AutoFailoverPolicy,
    ClusterDeclarations,
    ClusterPolicies,
    FailureDomain,
    NamespaceIsolationPolicy,
)
from planner.pulsar.policies import destination_refusal
from tests.builders import broker, bundle, bundle_data, load_data

FAILOVER = AutoFailoverPolicy(parameters={"min_limit": "1", "usage_threshold": "80"})


def isolated(namespaces: str, *primary: str, secondary: tuple[str, ...] = ()) -> NamespaceIsolationPolicy:
    return NamespaceIsolationPolicy(
        namespaces=(namespaces,), primary=primary, secondary=secondary, auto_failover_policy=FAILOVER
    )


def fence(host: str) -> dict[str, NamespaceIsolationPolicy]:
    """The executor's drain fence of `host` (planner/execute/fence.py), as the cluster lists it."""
    return {f"pulsar-rebalance-fence-{host}": isolated("pulsar-rebalance-fence/none", host)}


SECURE = ClusterPolicies(isolation={"secure": isolated("secure/.*", "a", "b")})


def config(**settings: str) -> PulsarConfig:
    return PulsarConfig.from_settings({"minUnloadMessage": "0", "maxUnloadPercentage": "0.5", **settings})


def hot_secure():
    """a:8080 carries four bundles of secure/pay at 2,000 msg/s each (90 % CPU); b:8080 one plain bundle; c:8080
    is idle. The issue's case: secure/.* isolated to a and b."""
    hot = [bundle(index, "secure/pay") for index in range(4)]
    cold = [bundle(9, "plain/app")]
    return load_data(
        {
            "a:8080": broker(cpu=(90, 100), rate_in=8000, throughput_in=8e5, bundles=hot),
            "b:8080": broker(cpu=(40, 100), rate_in=2000, throughput_in=2e5, bundles=cold),
            "c:8080": broker(cpu=(5, 100)),
        },
        {name: bundle_data(2000, 0, 2e5, 0) for name in (*hot, *cold)},
    )


def moves(plan) -> list[tuple[str, str, str | None]]:
    return [(action.bundle, action.source, action.destination) for action in plan.actions]


# --- selectBroker ------------------------------------------------------------------------------------------------


def test_a_lookup_of_an_isolated_namespace_goes_only_to_its_brokers():
    data = hot_secure()
    assert select_broker(bundle(20, "secure/pay"), data, config(), PlacementSession(random.Random(1))) == "c:8080"
    session = PlacementSession(random.Random(1))
    assert select_broker(bundle(20, "secure/pay"), data, config(), session, policies=SECURE) == "b:8080"
    # Namespaces no policy matches keep off the policy's primaries.
    assert allowed_brokers(data, "plain/app", SECURE) == ["c:8080"]
    assert allowed_brokers(data, "plain/app", None) == ["a:8080", "b:8080", "c:8080"]


def test_a_lookup_spreads_an_anti_affinity_group_over_failure_domains():
    names = {"geo/a": bundle(1, "geo/a"), "geo/b": bundle(2, "geo/b")}
    data = load_data(
        {
            "x:8080": broker(cpu=(50, 100), bundles=[names["geo/a"]]),
            "y:8080": broker(cpu=(5, 100)),
            "z:8080": broker(cpu=(60, 100)),
        },
        {name: bundle_data(100) for name in names.values()},
    )
    domains = {
        "zone-1": FailureDomain(brokers=frozenset({"x:8080", "y:8080"})),
        "zone-2": FailureDomain(brokers=frozenset({"z:8080"})),
    }
    policies = ClusterPolicies(anti_affinity_groups={"geo/a": "geo", "geo/b": "geo"}, failure_domains=domains)
    lookup = bundle(5, "geo/b")
    # y is the least loaded; the group spread keeps x out; with domains, the zone of x is out too.
    assert select_broker(lookup, data, config(), PlacementSession(random.Random(1)), policies=policies) == "y:8080"
    zoned = config(failureDomainsEnabled="true")
    assert select_broker(lookup, data, zoned, PlacementSession(random.Random(1)), policies=policies) == "z:8080"
    # Not read: placed as without policies.
    assert select_broker(lookup, data, zoned, PlacementSession(random.Random(1))) == "y:8080"


def test_prefer_later_versions_keeps_the_newest_release_or_every_allowed_broker_when_one_is_unreadable():
    data = load_data(
        {
            "old:8080": broker(cpu=(1, 100)).model_copy(update={"broker_version_string": "3.0.7"}),
            "new:8080": broker(cpu=(50, 100), bundles=[bundle(5)]).model_copy(
                update={"broker_version_string": "4.2.4"}
            ),
        },
        {bundle(5): bundle_data(1000)},
    )
    later = config(preferLaterVersions="true")
    assert select_broker(bundle(1, "other/ns"), data, config(), PlacementSession(random.Random(1))) == "old:8080"
    assert select_broker(bundle(1, "other/ns"), data, later, PlacementSession(random.Random(1))) == "new:8080"
    # A release it cannot read (BrokerFilterBadVersionException): every allowed broker is a candidate again.
    reports = {**data.brokers, "new:8080": data.brokers["new:8080"].model_copy(update={"broker_version_string": "4.2"})}
    unreadable = data.model_copy(update={"brokers": reports})
    for seed in range(5):
        plain = select_broker(bundle(1, "other/ns"), unreadable, config(), PlacementSession(random.Random(seed)))
        assert select_broker(bundle(1, "other/ns"), unreadable, later, PlacementSession(random.Random(seed))) == plain


# --- doLoadShedding -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["UniformLoadShedder", "OverloadShedder"])
def test_a_shedding_plan_keeps_an_isolated_namespace_on_its_brokers_and_says_so(strategy):
    data = hot_secure()
    without = make_plan("c", data, config(), strategy, None, include_splits=False)
    assert [destination for _, _, destination in moves(without)] == ["c:8080"]
    plan = make_plan("c", data, config(), strategy, None, include_splits=False, policies=SECURE)
    assert moves(plan) == [(bundle(0, "secure/pay"), "a:8080", "b:8080")]
    assert any(
        note.startswith(f"{bundle(0, 'secure/pay')}: placed on b:8080, not on c:8080")
        and "isolation policy secure" in note
        for note in plan.notes
    )
    # Every destination passes the executor's check.
    owners = {name: b for b, report in data.brokers.items() for name in report.bundles}
    for name, _, destination in moves(plan):
        assert destination_refusal(name, destination, SECURE, owners, brokers=sorted(data.brokers)) is None


def test_no_policies_and_empty_policies_plan_alike():
    data = hot_secure()
    for strategy in ("UniformLoadShedder", "OverloadShedder", "ThresholdShedder"):
        plain = make_plan("c", data, config(), strategy, None, include_splits=False)
        empty = make_plan("c", data, config(), strategy, None, include_splits=False, policies=ClusterPolicies())
        assert plain.to_json() == empty.to_json()


def test_should_namespace_policies_unload_keeps_a_bundle_no_other_broker_may_own():
    only_a = ClusterPolicies(isolation={"secure": isolated("secure/.*", "a")})
    plan = make_plan("c", hot_secure(), config(), "UniformLoadShedder", None, include_splits=False, policies=only_a)
    assert plan.actions == ()
    assert any(
        note == f"{bundle(0, 'secure/pay')}: not unloaded from a:8080: its isolation policy secure allows no other "
        "available broker (shouldNamespacePoliciesUnload)"
        for note in plan.notes
    )


def test_should_anti_affinity_namespace_unload_keeps_a_bundle_that_would_come_back():
    # Three namespaces of one group, one per broker: every broker holds one, so unloading a's would only return.
    hot = [bundle(index, "geo/a") for index in range(4)]
    data = load_data(
        {
            "a:8080": broker(cpu=(90, 100), rate_in=8000, throughput_in=8e5, bundles=hot),
            "b:8080": broker(cpu=(40, 100), rate_in=10, bundles=[bundle(9, "geo/b")]),
            "c:8080": broker(cpu=(5, 100), rate_in=10, bundles=[bundle(9, "geo/c")]),
        },
        {name: bundle_data(2000, 0, 2e5, 0) for name in (*hot, bundle(9, "geo/b"), bundle(9, "geo/c"))},
    )
    policies = ClusterPolicies(anti_affinity_groups={"geo/a": "geo", "geo/b": "geo", "geo/c": "GEO"})
    assert make_plan("c", data, config(), "UniformLoadShedder", None, include_splits=False).actions != ()
    plan = make_plan("c", data, config(), "UniformLoadShedder", None, include_splits=False, policies=policies)
    assert plan.actions == ()
    assert any("shouldAntiAffinityNamespaceUnload" in note and "anti-affinity group geo" in note for note in plan.notes)


def test_avg_shedders_planned_destination_is_re_drawn_when_the_policies_forbid_it():
    avg = config(loadBalancerAvgShedderHitCountHighThreshold="1", loadBalancerAvgShedderHitCountLowThreshold="1")
    data = hot_secure()
    without = make_plan("c", data, avg, "AvgShedder", None, include_splits=False)
    assert {destination for _, _, destination in moves(without)} == {"c:8080"}
    plan = make_plan("c", data, avg, "AvgShedder", None, include_splits=False, policies=SECURE)
    assert {destination for _, _, destination in moves(plan)} == {"b:8080"}
    assert sum("planned for c:8080, which the cluster's policies forbid" in note for note in plan.notes) == len(
        plan.actions
    )
    # Where the policies allow the planned destination, it stays bound.
    both = ClusterPolicies(isolation={"secure": isolated("secure/.*", "a", "c")})
    assert moves(make_plan("c", data, avg, "AvgShedder", None, include_splits=False, policies=both)) == moves(without)


# --- drain and fill -----------------------------------------------------------------------------------------------


def spread_cluster():
    """d:8080 to drain with six bundles; e:8080 and f:8080 carry one each; f:8080 is the least loaded."""
    drained = [bundle(index, "tenant/ns") for index in range(6)]
    return load_data(
        {
            "d:8080": broker(rate_in=600, bundles=drained),
            "e:8080": broker(rate_in=300, bundles=[bundle(7, "tenant/ns")]),
            "f:8080": broker(rate_in=10, bundles=[bundle(8, "tenant/ns")]),
        },
        {
            **{name: bundle_data(100) for name in drained},
            bundle(7, "tenant/ns"): bundle_data(300),
            bundle(8, "tenant/ns"): bundle_data(10),
        },
    )


def test_a_drain_after_an_earlier_drain_never_plans_onto_the_still_fenced_broker():
    data = spread_cluster()
    # Without the policies the idle, still-fenced f:8080 takes bundles the executor would then skip.
    assert "f:8080" in {action.destination for action in drain_plan("c", data, PulsarConfig(), ["d:8080"]).actions}
    fenced = ClusterPolicies(isolation=fence("f"))
    plan = drain_plan("c", data, PulsarConfig(), ["d:8080"], policies=fenced)
    assert len(plan.actions) == 6
    assert {action.destination for action in plan.actions} == {"e:8080"}
    assert any("primary broker of isolation policy pulsar-rebalance-fence-f" in note for note in plan.notes)
    owners = {name: b for b, report in data.brokers.items() for name in report.bundles}
    for action in plan.actions:
        assert (
            destination_refusal(action.bundle, action.destination, fenced, owners, brokers=sorted(data.brokers)) is None
        )
        owners[action.bundle] = action.destination
    # maintenance_plan passes them on.
    request = MaintenanceRequest(MaintenanceMode.DRAIN, ("d:8080",))
    assert maintenance_plan("c", data, PulsarConfig(), request, policies=fenced).actions == plan.actions


def test_a_drain_leaves_a_bundle_no_staying_broker_may_own_and_says_why():
    data = spread_cluster()
    policies = ClusterPolicies(isolation={"pinned": isolated("tenant/ns", "d")})
    plan = drain_plan("c", data, PulsarConfig(), ["d:8080"], policies=policies)
    assert plan.actions == ()
    assert "6 bundles stay: no broker that stays may own them" in plan.notes[0]
    assert sum("stays on d:8080: its isolation policy pinned allows no broker that stays" in n for n in plan.notes) == 6


def test_a_drain_keeps_an_anti_affinity_group_spread_counting_its_own_earlier_moves():
    group = [bundle(1, "geo/a"), bundle(1, "geo/b")]
    data = load_data(
        {
            "d:8080": broker(rate_in=190, bundles=group),
            "e:8080": broker(rate_in=10, bundles=[bundle(2, "plain/x")]),
            "f:8080": broker(rate_in=500, bundles=[bundle(3, "plain/x")]),
        },
        {
            group[0]: bundle_data(100),
            group[1]: bundle_data(90),
            bundle(2, "plain/x"): bundle_data(10),
            bundle(3, "plain/x"): bundle_data(500),
        },
    )
    # By message rate both go to the quiet e:8080.
    assert {action.destination for action in drain_plan("c", data, PulsarConfig(), ["d:8080"]).actions} == {"e:8080"}
    policies = ClusterPolicies(anti_affinity_groups={"geo/a": "geo", "geo/b": "geo"})
    plan = drain_plan("c", data, PulsarConfig(), ["d:8080"], policies=policies)
    # The first move counts: e:8080 then holds geo/a, so geo/b goes to f:8080.
    assert moves(plan) == [(group[0], "d:8080", "e:8080"), (group[1], "d:8080", "f:8080")]
    assert any(
        note.startswith(f"{group[1]}: to f:8080, not e:8080 as without the cluster's policies") for note in plan.notes
    )


def test_a_fill_lifts_its_targets_fence_and_takes_only_bundles_the_policies_allow_it():
    plain = [bundle(index, "tenant/ns") for index in range(3)]
    secure = [bundle(index, "secure/pay") for index in range(3)]
    data = load_data(
        {"a:8080": broker(rate_in=600, bundles=plain + secure), "n:8080": broker()},
        # The secure bundles would fill best (150 msg/s each towards a share of 300).
        {**{name: bundle_data(50) for name in plain}, **{name: bundle_data(150) for name in secure}},
    )
    policies = ClusterPolicies(isolation={**fence("n"), "secure": isolated("secure/.*", "a")})
    plan = fill_plan("c", data, PulsarConfig(), ["n:8080"], policies=policies)
    assert plan.actions and all(action.bundle.startswith("tenant/ns/") for action in plan.actions)
    assert all(action.destination == "n:8080" for action in plan.actions)
    assert any("not moved to n:8080: isolation policy secure" in note for note in plan.notes)


def test_the_jobs_cluster_plan_hands_the_policies_the_snapshot_read_to_shedding_and_maintenance():
    def plan(data, inputs: ClusterInputs, strategy: str = "UniformLoadShedder"):
        return plan_cluster("c", ClusterLoad(data, 1, {}, {}), inputs, strategy, now_millis=0, usage_models=None)

    settings = {"minUnloadMessage": "0", "maxUnloadPercentage": "0.5"}
    read = ClusterDeclarations(policies=SECURE)
    assert moves(plan(hot_secure(), ClusterInputs(settings=settings)))[0][2] == "c:8080"
    assert moves(plan(hot_secure(), ClusterInputs(settings=settings, declarations=read)))[0][2] == "b:8080"
    drain = {"mode": "drain", "brokers": ["d:8080"]}
    fenced = ClusterDeclarations(policies=ClusterPolicies(isolation=fence("f")))
    assert "f:8080" in {a.destination for a in plan(spread_cluster(), ClusterInputs(maintenance=drain)).actions}
    drained = plan(spread_cluster(), ClusterInputs(maintenance=drain, declarations=fenced))
    assert {action.destination for action in drained.actions} == {"e:8080"}
