"""The executor re-checks the cluster as it is when it runs, on the real local cluster (Pulsar 4.2.4, three brokers on
their own loopback addresses): a namespace isolation policy set after the approval refuses the destination it forbids
and the bundle stays where it was, although Pulsar itself would carry out an unload naming that destination; and the
brokers' own load shedding switched on through the dynamic configuration after the approval refuses the run, with
nothing sent. Each test removes what it set (`cluster_policies`)."""

from __future__ import annotations

import re
import secrets
import time

import pytest
from sqlalchemy import select

from planner.errors import InputError
from planner.execute.executor import execute_plan
from planner.lifecycle import AttemptStatus
from planner.settings import ExecutorSettings
from planner.store.database import Store
from planner.store.models import AuditEvent
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.executor_support import CountingClient, approved, owners, unload

pytestmark = pytest.mark.integration

FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=15, verify_interval_seconds=0.5)


def host(broker: str) -> str:
    """An isolation policy's broker pattern for one broker: Pulsar matches its host."""
    return re.escape(broker.rsplit(":", 1)[0])


def only_bundle(generator) -> str:
    lower, upper = generator.boundaries
    return f"{generator.namespace}/0x{lower:08x}_0x{upper:08x}"


def audited(store: Store, event: str) -> list[AuditEvent]:
    with store.session() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.event == event)))


def wait_for_shedding_off(client, brokers, timeout: float = 20.0) -> None:
    """Each broker applies a removed dynamic value (back to its broker.conf's) when its metadata watch fires."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        values = [client.runtime_configuration_of(broker).get("loadBalancerSheddingEnabled") for broker in brokers]
        if values == ["false"] * len(brokers):
            return
        time.sleep(0.5)
    raise AssertionError(f"the brokers still shed: {values}")


def test_an_isolation_policy_set_after_the_approval_keeps_the_bundle_off_the_destination_it_forbids(
    pulsar_cluster, traffic_generator, cluster_policies, tmp_path
):
    a, b, c = [broker["id"] for broker in pulsar_cluster["brokers"][:3]]
    guarded = traffic_generator([BundleTraffic(bundle=0, topics=1, rate=5)], num_bundles=1)
    free = traffic_generator([BundleTraffic(bundle=0, topics=1, rate=5)], num_bundles=1)
    for generator in (guarded, free):
        generator.place_bundles({0: a})
        generator.start()
    guarded_bundle, free_bundle = only_bundle(guarded), only_bundle(free)
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    # Approved while no policy covers either namespace: both bundles A -> C.
    plan_id = approved(store, pulsar_cluster, [unload(guarded_bundle, a, c), unload(free_bundle, a, c)])

    # Then an operator confines the guarded namespace to A and B. C stays shared: the free namespace may still go
    # there. Without Pulsar's own unload of the namespace (unload_scope none): the bundle stays where the plan saw it.
    policy = f"recheck-{secrets.token_hex(3)}"
    cluster_policies.isolate(policy, [re.escape(guarded.namespace)], [host(a), host(b)], unload_scope="none")

    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    report = execute_plan(store, client, plan_id, FAST)
    refused, moved = report.actions[0], report.actions[1]
    assert refused.status is AttemptStatus.SKIPPED, report.to_json()
    assert f"isolation policy {policy}" in refused.reason and c in refused.reason, refused.reason
    assert guarded_bundle not in client.unloads, client.unloads
    assert moved.status is AttemptStatus.SUCCEEDED, report.to_json()
    assert owners(client, pulsar_cluster, {guarded_bundle, free_bundle}) == {guarded_bundle: a, free_bundle: c}
    [event] = audited(store, "action.destination-refused")
    assert event.details["bundle"] == guarded_bundle and policy in event.details["refusal"]

    # Sent without the check, Pulsar carries out the unload the policy forbids: it applies no placement rule to a
    # named destination (docs/reliability.md). The producers' next lookup takes the bundle to C.
    client.unload_bundle(guarded.namespace, guarded_bundle.rsplit("/", 1)[1], c)
    deadline, landed = time.monotonic() + 60, None
    while time.monotonic() < deadline and landed in (None, a):
        time.sleep(1)
        landed = owners(client, pulsar_cluster, {guarded_bundle}).get(guarded_bundle)
    assert landed == c, f"Pulsar placed {guarded_bundle} on {landed}"


def test_the_brokers_own_shedding_switched_on_after_the_approval_refuses_the_run(
    pulsar_cluster, traffic_generator, cluster_policies, tmp_path
):
    a, _, c = [broker["id"] for broker in pulsar_cluster["brokers"][:3]]
    generator = traffic_generator([BundleTraffic(bundle=0, topics=1, rate=5)], num_bundles=1)
    generator.place_bundles({0: a})
    generator.start()
    bundle = only_bundle(generator)
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    plan_id = approved(store, pulsar_cluster, [unload(bundle, a, c)])

    # loadBalancerSheddingEnabled is a dynamic key: set for every broker at once, back to broker.conf's at the end.
    cluster_policies.dynamic("loadBalancerSheddingEnabled", "true")
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    with pytest.raises(InputError, match=r"loadBalancerSheddingEnabled=true on .*This run sent nothing") as refused:
        execute_plan(store, client, plan_id, FAST)
    assert "allow_beside_broker_controllers" in str(refused.value)
    assert client.unloads == [] and client.splits == []
    assert owners(client, pulsar_cluster, {bundle}) == {bundle: a}
    [event] = audited(store, "plan.broker-controllers-on")
    assert set(event.details["seen"]["on"]) == {broker["id"] for broker in pulsar_cluster["brokers"]}

    # Switched off again, the same approved plan runs.
    cluster_policies.remove_all()
    wait_for_shedding_off(client, [broker["id"] for broker in pulsar_cluster["brokers"]])
    report = execute_plan(store, client, plan_id, FAST)
    assert report.status.value == "executed", report.to_json()
    assert owners(client, pulsar_cluster, {bundle}) == {bundle: c}
