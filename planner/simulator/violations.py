"""What a run did to the cluster's policies: the bundles left where an isolation policy forbids them, the
anti-affinity namespaces left together when they need not be, and the moves that broke a policy.

Judged as the modular load manager judges placement (`LoadManagerShared.applyNamespacePolicies`, through
`planner.pulsar.policies.isolation_candidates`) over the brokers that are up at that moment:

- **isolation**: a bundle whose owner is not among its namespace's candidates (the primaries, and the
  secondaries when the auto-failover policy fails over; a namespace no policy matches may not use another
  policy's primaries). The modular load manager counts available primaries only, without a usage threshold,
  and so does this judgement.
- **anti-affinity**: per group, the namespaces sharing a broker (a failure domain, when `failureDomainsEnabled`
  and domains are declared; a broker in none is in Pulsar's `default` domain) beyond the fewest any placement on
  the brokers they may use needs: with k namespaces and at most M of them on distinct brokers (domains), k - M
  must share.
- **forbidden moves**: moves (the policy's own or a lookup's) onto a broker the isolation rule did not allow at
  that minute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.declarations import ClusterPolicies
from planner.pulsar.policies import (
    DEFAULT_DOMAIN,
    anti_affinity_group,
    broker_domains,
    isolation_candidates,
    same_group,
)


@dataclass(frozen=True, slots=True)
class PolicyViolations:
    isolation: int  # bundles on a broker their namespace's isolation rule forbids, at the end of the run
    anti_affinity: int  # avoidable shared brokers (domains) of anti-affinity namespaces, at the end of the run
    forbidden_moves: int  # moves onto a broker the isolation rule forbade at that minute
    refused_moves: int  # planned moves the executor refused: the policies in force forbade the destination


class PolicyJudge:
    """The policies of one run and the candidates of each namespace per set of brokers up (cached: the set
    changes only with broker events)."""

    def __init__(self, policies: ClusterPolicies, domains_enabled: bool) -> None:
        self.policies = policies
        self._domains = broker_domains(policies, domains_enabled)
        # Namespace -> its group, groups that differ only in case (Pulsar compares them ignoring it) as one.
        self._groups: dict[str, str] = {}
        for namespace in sorted(policies.anti_affinity_groups):
            group = anti_affinity_group(namespace, policies)
            if group is not None:
                known = (other for other in self._groups.values() if same_group(group, other))
                self._groups[namespace] = next(known, group)
        self._allowed: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}

    def allowed(self, namespace: str, brokers: tuple[str, ...]) -> frozenset[str]:
        """The brokers among `brokers` (those up, sorted) that `namespace`'s bundles may be placed on."""
        key = (namespace, brokers)
        cached = self._allowed.get(key)
        if cached is None:
            cached = frozenset(isolation_candidates(namespace, list(brokers), self.policies))
            self._allowed[key] = cached
        return cached

    def forbids(self, bundle: str, broker: str, brokers: tuple[str, ...]) -> bool:
        return broker not in self.allowed(namespace_of(bundle), brokers)

    def isolation_violations(self, owners: Mapping[str, str], brokers: tuple[str, ...]) -> int:
        return sum(1 for bundle, owner in owners.items() if self.forbids(bundle, owner, brokers))

    def _unit(self, broker: str) -> str:
        return self._domains.get(broker, DEFAULT_DOMAIN) if self._domains else broker

    def anti_affinity_violations(self, owners: Mapping[str, str], brokers: tuple[str, ...]) -> int:
        members: dict[str, dict[str, set[str]]] = {}  # group -> namespace -> units holding its bundles
        for bundle, owner in owners.items():
            namespace = namespace_of(bundle)
            group = self._groups.get(namespace)
            if group is not None:
                members.setdefault(group, {}).setdefault(namespace, set()).add(self._unit(owner))
        total = 0
        for namespaces in members.values():
            sharing: dict[str, int] = {}
            for units in namespaces.values():
                for unit in units:
                    sharing[unit] = sharing.get(unit, 0) + 1
            shared = sum(count - 1 for count in sharing.values())
            options = {
                namespace: sorted({self._unit(b) for b in self.allowed(namespace, brokers)})
                for namespace in sorted(namespaces)
            }
            unavoidable = len(namespaces) - _distinct_placements(options)
            total += max(0, shared - unavoidable)
        return total


def _distinct_placements(options: Mapping[str, Sequence[str]]) -> int:
    """The most namespaces that can sit on pairwise distinct units, each on one it may use (a maximum bipartite
    matching by augmenting paths: groups hold a handful of namespaces)."""
    holder: dict[str, str] = {}

    def place(namespace: str, seen: set[str]) -> bool:
        for unit in options[namespace]:
            if unit in seen:
                continue
            seen.add(unit)
            if unit not in holder or place(holder[unit], seen):
                holder[unit] = namespace
                return True
        return False

    return sum(1 for namespace in options if place(namespace, set()))
