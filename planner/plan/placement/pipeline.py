"""Where an unloaded bundle goes: `ModularLoadManagerImpl.selectBroker`, for the shedders
that do not plan destinations themselves (Uniform, Threshold, Overload).

Candidates are the brokers the namespace policies allow (without isolation policies: those that load persistent
topics); those over `loadBalancerBrokerMaxTopics` drop out (unless all would); with
`loadBalancerDistributeBundlesEvenlyEnabled` only the brokers owning the fewest bundles of the namespace stay; brokers
running another load manager class drop out (and when no candidate is left, all allowed brokers come back); excluded
namespaces go round robin; otherwise the configured placement strategy picks, and a pick over the overload threshold
is re-done once by the placement strategy over all allowed brokers.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.plan.placement.registry import configured_placement
from planner.plan.placement.round_robin_broker_selector import select_broker as round_robin
from planner.plan.placement.strategy import PlacementSession
from planner.pulsar.broker_score import overload_usage
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.load_manager_shared import (
    bundles_per_broker_in_namespace,
    remove_most_servicing_brokers_for_namespace,
)
from planner.pulsar.model import LoadData, default_bundle_data


def _topics(load_data: LoadData, session: PlacementSession, broker: str) -> int:
    pending = sum(data.topics for _, data in session.preallocated.get(broker, []))
    return load_data.brokers[broker].num_topics + pending


def excluded_namespaces(config: PulsarConfig) -> frozenset[str]:
    """`loadBalancerSheddingExcludedNamespaces`, on the releases that read it (PIP-380, 4.1.0)."""
    return (
        config.shedding_excluded_namespaces if config.pulsar_version.has_shedding_excluded_namespaces else frozenset()
    )


def allowed_brokers(load_data: LoadData) -> list[str]:
    """`LoadManagerShared.applyNamespacePolicies` without isolation policies (the planner reads none): the brokers
    that load persistent topics. An unload's bundle is always a persistent one there (its NamespaceBundle is made
    from its name, with no non-persistent topic)."""
    return sorted(broker for broker, report in load_data.brokers.items() if report.persistent_topics_enabled)


def select_broker(
    bundle: str, load_data: LoadData, config: PulsarConfig, session: PlacementSession, *, preallocate: bool = True
) -> str | None:
    """The broker Pulsar's placement would choose for `bundle`. An assignment (a client's lookup,
    `selectBrokerForAssignment`) records it as preallocated, so the next pick sees it; the destination of a
    shedding cycle's unload (`doLoadShedding`'s `selectBroker`, `preallocate=False`) is not recorded, so every
    unload of a cycle is placed on the same view of the cluster."""
    allowed = allowed_brokers(load_data)
    namespace = namespace_of(bundle)
    candidates = [b for b in allowed if _topics(load_data, session, b) <= config.broker_max_topics] or allowed
    if config.distribute_bundles_evenly_enabled or namespace == "pulsar/system":
        owned: Mapping[str, int] = bundles_per_broker_in_namespace(load_data, namespace)
        for broker, items in session.preallocated.items():
            extra = sum(1 for name, _ in items if namespace_of(name) == namespace)
            owned = {**owned, broker: owned.get(broker, 0) + extra}
        candidates = remove_most_servicing_brokers_for_namespace(candidates, owned)
    # BrokerLoadManagerClassFilter compares the class names exactly (a broker reporting none is left out too).
    candidates = [
        b for b in candidates if load_data.brokers[b].load_manager_class_name == config.load_manager_class_name
    ]
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
