"""Fencing a draining broker: Pulsar's own placement must not put new bundles on it while it is drained (bundles
of a new namespace, of a split, or unloaded by someone else).

Pulsar has no drain mode for the modular load manager; what its admin API offers is a namespace isolation
policy. In `LoadManagerShared.applyNamespacePolicies`, a namespace no policy matches may only go to *shared*
brokers, and `NamespaceIsolationPolicies.isSharedBroker` says a broker that is primary in any policy is not
shared. So a policy whose namespace pattern matches no real namespace and whose primary pattern is the
draining broker's host keeps every non-isolated namespace off that broker, and isolates nothing itself.

Limits, from the same code:
- Brokers are matched by host only, never by port (`parseBrokerHost`): a broker sharing its host with a broker
  that stays is not fenced, since the fence would take both out (the report says so).
- Namespaces isolated by other policies follow those; heartbeat and SLA-monitor namespaces stay on their broker.
- Unloads with a destination broker (the executor's) are assigned before any placement rule, so the drain and
  a later rollback still reach their destinations.
- A bundle split on the draining broker stays there until unloaded (Pulsar hands the halves to the owner).

The fence stays after the drain, so the emptied broker gets nothing before it is shut down; executing the
drain's rollback, or a fill of that broker, removes it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from planner.collect.admin_client import PulsarAdminClient
from planner.pulsar.policies import FENCE_PREFIX, broker_host

# A namespace nobody creates: the policy matches it only, so it confines no real namespace to the fenced broker.
FENCED_NAMESPACE = "pulsar-rebalance-fence/none"


def _host(broker: str) -> str:
    """The host Pulsar's isolation policies match a broker id (`host:webPort`, checked before a drain) by."""
    return broker_host(broker) or broker


def fence_name(broker: str) -> str:
    return FENCE_PREFIX + re.sub(r"[^A-Za-z0-9-]", "-", _host(broker))


def fence_policy(broker: str) -> dict[str, object]:
    return {
        "namespaces": [re.escape(FENCED_NAMESPACE)],
        "primary": [re.escape(_host(broker))],
        "secondary": [],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": "1", "usage_threshold": "100"},
        },
    }


def fence(client: PulsarAdminClient, cluster: str, brokers: Sequence[str], active: Collection[str]) -> dict[str, str]:
    """Fence each broker whose host no other active broker shares; per broker, what was done."""
    fenced = set(brokers)
    results = {}
    for broker in brokers:
        sharing = sorted(b for b in active if b not in fenced and broker_host(b) == _host(broker))
        if sharing:
            results[broker] = (
                f"not fenced: {', '.join(sharing)} share its host {_host(broker)} and Pulsar's isolation "
                "policies match brokers by host only"
            )
            continue
        client.set_isolation_policy(cluster, fence_name(broker), fence_policy(broker))
        results[broker] = f"fenced: isolation policy {fence_name(broker)}"
    return results


def unfence(client: PulsarAdminClient, cluster: str, brokers: Sequence[str]) -> dict[str, str]:
    """Remove the brokers' fences; per broker, what was done."""
    return {
        broker: f"unfenced: removed {fence_name(broker)}"
        if client.delete_isolation_policy(cluster, fence_name(broker))
        else "no fence"
        for broker in brokers
    }
