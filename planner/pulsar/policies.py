"""The cluster's namespace policies as Pulsar's modular load manager applies them to placement and shedding, pure:

- namespace isolation policies: `LoadManagerShared.applyNamespacePolicies` over `SimpleResourceAllocationPolicies`
  (`isPrimaryBroker`, `isSecondaryBroker`, `isSharedBroker`, `shouldFailoverToSecondaries`),
  `NamespaceIsolationPolicies` (`getPolicyByNamespace`, `isSharedBroker`), `NamespaceIsolationPolicyImpl` and the
  auto-failover `MinAvailablePolicy`;
- anti-affinity groups and failure domains: `filterAntiAffinityGroupOwnedBrokers`,
  `filterDomainsNotHavingLeastNumberAntiAffinityNamespaces`, `getAntiAffinityNamespaceOwnedBrokers`,
  `shouldAntiAffinityNamespaceUnload`, `refreshBrokerToFailureDomainMap`;
- `BrokerVersionFilter` with `preferLaterVersions`;
- the check of one destination against all of them (`destination_refusal`), which the executor makes at execution
  time, the planner for its own destinations and the simulator for its executor.

Read in the `pulsar-broker` sources of 3.0.7, 3.3.6, 4.0.8 and 4.2.4 and the `pulsar-common` sources of 3.0.7 and
4.2.4, where the rules are the same (only the collections holding the ownership changed), and in the 5.0.1 jars'
bytecode, where isolation also matches broker ids (`PulsarVersion.isolation_matches_broker_ids`). docs/fidelity.md,
"Isolation, anti-affinity and failure-domain policies (modular load manager)", says what was read and where the
planner differs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

from planner.errors import InputError
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.config import PulsarConfig
from planner.pulsar.declarations import ClusterPolicies, NamespaceIsolationPolicy
from planner.pulsar.java_numbers import wrap_int32
from planner.pulsar.versions import PulsarVersion

DEFAULT_DOMAIN = "default"  # LoadManagerShared.DEFAULT_DOMAIN: the failure domain of a broker listed in none
# The executor's drain fence is an isolation policy of this name prefix (planner/execute/fence.py): a fill of the
# fenced broker lifts it.
FENCE_PREFIX = "pulsar-rebalance-fence-"

_LATEST = PulsarVersion.parse("latest")
_DEFAULTS = PulsarConfig()
# `\Q...\E` (what Java's `Pattern.quote` writes) quotes literally; Python's `re` has no such construct.
_JAVA_QUOTED = re.compile(r"\\Q(.*?)(?:\\E|$)", re.DOTALL)
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


# --- namespace isolation policies ----------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(_JAVA_QUOTED.sub(lambda quoted: re.escape(quoted[1]), pattern))


def _matches(patterns: Iterable[str], text: str, where: str) -> bool:
    """Java's `String.matches` (the whole text) against any of `patterns`; an unreadable pattern is bad input."""
    for pattern in patterns:
        try:
            compiled = _compiled(pattern)
        except re.error as error:
            raise InputError(
                f"{where}: {pattern!r} is not a regular expression the planner can read ({error})"
            ) from None
        if compiled.fullmatch(text):
            return True
    return False


def isolation_policy(namespace: str, policies: ClusterPolicies) -> tuple[str, NamespaceIsolationPolicy] | None:
    """`NamespaceIsolationPolicies.getPolicyByNamespace`: the first policy, in the order the cluster lists them (the
    metadata store keeps them in a JSON map, read back in order), one of whose namespace patterns matches the whole
    namespace name; with its name. None: no policy isolates the namespace."""
    for name, policy in policies.isolation.items():
        if _matches(policy.namespaces, namespace, f"isolation policy {name}: namespaces"):
            return name, policy
    return None


def broker_host(broker: str) -> str | None:
    """`LoadManagerShared.parseBrokerHost`: the broker id (`host:port`) before its last `:`, which is what isolation
    policies match; None for an id without one, which Pulsar logs and leaves out of every candidate set."""
    index = broker.rfind(":")
    return broker[:index] if index >= 0 else None


def _host_and_port(broker: str) -> str | None:
    """5.0's `NamespaceIsolationPolicyImpl.toHostAndPort`: the id as Guava's `HostAndPort` writes it (`[v6]:port`);
    None when it has no valid port after its last `:`."""
    index = broker.rfind(":")
    if index <= 0:
        return None
    host, port_text = broker[:index], broker[index + 1 :]
    if len(host) > 1 and host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not _JAVA_INT.fullmatch(port_text):
        return None
    port = int(port_text)
    if not 0 <= port <= 65535 or host.count(":") == 1:  # HostAndPort refuses a host that holds a port itself
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _names_broker(patterns: Sequence[str], broker: str, host: str, version: PulsarVersion, where: str) -> bool:
    """Whether a policy's primary or secondary patterns name the broker: by host in every release read; from 5.0
    also the patterns that hold a `:` by broker id (`isPrimaryBrokerId`, `isSecondaryBrokerId`)."""
    if _matches(patterns, host, where):
        return True
    if not version.isolation_matches_broker_ids:
        return False
    host_and_port = _host_and_port(broker)
    return host_and_port is not None and _matches([p for p in patterns if ":" in p], host_and_port, where)


def is_primary(name: str, policy: NamespaceIsolationPolicy, broker: str, version: PulsarVersion = _LATEST) -> bool:
    """`NamespaceIsolationPolicyImpl.isPrimaryBroker` for the broker id `broker` (by its host)."""
    host = broker_host(broker)
    return host is not None and _names_broker(
        policy.primary, broker, host, version, f"isolation policy {name}: primary"
    )


def is_secondary(name: str, policy: NamespaceIsolationPolicy, broker: str, version: PulsarVersion = _LATEST) -> bool:
    """`NamespaceIsolationPolicyImpl.isSecondaryBroker` for the broker id `broker` (by its host)."""
    host = broker_host(broker)
    where = f"isolation policy {name}: secondary"
    return host is not None and _names_broker(policy.secondary, broker, host, version, where)


def primary_of(broker: str, policies: ClusterPolicies, version: PulsarVersion = _LATEST) -> str | None:
    """The first policy naming `broker` a primary, or None: `NamespaceIsolationPolicies.isSharedBroker` is its
    negation (a primary of any policy is kept for the namespaces that policy isolates)."""
    return next(
        (name for name, policy in policies.isolation.items() if is_primary(name, policy, broker, version)), None
    )


def min_limit(name: str, policy: NamespaceIsolationPolicy) -> int:
    """The auto-failover policy's `min_limit` (`MinAvailablePolicy`): with fewer primaries available the
    secondaries are candidates too. Pulsar refuses to store a policy without it."""
    failover = policy.auto_failover_policy
    text = failover.parameters.get("min_limit") if failover is not None else None
    if text is None or not _JAVA_INT.fullmatch(text) or not INT_MIN <= int(text) <= INT_MAX:
        raise InputError(
            f"isolation policy {name}: auto_failover_policy.parameters.min_limit is {text!r}, not an integer "
            "(Pulsar refuses such a policy)"
        )
    return int(text)


def isolation_candidates(
    namespace: str,
    brokers: Sequence[str],
    policies: ClusterPolicies,
    usage: Mapping[str, float] | None = None,
    *,
    persistent_topics: Mapping[str, bool] | None = None,
    version: PulsarVersion | None = None,
) -> list[str]:
    """`LoadManagerShared.applyNamespacePolicies` for a persistent bundle of `namespace` over the available
    `brokers` (ids `host:port`), in their order.

    With a policy for the namespace: its primaries, plus its secondaries when fewer primaries are available than the
    auto-failover policy's `min_limit` (`shouldFailoverToSecondaries` counts them; it reads no usage). Without one:
    the shared brokers (primary in no policy) that load persistent topics (`persistent_topics`, by broker id; a
    broker missing there does). `usage` (each broker's resource usage, in percent) is accepted for the callers that
    have it, but no release read applies `usage_threshold` to placement: `MinAvailablePolicy.isBrokerAvailable` is
    called by neither load manager. `version`: the release whose matching applies (default: the latest)."""
    del usage  # not read by Pulsar's placement: see above
    version = version or _LATEST
    found = isolation_policy(namespace, policies)
    hosted = [broker for broker in dict.fromkeys(brokers) if broker_host(broker) is not None]
    if found is None:
        loads = persistent_topics or {}
        return [
            broker for broker in hosted if loads.get(broker, True) and primary_of(broker, policies, version) is None
        ]
    name, policy = found
    primaries = {broker for broker in hosted if is_primary(name, policy, broker, version)}
    allowed = set(primaries)
    if len(primaries) < min_limit(name, policy):
        allowed |= {broker for broker in hosted if is_secondary(name, policy, broker, version)}
    return [broker for broker in hosted if broker in allowed]


def isolation_refusal(
    namespace: str,
    broker: str,
    brokers: Sequence[str],
    policies: ClusterPolicies,
    *,
    persistent_topics: Mapping[str, bool] | None = None,
    version: PulsarVersion | None = None,
) -> str | None:
    """Why `applyNamespacePolicies` over `brokers` leaves `broker` out for `namespace`, naming the policy; None when
    it keeps it."""
    available = list(dict.fromkeys([*brokers, broker]))
    if broker in isolation_candidates(
        namespace, available, policies, persistent_topics=persistent_topics, version=version
    ):
        return None
    version = version or _LATEST
    if broker_host(broker) is None:
        return f"{broker} is not a broker id host:port, which Pulsar leaves out of placement"
    found = isolation_policy(namespace, policies)
    if found is None:
        owner = primary_of(broker, policies, version)
        if owner is not None:
            return (
                f"{broker} is a primary broker of isolation policy {owner}, and {namespace} matches no isolation "
                "policy: only shared brokers may own it"
            )
        return f"{broker} does not load persistent topics"
    name, policy = found
    if is_secondary(name, policy, broker, version):
        primaries = sum(1 for other in available if is_primary(name, policy, other, version))
        return (
            f"{broker} is a secondary of isolation policy {name}, which {namespace} follows: secondaries take it only "
            f"with fewer than {min_limit(name, policy)} primaries available ({primaries} are)"
        )
    return f"isolation policy {name}, which {namespace} follows, names {broker} neither primary nor secondary"


def should_namespace_policies_unload(
    namespace: str,
    current: str,
    brokers: Sequence[str],
    policies: ClusterPolicies,
    *,
    persistent_topics: Mapping[str, bool] | None = None,
    version: PulsarVersion | None = None,
) -> bool:
    """`ModularLoadManagerImpl.shouldNamespacePoliciesUnload`: whether any broker but `current` may own a bundle of
    `namespace` (else the shedding cycle leaves it where it is)."""
    candidates = isolation_candidates(
        namespace, brokers, policies, persistent_topics=persistent_topics, version=version
    )
    return bool(set(candidates) - {current})


def without_fences(policies: ClusterPolicies, brokers: Collection[str]) -> ClusterPolicies:
    """`policies` without the executor's drain fences of `brokers` (what a fill of them executes first)."""
    hosts = {host for host in map(broker_host, brokers) if host is not None}
    kept = {
        name: policy
        for name, policy in policies.isolation.items()
        if not (name.startswith(FENCE_PREFIX) and any(_matches(policy.primary, host, name) for host in hosts))
    }
    return policies if len(kept) == len(policies.isolation) else policies.model_copy(update={"isolation": kept})


# --- anti-affinity groups and failure domains ----------------------------------------------------


def anti_affinity_group(namespace: str, policies: ClusterPolicies) -> str | None:
    """`LoadManagerShared.getNamespaceAntiAffinityGroup`: the namespace's group unless blank."""
    group = policies.anti_affinity_groups.get(namespace)
    return group if group is not None and group.strip() else None


def same_group(a: str, b: str) -> bool:
    """`String.equalsIgnoreCase`, char by char: equal, or equal upper-cased, or equal lower-cased."""
    return len(a) == len(b) and all(
        x == y or x.upper() == y.upper() or x.lower() == y.lower() for x, y in zip(a, b, strict=True)
    )


def owned_namespaces(owners: Mapping[str, str]) -> dict[str, set[str]]:
    """Per broker, the namespaces it owns bundles of (the modular load manager's `brokerToNamespaceToBundleRange`),
    from bundle -> owner."""
    owned: dict[str, set[str]] = {}
    for bundle, broker in owners.items():
        owned.setdefault(broker, set()).add(namespace_of(bundle))
    return owned


def _group_members(group: str, namespaces: Iterable[str], policies: ClusterPolicies) -> set[str]:
    """The namespaces among `namespaces` in `group` (ignoring case)."""
    members = set()
    for namespace in set(namespaces):
        other = anti_affinity_group(namespace, policies)
        if other is not None and same_group(group, other):
            members.add(namespace)
    return members


def anti_affinity_counts(
    namespace: str, policies: ClusterPolicies, owned: Mapping[str, Collection[str]]
) -> dict[str, int] | None:
    """`getAntiAffinityNamespaceOwnedBrokers` of the modular load manager: per broker, how many namespaces of
    `namespace`'s anti-affinity group it owns bundles of (`owned`: broker -> namespaces; `namespace` itself counts
    where it has bundles); a broker owning none is absent. None when `namespace` has no group."""
    group = anti_affinity_group(namespace, policies)
    if group is None:
        return None
    members = _group_members(group, (name for names in owned.values() for name in names), policies)
    counts = {broker: len(members.intersection(names)) for broker, names in owned.items()}
    return {broker: count for broker, count in counts.items() if count}


def anti_affinity_bundle_counts(
    namespace: str, policies: ClusterPolicies, owners: Mapping[str, str]
) -> dict[str, int] | None:
    """The extensible load manager's count (over the ownership channel's Owned entries): per broker, how many
    bundles of namespaces in `namespace`'s group it owns. None when `namespace` has no group."""
    group = anti_affinity_group(namespace, policies)
    if group is None:
        return None
    members = _group_members(group, map(namespace_of, owners), policies)
    counts: dict[str, int] = {}
    for bundle, broker in owners.items():
        if namespace_of(bundle) in members:
            counts[broker] = counts.get(broker, 0) + 1
    return counts


def broker_domains(policies: ClusterPolicies, failure_domains_enabled: bool) -> dict[str, str]:
    """`refreshBrokerToFailureDomainMap`: broker id -> its failure domain, empty unless `failureDomainsEnabled`. The
    metadata store lists the domains by name, so a broker listed in two is in the later one."""
    if not failure_domains_enabled:
        return {}
    return {broker: name for name, domain in sorted(policies.failure_domains.items()) for broker in domain.brokers}


def filter_domains(candidates: Sequence[str], counts: Mapping[str, int], domains: Mapping[str, str]) -> list[str]:
    """`filterDomainsNotHavingLeastNumberAntiAffinityNamespaces`: the candidates of the failure domains whose
    candidates hold the fewest of the group (a broker in no domain is in `default`); all of them without domains."""
    if not domains or not candidates:
        return list(candidates)
    per_domain: dict[str, int] = {}
    for broker in candidates:
        domain = domains.get(broker, DEFAULT_DOMAIN)
        per_domain[domain] = per_domain.get(domain, 0) + counts.get(broker, 0)
    fewest = min(per_domain.values())
    return [broker for broker in candidates if per_domain[domains.get(broker, DEFAULT_DOMAIN)] == fewest]


def keep_fewest(candidates: Sequence[str], counts: Mapping[str, int] | None, domains: Mapping[str, str]) -> list[str]:
    """`filterAntiAffinityGroupOwnedBrokers` given the group's counts (None: the namespace has no group, nothing is
    filtered): the domains holding the fewest (with domains), then within them the brokers holding the fewest (any
    broker holding none: those holding none)."""
    if counts is None or not candidates:
        return list(candidates)
    kept = filter_domains(candidates, counts, domains)
    if any(broker not in counts for broker in kept):
        return [broker for broker in kept if broker not in counts]
    fewest = min(counts[broker] for broker in kept)
    return [broker for broker in kept if counts[broker] == fewest]


def filter_anti_affinity(
    namespace: str,
    candidates: Sequence[str],
    policies: ClusterPolicies,
    owned: Mapping[str, Collection[str]],
    *,
    failure_domains_enabled: bool,
) -> list[str]:
    """`LoadManagerShared.filterAntiAffinityGroupOwnedBrokers` for a bundle of `namespace` over `candidates`, on the
    ownership `owned` (broker -> namespaces it owns bundles of), with the failure domains when enabled."""
    counts = anti_affinity_counts(namespace, policies, owned)
    return keep_fewest(candidates, counts, broker_domains(policies, failure_domains_enabled))


def should_anti_affinity_namespace_unload(
    namespace: str,
    current: str,
    candidates: Collection[str],
    policies: ClusterPolicies,
    owned: Mapping[str, Collection[str]],
) -> bool:
    """`shouldAntiAffinityNamespaceUnload`: whether the shedding cycle may unload a bundle of `namespace` from
    `current`, `candidates` being the brokers the isolation policies allow (`current` among them). Not when every
    candidate holds as many namespaces of the group as the fewest any holds, and that fewest is not zero and
    `current` holds no more: the unload would only come back."""
    counts = anti_affinity_counts(namespace, policies, owned)
    if not counts:  # no group, or nobody owns any of it
        return True
    unique = list(dict.fromkeys(candidates))
    fewest = min((counts.get(broker, 0) for broker in unique), default=INT_MAX)
    held = counts.get(current, 0) if current in unique else 0  # Java reads it in its loop over the candidates
    if fewest == 0 or held > fewest:
        return True
    return sum(1 for broker in unique if counts.get(broker, 0) == fewest) != len(unique)


# --- BrokerVersionFilter -------------------------------------------------------------------------


class BrokerFilterError(Exception):
    """`BrokerFilterBadVersionException`: the version filter cannot decide, and Pulsar's `selectBroker` restores the
    candidates to every broker the isolation policies allow."""


_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


def _release(version: str | None, broker: str) -> tuple[tuple[int, int, int], tuple[str, ...] | None]:
    """java-semver 0.9.0's `Version.valueOf` (what Pulsar reads `brokerVersionString` with): the normal version and
    the pre-release identifiers (None without any); build metadata plays no part in the filter's equality."""
    if not version:
        raise BrokerFilterError(f"no version string in the load report of {broker}")
    match = _SEMVER.fullmatch(version)
    if match is None:
        raise BrokerFilterError(f"invalid version string in the load report of {broker}: {version!r}")
    return (int(match[1]), int(match[2]), int(match[3])), tuple(match[4].split(".")) if match[4] else None


def _java_int(text: str) -> int | None:
    return int(text) if _JAVA_INT.fullmatch(text) and INT_MIN <= int(text) <= INT_MAX else None


def _compare_identifiers(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """`MetadataVersion.compareTo`: identifier by identifier, numerically when both are ints (by Java's int
    subtraction), else as strings; then the shorter first."""
    for x, y in zip(a, b, strict=False):
        x_int, y_int = _java_int(x), _java_int(y)
        result = wrap_int32(x_int - y_int) if x_int is not None and y_int is not None else (x > y) - (x < y)
        if result:
            return result
    return len(a) - len(b)


def compare_releases(a: str, b: str) -> int:
    """`Version.compareTo` of java-semver 0.9.0: negative, zero or positive as release `a` sorts before, with or
    after `b` (a release after its pre-releases); BrokerFilterError on one that is not a semantic version."""
    (normal_a, pre_a), (normal_b, pre_b) = _release(a, a), _release(b, b)
    if normal_a != normal_b:
        return -1 if normal_a < normal_b else 1
    if pre_a is None or pre_b is None:
        return 0 if pre_a is pre_b else (1 if pre_a is None else -1)
    return _compare_identifiers(pre_a, pre_b)


def newest_release_brokers(candidates: Sequence[str], versions: Mapping[str, str | None]) -> list[str]:
    """`BrokerVersionFilter.filter` with `preferLaterVersions`: the candidates running the newest release among them
    (`versions`: broker -> `brokerVersionString` of its load report). BrokerFilterError as Pulsar throws: no
    candidates, or one without a release or with one that is not a semantic version."""
    if not candidates:
        raise BrokerFilterError("no candidates to take the newest release of")
    for broker in candidates:
        _release(versions.get(broker), broker)
    newest = candidates[0]
    for broker in candidates[1:]:
        if compare_releases(versions[newest] or "", versions[broker] or "") < 0:
            newest = broker
    return [broker for broker in candidates if compare_releases(versions[broker] or "", versions[newest] or "") == 0]


# --- one destination -----------------------------------------------------------------------------


def group_counts(
    namespace: str, policies: ClusterPolicies, owners: Mapping[str, str], config: PulsarConfig
) -> dict[str, int] | None:
    """The anti-affinity count of the configured load manager over `owners` (bundle -> broker): per broker, the
    namespaces of `namespace`'s group it owns bundles of (modular), or its bundles of them (extensible). None when
    `namespace` has no group."""
    if config.extensible:
        return anti_affinity_bundle_counts(namespace, policies, owners)
    return anti_affinity_counts(namespace, policies, owned_namespaces(owners))


def spread_destinations(
    source: str | None,
    candidates: Sequence[str],
    counts: Mapping[str, int] | None,
    policies: ClusterPolicies,
    config: PulsarConfig,
) -> list[str]:
    """The destinations that keep an anti-affinity group spread, in `candidates` order: those Pulsar's anti-affinity
    filter (with the failure domains when `failureDomainsEnabled`) keeps of the bundle's `candidates`, either with
    `source`, its current owner, among them (as a shedding cycle's `selectBroker` sees it) or without (as once the
    move took it off, or a drain emptied it); never `source`. `counts`: the group's (None: no group)."""
    domains = broker_domains(policies, config.failure_domains_enabled)
    kept = set(keep_fewest([broker for broker in candidates if broker != source], counts, domains))
    if source in candidates:
        kept.update(keep_fewest(candidates, counts, domains))
    return [broker for broker in candidates if broker in kept and broker != source]


def destination_refusal(
    bundle: str,
    destination: str,
    policies: ClusterPolicies,
    owners: Mapping[str, str] | None = None,
    *,
    brokers: Sequence[str] | None = None,
    config: PulsarConfig | None = None,
) -> str | None:
    """None when the cluster's policies allow `destination` to own `bundle`; else one line naming the policy.

    Refused: a destination the namespace isolation policies leave out (`applyNamespacePolicies` over `brokers`, the
    available brokers; the executor's drain fence is such a policy); and, when `owners` (bundle -> broker, the
    ownership now) is given and the namespace has an anti-affinity group, a destination outside
    `spread_destinations`: Pulsar's anti-affinity filter would keep it neither with the bundle's owner among its
    candidates nor without. The modular load manager counts each broker's namespaces of the group, the extensible one
    its bundles of them.

    `brokers`: without it, the brokers `owners` names and `destination` (a broker owning nothing then goes
    uncounted, which only matters for an auto-failover count). `config`: the release (broker-id matching from 5.0),
    `failureDomainsEnabled` and the load manager class; default: Pulsar's defaults."""
    config = config or _DEFAULTS
    version = config.pulsar_version
    namespace = namespace_of(bundle)
    available = list(brokers) if brokers is not None else sorted({*(owners or {}).values()})
    if destination not in available:
        available.append(destination)
    refused = isolation_refusal(namespace, destination, available, policies, version=version)
    if refused is not None:
        return refused
    group = anti_affinity_group(namespace, policies)
    if owners is None or group is None or owners.get(bundle) == destination:
        return None
    counts = group_counts(namespace, policies, owners, config)
    candidates = isolation_candidates(namespace, available, policies, version=version)
    kept = spread_destinations(owners.get(bundle), candidates, counts, policies, config)
    if destination in kept:
        return None
    unit = "bundles" if config.extensible else "namespaces"
    return (
        f"anti-affinity group {group} of {namespace}: {destination} holds {(counts or {}).get(destination, 0)} {unit} "
        f"of it, and Pulsar would place the bundle on {', '.join(kept)} instead"
    )
