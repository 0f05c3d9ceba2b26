"""What a cluster declares about itself, read at every collect and kept with the snapshot: each broker's release,
the load-balancing keys of its configuration, and the policies Pulsar's placement obeys (namespace isolation
policies, failure domains, anti-affinity groups).

The records mirror Pulsar's own JSON (`NamespaceIsolationData`, `FailureDomain`, a namespace's
`namespace_anti_affinity_group`), so what the admin API answers validates as it is. Pure values: the collector
fills them (`planner.collect`), the placement reads them (`planner.pulsar.policies`), the executor re-reads them at
execution time.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class PulsarJson(BaseModel):
    """A record under the names Pulsar's admin API uses (snake_case for isolation data), immutable."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class AutoFailoverPolicyType(StrEnum):
    MIN_AVAILABLE = "min_available"  # the only type Pulsar has (`AutoFailoverPolicyType`)


class AutoFailoverPolicy(PulsarJson):
    """When a namespace may fail over to its secondary brokers (`AutoFailoverPolicyData`). For `min_available`:
    `min_limit` (fewer available primaries than this fails over) and `usage_threshold` (a primary above this CPU,
    memory or bandwidth usage, in percent, is not available)."""

    policy_type: AutoFailoverPolicyType = AutoFailoverPolicyType.MIN_AVAILABLE
    parameters: dict[str, str] = Field(default_factory=dict)


class NamespaceIsolationPolicy(PulsarJson):
    """One namespace isolation policy (`NamespaceIsolationData`): the namespaces it matches and the brokers they may
    go to, as regular expressions (Java's, matched against the whole name: namespace name, broker host)."""

    namespaces: tuple[str, ...] = ()
    primary: tuple[str, ...] = ()
    secondary: tuple[str, ...] = ()
    auto_failover_policy: AutoFailoverPolicy | None = None


class FailureDomain(PulsarJson):
    """A failure domain (`FailureDomain`): the broker ids (`host:port`) it holds."""

    brokers: frozenset[str] = frozenset()


class ClusterPolicies(PulsarJson):
    """The policies placement obeys, as the cluster declared them when read. Empty: a cluster without policies."""

    # By policy name, as `/admin/v2/clusters/{cluster}/namespaceIsolationPolicies` answers.
    isolation: dict[str, NamespaceIsolationPolicy] = Field(default_factory=dict)
    # By domain name, as `/admin/v2/clusters/{cluster}/failureDomains` answers.
    failure_domains: dict[str, FailureDomain] = Field(default_factory=dict)
    # Namespace (`tenant/ns`) -> its anti-affinity group; namespaces without one are absent.
    anti_affinity_groups: dict[str, str] = Field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.isolation or self.failure_domains or self.anti_affinity_groups)


class Declaration(StrEnum):
    """The kinds of declaration a collect reads, so a reader can tell which of them it must plan without."""

    RELEASE = "release"
    LEADER = "leader"
    CONFIGURATION = "configuration"
    DYNAMIC_CONFIGURATION = "dynamic configuration"
    ISOLATION_POLICIES = "isolation policies"
    FAILURE_DOMAINS = "failure domains"
    ANTI_AFFINITY_GROUPS = "anti-affinity groups"


class Unreadable(PulsarJson):
    """A declaration the collect could not read, and why (a role without the right, an endpoint that failed)."""

    kind: Declaration | None = None
    what: str  # "isolation policies", "failure domains", "anti-affinity of tenant/ns", "configuration of host:port"
    reason: str
    # The brokers or namespaces the entry is about, when one refusal covers many (a role refused on every broker,
    # or on every namespace of a tenant): one entry each way it failed, not one per broker or namespace.
    covers: tuple[str, ...] = ()


class ClusterDeclarations(PulsarJson):
    """Everything a collect read of what the cluster declares (stored in the snapshot's archive)."""

    # Broker id -> the release it reports (`brokerVersionString` of its load report, else `/brokers/version`).
    broker_versions: dict[str, str] = Field(default_factory=dict)
    leader: str | None = None
    # Broker id -> the load-balancing keys of its runtime configuration (values as strings, as Pulsar serves them).
    configuration: dict[str, dict[str, str]] = Field(default_factory=dict)
    # The dynamic configuration's values (`/admin/v2/brokers/configuration/values`), cluster-wide.
    dynamic_configuration: dict[str, str] = Field(default_factory=dict)
    policies: ClusterPolicies = Field(default_factory=ClusterPolicies)
    # What could not be read: the plan is made without it and says so.
    unreadable: tuple[Unreadable, ...] = ()

    def unread(self, kind: Declaration) -> tuple[Unreadable, ...]:
        """What of `kind` could not be read (empty: all of it was)."""
        return tuple(entry for entry in self.unreadable if entry.kind is kind)
