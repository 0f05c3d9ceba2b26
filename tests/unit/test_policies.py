"""The cluster policies' pure rules (`planner.pulsar.policies`), with Pulsar's own test cases and their expected
answers: `NamespaceIsolationPoliciesTest`, `NamespaceIsolationPolicyImplTest`, `MinAvailablePolicyTest` (pulsar-common),
`ModularLoadManagerImplTest` (its isolation and shedding-check cases), `AntiAffinityNamespaceGroupTest` and
`BrokerVersionFilterTest` (pulsar-broker)."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.pulsar.config import EXTENSIBLE_LOAD_MANAGER, PulsarConfig
from planner.pulsar.declarations import AutoFailoverPolicy, ClusterPolicies, FailureDomain, NamespaceIsolationPolicy
from planner.pulsar.policies import (
    BrokerFilterError,
    anti_affinity_counts,
    broker_domains,
    compare_releases,
    destination_refusal,
    filter_anti_affinity,
    is_primary,
    is_secondary,
    isolation_candidates,
    isolation_policy,
    newest_release_brokers,
    owned_namespaces,
    primary_of,
    should_anti_affinity_namespace_unload,
    should_namespace_policies_unload,
    without_fences,
)
from planner.pulsar.versions import PulsarVersion


def policy(namespaces, primary, secondary=(), min_limit="1", usage_threshold="80") -> NamespaceIsolationPolicy:
    parameters = {"min_limit": str(min_limit), "usage_threshold": str(usage_threshold)}
    return NamespaceIsolationPolicy(
        namespaces=tuple(namespaces),
        primary=tuple(primary),
        secondary=tuple(secondary),
        auto_failover_policy=AutoFailoverPolicy(parameters=parameters),
    )


# NamespaceIsolationPoliciesTest's defaultJson, as the admin API serves it.
DEFAULT_JSON = {
    "policy1": {
        "namespaces": ["pulsar/use/test.*"],
        "primary": ["prod1-broker[1-3].messaging.use.example.com"],
        "secondary": ["prod1-broker.*.use.example.com"],
        "auto_failover_policy": {
            "parameters": {"min_limit": "3", "usage_threshold": "100"},
            "policy_type": "min_available",
        },
    }
}


def default_policies() -> ClusterPolicies:
    return ClusterPolicies.model_validate({"isolation": DEFAULT_JSON})


def at(host: str) -> str:
    return f"{host}:8080"


# --- NamespaceIsolationPolicies / NamespaceIsolationPolicyImpl / MinAvailablePolicy ---------------------------------


def test_get_namespace_isolation_policy_by_namespace():
    policies = default_policies()
    assert isolation_policy("no/such/namespace", policies) is None
    found = isolation_policy("pulsar/use/testns-1", policies)
    assert found is not None and found[0] == "policy1"


def test_set_policy_the_second_matches_what_the_first_does_not():
    # testSetPolicy: patterns match case-sensitively and the whole name.
    second = policy(["pulsar/use/TESTNS.*"], ["prod1-broker[45].messaging.use.example.com"], ["prod1-broker.*"], 2)
    policies = ClusterPolicies(isolation={**default_policies().isolation, "policy2": second})
    found = isolation_policy("pulsar/use/TESTNS.1", policies)
    assert found is not None and found[0] == "policy2"


def test_the_first_policy_in_the_clusters_order_wins_when_two_match():
    first, second = policy(["t/.*"], ["a"]), policy(["t/ns"], ["b"])
    assert isolation_policy("t/ns", ClusterPolicies(isolation={"x": first, "y": second}))[0] == "x"
    assert isolation_policy("t/ns", ClusterPolicies(isolation={"y": second, "x": first}))[0] == "y"


def test_is_primary_or_secondary_broker():
    name, found = "policy1", default_policies().isolation["policy1"]
    assert is_primary(name, found, at("prod1-broker2.messaging.use.example.com"))
    assert not is_primary(name, found, at("prod1-broker5.messaging.use.example.com"))
    assert is_secondary(name, found, at("prod1-broker5.messaging.use.example.com"))
    assert not is_secondary(name, found, at("broker-X.messaging.use.example.com"))


def test_broker_assignment_primary_secondary_shared():
    # testBrokerAssignment: a primary of the policy, a secondary of it, and a broker no policy names (shared).
    policies = default_policies()
    primary, secondary, shared = (
        at("prod1-broker1.messaging.use.example.com"),
        at("prod1-broker4.messaging.use.example.com"),
        at("use.example.com"),
    )
    found = policies.isolation["policy1"]
    assert is_primary("policy1", found, primary) and is_secondary("policy1", found, secondary)
    assert not is_primary("policy1", found, secondary) and not is_secondary("policy1", found, shared)
    # One primary available, fewer than min_limit 3: the secondaries are candidates too, the shared broker never.
    assert isolation_candidates("pulsar/use/testns-1", [primary, secondary, shared], policies) == [primary, secondary]
    assert primary_of(shared, policies) is None and primary_of(primary, policies) == "policy1"
    assert isolation_candidates("pulsar/use1/testns-1", [primary, secondary, shared], policies) == [secondary, shared]


def test_find_brokers_the_primaries_unless_too_few_of_them():
    # testFindBrokers: of ten brokers three are primaries, all ten secondaries; min_limit 3 keeps the primaries.
    brokers = [at(f"prod1-broker{i}.messaging.use.example.com") for i in range(10)]
    others = [at(f"prod1-broker{i}.messaging.usw.example.com") for i in range(10)]
    policies = default_policies()
    assert isolation_candidates("pulsar/use/testns-1", brokers, policies) == brokers[1:4]
    # MinAvailablePolicyTest: shouldFailoverToSecondary(2) with min_limit 3: the secondaries come in.
    two = [brokers[1], brokers[2], *brokers[5:]]
    assert isolation_candidates("pulsar/use/testns-1", two, policies) == two
    assert isolation_candidates("pulsar/use/testns-1", others, policies) == []


def test_usage_threshold_plays_no_part_in_placement():
    # MinAvailablePolicy.isBrokerAvailable reads the usage, but neither load manager calls it.
    policies = default_policies()
    brokers = [at(f"prod1-broker{i}.messaging.use.example.com") for i in range(1, 4)]
    busy = dict.fromkeys(brokers, 99.0)
    assert isolation_candidates("pulsar/use/testns-1", brokers, policies, busy) == brokers


# --- ModularLoadManagerImplTest ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("min_limit", "available", "expected"),
    [
        (1, ["broker3:8080", "localhost0:8080", "localhost1:8080"], ["localhost0:8080"]),
        (1, ["broker3:8080", "localhost1:8080"], ["localhost1:8080"]),
        (1, ["broker3:8080"], []),
        (2, ["broker3:8080", "localhost0:8080", "localhost1:8080"], ["localhost0:8080", "localhost1:8080"]),
        (2, ["broker3:8080", "localhost1:8080"], ["localhost1:8080"]),
        (2, ["broker3:8080"], []),
    ],
)
def test_namespace_isolation_policies_for_primary_and_secondary_brokers(min_limit, available, expected):
    # Primary localhost0, secondary localhost1, broker3 shared; the namespace is my-property/use/my-ns.
    found = policy(["my-property/use/my-ns.*"], ["localhost0"], ["localhost1"], min_limit)
    policies = ClusterPolicies(isolation={"my-ns-isolation-policies": found})
    assert isolation_candidates("my-property/use/my-ns", available, policies) == expected


def test_load_shedding_with_namespace_isolation_policies():
    # Two brokers on host localhost; the namespace's bundle is on the first.
    namespace, brokers = "my-tenant/use/my-ns", ["localhost:8080", "localhost:8081"]
    assert should_namespace_policies_unload(namespace, brokers[0], brokers, ClusterPolicies())
    # Isolated to localhost1 (no such broker) as primary and secondary: nobody may take it.
    away = ClusterPolicies(isolation={"p": policy([f"{namespace}.*"], ["localhost1"], ["localhost1"])})
    assert not should_namespace_policies_unload(namespace, "localhost1:8080", brokers, away)
    # Isolated to host localhost: the other broker on it may.
    here = ClusterPolicies(isolation={"p": policy([f"{namespace}.*"], ["localhost"], ["localhost"])})
    assert should_namespace_policies_unload(namespace, brokers[0], brokers, here)


def test_without_a_policy_only_shared_brokers_that_load_persistent_topics():
    fence = policy(["pulsar-rebalance-fence/none"], ["b"])
    policies = ClusterPolicies(isolation={"pulsar-rebalance-fence-b": fence})
    brokers = ["a:8080", "b:8080", "c:8080", "no-port"]
    assert isolation_candidates("t/ns", brokers, policies, persistent_topics={"c:8080": False}) == ["a:8080"]
    # A policy's own namespaces ignore the persistent-topics flag (Pulsar checks it only for the shared brokers).
    assert isolation_candidates("pulsar-rebalance-fence/none", brokers, policies, persistent_topics={}) == ["b:8080"]


def test_hosts_only_before_5_0_and_broker_ids_from_5_0():
    # A pattern with a port names no host; 5.0 matches such patterns against the broker id too.
    policies = ClusterPolicies(isolation={"p": policy(["t/.*"], ["10\\.0\\.0\\.1:8081"])})
    brokers = ["10.0.0.1:8080", "10.0.0.1:8081", "10.0.0.2:8080"]
    assert isolation_candidates("t/ns", brokers, policies, version=PulsarVersion.parse("4.2.4")) == []
    assert isolation_candidates("t/ns", brokers, policies, version=PulsarVersion.parse("5.0.1")) == ["10.0.0.1:8081"]
    # ... and a primary by id is no shared broker there.
    others = isolation_candidates("o/ns", brokers, policies, version=PulsarVersion.parse("5.0.1"))
    assert others == ["10.0.0.1:8080", "10.0.0.2:8080"]
    assert isolation_candidates("o/ns", brokers, policies, version=PulsarVersion.parse("4.2.4")) == brokers
    # IPv6 ids are written as Guava's HostAndPort writes them.
    v6 = ClusterPolicies(isolation={"p": policy(["t/.*"], ["\\[::1\\]:8080"])})
    assert isolation_candidates("t/ns", ["[::1]:8080"], v6, version=PulsarVersion.parse("5.0.1")) == ["[::1]:8080"]


def test_java_quoting_and_unreadable_patterns():
    quoted = ClusterPolicies(isolation={"p": policy(["\\Qa.b/ns\\E"], ["\\Qhost.one\\E"])})
    assert isolation_candidates("a.b/ns", ["host.one:1", "hostxone:1"], quoted) == ["host.one:1"]
    assert isolation_policy("aXb/ns", quoted) is None
    broken = ClusterPolicies(isolation={"p": policy(["(unclosed"], ["a"])})
    with pytest.raises(InputError, match=r"isolation policy p: namespaces: '\(unclosed'"):
        isolation_candidates("t/ns", ["a:1"], broken)
    without_limit = ClusterPolicies(isolation={"p": NamespaceIsolationPolicy(namespaces=("t/.*",), primary=("a",))})
    with pytest.raises(InputError, match=r"isolation policy p: auto_failover_policy\.parameters\.min_limit"):
        isolation_candidates("t/ns", ["a:1"], without_limit)


def test_lifting_a_fence_keeps_the_other_policies():
    fence = policy(["pulsar-rebalance-fence/none"], ["b"])
    policies = ClusterPolicies(isolation={"pulsar-rebalance-fence-b": fence, "mine": policy(["t/.*"], ["b"])})
    lifted = without_fences(policies, ["b:8080"])
    assert list(lifted.isolation) == ["mine"]
    assert without_fences(policies, ["c:8080"]) is policies


# --- AntiAffinityNamespaceGroupTest ------------------------------------------------------------------------------

NAMESPACE = "my-tenant/use/my-ns"
GROUPS = ClusterPolicies(anti_affinity_groups={f"{NAMESPACE}{i}": "my-antiaffinity" for i in range(5)})


def filtered(namespace: str, candidates: list[str], owned: dict[str, set[str]], policies=GROUPS, domains=False):
    return sorted(filter_anti_affinity(namespace, candidates, policies, owned, failure_domains_enabled=domains))


def test_anti_affinity_namespace_filtering_with_domain():
    brokers = [f"brokerName-{i}" for i in range(4)]
    domains = {
        "domain-0": FailureDomain(brokers=frozenset(brokers[:2])),
        "domain-1": FailureDomain(brokers=frozenset(brokers[2:])),
    }
    policies = GROUPS.model_copy(update={"failure_domains": domains})
    owned: dict[str, set[str]] = {}
    assert filtered(f"{NAMESPACE}0", brokers, owned, policies, True) == brokers
    owned["brokerName-0"] = {f"{NAMESPACE}0"}
    assert filtered(f"{NAMESPACE}1", brokers, owned, policies, True) == ["brokerName-2", "brokerName-3"]
    owned["brokerName-2"] = {f"{NAMESPACE}1"}
    assert filtered(f"{NAMESPACE}2", brokers, owned, policies, True) == ["brokerName-1", "brokerName-3"]
    owned["brokerName-1"] = {f"{NAMESPACE}2"}
    assert filtered(f"{NAMESPACE}3", brokers, owned, policies, True) == ["brokerName-3"]
    owned["brokerName-3"] = {f"{NAMESPACE}3"}
    assert filtered(f"{NAMESPACE}4", brokers, owned, policies, True) == brokers
    # With failureDomainsEnabled=false the domains count nothing: step 2 keeps the three brokers owning none.
    partial = {"brokerName-0": {f"{NAMESPACE}0"}}
    assert filtered(f"{NAMESPACE}1", brokers, partial, policies, False) == brokers[1:]


def test_anti_affinity_namespace_filtering_without_domain():
    brokers = ["broker-0", "broker-1", "broker-2"]
    owned: dict[str, set[str]] = {}
    assert filtered(f"{NAMESPACE}0", brokers, owned) == brokers
    owned["broker-0"] = {f"{NAMESPACE}0"}
    assert filtered(f"{NAMESPACE}1", brokers, owned) == ["broker-1", "broker-2"]
    owned["broker-1"] = {f"{NAMESPACE}1"}
    assert filtered(f"{NAMESPACE}2", brokers, owned) == ["broker-2"]
    owned["broker-2"] = {f"{NAMESPACE}2"}
    assert filtered(f"{NAMESPACE}3", brokers, owned) == brokers


def test_load_shedding_util_with_anti_affinity_namespace():
    brokers = ["broker-0", "broker-1", "broker-2"]
    owned = {"broker-0": {f"{NAMESPACE}0"}}
    assert should_anti_affinity_namespace_unload(f"{NAMESPACE}0", "broker-0", brokers, GROUPS, owned)
    owned["broker-1"] = {f"{NAMESPACE}1"}
    assert should_anti_affinity_namespace_unload(f"{NAMESPACE}0", "broker-0", brokers, GROUPS, owned)
    owned["broker-2"] = {f"{NAMESPACE}2"}
    assert not should_anti_affinity_namespace_unload(f"{NAMESPACE}0", "broker-0", brokers, GROUPS, owned)
    # testLoadSheddingWithAntiAffinityNamespace: the only broker owning the group may unload (the others own none).
    assert should_anti_affinity_namespace_unload(
        f"{NAMESPACE}0", "broker-0", brokers, GROUPS, {"broker-0": {f"{NAMESPACE}0"}}
    )
    # A namespace without a group always may.
    assert should_anti_affinity_namespace_unload("other/ns", "broker-0", brokers, GROUPS, owned)


def test_groups_compare_ignoring_case_and_blank_groups_are_none():
    policies = ClusterPolicies(anti_affinity_groups={"a/x": "Geo", "a/y": "GEO", "a/z": "  ", "a/w": "other"})
    owned = {"b1": {"a/x"}, "b2": {"a/y", "a/z", "a/w"}}
    assert anti_affinity_counts("a/x", policies, owned) == {"b1": 1, "b2": 1}
    assert anti_affinity_counts("a/z", policies, owned) is None
    assert owned_namespaces({"a/x/0x0_0x1": "b1", "a/x/0x1_0x2": "b1", "a/y/0x0_0x1": "b2"}) == {
        "b1": {"a/x"},
        "b2": {"a/y"},
    }


def test_failure_domains_in_name_order_the_later_wins_and_only_when_enabled():
    policies = ClusterPolicies(
        failure_domains={
            "zone-b": FailureDomain(brokers=frozenset({"x:1"})),
            "zone-a": FailureDomain(brokers=frozenset({"x:1", "y:1"})),
        }
    )
    assert broker_domains(policies, True) == {"x:1": "zone-b", "y:1": "zone-a"}
    assert broker_domains(policies, False) == {}


# --- BrokerVersionFilterTest -------------------------------------------------------------------------------------


def test_latest_version():
    versions = {"broker1": "1.1.0-SNAPSHOT", "broker2": "1.1.0-SNAPSHOT", "broker3": "1.2.0-SNAPSHOT"}
    assert newest_release_brokers(["broker1", "broker2", "broker3"], versions) == ["broker3"]


def test_release_order_of_java_semver():
    assert compare_releases("4.2.4", "4.2.4-rc1") > 0  # a release after its pre-releases
    assert compare_releases("3.0.7", "4.2.4") < 0
    assert compare_releases("4.2.4+build1", "4.2.4+build2") == 0  # build metadata: equal for the filter
    assert compare_releases("1.0.0-alpha.2", "1.0.0-alpha.10") < 0  # numeric identifiers numerically
    assert compare_releases("1.0.0-alpha", "1.0.0-alpha.1") < 0  # the shorter first
    assert compare_releases("1.0.0-1", "1.0.0-beta") < 0  # mixed: as strings ('1' < 'b')
    assert newest_release_brokers(["a", "b"], {"a": "4.2.4+x", "b": "4.2.4"}) == ["a", "b"]


@pytest.mark.parametrize("versions", [{"a": "4.2.4"}, {"a": "4.2.4", "b": ""}, {"a": "4.2.4", "b": "4.2"}])
def test_a_release_it_cannot_read_fails_the_filter(versions):
    with pytest.raises(BrokerFilterError):
        newest_release_brokers(["a", "b"], versions)
    with pytest.raises(BrokerFilterError):
        newest_release_brokers([], versions)


# --- destination_refusal -----------------------------------------------------------------------------------------


def test_destination_refusal_names_the_isolation_policy_and_the_fence():
    policies = ClusterPolicies(
        isolation={
            "secure": policy(["secure/.*"], ["iso-[0-9]+"], ["spare"], min_limit=2),
            "pulsar-rebalance-fence-c": policy(["pulsar-rebalance-fence/none"], ["c"]),
        }
    )
    brokers = ["iso-1:8080", "iso-2:8080", "spare:8080", "c:8080", "d:8080"]
    bundle, other = "secure/pay/0x00000000_0xffffffff", "plain/ns/0x00000000_0xffffffff"
    assert destination_refusal(bundle, "iso-2:8080", policies, brokers=brokers) is None
    assert "names d:8080 neither primary nor secondary" in destination_refusal(
        bundle, "d:8080", policies, brokers=brokers
    )
    assert "secondary of isolation policy secure" in destination_refusal(
        bundle, "spare:8080", policies, brokers=brokers
    )
    assert destination_refusal(bundle, "spare:8080", policies, brokers=["iso-1:8080", "spare:8080"]) is None
    fenced = destination_refusal(other, "c:8080", policies, brokers=brokers)
    assert "primary broker of isolation policy pulsar-rebalance-fence-c" in fenced
    assert destination_refusal(other, "d:8080", policies, brokers=brokers) is None


def test_destination_refusal_keeps_an_anti_affinity_group_spread():
    policies = ClusterPolicies(anti_affinity_groups={"geo/a": "g", "geo/b": "g", "geo/c": "g"})
    owners = {"geo/a/0x0_0x1": "x:1", "geo/b/0x0_0x1": "y:1", "geo/c/0x0_0x1": "z:1", "plain/n/0x0_0x1": "w:1"}
    assert destination_refusal("geo/a/0x0_0x1", "w:1", policies, owners) is None
    refused = destination_refusal("geo/a/0x0_0x1", "y:1", policies, owners)
    assert refused.startswith("anti-affinity group g of geo/a: y:1 holds 1 namespaces of it")
    assert destination_refusal("geo/a/0x0_0x1", "y:1", policies) is None  # no ownership given: isolation only
    # Leaving its owner for a broker holding as many as the others is no worse: allowed.
    full = {**owners, "plain/n/0x0_0x1": "x:1", "geo/c/0x1_0x2": "w:1"}
    assert destination_refusal("geo/a/0x0_0x1", "y:1", policies, {**full, "geo/a/0x1_0x2": "x:1"}) is None
    # With failure domains enabled, a broker of a domain holding the group is refused beside one of an empty domain.
    zoned = policies.model_copy(
        update={
            "failure_domains": {
                "z1": FailureDomain(brokers=frozenset({"x:1", "w:1"})),
                "z2": FailureDomain(brokers=frozenset({"v:1"})),
            }
        }
    )
    two = {"geo/a/0x0_0x1": "x:1", "geo/b/0x0_0x1": "y:1", "plain/n/0x0_0x1": "w:1", "plain/m/0x0_0x1": "v:1"}
    enabled = PulsarConfig.from_settings({"failureDomainsEnabled": "true"})
    assert destination_refusal("geo/b/0x0_0x1", "w:1", zoned, two) is None
    assert "would place the bundle on v:1" in destination_refusal("geo/b/0x0_0x1", "w:1", zoned, two, config=enabled)


def test_the_extensible_load_manager_counts_bundles_not_namespaces():
    policies = ClusterPolicies(anti_affinity_groups={"geo/a": "g", "geo/b": "g"})
    owners = {"geo/a/0x0_0x1": "x:1", "geo/b/0x0_0x1": "y:1", "geo/b/0x1_0x2": "y:1", "geo/b/0x2_0x3": "z:1"}
    extensible = PulsarConfig.from_settings({"loadManagerClassName": EXTENSIBLE_LOAD_MANAGER})
    # Namespaces: y and z hold one each, so either takes it; bundles: y holds two, z one.
    assert destination_refusal("geo/a/0x0_0x1", "y:1", policies, owners) is None
    assert "y:1 holds 2 bundles" in destination_refusal("geo/a/0x0_0x1", "y:1", policies, owners, config=extensible)


def test_what_pulsars_own_pipeline_picks_for_a_shedding_unload_passes_the_check():
    # Zone z1 holds the owner a (two namespaces of the group) and b (none); z2 holds c (one). Pulsar's shedding cycle
    # counts the owner: z1 holds 2, z2 1, so it places on c. Leaving a out, z1 holds 0 and b would be kept: both pass.
    policies = ClusterPolicies(
        anti_affinity_groups={"geo/a": "g", "geo/b": "g", "geo/c": "g"},
        failure_domains={
            "z1": FailureDomain(brokers=frozenset({"a:1", "b:1"})),
            "z2": FailureDomain(brokers=frozenset({"c:1"})),
        },
    )
    owners = {"geo/a/0x0_0x1": "a:1", "geo/b/0x0_0x1": "a:1", "geo/c/0x0_0x1": "c:1", "plain/x/0x0_0x1": "b:1"}
    enabled = PulsarConfig.from_settings({"failureDomainsEnabled": "true"})
    kept = filter_anti_affinity(
        "geo/a", ["a:1", "b:1", "c:1"], policies, owned_namespaces(owners), failure_domains_enabled=True
    )
    assert kept == ["c:1"]
    assert destination_refusal("geo/a/0x0_0x1", "c:1", policies, owners, config=enabled) is None
    assert destination_refusal("geo/a/0x0_0x1", "b:1", policies, owners, config=enabled) is None
