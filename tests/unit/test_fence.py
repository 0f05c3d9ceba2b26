"""The drain fence's policy and its refusal to fence a host another broker shares (the policy itself is proved on
the real cluster: tests/integration/test_maintenance_on_cluster.py)."""

from __future__ import annotations

import re

from planner.execute.fence import FENCED_NAMESPACE, fence, fence_name, fence_policy


class RecordingAdmin:
    """Records the isolation policies set; the real admin API is exercised on the local cluster."""

    def __init__(self):
        self.policies = {}

    def set_isolation_policy(self, cluster, name, policy):
        self.policies[(cluster, name)] = policy


def test_the_policy_names_the_brokers_host_and_a_namespace_nobody_has():
    policy = fence_policy("10.0.0.7:8080")
    assert [re.fullmatch(p, "10.0.0.7") is not None for p in policy["primary"]] == [True]
    assert re.fullmatch(policy["primary"][0], "10.0.0.70") is None
    assert [re.fullmatch(p, FENCED_NAMESPACE) is not None for p in policy["namespaces"]] == [True]
    assert fence_name("10.0.0.7:8080") == "pulsar-rebalance-fence-10-0-0-7"


def test_a_host_another_staying_broker_shares_is_not_fenced():
    admin = RecordingAdmin()
    active = ["10.0.0.1:8080", "10.0.0.1:8081", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.3:8081"]
    results = fence(admin, "c1", ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.3:8081"], active)
    assert results["10.0.0.1:8080"].startswith("not fenced: 10.0.0.1:8081 share its host 10.0.0.1")
    assert results["10.0.0.2:8080"] == "fenced: isolation policy pulsar-rebalance-fence-10-0-0-2"
    # Two brokers of one host, both drained: the host can be fenced.
    assert results["10.0.0.3:8081"] == "fenced: isolation policy pulsar-rebalance-fence-10-0-0-3"
    assert sorted(name for _, name in admin.policies) == [
        "pulsar-rebalance-fence-10-0-0-2",
        "pulsar-rebalance-fence-10-0-0-3",
    ]
