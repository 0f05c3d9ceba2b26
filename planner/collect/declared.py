"""Reading what a cluster declares about itself at every collect (`ClusterDeclarations`): each broker's release, the
leader, the load-balancing keys of each broker's runtime configuration and of the dynamic configuration, the
namespace isolation policies, the failure domains and each namespace's anti-affinity group.

Cost: one call per broker (its runtime configuration; and its release where its load report does not carry it,
always on the extensible load manager), three per cluster, and one per namespace for its anti-affinity group, made
in the same concurrent task as the namespace's bundle boundaries. The group is not in the namespace's policies
document (`GET /namespaces/{tenant}/{ns}`): Pulsar 3.0 to 4.2 keep it in the namespace's local policies, which
that document does not carry (`AdminResource.getNamespacePoliciesAsync` copies only their bundles). A tenant
whose first namespaces refuse the role (401/403: the group needs tenant admin) is not asked again for the rest.

Whatever cannot be read is listed in `unreadable`, one entry per kind and way it failed, naming the brokers or
namespaces it covers; the collect publishes all the same and the plan is made without it. Only the allow-listed
keys of a configuration are kept (`DECLARED_KEYS`): the rest holds tokens and passwords.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.errors import format_validation_error
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import (
    ClusterDeclarations,
    ClusterPolicies,
    Declaration,
    FailureDomain,
    NamespaceIsolationPolicy,
    Unreadable,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The configuration keys kept from each broker and from the dynamic configuration: those the planner's config
# reads, and those that switch Pulsar's own controllers, filters and policy handling on or off. Nothing else is
# kept: a broker's runtime configuration also holds its client token, TLS key passwords and the like.
DECLARED_KEYS: frozenset[str] = (PulsarConfig.known_keys() - {"pulsarVersion"}) | {
    "loadBalancerEnabled",
    "loadBalancerSheddingEnabled",
    "loadBalancerAutoBundleSplitEnabled",
    "loadBalancerSheddingBundlesWithPoliciesEnabled",
    "loadBalancerBrokerMaxTopics",
    "preferLaterVersions",
    "loadManagerClassName",
    "clusterName",
}

_ISOLATION = TypeAdapter(dict[str, NamespaceIsolationPolicy])
_DOMAINS = TypeAdapter(dict[str, FailureDomain])


def declared_configuration(values: Mapping[str, Any]) -> dict[str, str]:
    """The allow-listed keys of a configuration answer, as the strings Pulsar serves (booleans as Java writes
    them); every other key is dropped."""
    return {key: _java_text(value) for key, value in values.items() if key in DECLARED_KEYS and value is not None}


def _java_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(_java_text(item) for item in value)
    return str(value)


@dataclass
class NamespaceAnswers:
    """Per namespace, its bundle boundaries (or why they could not be read), and the anti-affinity groups read."""

    boundaries: dict[str, list[int] | AdminError] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    group_errors: dict[str, AdminError] = field(default_factory=dict)
    # The namespaces whose group was asked for (those without one are in neither `groups` nor `group_errors`).
    groups_asked: set[str] = field(default_factory=set)

    def of(self, namespaces: set[str]) -> NamespaceAnswers:
        """These answers for `namespaces` only."""
        return NamespaceAnswers(
            boundaries={ns: found for ns, found in self.boundaries.items() if ns in namespaces},
            groups={ns: group for ns, group in self.groups.items() if ns in namespaces},
            group_errors={ns: error for ns, error in self.group_errors.items() if ns in namespaces},
            groups_asked=self.groups_asked & namespaces,
        )

    def merged(self, other: NamespaceAnswers) -> NamespaceAnswers:
        """These answers and `other`'s (read for other namespaces) together."""
        return NamespaceAnswers(
            boundaries={**self.boundaries, **other.boundaries},
            groups={**self.groups, **other.groups},
            group_errors={**self.group_errors, **other.group_errors},
            groups_asked=self.groups_asked | other.groups_asked,
        )


def read_namespaces(
    client: PulsarAdminClient, boundaries_of: Sequence[str], groups_of: Sequence[str]
) -> NamespaceAnswers:
    """The bundle boundaries of `boundaries_of` and the anti-affinity groups of `groups_of`, one concurrent task per
    namespace making both calls. Once a tenant refuses the role its other namespaces' groups are not asked for:
    they count as refused the same way."""
    want_boundaries = set(boundaries_of)
    want_group = set(groups_of)
    refused: dict[str, AdminError] = {}
    lock = threading.Lock()

    def read(namespace: str) -> tuple[list[int] | AdminError | None, str | AdminError | None]:
        boundaries = _guarded(client.bundle_boundaries, namespace) if namespace in want_boundaries else None
        if namespace not in want_group:
            return boundaries, None
        tenant = namespace.split("/", 1)[0]
        with lock:
            refusal = refused.get(tenant)
        if refusal is not None:
            return boundaries, refusal
        group = _guarded(client.anti_affinity_group, namespace)
        if isinstance(group, AdminError) and group.refused:
            with lock:
                refused.setdefault(tenant, group)
        return boundaries, group

    answers = NamespaceAnswers(groups_asked=want_group)
    for namespace, answer in client.map_concurrently(sorted(want_boundaries | want_group), read).items():
        if isinstance(answer, AdminError):  # not reached: `read` catches its calls' errors itself
            raise answer
        boundaries, group = answer
        if boundaries is not None:
            answers.boundaries[namespace] = boundaries
        if isinstance(group, AdminError):
            answers.group_errors[namespace] = group
        elif group is not None:
            answers.groups[namespace] = group
    return answers


def _guarded(call: Callable[[str], T], key: str) -> T | AdminError:
    try:
        return call(key)
    except AdminError as error:
        return error


def read_declarations(
    client: PulsarAdminClient,
    cluster: str,
    brokers: Sequence[str],
    *,
    reported_versions: Mapping[str, str | None],
    leader: object,
    leader_error: AdminError | None,
    namespaces: NamespaceAnswers,
) -> ClusterDeclarations:
    """What the cluster declares, read from `brokers` (those that answered for their load) and the admin URL.

    `reported_versions`: each broker's `brokerVersionString` from its load report (None where it has none: every
    broker of the extensible load manager, whose release is then asked of the broker itself)."""
    unreadable: list[Unreadable] = []
    if leader_error is not None:
        unreadable += _unreadable(Declaration.LEADER, "leader", {"": leader_error}, "")
    elif leader is not None and not isinstance(leader, str):
        unreadable.append(Unreadable(kind=Declaration.LEADER, what="leader", reason=f"not a broker id: {leader!r:.60}"))

    def per_broker(broker: str) -> tuple[dict[str, Any] | AdminError, str | AdminError | None]:
        configuration = _guarded(client.runtime_configuration_of, broker)
        version = reported_versions.get(broker)
        return configuration, (version if version else _guarded(client.broker_version, broker))

    configuration: dict[str, dict[str, str]] = {}
    versions: dict[str, str] = {}
    configuration_errors: dict[str, AdminError] = {}
    version_errors: dict[str, AdminError] = {}
    for broker, answer in client.map_concurrently(sorted(brokers), per_broker).items():
        if isinstance(answer, AdminError):  # not reached: `per_broker` catches its calls' errors itself
            raise answer
        values, version = answer
        if isinstance(values, AdminError):
            configuration_errors[broker] = values
        else:
            configuration[broker] = declared_configuration(values)
        if isinstance(version, AdminError):
            version_errors[broker] = version
        elif version:
            versions[broker] = version
    unreadable += _unreadable(Declaration.CONFIGURATION, "configuration", configuration_errors, "brokers")
    unreadable += _unreadable(Declaration.RELEASE, "release", version_errors, "brokers")

    dynamic: dict[str, str] = {}
    try:
        dynamic = declared_configuration(client.dynamic_configuration())
    except AdminError as error:
        unreadable += _unreadable(Declaration.DYNAMIC_CONFIGURATION, "dynamic configuration", {"": error}, "")

    isolation = _cluster_policy(
        Declaration.ISOLATION_POLICIES, lambda: client.isolation_policies(cluster), _ISOLATION, unreadable
    )
    domains = _cluster_policy(
        Declaration.FAILURE_DOMAINS, lambda: client.failure_domains(cluster), _DOMAINS, unreadable
    )
    unreadable += _unreadable(
        Declaration.ANTI_AFFINITY_GROUPS, "anti-affinity group", namespaces.group_errors, "namespaces"
    )
    for entry in unreadable:
        logger.warning("%s: %s unreadable, planned without: %s", cluster, entry.what, entry.reason)
    return ClusterDeclarations(
        broker_versions=versions,
        leader=leader if isinstance(leader, str) else None,
        configuration=configuration,
        dynamic_configuration=dynamic,
        policies=ClusterPolicies(isolation=isolation, failure_domains=domains, anti_affinity_groups=namespaces.groups),
        unreadable=tuple(unreadable),
    )


def _cluster_policy(
    kind: Declaration,
    read: Callable[[], dict[str, Any]],
    adapter: TypeAdapter[dict[str, T]],
    unreadable: list[Unreadable],
) -> dict[str, T]:
    """One cluster-wide policy answer validated as Pulsar's JSON; {} and an `unreadable` entry when it is not."""
    try:
        return adapter.validate_python(read())
    except AdminError as error:
        unreadable += _unreadable(kind, str(kind), {"": error}, "")
    except ValidationError as error:
        unreadable.append(Unreadable(kind=kind, what=str(kind), reason=format_validation_error(error, "answer")))
    return {}


def _unreadable(kind: Declaration, what: str, errors: Mapping[str, AdminError], noun: str) -> list[Unreadable]:
    """One entry per way the reads failed (status and reason), covering every broker or namespace it failed for:
    a role refused on 100 brokers is one entry, not 100."""
    by_failure: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, error in sorted(errors.items()):
        by_failure[(error.status_text, error.reason)].append(key)
    entries = []
    for (status, reason), keys in by_failure.items():
        covers = tuple(key for key in keys if key)
        if not covers:
            named = what
        elif len(covers) == 1:
            named = f"{what} of {covers[0]}"
        else:
            named = f"{what}s of {len(covers)} {noun}"
        entries.append(Unreadable(kind=kind, what=named, reason=f"{status}: {reason}", covers=covers))
    return entries
