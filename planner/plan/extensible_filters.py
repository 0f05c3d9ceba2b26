"""The extensible load manager's broker filters and its checks of bundles with policies (PIP-192), as
`ExtensibleLoadManagerImpl` sets them up; pure, over what a snapshot read of the cluster.

Read in the 3.0.7, 3.3.6, 4.0.8 and 4.2.4 sources (`extensions/filter/*`, `extensions/policies/*`,
`TransferShedder.isTransferable`, `TopKBundles.hasPolicies`, `LoadManagerShared`); the same in every one of them:

- The pipeline, in its order: `BrokerLoadManagerClassFilter` (the broker runs the same load manager class),
  `BrokerMaxTopicCountFilter` (fewer topics than `loadBalancerBrokerMaxTopics`), `BrokerVersionFilter` (with
  `preferLaterVersions`, the newest release only), `AntiAffinityGroupPolicyFilter`, `BrokerIsolationPoliciesFilter`.
- Isolation: `LoadManagerShared.applyNamespacePoliciesAsync`, the modular load manager's rule
  (`planner.pulsar.policies.isolation_candidates`); a namespace no policy matches may also only go to brokers that
  load persistent topics. The auto-failover policy counts the available primaries only (no usage threshold).
- Anti-affinity differs from the modular load manager's: it counts, per broker, the *bundles* it owns (the
  ownership channel's Owned entries) of namespaces in the bundle's group, not the namespaces; groups compare
  ignoring case. Failure domains count there only, and only with `failureDomainsEnabled`: the brokers of the
  domains holding the fewest such bundles stay (`filterDomainsNotHavingLeastNumberAntiAffinityNamespaces`), then
  those holding the fewest themselves. The extensible load manager has no `shouldAntiAffinityNamespaceUnload`.
- A bundle has policies when an isolation policy matches its namespace or the namespace has an anti-affinity
  group; `TopKBundles` leaves such bundles out of a broker's top bundles, and `isTransferable` refuses them, unless
  `loadBalancerSheddingBundlesWithPoliciesEnabled`.
- `isTransferable` runs the pipeline in turn and refuses the bundle when a filter fails; a lookup
  (`selectAsync`) starts every filter on the same candidates and goes on with what they left when one fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies, NamespaceIsolationPolicy

DEFAULT_DOMAIN = "default"  # LoadManagerShared.DEFAULT_DOMAIN: a broker in no failure domain


def isolation_policy(namespace: str, policies: ClusterPolicies) -> NamespaceIsolationPolicy | None:
    """`NamespaceIsolationPolicies.getPolicyByNamespace`: the first policy one of whose namespace patterns matches."""
    for policy in policies.isolation.values():
        if any(re.fullmatch(pattern, namespace) for pattern in policy.namespaces):
            return policy
    return None


def anti_affinity_group(namespace: str, policies: ClusterPolicies) -> str | None:
    """`LoadManagerShared.getNamespaceAntiAffinityGroup`: the namespace's group unless blank."""
    group = policies.anti_affinity_groups.get(namespace)
    return group if group is not None and group.strip() else None


def isolation_candidates(namespace: str, brokers: Sequence[str], policies: ClusterPolicies) -> list[str]:
    """`LoadManagerShared.applyNamespacePolicies` for a persistent bundle of `namespace`."""
    policy = isolation_policy(namespace, policies)

    def matches(patterns: Sequence[str], host: str) -> bool:
        return any(re.fullmatch(pattern, host) for pattern in patterns)

    hosts = {broker: broker.rsplit(":", 1)[0] for broker in brokers if ":" in broker}
    if policy is None:
        return [b for b, h in hosts.items() if not any(matches(p.primary, h) for p in policies.isolation.values())]
    primaries = [b for b, h in hosts.items() if matches(policy.primary, h)]
    secondaries = [b for b, h in hosts.items() if b not in primaries and matches(policy.secondary, h)]
    failover = policy.auto_failover_policy
    min_limit = int(failover.parameters.get("min_limit", "1")) if failover is not None else 1
    return primaries + secondaries if len(primaries) < min_limit else primaries


class BrokerFilter(StrEnum):
    """The extensible load manager's filters, by their `FILTER_NAME`, in the order of its pipeline."""

    LOAD_MANAGER_CLASS = "broker_load_manager_class_filter"
    MAX_TOPIC_COUNT = "broker_max_topic_count_filter"
    VERSION = "broker_version_filter"
    ANTI_AFFINITY = "broker_anti_affinity_group_filter"
    ISOLATION = "broker_isolation_policies_filter"


class BrokerFilterError(Exception):
    """A filter that could not decide (`BrokerFilterException`): `BrokerVersionFilter` on a release it cannot read."""


@dataclass(frozen=True, slots=True)
class ExtensibleCluster:
    """What the extensible load manager's filters read of a cluster, as one snapshot holds it.

    Brokers missing from `load_manager_classes`, `versions` or `persistent_topics` were not read: the filter that
    needs them keeps them (the version filter is left out when a candidate's release was not read)."""

    config: PulsarConfig
    policies: ClusterPolicies
    # Bundle -> the broker owning it (`ServiceUnitStateChannel.getOwnershipEntrySet`, Owned entries).
    owners: Mapping[str, str] = field(default_factory=dict)
    # Broker -> the topics of its load data (`BrokerLoadData.topics`); a broker without load data counts 0.
    topics: Mapping[str, int] = field(default_factory=dict)
    # Broker -> the load manager class of its lookup data (None: it gave none, as an old broker does).
    load_manager_classes: Mapping[str, str | None] = field(default_factory=dict)
    # Broker -> the release of its lookup data (`brokerVersion`; None or empty: it gave none).
    versions: Mapping[str, str | None] = field(default_factory=dict)
    # Broker -> whether it loads persistent topics (`persistentTopicsEnabled` of its lookup data).
    persistent_topics: Mapping[str, bool] = field(default_factory=dict)


def has_policies(namespace: str, policies: ClusterPolicies) -> bool:
    """`TopKBundles.hasPolicies`: an isolation policy matches the namespace or it has an anti-affinity group."""
    return isolation_policy(namespace, policies) is not None or anti_affinity_group(namespace, policies) is not None


def sheds_bundles_with_policies(namespace: str, policies: ClusterPolicies, config: PulsarConfig) -> bool:
    """`TransferShedder.isLoadBalancerSheddingBundlesWithPoliciesEnabled`: whether a bundle of `namespace` may be
    unloaded at all."""
    if isolation_policy(namespace, policies) is not None:
        return config.shedding_bundles_with_policies_enabled
    if anti_affinity_group(namespace, policies) is not None:
        return config.shedding_bundles_with_policies_enabled
    return True


def _load_manager_class_filter(candidates: list[str], cluster: ExtensibleCluster) -> list[str]:
    expected = cluster.config.load_manager_class_name
    classes = cluster.load_manager_classes
    return [broker for broker in candidates if broker not in classes or classes[broker] == expected]


def _max_topic_count_filter(candidates: list[str], cluster: ExtensibleCluster) -> list[str]:
    limit = cluster.config.broker_max_topics
    return [broker for broker in candidates if cluster.topics.get(broker, 0) < limit]


_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


def _precedence(version: str) -> tuple[tuple[int, int, int], int, tuple[tuple[int, int, str], ...]]:
    """Semantic-version precedence (`Version.compareTo` of java-semver: build metadata ignored); BrokerFilterError on a
    release that is not a semantic version (`Version.valueOf` throws)."""
    match = _SEMVER.fullmatch(version)
    if match is None:
        raise BrokerFilterError(f"release {version!r} is not a semantic version")
    normal = (int(match[1]), int(match[2]), int(match[3]))
    if match[4] is None:
        return normal, 1, ()  # a release sorts after its pre-releases
    identifiers = tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in match[4].split(".")
    )  # numeric identifiers before alphanumeric ones, a shorter list of equal prefix first
    return normal, 0, identifiers


def _version_filter(candidates: list[str], cluster: ExtensibleCluster) -> list[str]:
    versions = cluster.versions
    if not cluster.config.prefer_later_versions or not candidates or any(b not in versions for b in candidates):
        return candidates
    order = {}
    for broker in candidates:
        release = versions[broker]
        if not release:
            raise BrokerFilterError(f"no release in the lookup data of {broker}")
        order[broker] = _precedence(release)
    latest = max(order.values())
    return [broker for broker in candidates if order[broker] == latest]


def _same_group(a: str, b: str) -> bool:
    """`String.equalsIgnoreCase`: char by char, equal, or equal upper-cased, or equal lower-cased."""
    return len(a) == len(b) and all(
        x == y or x.upper() == y.upper() or x.lower() == y.lower() for x, y in zip(a, b, strict=True)
    )


def anti_affinity_counts(namespace: str, policies: ClusterPolicies, owners: Mapping[str, str]) -> dict[str, int] | None:
    """`getAntiAffinityNamespaceOwnedBrokers` over the ownership channel: per broker, the bundles it owns of the
    namespaces in `namespace`'s anti-affinity group; None when `namespace` has no group."""
    group = anti_affinity_group(namespace, policies)
    if group is None:
        return None
    counts: dict[str, int] = {}
    groups: dict[str, bool] = {}
    for bundle, owner in owners.items():
        owned_namespace = namespace_of(bundle)
        if owned_namespace not in groups:
            other = anti_affinity_group(owned_namespace, policies)
            groups[owned_namespace] = other is not None and _same_group(group, other)
        if groups[owned_namespace]:
            counts[owner] = counts.get(owner, 0) + 1
    return counts


def broker_domains(policies: ClusterPolicies) -> dict[str, str]:
    """`refreshBrokerToFailureDomainMap`: broker id -> its failure domain (a broker listed twice: the later one)."""
    return {broker: name for name, domain in policies.failure_domains.items() for broker in sorted(domain.brokers)}


def filter_anti_affinity(
    bundle: str, candidates: Sequence[str], policies: ClusterPolicies, owners: Mapping[str, str], domains_enabled: bool
) -> list[str]:
    """`LoadManagerShared.filterAntiAffinityGroupOwnedBrokersAsync` (the `AntiAffinityGroupPolicyFilter`)."""
    kept = list(candidates)
    if not kept:
        return kept
    counts = anti_affinity_counts(namespace_of(bundle), policies, owners)
    if counts is None:  # no group: nobody is filtered
        return kept
    domains = broker_domains(policies) if domains_enabled else {}
    if domains:
        per_domain: dict[str, int] = {}
        for broker in kept:
            domain = domains.get(broker, DEFAULT_DOMAIN)
            per_domain[domain] = per_domain.get(domain, 0) + counts.get(broker, 0)
        fewest = min(per_domain.values())
        kept = [broker for broker in kept if per_domain[domains.get(broker, DEFAULT_DOMAIN)] == fewest]
    least = None
    for broker in kept:
        if broker not in counts:  # a broker owning none of the group counts 0
            least = 0
            break
        least = counts[broker] if least is None else min(least, counts[broker])
    if least == 0:
        return [broker for broker in kept if counts.get(broker, 0) == 0]
    return [broker for broker in kept if counts[broker] == least]


def filter_isolation(
    bundle: str, candidates: Sequence[str], policies: ClusterPolicies, persistent_topics: Mapping[str, bool]
) -> list[str]:
    """`BrokerIsolationPoliciesFilter` (`IsolationPoliciesHelper.applyIsolationPoliciesAsync`) for a persistent
    bundle, in `candidates` order."""
    namespace = namespace_of(bundle)
    allowed = set(isolation_candidates(namespace, list(candidates), policies))
    if isolation_policy(namespace, policies) is None:
        allowed = {broker for broker in allowed if persistent_topics.get(broker, True)}
    return [broker for broker in candidates if broker in allowed]


def apply_filter(name: BrokerFilter, bundle: str, candidates: list[str], cluster: ExtensibleCluster) -> list[str]:
    """One filter of the pipeline over `candidates`; BrokerFilterError when it cannot decide."""
    if name is BrokerFilter.LOAD_MANAGER_CLASS:
        return _load_manager_class_filter(candidates, cluster)
    if name is BrokerFilter.MAX_TOPIC_COUNT:
        return _max_topic_count_filter(candidates, cluster)
    if name is BrokerFilter.VERSION:
        return _version_filter(candidates, cluster)
    if name is BrokerFilter.ANTI_AFFINITY:
        return filter_anti_affinity(
            bundle, candidates, cluster.policies, cluster.owners, cluster.config.failure_domains_enabled
        )
    return filter_isolation(bundle, candidates, cluster.policies, cluster.persistent_topics)


@dataclass(frozen=True, slots=True)
class Filtered:
    """What the pipeline left of the candidates, which filter removed each of the others, and the filter that
    failed (the first one, if any)."""

    candidates: tuple[str, ...]
    removed_by: Mapping[str, BrokerFilter]
    failed: tuple[BrokerFilter, str] | None = None

    def why_not(self, broker: str) -> str:
        """Why `broker` is not a candidate, naming the filter and, for the policy filters, the policy."""
        return _FILTER_REASONS[self.removed_by[broker]] if broker in self.removed_by else "not available"


_FILTER_REASONS = {
    BrokerFilter.LOAD_MANAGER_CLASS: "it runs another load manager class (BrokerLoadManagerClassFilter)",
    BrokerFilter.MAX_TOPIC_COUNT: "it has loadBalancerBrokerMaxTopics topics or more (BrokerMaxTopicCountFilter)",
    BrokerFilter.VERSION: "it runs an older release than the newest broker, with preferLaterVersions",
    BrokerFilter.ANTI_AFFINITY: "its anti-affinity group already has more bundles there than elsewhere",
    BrokerFilter.ISOLATION: "the namespace isolation policies do not allow it",
}


def filter_brokers(
    bundle: str, available: Sequence[str], cluster: ExtensibleCluster, *, stop_on_failure: bool
) -> Filtered:
    """The pipeline over the available brokers for `bundle`. `stop_on_failure`: as `isTransferable`, which gives up
    at a failed filter; else as `selectAsync`, which goes on with what the filters left."""
    candidates = list(available)
    removed: dict[str, BrokerFilter] = {}
    failed: tuple[BrokerFilter, str] | None = None
    for name in BrokerFilter:
        try:
            kept = apply_filter(name, bundle, candidates, cluster)
        except BrokerFilterError as error:
            failed = failed or (name, str(error))
            if stop_on_failure:
                break
            continue
        left = set(kept)
        removed.update({broker: name for broker in candidates if broker not in left})
        candidates = kept
    return Filtered(tuple(candidates), removed, failed)


def transfer_refusal(
    bundle: str, source: str, destination: str, available: Sequence[str], cluster: ExtensibleCluster
) -> str | None:
    """`TransferShedder.isTransferable(bundle, source, Optional.of(destination))`: None when Pulsar would unload
    `bundle` from `source` (to `destination` with `loadBalancerTransferEnabled`), else why not in one line."""
    namespace = namespace_of(bundle)
    if not sheds_bundles_with_policies(namespace, cluster.policies, cluster.config):
        kind = "an isolation policy" if isolation_policy(namespace, cluster.policies) else "an anti-affinity group"
        return f"{namespace} has {kind} and loadBalancerSheddingBundlesWithPoliciesEnabled is false"
    filtered = filter_brokers(bundle, available, cluster, stop_on_failure=True)
    if filtered.failed is not None:
        return f"the {filtered.failed[0].value} failed ({filtered.failed[1]}), so Pulsar keeps every bundle in place"
    if destination not in filtered.candidates:
        return f"{destination} is no destination for it: {filtered.why_not(destination)}"
    others = [broker for broker in filtered.candidates if broker != source]
    if not cluster.config.transfer_enabled:  # an unload: any other candidate will do
        return None if others else f"no broker but {source} may own it"
    return None if destination in others else f"{destination} already owns it"


def placement_candidates(bundle: str, available: Sequence[str], cluster: ExtensibleCluster) -> Filtered:
    """`ExtensibleLoadManagerImpl.selectAsync`'s candidates for an unowned bundle: the available brokers the
    pipeline leaves (a failed filter is logged and the others' result used)."""
    return filter_brokers(bundle, available, cluster, stop_on_failure=False)
