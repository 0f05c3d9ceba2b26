"""Rules shared by Pulsar's strategies (`LoadManagerShared`, `LoadData.getBundleDataForLoadShedding`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.model import BundleData, LoadData
from planner.pulsar.versions import PulsarVersion

SYSTEM_NAMESPACE = "pulsar/system"
# NamespaceService's heartbeat and SLA-monitor namespaces, owned by each broker itself. `[^:]+` may hold
# slashes, so the heartbeat pattern covers both `pulsar/<host:port>` and `pulsar/<cluster>/<host:port>`.
_HEARTBEAT_NAMESPACE = re.compile(r"pulsar/[^:]+:[0-9]+")
# Before 4.2 Pulsar also matches `pulsar/[^/]+/([^:]+:\d+)`: the V1 form, whose cluster part may hold a colon.
_HEARTBEAT_NAMESPACE_V1 = re.compile(r"pulsar/[^/]+/[^:]+:[0-9]+")
# Before 4.2 the SLA-monitor namespace is `sla-monitor/<cluster>/<host:port>`; 4.2 (PIP-457, no more V1 names
# with a cluster) names it `sla-monitor/<host:port>` and matches `sla-monitor/[^:]+:\d+`.
_SLA_MONITOR_NAMESPACE_V1 = re.compile(r"sla-monitor/[^/]+/[^:]+:[0-9]+")
_SLA_MONITOR_NAMESPACE = re.compile(r"sla-monitor/[^:]+:[0-9]+")
_SYSTEM_SERVICE_NAMESPACE_PATTERNS = (_HEARTBEAT_NAMESPACE, _HEARTBEAT_NAMESPACE_V1, _SLA_MONITOR_NAMESPACE_V1)
# NamedEntity: the characters Pulsar allows in tenant, cluster and namespace names.
_NAMED_ENTITY = re.compile(r"[-=:.A-Za-z0-9_]*")
_LATEST = PulsarVersion.parse("latest")


def is_system_service_namespace(namespace: str) -> bool:
    """`NamespaceService.isSystemServiceNamespace` (before 4.2): `pulsar/system`, heartbeat and SLA monitor."""
    return namespace == SYSTEM_NAMESPACE or any(
        pattern.fullmatch(namespace) for pattern in _SYSTEM_SERVICE_NAMESPACE_PATTERNS
    )


def is_sla_or_heartbeat_namespace(namespace: str, version: PulsarVersion = _LATEST) -> bool:
    """The namespaces `LoadData.getBundleDataForLoadShedding()` leaves out: heartbeat and SLA monitor only.

    `pulsar/system` is not among them: Pulsar's shedders may move its bundles. Pulsar first parses the
    bundle's namespace (`NamespaceBundle.getBundleNamespace`); a name it cannot parse (from 4.2 any V1 name
    `tenant/cluster/ns`) is matched as the whole bundle name, which never matches. Before 3.0.2 it left out every
    system service namespace, `pulsar/system` included.
    """
    if not version.sheds_system_namespace:
        return is_system_service_namespace(namespace)
    parts = namespace.split("/")
    if len(parts) not in ((2,) if version.at_least(4, 2) else (2, 3)):
        return False
    if not all(_NAMED_ENTITY.fullmatch(part) for part in parts):
        return False
    if version.at_least(4, 2):
        return bool(_HEARTBEAT_NAMESPACE.fullmatch(namespace) or _SLA_MONITOR_NAMESPACE.fullmatch(namespace))
    return any(
        pattern.fullmatch(namespace)
        for pattern in (_HEARTBEAT_NAMESPACE, _HEARTBEAT_NAMESPACE_V1, _SLA_MONITOR_NAMESPACE_V1)
    )


def is_pinned_namespace(namespace: str) -> bool:
    """A heartbeat or SLA-monitor namespace in any release's form: Pulsar assigns it to the broker its name
    holds, so no unload moves it (maintenance plans leave it, and a drained broker keeps it)."""
    pinned = (_HEARTBEAT_NAMESPACE, _HEARTBEAT_NAMESPACE_V1, _SLA_MONITOR_NAMESPACE_V1, _SLA_MONITOR_NAMESPACE)
    return any(pattern.fullmatch(namespace) for pattern in pinned)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A bundle a shedder may move, with the traffic figure it is ranked by."""

    bundle: str
    traffic: float


def sheddable_bundles(
    load_data: LoadData, broker_id: str, version: PulsarVersion = _LATEST
) -> list[tuple[str, BundleData]]:
    """The broker's reported bundles that have bundle data, are not heartbeat or SLA-monitor bundles, and were
    not recently unloaded.

    This is `getBundleDataForLoadShedding()` restricted to `localData.bundles`, minus
    `recentlyUnloadedBundles`: the candidate set of every shedder.
    """
    broker = load_data.brokers[broker_id]
    recently_unloaded = load_data.recently_unloaded_bundles
    bundle_data = load_data.bundle_data
    return [
        (bundle, bundle_data[bundle])
        for bundle in broker.bundles
        if bundle in bundle_data
        and bundle not in recently_unloaded
        and not is_sla_or_heartbeat_namespace(namespace_of(bundle), version)
    ]


def ranked_by_traffic(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Largest traffic first; equal traffic by bundle name (Java keeps HashMap order there)."""
    return sorted(candidates, key=lambda candidate: (-candidate.traffic, candidate.bundle))


def select_until_reached(candidates: Sequence[Candidate], minimum: float) -> list[str]:
    """Take the biggest bundles while the total is below `minimum`, and at least one (Threshold/Overload)."""
    selected: list[str] = []
    total = 0.0
    for candidate in ranked_by_traffic(candidates):
        if total < minimum or not selected:
            selected.append(candidate.bundle)
            total += candidate.traffic
    return selected


def remove_expired_recently_unloaded(load_data: LoadData, now_millis: int, grace_period_millis: int) -> LoadData:
    """Drop recently-unloaded entries older than the grace period, as each shedding cycle starts by doing."""
    kept = {
        bundle: unloaded_at
        for bundle, unloaded_at in load_data.recently_unloaded_bundles.items()
        if now_millis - unloaded_at <= grace_period_millis
    }
    return load_data.model_copy(update={"recently_unloaded_bundles": kept})


def bundles_per_broker_in_namespace(load_data: LoadData, namespace: str) -> dict[str, int]:
    """How many bundles of `namespace` each broker owns (reported bundles)."""
    return {
        broker_id: sum(1 for bundle in broker.bundles if namespace_of(bundle) == namespace)
        for broker_id, broker in load_data.brokers.items()
    }


def remove_most_servicing_brokers_for_namespace(
    candidates: Sequence[str], owned_bundles_of_namespace: Mapping[str, int]
) -> list[str]:
    """The even-distribution filter: keep the candidates owning the fewest bundles of the namespace."""
    if not candidates:
        return []
    fewest = min(owned_bundles_of_namespace.get(broker, 0) for broker in candidates)
    return [broker for broker in candidates if owned_bundles_of_namespace.get(broker, 0) == fewest]
