"""The extensible load manager's policies, offline: TransferShedder's checks of bundles with isolation policies and
anti-affinity groups (`isTransferable`), the broker filters, the top bundles they keep off the table, and the plan
made with them (planning.make_transfer_plan with the cluster's policies).

Most cases are Pulsar's own, with their expected answers, named after the test they come from (4.2.4's tests:
TransferShedderTest, BrokerIsolationPoliciesFilterTest, TopKBundlesTest, AntiAffinityNamespaceGroupExtensionTest
and the AntiAffinityNamespaceGroupTest cases it runs on the ownership channel). Pulsar has no
IsolationPoliciesHelperTest or AntiAffinityGroupPolicyFilterTest: the filter tests above cover the helpers. Where
Pulsar's test mocks a helper, the port injects the same answers through the `transferable` check.
"""

from __future__ import annotations

import pytest

from planner.actions import ActionKind
from planner.plan.cluster_plan import ClusterLoad, plan_cluster
from planner.plan.extensible import extensible_load_data, top_k_bundles
from planner.plan.extensible_filters import (
    ExtensibleCluster,
    filter_anti_affinity,
    filter_isolation,
    placement_candidates,
    sheds_bundles_with_policies,
    transfer_refusal,
)
from planner.plan.planning import make_transfer_plan
from planner.plan.request import ClusterInputs
from planner.plan.shedding.transfer_shedder import (
    Reason,
    TransferShedderState,
    find_bundles_for_unloading,
)
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER, PulsarConfig
from planner.pulsar.declarations import (
    AutoFailoverPolicy,
    ClusterDeclarations,
    ClusterPolicies,
    FailureDomain,
    NamespaceIsolationPolicy,
)
from planner.pulsar.model import BrokerLoadData, ExtensibleLoadData, NamespaceBundleStats
from tests.builders import broker, load_data

NOW = 1_000_000
EXTENSIBLE = PulsarConfig().with_settings({"loadManagerClassName": EXTENSIBLE_LOAD_MANAGER})
# TransferShedderTest.getContext: debug mode on, the condition needs no consecutive cycles.
SHEDDER_TEST = EXTENSIBLE.with_settings(
    {"loadBalancerDebugModeEnabled": "true", "loadBalancerSheddingConditionHitCountThreshold": "0"}
)
BROKERS = [f"broker{i}:8080" for i in range(1, 6)]
BUNDLE_D1 = "my-tenant/my-namespaceD/0x00000000_0x0fffffff"
BUNDLE_E1 = "my-tenant/my-namespaceE/0x00000000_0x0fffffff"


def _isolation(
    namespaces: list[str], primary: list[str], secondary: tuple[str, ...] | list[str] = (), min_limit: int = 1
) -> NamespaceIsolationPolicy:
    return NamespaceIsolationPolicy(
        namespaces=tuple(namespaces),
        primary=tuple(primary),
        secondary=tuple(secondary),
        auto_failover_policy=AutoFailoverPolicy(parameters={"min_limit": str(min_limit), "usage_threshold": "80"}),
    )


def _out(throughput: float) -> NamespaceBundleStats:
    return NamespaceBundleStats(msg_throughput_out=throughput)


def _setup_context(config: PulsarConfig = SHEDDER_TEST) -> ExtensibleLoadData:
    """TransferShedderTest.setupContext: brokers 1-5 at 2, 4, 6, 80 and 90 % CPU, each with two bundles of its own
    namespace (A to E), its throughput out the sum of theirs (and 1 byte/s in)."""
    loads = {"A": (1e6, 2e6, 2), "B": (1e6, 3e6, 4), "C": (2e6, 4e6, 6), "D": (2e6, 6e6, 80), "E": (2e6, 7e6, 90)}
    brokers, top = {}, {}
    for name, (letter, (load1, load2, percent)) in zip(BROKERS, loads.items(), strict=True):
        bundles = {
            f"my-tenant/my-namespace{letter}/0x00000000_0x0fffffff": _out(load1),
            f"my-tenant/my-namespace{letter}/0x0fffffff_0xffffffff": _out(load2),
        }
        top[name] = top_k_bundles(bundles, config)
        brokers[name] = BrokerLoadData(
            msg_throughput_in=1.0,
            msg_throughput_out=load1 + load2,
            msg_rate_in=3.0,
            msg_rate_out=4.0,
            bundle_count=5,
            topics=6,
            weighted_max_ema=percent / 100,
            msg_throughput_ema=1.0 + load1 + load2,
            updated_at=NOW,
        )
    # The load data store lists them in its HashMap's order, which the sums (mean, std) follow.
    store_order = ["broker4:8080", "broker1:8080", "broker2:8080", "broker5:8080", "broker3:8080"]
    return ExtensibleLoadData(brokers={b: brokers[b] for b in store_order}, top_bundles=top)


def _owners(data: ExtensibleLoadData) -> dict[str, str]:
    return {entry.bundle_name: b for b, top in data.top_bundles.items() for entry in top.top_bundles_load_data}


def _cluster(config: PulsarConfig, policies: ClusterPolicies, data: ExtensibleLoadData, **known) -> ExtensibleCluster:
    topics = {b: load.topics for b, load in data.brokers.items()}
    return ExtensibleCluster(config, policies, known.pop("owners", _owners(data)), topics, **known)


def _cycle(data: ExtensibleLoadData, config: PulsarConfig, policies: ClusterPolicies | None = None, **known):
    """One TransferShedder cycle; with `policies`, each bundle checked as Pulsar's isTransferable checks it."""
    transferable = None
    if policies is not None:
        cluster = _cluster(config, policies, data, **known)

        def transferable(bundle: str, source: str, destination: str) -> str | None:
            return transfer_refusal(bundle, source, destination, BROKERS, cluster)

    return find_bundles_for_unloading(data, config, TransferShedderState(), NOW, transferable)


def _unloads(outcome) -> set[tuple[str, str, str | None, Reason]]:
    return {(d.source, d.bundle, d.destination, d.reason) for d in outcome.decisions}


def test_the_setup_context_is_pulsars():
    # TransferShedderTest.setupLoadAvg / setupLoadStd, and testMaxNumberOfTransfersPerShedderCycle's answer
    outcome = _cycle(_setup_context(), SHEDDER_TEST)
    assert outcome.average == 0.36400000000000005 and outcome.std == 0.3982762860126121
    assert _unloads(outcome) == {
        ("broker5:8080", BUNDLE_E1, "broker1:8080", Reason.OVERLOADED),
        ("broker4:8080", BUNDLE_D1, "broker2:8080", Reason.OVERLOADED),
    }


def test_bundles_with_isolation_policies():
    """TransferShedderTest.testBundlesWithIsolationPolicies: namespace E may only be on broker5."""
    config = SHEDDER_TEST.with_settings({"loadBalancerSheddingBundlesWithPoliciesEnabled": "true"})
    policies = ClusterPolicies(isolation={"e": _isolation(["my-tenant/my-namespaceE"], ["broker5"])})
    data = _setup_context()
    outcome = _cycle(data, config, policies)
    assert _unloads(outcome) == {("broker4:8080", BUNDLE_D1, "broker1:8080", Reason.OVERLOADED)}
    assert (outcome.average, outcome.std) == (0.36400000000000005, 0.3982762860126121)
    assert any(
        held.startswith(BUNDLE_E1 + ": not transferred from broker5:8080 to broker1:8080") for held in outcome.held
    )
    # an unload without a destination still needs the least loaded broker among the bundle's candidates
    no_transfer = config.with_settings({"loadBalancerTransferEnabled": "false"})
    assert _unloads(_cycle(data, no_transfer, policies)) == {("broker4:8080", BUNDLE_D1, None, Reason.OVERLOADED)}
    # every namespace isolated and bundles with policies not shed: nothing moves, with transfers or without
    everything = ClusterPolicies(isolation={"all": _isolation(["my-tenant/.*"], ["broker5"])})
    for settings in ({}, {"loadBalancerTransferEnabled": "false"}):
        off = config.with_settings({"loadBalancerSheddingBundlesWithPoliciesEnabled": "false", **settings})
        outcome = _cycle(data, off, everything)
        assert outcome.decisions == () and outcome.skipped is Reason.NO_BUNDLES
        assert (outcome.average, outcome.std) == (0.36400000000000005, 0.3982762860126121)
    # as Pulsar's test has it: namespaces isolated to no broker at all have no destination either
    nowhere = ClusterPolicies(isolation={**policies.isolation, "rest": _isolation(["my-tenant/my-namespace[A-D]"], [])})
    assert _cycle(data, config, nowhere).skipped is Reason.NO_BUNDLES


def test_bundles_with_anti_affinity_group():
    """TransferShedderTest.testBundlesWithAntiAffinityGroup: its mocked anti-affinity filter first leaves no broker
    for any bundle, then every broker for bundle E1 only."""
    data = _setup_context()
    config = SHEDDER_TEST.with_settings({"loadBalancerSheddingBundlesWithPoliciesEnabled": "true"})
    outcome = find_bundles_for_unloading(data, config, TransferShedderState(), NOW, lambda *_: "filtered out")
    assert outcome.decisions == () and outcome.skipped is Reason.NO_BUNDLES

    def only_e1(bundle: str, source: str, destination: str) -> str | None:
        return None if bundle == BUNDLE_E1 else "filtered out"

    outcome = find_bundles_for_unloading(data, config, TransferShedderState(), NOW, only_e1)
    assert _unloads(outcome) == {("broker5:8080", BUNDLE_E1, "broker1:8080", Reason.OVERLOADED)}
    assert (outcome.average, outcome.std) == (0.36400000000000005, 0.3982762860126121)


def test_filter_has_exception():
    """TransferShedderTest.testFilterHasException: a filter that fails keeps every bundle in place. Here the real
    one that can: BrokerVersionFilter, with preferLaterVersions, on a broker whose lookup data has no release."""
    config = SHEDDER_TEST.with_settings({"preferLaterVersions": "true"})
    versions = {b: "4.2.4" for b in BROKERS} | {"broker3:8080": ""}
    outcome = _cycle(_setup_context(), config, ClusterPolicies(), versions=versions)
    assert outcome.decisions == () and outcome.skipped is Reason.NO_BUNDLES
    assert all("broker_version_filter failed" in held for held in outcome.held)
    # every release known and readable: only the newest brokers are destinations, so broker2 gets nothing
    older = versions | {"broker3:8080": "4.2.4", "broker2:8080": "4.2.4-rc-1"}
    outcome = _cycle(_setup_context(), config, ClusterPolicies(), versions=older)
    assert _unloads(outcome) == {("broker5:8080", BUNDLE_E1, "broker1:8080", Reason.OVERLOADED)}
    assert any("broker2:8080 is no destination for it: it runs 4.2.4-rc-1, older" in held for held in outcome.held)
    # releases not read at all: the filter is left out, as if Pulsar had no preference
    assert _unloads(_cycle(_setup_context(), config, ClusterPolicies())) == _unloads(_cycle(_setup_context(), config))


@pytest.mark.parametrize(
    ("isolated", "grouped", "enabled", "expected"),
    [
        (True, True, True, True),
        (True, True, False, False),
        (True, False, True, True),
        (True, False, False, False),
        (False, True, True, True),
        (False, True, False, False),
        (False, False, True, True),
        (False, False, False, True),
    ],
)
def test_is_load_balancer_shedding_bundles_with_policies_enabled(isolated, grouped, enabled, expected):
    """TransferShedderTest.testIsLoadBalancerSheddingBundlesWithPoliciesEnabled's table."""
    policies = ClusterPolicies(
        isolation={"p": _isolation(["tenant/ns"], ["host1"])} if isolated else {},
        anti_affinity_groups={"tenant/ns": "group"} if grouped else {},
    )
    config = EXTENSIBLE.with_settings({"loadBalancerSheddingBundlesWithPoliciesEnabled": str(enabled).lower()})
    assert sheds_bundles_with_policies("tenant/ns", policies, config) is expected


THREE = ["broker1:8080", "broker2:8080", "broker3:8080"]


@pytest.mark.parametrize(
    ("min_limit", "available", "expected"),
    [
        (1, THREE, ["broker1:8080"]),
        (1, THREE[1:], ["broker2:8080"]),
        (1, THREE[2:], []),
        (2, THREE, ["broker1:8080", "broker2:8080"]),
        (2, THREE[1:], ["broker2:8080"]),
        (2, THREE[2:], []),
    ],
)
def test_filter_with_namespace_isolation_policies_for_primary_and_secondary_brokers(min_limit, available, expected):
    """BrokerIsolationPoliciesFilterTest.testFilterWithNamespaceIsolationPoliciesForPrimaryAndSecondaryBrokers:
    primary broker1, secondary broker2, broker3 shared."""
    policies = ClusterPolicies(isolation={"p": _isolation(["my-tenant/my-ns"], ["broker1"], ["broker2"], min_limit)})
    assert filter_isolation("my-tenant/my-ns/0x00000000_0xffffffff", available, policies, {}) == expected


def test_filter_with_persistent_topics_disabled():
    """BrokerIsolationPoliciesFilterTest.testFilterWithPersistentOrNonPersistentDisabled, for the persistent bundles
    a plan moves (a bundle looked up by its name holds no non-persistent topic): without isolation policies a broker
    that loads no persistent topics is no candidate."""
    bundle = "my-tenant/my-ns/0x00000000_0xffffffff"
    assert filter_isolation(bundle, THREE, ClusterPolicies(), {}) == THREE
    assert filter_isolation(bundle, THREE, ClusterPolicies(), {"broker1:8080": False}) == THREE[1:]
    # a namespace an isolation policy matches is placed by the policy alone
    isolated = ClusterPolicies(isolation={"p": _isolation(["my-tenant/my-ns"], ["broker1"])})
    assert filter_isolation(bundle, THREE, isolated, {"broker1:8080": False}) == ["broker1:8080"]


def test_policies_naming_broker_ids_match_nothing_on_4_2_4():
    """BrokerIsolationPoliciesFilterTest.testFilterWithNamespaceIsolationPoliciesUsingBrokerIds is newer than 4.2.4:
    every release read matches the patterns against the broker's host only (`parseBrokerHost`), so a policy naming
    `broker1:8080` matches no broker there."""
    policies = ClusterPolicies(
        isolation={"p": _isolation(["my-tenant/my-ns"], ["broker1:8080"], ["broker2:8080"])},
    )
    assert filter_isolation("my-tenant/my-ns/0x00000000_0xffffffff", THREE, policies, {}) == []


TOP_K = EXTENSIBLE.with_settings({"loadBalancerMaxNumberOfBundlesInBundleLoadReport": "2"})
TOP_K_BUNDLE1 = "my-tenant/my-namespace1/0x00000000_0x0fffffff"
TOP_K_BUNDLE2 = "my-tenant/my-namespace2/0x00000000_0x0fffffff"
TOP_K_STATS = {
    TOP_K_BUNDLE1: NamespaceBundleStats(msg_rate_in=500, msg_throughput_in=500),
    TOP_K_BUNDLE2: NamespaceBundleStats(msg_rate_in=10000, msg_throughput_in=10000),
}
TOP_K_ISOLATION = {
    "policy": _isolation(
        ["my-tenant/my-namespace1.*"],
        ["prod1-broker[1-3].messaging.use.example.com"],
        ["prod1-broker.*.use.example.com"],
        3,
    )
}


def _top(policies: ClusterPolicies | None, config: PulsarConfig = TOP_K) -> list[str]:
    return [entry.bundle_name for entry in top_k_bundles(TOP_K_STATS, config, policies).top_bundles_load_data]


def test_top_k_bundles_leave_out_bundles_with_policies():
    """TopKBundlesTest.testIsolationPolicy, testAntiAffinityGroupPolicy and
    testLoadBalancerSheddingBundlesWithPoliciesEnabledConfig."""
    assert _top(ClusterPolicies(isolation=TOP_K_ISOLATION)) == [TOP_K_BUNDLE2]
    assert _top(ClusterPolicies(anti_affinity_groups={"my-tenant/my-namespace2": "namespaceAntiAffinityGroup"})) == [
        TOP_K_BUNDLE1
    ]
    both = ClusterPolicies(
        isolation=TOP_K_ISOLATION, anti_affinity_groups={"my-tenant/my-namespace2": "namespaceAntiAffinityGroup"}
    )
    enabled = TOP_K.with_settings({"loadBalancerSheddingBundlesWithPoliciesEnabled": "true"})
    assert _top(both, enabled) == [TOP_K_BUNDLE1, TOP_K_BUNDLE2]
    assert _top(both) == []
    # policies not read: every bundle stays, as before
    assert _top(None) == [TOP_K_BUNDLE1, TOP_K_BUNDLE2]
    # a blank anti-affinity group is no group (StringUtils.isNotBlank)
    assert _top(ClusterPolicies(anti_affinity_groups={"my-tenant/my-namespace2": " "})) == [
        TOP_K_BUNDLE1,
        TOP_K_BUNDLE2,
    ]


def test_the_next_busiest_bundle_takes_the_place_of_one_with_policies():
    # TopKBundles leaves them out before it takes the busiest, so a broker still reports k bundles
    stats = {**TOP_K_STATS, "my-tenant/my-namespace3/0x00000000_0x0fffffff": NamespaceBundleStats(msg_rate_in=100)}
    stats["my-tenant/my-namespace3/0x00000000_0x0fffffff"] = NamespaceBundleStats(msg_throughput_in=100)
    grouped = ClusterPolicies(anti_affinity_groups={"my-tenant/my-namespace2": "g"})
    top = [e.bundle_name for e in top_k_bundles(stats, TOP_K, grouped).top_bundles_load_data]
    assert top == ["my-tenant/my-namespace3/0x00000000_0x0fffffff", TOP_K_BUNDLE1]


NS = "my-tenant/test/my-ns"
ANTI = "/0x00000000_0xffffffff"


def test_anti_affinity_group_policy_filter():
    """AntiAffinityNamespaceGroupExtensionTest.testAntiAffinityGroupPolicyFilter: a namespace without a group keeps
    every broker; one with a group loses the broker owning its bundle."""
    brokers = ["broker1:8080", "broker2:8080"]
    enabled = NS + "-filter-antiaffinity-enabled"
    policies = ClusterPolicies(anti_affinity_groups={enabled: "my-antiaffinity-filter"})
    owners = {enabled + ANTI: "broker1:8080"}
    assert filter_anti_affinity(NS + "-filter" + ANTI, brokers, policies, owners, True) == brokers
    assert filter_anti_affinity(enabled + ANTI, brokers, policies, owners, True) == ["broker2:8080"]


def _group(count: int) -> ClusterPolicies:
    return ClusterPolicies(anti_affinity_groups={f"{NS}{i}": "my-antiaffinity" for i in range(count)})


def test_anti_affinity_namespace_filtering_with_domain():
    """AntiAffinityNamespaceGroupTest.testAntiAffinityNamespaceFilteringWithDomain, on the ownership channel (as
    AntiAffinityNamespaceGroupExtensionTest runs it): ns0 on any broker, ns1 in the other domain, ns2 and ns3 on
    the brokers and domain still without one, ns4 anywhere again."""
    brokers = [f"brokerName-{i}" for i in range(4)]
    domains = {
        "domain-0": FailureDomain(brokers=frozenset(brokers[:2])),
        "domain-1": FailureDomain(brokers=frozenset(brokers[2:])),
    }
    policies = _group(5).model_copy(update={"failure_domains": domains})
    owners: dict[str, str] = {}
    expected = [brokers, brokers[2:], ["brokerName-1", "brokerName-3"], ["brokerName-3"], brokers]
    chosen = ["brokerName-0", "brokerName-2", "brokerName-1", "brokerName-3", None]
    for index, (candidates, owner) in enumerate(zip(expected, chosen, strict=True)):
        assigned = f"{NS}{index}{ANTI}"
        assert filter_anti_affinity(assigned, brokers, policies, owners, True) == candidates
        if owner:
            owners[assigned] = owner
    # without failureDomainsEnabled the domains do not count: ns1 may go to broker-1 too
    assert filter_anti_affinity(f"{NS}1{ANTI}", brokers, policies, {f"{NS}0{ANTI}": "brokerName-0"}, False) == [
        "brokerName-1",
        "brokerName-2",
        "brokerName-3",
    ]


def test_anti_affinity_namespace_filtering_without_domain():
    """AntiAffinityNamespaceGroupTest.testAntiAffinityNamespaceFilteringWithoutDomain, on the ownership channel."""
    brokers = ["broker-0", "broker-1", "broker-2"]
    owners: dict[str, str] = {}
    expected = [brokers, brokers[1:], brokers[2:], brokers]
    for index, candidates in enumerate(expected):
        assigned = f"{NS}{index}{ANTI}"
        assert filter_anti_affinity(assigned, brokers, _group(5), owners, True) == candidates
        owners[assigned] = brokers[index % 3]


def test_anti_affinity_counts_bundles_not_namespaces_and_groups_ignore_case():
    # the extensible load manager counts the owned bundles of the group (the modular one, namespaces)
    brokers = ["b1:8080", "b2:8080"]
    policies = ClusterPolicies(anti_affinity_groups={"t/a": "Group", "t/b": "gROUP", "t/c": "group"})
    owners = {
        "t/a/0x00000000_0x40000000": "b1:8080",
        "t/a/0x40000000_0x80000000": "b1:8080",
        "t/b/0x80000000_0xffffffff": "b2:8080",
    }
    assert filter_anti_affinity("t/c/0x00000000_0xffffffff", brokers, policies, owners, False) == ["b2:8080"]


def test_broker_selection_for_anti_affinity_group():
    """AntiAffinityNamespaceGroupTest.testBrokerSelectionForAntiAffinityGroup on the extensible load manager's
    lookup: two brokers in two failure domains, two namespaces of one group end on different brokers."""
    b1, b2 = "localhost:8081", "localhost:8082"
    policies = ClusterPolicies(
        anti_affinity_groups={"tenant/use/ns1": "group", "tenant/use/ns2": "group"},
        failure_domains={"domain1": FailureDomain(brokers=frozenset({b1})), "domain2": FailureDomain(brokers={b2})},
    )
    config = EXTENSIBLE.with_settings({"failureDomainsEnabled": "true"})
    cluster = ExtensibleCluster(config, policies)
    first = placement_candidates("tenant/use/ns1" + ANTI, [b1, b2], cluster).candidates
    assert first == (b1, b2)
    owned = ExtensibleCluster(config, policies, owners={"tenant/use/ns1" + ANTI: b1})
    assert placement_candidates("tenant/use/ns2" + ANTI, [b1, b2], owned).candidates == (b2,)


HOSTS = ["a:8080", "b:8080", "c:8080"]
ISOLATED = ClusterPolicies(isolation={"team": _isolation(["team/isolated"], ["a", "b"])})


def _busy_a(policies: ClusterPolicies | None, config: PulsarConfig, b_ema: float = 0.5):
    """Issue #34's cluster: namespace team/isolated may only be on a and b, its load on a, c idle; a serves
    team/free's bundles too."""
    bundles = {f"team/isolated/0x{i:x}0000000_0x{i + 1:x}0000000": _out((i + 1) * 1e6) for i in range(4)}
    bundles |= {f"team/free/0x{i:x}0000000_0x{i + 1:x}0000000": _out((i + 1) * 0.5e6) for i in range(2)}
    reports = {
        "a:8080": broker(
            throughput_out=12e6, bundles=bundles, last_stats=bundles, load_manager=EXTENSIBLE_LOAD_MANAGER
        ),
        "b:8080": broker(throughput_out=1e6, load_manager=EXTENSIBLE_LOAD_MANAGER),
        "c:8080": broker(load_manager=EXTENSIBLE_LOAD_MANAGER),
    }
    emas = {"a:8080": 0.9, "b:8080": b_ema, "c:8080": 0.1}
    extensible = extensible_load_data(reports, emas, {}, NOW, config, policies=policies)
    return load_data(reports), extensible


def _plan(policies: ClusterPolicies | None, settings: dict[str, str] | None = None):
    config = SHEDDER_TEST.with_settings(settings or {})
    data, extensible = _busy_a(policies, config)
    return make_transfer_plan("c", data, extensible, config, None, now_millis=NOW, policies=policies)


def _moves(plan) -> list[tuple[str, str, str | None]]:
    return [(a.bundle, a.source, a.destination) for a in plan.actions if a.kind is ActionKind.UNLOAD]


def test_without_policies_the_plan_moves_the_isolated_namespace_to_the_idle_broker():
    # what issue #34 saw: the planner, blind to the policy, sends team/isolated to c
    plan = _plan(None)
    assert any(bundle.startswith("team/isolated/") and dest == "c:8080" for bundle, _, dest in _moves(plan))
    # policies not read or an empty set of them: the same plan as before
    assert (
        _plan(None).model_dump()
        == make_transfer_plan("c", *_busy_a(None, SHEDDER_TEST), SHEDDER_TEST, None, now_millis=NOW).model_dump()
    )
    assert _moves(_plan(ClusterPolicies())) == _moves(plan)


def test_bundles_with_isolation_policies_are_not_shed_by_default_and_the_plan_says_so():
    plan = _plan(ISOLATED)
    moves = _moves(plan)
    assert moves and all(bundle.startswith("team/free/") for bundle, _, _ in moves)
    note = next(n for n in plan.notes if n.startswith("a:8080: 4 of its busiest bundles are not shed"))
    assert "loadBalancerSheddingBundlesWithPoliciesEnabled is false" in note and "team/isolated/" in note


def test_with_bundles_with_policies_shed_the_isolated_ones_stay_within_their_brokers():
    plan = _plan(ISOLATED, {"loadBalancerSheddingBundlesWithPoliciesEnabled": "true"})
    for bundle, _, destination in _moves(plan):
        assert not bundle.startswith("team/isolated/") or destination in {"a:8080", "b:8080"}
    held = [n for n in plan.notes if n.startswith("team/isolated/") and "not transferred from a:8080 to c:8080" in n]
    assert held and all("isolation policy team, which team/isolated follows, names c:8080 neither" in n for n in held)


def test_the_drain_fence_keeps_every_unisolated_bundle_off_the_fenced_broker():
    # the executor's fence: an isolation policy whose primary is the fenced host and which matches no real namespace
    fence = ClusterPolicies(isolation={"pulsar-rebalance-fence-c": _isolation(["pulsar-rebalance-fence/none"], ["c"])})
    plan = _plan(fence)
    assert all(destination != "c:8080" for _, _, destination in _moves(plan))
    assert any(n.startswith("team/free/") and "to c:8080" in n for n in plan.notes)
    assert _moves(_plan(None)) and any(dest == "c:8080" for _, _, dest in _moves(_plan(None)))


def test_an_unload_without_destination_is_placed_among_the_brokers_the_filters_leave():
    # transfers off: Pulsar places the bundle at its next lookup, at random among b and c (both well under the
    # mean); its anti-affinity group is already on b, so c only
    grouped = ClusterPolicies(anti_affinity_groups={"team/free": "g", "team/other": "g"})
    settings = {"loadBalancerTransferEnabled": "false", "loadBalancerSheddingBundlesWithPoliciesEnabled": "true"}
    config = SHEDDER_TEST.with_settings(settings)
    data, extensible = _busy_a(grouped, config, b_ema=0.15)
    b_report = data.brokers["b:8080"].model_copy(update={"bundles": frozenset({"team/other/0x00000000_0xffffffff"})})
    data = data.model_copy(update={"brokers": {**data.brokers, "b:8080": b_report}})
    plan = make_transfer_plan("c", data, extensible, config, None, now_millis=NOW, policies=grouped)
    free = [a for a in plan.actions if a.bundle.startswith("team/free/")]
    assert free and all(a.destination is None for a in free)
    assert all(a.reason.endswith("placed by LeastResourceUsageWithWeight at random among c:8080") for a in free)
    assert any(
        n.startswith("team/free/") and "b:8080: anti-affinity group g of team/free: it holds 1 bundles" in n
        for n in plan.notes
    )


def test_the_jobs_cluster_plan_takes_the_policies_the_snapshot_read():
    # plan_cluster (the Spark job's per-cluster plan) hands the latest snapshot's policies to TransferShedder
    fence = ClusterPolicies(isolation={"pulsar-rebalance-fence-c": _isolation(["pulsar-rebalance-fence/none"], ["c"])})
    data, _ = _busy_a(None, SHEDDER_TEST)
    load = ClusterLoad(data, 1, {"a:8080": 0.9, "b:8080": 0.5, "c:8080": 0.1}, {})
    settings = {"loadBalancerDebugModeEnabled": "true", "loadBalancerSheddingConditionHitCountThreshold": "0"}
    inputs = ClusterInputs(settings=settings, load_manager=EXTENSIBLE_LOAD_MANAGER)

    def plan(inputs: ClusterInputs):
        return plan_cluster("c", load, inputs, "TransferShedder", now_millis=NOW, usage_models=None)

    assert "c:8080" in {a.destination for a in plan(inputs).actions}
    # fenced, c is no destination; like Pulsar, TransferShedder then waits with c as the least loaded broker
    fenced = plan(inputs.model_copy(update={"declarations": ClusterDeclarations(policies=fence)}))
    assert fenced.actions == ()
    assert any("to c:8080: c:8080 is no destination" in note for note in fenced.notes)


def test_the_jobs_load_without_class_names_takes_them_from_the_snapshots_declarations():
    # The job's averaged load keeps traffic only: its brokers name no load manager class, which the class filter
    # refuses. With the snapshot's declarations (every broker runs the extensible manager) the plan transfers as
    # on the brokers' own reports; the whole-cycle test on the extensible cluster found every transfer refused.
    data, _ = _busy_a(None, SHEDDER_TEST)
    bare = data.model_copy(
        update={
            "brokers": {
                name: report.model_copy(update={"load_manager_class_name": None})
                for name, report in data.brokers.items()
            }
        }
    )
    load = ClusterLoad(bare, 1, {"a:8080": 0.9, "b:8080": 0.5, "c:8080": 0.1}, {})
    settings = {"loadBalancerDebugModeEnabled": "true", "loadBalancerSheddingConditionHitCountThreshold": "0"}
    declared = ClusterDeclarations(
        configuration={name: {"loadManagerClassName": EXTENSIBLE_LOAD_MANAGER} for name in bare.brokers},
        broker_versions=dict.fromkeys(bare.brokers, "4.2.4"),
    )
    inputs = ClusterInputs(settings=settings, load_manager=EXTENSIBLE_LOAD_MANAGER, declarations=declared)
    plan = plan_cluster("c", load, inputs, "TransferShedder", now_millis=NOW, usage_models=None)
    assert "c:8080" in {action.destination for action in plan.actions}
