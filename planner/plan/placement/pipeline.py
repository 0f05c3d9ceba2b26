"""Where an unloaded bundle goes: `ModularLoadManagerImpl.selectBroker`, for the shedders
that do not plan destinations themselves (Uniform, Threshold, Overload).

In Pulsar's order (the same in 3.0.7, 3.3.6, 4.0.8, 4.2.4 and 5.0.1): candidates are the brokers the namespace
policies allow (`applyNamespacePolicies`: the isolation policies' primaries and secondaries, or the shared brokers
that load persistent topics); those over `loadBalancerBrokerMaxTopics` drop out (unless all would); the
anti-affinity filter keeps the failure domains and brokers holding the fewest namespaces of the bundle's group; with
`loadBalancerDistributeBundlesEvenlyEnabled` only the brokers owning the fewest bundles of the namespace stay; brokers
running another load manager class drop out; with `preferLaterVersions` only those of the newest release stay (a
release that cannot be read brings every allowed broker back, as does an empty result); excluded namespaces go round
robin; otherwise the configured placement strategy picks, and a pick over the overload threshold is re-done once by the
placement strategy over all allowed brokers. Without the cluster's policies (`policies=None`: not read) the isolation
and anti-affinity steps are those of a cluster that declares none.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.plan.placement.registry import configured_placement
from planner.plan.placement.round_robin_broker_selector import select_broker as round_robin
from planner.plan.placement.strategy import PlacementSession
from planner.pulsar.broker_score import overload_usage
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.load_manager_shared import (
    bundles_per_broker_in_namespace,
    remove_most_servicing_brokers_for_namespace,
)
from planner.pulsar.model import LoadData, default_bundle_data
from planner.pulsar.policies import (
    BrokerFilterError,
    anti_affinity_group,
    filter_anti_affinity,
    isolation_candidates,
    newest_release_brokers,
)
from planner.pulsar.versions import PulsarVersion


def _topics(load_data: LoadData, session: PlacementSession, broker: str) -> int:
    pending = sum(data.topics for _, data in session.preallocated.get(broker, []))
    return load_data.brokers[broker].num_topics + pending


def excluded_namespaces(config: PulsarConfig) -> frozenset[str]:
    """`loadBalancerSheddingExcludedNamespaces`, on the releases that read it (PIP-380, 4.1.0)."""
    return (
        config.shedding_excluded_namespaces if config.pulsar_version.has_shedding_excluded_namespaces else frozenset()
    )


def allowed_brokers(
    load_data: LoadData,
    namespace: str | None = None,
    policies: ClusterPolicies | None = None,
    version: PulsarVersion | None = None,
) -> list[str]:
    """`LoadManagerShared.applyNamespacePolicies` for a bundle of `namespace` over the brokers of `load_data`, sorted:
    with the cluster's `policies`, its isolation policy's primaries (and secondaries on failover), or the shared
    brokers that load persistent topics; without them (not read, or no namespace given), the brokers that load
    persistent topics. An unload's bundle is always a persistent one there (its NamespaceBundle is made from its
    name, with no non-persistent topic)."""
    if policies is None or namespace is None:
        return sorted(broker for broker, report in load_data.brokers.items() if report.persistent_topics_enabled)
    loads = {broker: report.persistent_topics_enabled for broker, report in load_data.brokers.items()}
    return isolation_candidates(
        namespace, sorted(load_data.brokers), policies, persistent_topics=loads, version=version
    )


def owned_namespaces(load_data: LoadData, session: PlacementSession) -> dict[str, set[str]]:
    """Per broker, the namespaces of its reported and preallocated bundles: what the leader's
    `brokerToNamespaceToBundleRange` holds, which the anti-affinity filter counts (the even distribution counts the
    same ownership by bundle)."""
    owned = {
        broker: {namespace_of(bundle) for bundle in report.bundles} for broker, report in load_data.brokers.items()
    }
    for broker, items in session.preallocated.items():
        owned.setdefault(broker, set()).update(namespace_of(bundle) for bundle, _ in items)
    return owned


def policy_candidates(
    bundle: str,
    load_data: LoadData,
    config: PulsarConfig,
    session: PlacementSession,
    policies: ClusterPolicies,
    candidates: list[str] | None = None,
) -> list[str]:
    """What the cluster's policies leave for `bundle` of `candidates` (default: the brokers its isolation policies
    allow): the anti-affinity filter, with the failure domains when enabled, on the ownership the leader sees."""
    namespace = namespace_of(bundle)
    if candidates is None:
        candidates = allowed_brokers(load_data, namespace, policies, config.pulsar_version)
    if anti_affinity_group(namespace, policies) is None:
        return list(candidates)
    owned = owned_namespaces(load_data, session)
    return filter_anti_affinity(
        namespace, candidates, policies, owned, failure_domains_enabled=config.failure_domains_enabled
    )


def select_broker(
    bundle: str,
    load_data: LoadData,
    config: PulsarConfig,
    session: PlacementSession,
    *,
    preallocate: bool = True,
    policies: ClusterPolicies | None = None,
) -> str | None:
    """The broker Pulsar's placement would choose for `bundle`. An assignment (a client's lookup,
    `selectBrokerForAssignment`) records it as preallocated, so the next pick sees it; the destination of a
    shedding cycle's unload (`doLoadShedding`'s `selectBroker`, `preallocate=False`) is not recorded, so every
    unload of a cycle is placed on the same view of the cluster. `policies`: the cluster's isolation policies,
    failure domains and anti-affinity groups (None: not read, placed as on a cluster without them)."""
    namespace = namespace_of(bundle)
    allowed = allowed_brokers(load_data, namespace, policies, config.pulsar_version)
    candidates = [b for b in allowed if _topics(load_data, session, b) <= config.broker_max_topics] or allowed
    if policies is not None:
        candidates = policy_candidates(bundle, load_data, config, session, policies, candidates)
    system = namespace == "pulsar/system" and config.pulsar_version.evenly_distributes_system_namespace
    if config.distribute_bundles_evenly_enabled or system:
        owned: Mapping[str, int] = bundles_per_broker_in_namespace(load_data, namespace)
        for broker, items in session.preallocated.items():
            # brokerToNamespaceToBundleRange holds each broker's ranges as a set: a bundle placed on a broker whose
            # last report still lists it (a lookup right after its unload) counts once.
            reported = load_data.brokers[broker].bundles if broker in load_data.brokers else frozenset()
            extra = sum(1 for name, _ in items if namespace_of(name) == namespace and name not in reported)
            owned = {**owned, broker: owned.get(broker, 0) + extra}
        candidates = remove_most_servicing_brokers_for_namespace(candidates, owned)
    # BrokerLoadManagerClassFilter compares the class names exactly (a broker reporting none is left out too).
    candidates = [
        b for b in candidates if load_data.brokers[b].load_manager_class_name == config.load_manager_class_name
    ]
    if config.prefer_later_versions:
        versions = {b: load_data.brokers[b].broker_version_string for b in candidates}
        try:
            candidates = newest_release_brokers(candidates, versions)
        except BrokerFilterError:  # Pulsar restores the candidates to every allowed broker
            candidates = allowed
    if not candidates:  # every filter together left none: all allowed brokers
        candidates = allowed
    strategy = configured_placement(config)
    if namespace in excluded_namespaces(config):
        chosen, session.round_robin = round_robin(candidates, session.round_robin)
    else:
        chosen = strategy.select(candidates, bundle, load_data, config, session)
    if chosen is not None and overload_usage(load_data.brokers[chosen], config) > config.overload_threshold:
        # Also after a round-robin pick: the re-pick is the placement strategy's, over all allowed brokers.
        chosen = strategy.select(allowed, bundle, load_data, config, session) or chosen
    if chosen is not None and preallocate:
        session.record(chosen, bundle, load_data.bundle_data.get(bundle, default_bundle_data()))
    return chosen
