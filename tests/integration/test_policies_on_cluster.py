"""Pulsar's own policies on the real local cluster (ModularLoadManagerImpl), written through its admin API as an
operator writes them, planned and executed: a namespace isolated to two of three brokers is planned and moved only
within them; an anti-affinity group spread over three failure domains stays spread. Each test removes its policies.
A policy changed after the approval is `test_policy_recheck_on_cluster.py`'s.

The load is chosen so that ignoring the policy plans differently: the idle broker an isolated namespace may not use is
the least loaded one, and the anti-affinity group's busiest bundle is the strategy's first pick."""

from __future__ import annotations

import re
import secrets
import time
from datetime import timedelta

import pytest

from planner.execute.executor import execute_plan
from planner.lifecycle import Decision
from planner.orchestrate.runner import PlanRequest, run_plan
from planner.plan.document import ConfigSource, PlanDocument
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.policies import destination_refusal
from planner.samples.dataset import samples_root
from planner.settings import ExecutorSettings
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.snapshots import latest_declarations
from pulsar_rebalance_devtools.demo import settled_snapshot
from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator
from tests.integration.executor_support import CountingClient, owners

pytestmark = pytest.mark.integration

# Idle bundles other namespaces leave on the busy broker move too; 10 s is enough for those that carry traffic.
FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=10, verify_interval_seconds=0.5)


def host(broker: str) -> str:
    """An isolation policy's broker pattern for one broker: Pulsar matches its host."""
    return re.escape(broker.rsplit(":", 1)[0])


def bundles_of(generator: TrafficGenerator) -> list[str]:
    edges = generator.boundaries
    return [f"{generator.namespace}/0x{edges[i]:08x}_0x{edges[i + 1]:08x}" for i in range(len(edges) - 1)]


def approved_plan(store: Store, tmp_path, spark, cluster: str, settings: dict[str, object]) -> tuple[int, PlanDocument]:
    """UniformLoadShedder's plan from the stored snapshots (the job, as the plan DAG runs it), approved."""
    request = PlanRequest(
        clusters=(cluster,), strategy="UniformLoadShedder", settings=settings, history=timedelta(days=1)
    )
    [(commit, result)] = run_plan(store, samples_root(tmp_path), request, spark=spark).values()
    record_decision(store, commit.plan_id, Decision.APPROVED, approver="alice", approved_hash=result.plan.actions_hash)
    return commit.plan_id, result.plan


def test_an_isolated_namespace_is_planned_and_moved_only_within_its_brokers(
    pulsar_cluster, traffic_generator, cluster_policies, spark, tmp_path
):
    name = pulsar_cluster["cluster"]
    a, b, c = [broker["id"] for broker in pulsar_cluster["brokers"][:3]]
    isolated = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=40) for i in range(4)])
    # The policy first: Pulsar unloads the bundles of the namespaces a new policy matches.
    policy = f"isolated-{secrets.token_hex(3)}"
    cluster_policies.isolate(policy, [re.escape(isolated.namespace)], [host(a), host(b)])
    isolated.place_bundles(dict.fromkeys(range(4), a))
    # Some load on B and none on C: C is where the placement would send A's bundles if it ignored the policy.
    neighbour = traffic_generator([BundleTraffic(bundle=0, topics=1, rate=10)], num_bundles=1)
    neighbour.place_bundles({0: b})
    isolated.start()
    neighbour.start()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    started = time.monotonic()
    settled_snapshot(client, store, tmp_path)

    declared = latest_declarations(store, name)
    assert declared is not None, "the collect stored no declarations"
    assert policy in declared.policies.isolation, declared.policies.isolation
    recorded = declared.policies.isolation[policy]
    assert recorded.namespaces == (re.escape(isolated.namespace),)
    assert set(recorded.primary) == {host(a), host(b)} and recorded.secondary == ()

    # maxUnloadPercentage 0.6: two of A's four 80 msg/s bundles (in + out) move toward the idle broker's level.
    plan_id, plan = approved_plan(store, tmp_path, spark, name, {"minUnloadMessage": 0, "maxUnloadPercentage": 0.6})
    assert plan.cluster_view is not None and plan.cluster_view.policies_read, plan.cluster_view
    moves = [action for action in plan.actions if namespace_of(action.bundle) == isolated.namespace]
    assert moves, f"nothing of {isolated.namespace} planned off {a}: {plan.to_json()}"
    assert {action.destination for action in moves} <= {a, b}, [action.to_json() for action in moves]
    for action in plan.actions:  # the other namespaces' bundles may go to the shared broker C only
        assert destination_refusal(action.bundle, action.destination, declared.policies, brokers=[a, b, c]) is None

    report = execute_plan(store, client, plan_id, FAST)
    assert report.status == "executed", report.to_json()
    landed = owners(client, pulsar_cluster, set(bundles_of(isolated)))
    assert len(landed) == 4 and set(landed.values()) <= {a, b}, landed
    assert sum(owner == b for owner in landed.values()) == len(moves), landed
    print(f"\nisolation: {len(moves)} bundles A -> B, {time.monotonic() - started:.0f} s from settle to executed")


def test_an_anti_affinity_group_across_failure_domains_stays_spread(
    pulsar_cluster, traffic_generator, cluster_policies, spark, tmp_path
):
    name = pulsar_cluster["cluster"]
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"][:3]]
    a, b, c = brokers
    # Failure domains count in the anti-affinity filters only when enabled: the brokers' dynamic configuration, read
    # by the collect. Enabled first: the load manager reads the domains again when they change.
    cluster_policies.dynamic("failureDomainsEnabled", "true")
    domains = {f"zone-{index}-{secrets.token_hex(2)}": broker for index, broker in enumerate(brokers)}
    for domain, broker in domains.items():
        cluster_policies.failure_domain(domain, [broker])
    # One namespace of the group per domain; B's is the busiest bundle of the busiest broker, the strategy's first
    # pick. Pulsar keeps it: every broker holds one namespace of the group, so no other broker has fewer.
    rates = {a: 5, b: 60, c: 3}
    members = {
        broker: traffic_generator([BundleTraffic(bundle=0, topics=1, rate=rate)], num_bundles=1)
        for broker, rate in rates.items()
    }
    for broker, member in members.items():
        member.place_bundles({0: broker})
    filler = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=40) for i in range(2)], num_bundles=2)
    filler.place_bundles(dict.fromkeys(range(2), b))
    group = f"replicated-{secrets.token_hex(3)}"
    for member in members.values():
        cluster_policies.anti_affinity(member.namespace, group)
    for generator in (*members.values(), filler):
        generator.start()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    settled_snapshot(client, store, tmp_path)

    declared = latest_declarations(store, name)
    assert declared is not None, "the collect stored no declarations"
    assert {
        member.namespace: group for member in members.values()
    }.items() <= declared.policies.anti_affinity_groups.items()
    assert {domain: declared.policies.failure_domains[domain].brokers for domain in domains} == {
        domain: frozenset({broker}) for domain, broker in domains.items()
    }

    # maxUnloadPercentage 0.9 of B's lead: the group's 120 msg/s bundle (which Pulsar keeps) and one filler bundle.
    plan_id, plan = approved_plan(store, tmp_path, spark, name, {"minUnloadMessage": 0, "maxUnloadPercentage": 0.9})
    view = plan.cluster_view
    assert view is not None and view.policies_read, view
    enabled = {value.key: value for value in view.configuration}.get("failureDomainsEnabled")
    assert enabled is not None and enabled.source is ConfigSource.CLUSTER and str(enabled.value).lower() == "true"
    member_namespaces = {member.namespace for member in members.values()}
    assert not [a.to_json() for a in plan.actions if namespace_of(a.bundle) in member_namespaces]
    filler_bundles = set(bundles_of(filler))
    assert any(action.bundle in filler_bundles for action in plan.actions), plan.to_json()

    report = execute_plan(store, client, plan_id, FAST)
    assert report.status == "executed", report.to_json()
    domain_of = {broker: domain for domain, broker in domains.items()}
    placed = {member.namespace: owners(client, pulsar_cluster, set(bundles_of(member))) for member in members.values()}
    spread = {domain_of[owner] for found in placed.values() for owner in found.values()}
    assert len(spread) == 3, placed
