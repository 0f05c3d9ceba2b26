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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.policies import (
    BrokerFilterError,
    anti_affinity_bundle_counts,
    anti_affinity_group,
    broker_domains,
    isolation_candidates,
    isolation_policy,
    isolation_refusal,
    keep_fewest,
    newest_release_brokers,
)


class BrokerFilter(StrEnum):
    """The extensible load manager's filters, by their `FILTER_NAME`, in the order of its pipeline."""

    LOAD_MANAGER_CLASS = "broker_load_manager_class_filter"
    MAX_TOPIC_COUNT = "broker_max_topic_count_filter"
    VERSION = "broker_version_filter"
    ANTI_AFFINITY = "broker_anti_affinity_group_filter"
    ISOLATION = "broker_isolation_policies_filter"


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


def filter_anti_affinity(
    bundle: str, candidates: Sequence[str], policies: ClusterPolicies, owners: Mapping[str, str], domains_enabled: bool
) -> list[str]:
    """`LoadManagerShared.filterAntiAffinityGroupOwnedBrokersAsync` (the `AntiAffinityGroupPolicyFilter`): counted
    by the bundles each broker owns of the group (`owners`: bundle -> broker, the ownership channel)."""
    counts = anti_affinity_bundle_counts(namespace_of(bundle), policies, owners)
    return keep_fewest(candidates, counts, broker_domains(policies, domains_enabled))


def filter_isolation(
    bundle: str,
    candidates: Sequence[str],
    policies: ClusterPolicies,
    persistent_topics: Mapping[str, bool],
    config: PulsarConfig | None = None,
) -> list[str]:
    """`BrokerIsolationPoliciesFilter` (`IsolationPoliciesHelper.applyIsolationPoliciesAsync`) for a persistent
    bundle, in `candidates` order; `config`: the release whose matching applies (default: the latest)."""
    version = config.pulsar_version if config is not None else None
    namespace = namespace_of(bundle)
    return isolation_candidates(namespace, candidates, policies, persistent_topics=persistent_topics, version=version)


def _load_manager_class_filter(candidates: list[str], cluster: ExtensibleCluster) -> list[str]:
    expected = cluster.config.load_manager_class_name
    classes = cluster.load_manager_classes
    return [broker for broker in candidates if broker not in classes or classes[broker] == expected]


def _max_topic_count_filter(candidates: list[str], cluster: ExtensibleCluster) -> list[str]:
    limit = cluster.config.broker_max_topics
    return [broker for broker in candidates if cluster.topics.get(broker, 0) < limit]


def _version_filter(candidates: list[str], cluster: ExtensibleCluster) -> list[str]:
    versions = cluster.versions
    if not cluster.config.prefer_later_versions or not candidates or any(b not in versions for b in candidates):
        return candidates
    return newest_release_brokers(candidates, versions)


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
    return filter_isolation(bundle, candidates, cluster.policies, cluster.persistent_topics, cluster.config)


def _why_removed(name: BrokerFilter, broker: str, bundle: str, before: list[str], cluster: ExtensibleCluster) -> str:
    """Why filter `name` left `broker` out of `before`, naming the policy for the policy filters."""
    namespace = namespace_of(bundle)
    if name is BrokerFilter.ISOLATION:
        refusal = isolation_refusal(
            namespace,
            broker,
            before,
            cluster.policies,
            persistent_topics=cluster.persistent_topics,
            version=cluster.config.pulsar_version,
        )
        return refusal or "the namespace isolation policies do not allow it"
    if name is BrokerFilter.ANTI_AFFINITY:
        counts = anti_affinity_bundle_counts(namespace, cluster.policies, cluster.owners) or {}
        where = (
            " or its failure domain" if broker_domains(cluster.policies, cluster.config.failure_domains_enabled) else ""
        )
        return (
            f"anti-affinity group {anti_affinity_group(namespace, cluster.policies)} of {namespace}: it holds "
            f"{counts.get(broker, 0)} bundles of the group, and another candidate{where} holds fewer"
        )
    if name is BrokerFilter.LOAD_MANAGER_CLASS:
        return (
            f"it runs {cluster.load_manager_classes.get(broker)}, another load manager (BrokerLoadManagerClassFilter)"
        )
    if name is BrokerFilter.MAX_TOPIC_COUNT:
        return f"it has {cluster.topics.get(broker, 0)} topics, loadBalancerBrokerMaxTopics or more"
    return f"it runs {cluster.versions.get(broker)}, older than the newest broker, and preferLaterVersions is on"


@dataclass(frozen=True, slots=True)
class Filtered:
    """What the pipeline left of the candidates, which filter removed each of the others and why, and the filter
    that failed (the first one, if any)."""

    candidates: tuple[str, ...]
    removed_by: Mapping[str, tuple[BrokerFilter, str]]
    failed: tuple[BrokerFilter, str] | None = None

    def why_not(self, broker: str) -> str:
        """Why `broker` is not a candidate, naming the filter and, for the policy filters, the policy."""
        return self.removed_by[broker][1] if broker in self.removed_by else "not available"


def filter_brokers(
    bundle: str, available: Sequence[str], cluster: ExtensibleCluster, *, stop_on_failure: bool
) -> Filtered:
    """The pipeline over the available brokers for `bundle`. `stop_on_failure`: as `isTransferable`, which gives up
    at a failed filter; else as `selectAsync`, which goes on with what the filters left."""
    candidates = list(available)
    removed: dict[str, tuple[BrokerFilter, str]] = {}
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
        for broker in candidates:
            if broker not in left:
                removed[broker] = (name, _why_removed(name, broker, bundle, candidates, cluster))
        candidates = kept
    return Filtered(tuple(candidates), removed, failed)


def transfer_refusal(
    bundle: str, source: str, destination: str, available: Sequence[str], cluster: ExtensibleCluster
) -> str | None:
    """`TransferShedder.isTransferable(bundle, source, Optional.of(destination))`: None when Pulsar would unload
    `bundle` from `source` (to `destination` with `loadBalancerTransferEnabled`), else why not in one line."""
    namespace = namespace_of(bundle)
    if not sheds_bundles_with_policies(namespace, cluster.policies, cluster.config):
        found = isolation_policy(namespace, cluster.policies)
        group = anti_affinity_group(namespace, cluster.policies)
        kind = f"isolation policy {found[0]}" if found else f"anti-affinity group {group}"
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
