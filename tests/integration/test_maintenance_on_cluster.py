"""Maintenance plans on the real local cluster, with traffic: a drain empties a broker at its pace without losing
a message and lands the load where it predicted; a rollback brings the bundles back; a broker added to the
running cluster gets its share in one fill plan. Figures are printed (run with -s)."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.collect.admin_client import PulsarAdminClient
from planner.errors import InputError
from planner.execute.executor import execute_plan
from planner.execute.fence import fence_name, unfence
from planner.lifecycle import Decision
from planner.orchestrate.rollback import plan_rollback
from planner.orchestrate.runner import PlanRequest, run_plan
from planner.plan.maintenance import MaintenanceMode, MaintenanceRequest
from planner.pulsar.bundle_range import namespace_of
from planner.pulsar.load_manager_shared import is_pinned_namespace
from planner.samples.dataset import samples_root, snapshot_broker_load
from planner.settings import ExecutorSettings
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.models import ActionExecution, AuditEvent, PlanAction
from planner.store.plans import list_plans
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.demo import run_plan_cycle, settled_snapshot
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.conftest import airflow_env, collect_snapshots
from tests.integration.executor_support import CountingClient, approved, owners, unload

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

PACE = 12  # unloads per minute: one every 5 s
# Idle bundles of the drained broker get no new owner until a lookup: 10 s is enough for those that carry traffic.
FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=10, verify_interval_seconds=0.5)


def generator_bundles(generator, count):
    return [
        f"{generator.namespace}/0x{generator.boundaries[i]:08x}_0x{generator.boundaries[i + 1]:08x}"
        for i in range(count)
    ]


def movable_owned(client, cluster, broker):
    return sorted(b for b in client.owned_bundles(cluster, broker) if not is_pinned_namespace(namespace_of(b)))


@pytest.fixture
def unfenced_at_the_end(pulsar_cluster):
    """Whatever a test leaves, no broker of the shared cluster stays fenced for the tests after it."""
    yield
    with PulsarAdminClient(pulsar_cluster["brokers"][0]["adminUrl"]) as client:
        unfence(client, pulsar_cluster["cluster"], [broker["id"] for broker in pulsar_cluster["brokers"]])


def plan_maintenance(store, tmp_path, spark, cluster, request, settings=None):
    plan_request = PlanRequest(
        clusters=(cluster,),
        strategy="AvgShedder",
        settings=settings or {},
        history=timedelta(days=1),
        maintenance=request,
    )
    [(commit, result)] = run_plan(store, samples_root(tmp_path), plan_request, spark=spark).values()
    record_decision(store, commit.plan_id, Decision.APPROVED, approver="alice", approved_hash=result.plan.actions_hash)
    return commit.plan_id, result.plan


def request_starts(store, plan_id):
    with store.session() as session:
        return sorted(
            row.started_at.timestamp()
            for row in session.scalars(select(ActionExecution).join(PlanAction).where(PlanAction.plan_id == plan_id))
        )


def test_a_drain_empties_the_broker_at_its_pace_as_predicted_and_a_rollback_undoes_it(
    pulsar_cluster, traffic_generator, spark, tmp_path, unfenced_at_the_end
):
    name = pulsar_cluster["cluster"]
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    drained, remaining = brokers[-1], brokers[:-1]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=5) for i in range(8)], num_bundles=8)
    generator.place_bundles({i: drained if i < 6 else remaining[i % 2] for i in range(8)})
    generator.start()
    # Two idle bundles too (owned, no topic loaded): load reports leave them out, the admin API lists them.
    idle = traffic_generator([BundleTraffic(bundle=i, topics=1) for i in range(2)], num_bundles=2)
    idle.place_bundles(dict.fromkeys(range(2), drained))
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    settled_snapshot(client, store, tmp_path)
    on_drained = movable_owned(client, name, drained)
    assert set(generator_bundles(idle, 2)) <= set(on_drained)
    # The three brokers share this machine's CPU, so their scores follow whatever else runs on it (a full CI run
    # measured them over 85 %, a busy machine over 100 %): the capacity check is not what this test is about
    # (tests/unit/test_maintenance_plans.py has it), so the threshold is out of reach.
    plan_id, plan = plan_maintenance(
        store,
        tmp_path,
        spark,
        name,
        MaintenanceRequest(MaintenanceMode.DRAIN, (drained,)),
        settings={"loadBalancerBrokerOverloadedThresholdPercentage": 1000},
    )
    assert plan.mode == "drain" and plan.maintenance.brokers == [drained] and plan.maintenance.over_capacity == []
    assert sorted(action.bundle for action in plan.actions) == on_drained
    assert all(action.source == drained and action.destination in remaining for action in plan.actions)

    paced = ExecutorSettings(actions_per_minute=PACE, verify_timeout_seconds=10, verify_interval_seconds=0.5)
    report = execute_plan(store, client, plan_id, paced)
    assert report.status == "executed", report.to_json()
    assert report.still_owned == {drained: []}
    assert movable_owned(client, name, drained) == []
    starts = request_starts(store, plan_id)
    assert len(starts) == len(plan.actions) == len(client.unloads)
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) >= 60 / PACE - 0.05, gaps
    assert max(sum(start <= other < start + 60 for other in starts) for start in starts) <= PACE

    # The emptied broker is the least loaded now, so Pulsar's placement would pick it first: the fence forbids it.
    newcomer = traffic_generator([BundleTraffic(bundle=i, topics=1) for i in range(4)], num_bundles=4)
    placed = {topic: newcomer.owner(topic) for topic in newcomer.topics}
    assert drained not in placed.values() and set(placed.values()) <= set(remaining), placed
    assert report.fences == {drained: f"fenced: isolation policy {fence_name(drained)}"}
    # Nor does a plan made beside the drain refill it: the executor skips a move onto a fenced broker.
    moved = plan.actions[0]
    beside = execute_plan(
        store, client, approved(store, pulsar_cluster, [unload(moved.bundle, moved.destination, drained)]), FAST
    )
    assert beside.results == {0: "skipped"} and "is fenced" in beside.reasons[0], beside.to_json()

    after = settled_snapshot(client, store, tmp_path)
    measured = snapshot_broker_load(tmp_path, name, after.snapshot_id)
    predicted = {forecast.broker: forecast.msg_rate_after for forecast in plan.brokers}
    for broker in remaining:
        assert abs(measured[broker]["msgRate"] - predicted[broker]) <= 0.25 * predicted[broker] + 5, (
            broker,
            measured,
            predicted,
        )

    rollback_id, rollback = plan_rollback(store, client, plan_id, actor="test")
    assert rollback.maintenance.rolls_back == plan_id
    record_decision(
        store, rollback_id.plan_id, Decision.APPROVED, approver="alice", approved_hash=rollback.actions_hash
    )
    undone = execute_plan(store, client, rollback_id.plan_id, FAST)
    assert undone.status == "executed" and undone.fences == {drained: f"unfenced: removed {fence_name(drained)}"}
    assert fence_name(drained) not in client.isolation_policies(name)
    # The bundles that carry traffic come back; an idle one stays unowned after its unload until a lookup places
    # it, so there is nothing to move back, and the rollback says so.
    carrying = [bundle for bundle in generator_bundles(generator, 8) if bundle in on_drained]
    back = owners(client, pulsar_cluster, carrying)
    returned = sum(back.get(bundle) == drained for bundle in carrying)
    assert returned >= 0.99 * len(carrying), back
    for bundle in generator_bundles(idle, 2):
        assert any(note.startswith(f"{bundle}: now not owned") for note in rollback.notes), rollback.notes
    with store.session() as session:
        links = {
            (row.plan_id, row.event)
            for row in session.scalars(select(AuditEvent).where(AuditEvent.event.startswith("plan.roll")))
        }
    assert links == {
        (plan_id, "plan.rollback-planned"),
        (rollback_id.plan_id, "plan.rolls-back"),
        (plan_id, "plan.rolled-back"),
    }
    assert show_plan(store, rollback_id.plan_id).document.maintenance.rolls_back == plan_id
    # The drain is over for good: resuming it would send its moves over the rollback's.
    assert show_plan(store, plan_id).status == "rolled-back"
    with pytest.raises(InputError, match="is rolled-back"):
        execute_plan(store, client, plan_id, FAST)

    generator.stop()
    traffic = generator.report()
    assert traffic.complete, f"{sum(len(gaps) for gaps in traffic.missing.values())} messages lost: {traffic}"
    assert traffic.produced > 500
    print(
        f"\ndrain of {drained}: {len(plan.actions)} unloads, starts {min(gaps):.1f}-{max(gaps):.1f} s apart "
        f"(pace {PACE}/min); msg/s predicted {[round(predicted[b], 1) for b in remaining]}, measured "
        f"{[measured[b]['msgRate'] for b in remaining]}; rollback returned {returned}/{len(carrying)}; "
        f"produced {traffic.produced}, consumed {traffic.consumed}, missing 0"
    )
    store.dispose()


@pytest.mark.slow  # kept out of CI's run for time; the fill's planning is covered by the unit tests
def test_a_broker_added_to_a_running_cluster_gets_its_share_in_one_fill_plan(
    pulsar_cluster, traffic_generator, spark, tmp_path
):
    name = pulsar_cluster["cluster"]
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    rate = 4
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=rate) for i in range(9)], num_bundles=9)
    generator.place_bundles({i: brokers[i % len(brokers)] for i in range(9)})
    generator.start()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    grown = local_cluster.add_broker()
    try:
        [new] = [broker["id"] for broker in grown["brokers"] if broker["id"] not in brokers]
        before = settled_snapshot(client, store, tmp_path)
        assert movable_owned(client, name, new) == []
        plan_id, plan = plan_maintenance(store, tmp_path, spark, name, MaintenanceRequest(MaintenanceMode.FILL))
        assert plan.maintenance.brokers == [new]
        assert plan.actions and all(action.destination == new for action in plan.actions)
        assert execute_plan(store, client, plan_id, FAST).status == "executed"
        after = settled_snapshot(client, store, tmp_path)
        measured = snapshot_broker_load(tmp_path, name, after.snapshot_id)
        total = sum(load["msgRate"] for load in snapshot_broker_load(tmp_path, name, before.snapshot_id).values())
        share = total / len(grown["brokers"])
        one_bundle = 2 * rate  # in and out
        assert measured[new]["msgRate"] >= share - one_bundle - 2, (measured, share)
        generator.stop()
        traffic = generator.report()
        assert traffic.complete, traffic
        print(
            f"\nfill of {new}: {len(plan.actions)} unloads in one plan; its msg/s {measured[new]['msgRate']} "
            f"against a share of {share:.1f}"
        )
    finally:
        generator.stop()
        local_cluster.remove_broker()
        time.sleep(1)
        store.dispose()


@pytest.mark.slow
def test_the_maintenance_and_rollback_dags_drain_and_refill_through_the_approval_gate(
    pulsar_cluster, traffic_generator, tmp_path, unfenced_at_the_end
):
    name = pulsar_cluster["cluster"]
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    drained = brokers[-1]
    env = airflow_env(pulsar_cluster, tmp_path)
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=5) for i in range(4)])
    generator.place_bundles(dict.fromkeys(range(4), drained))
    generator.start()
    time.sleep(12)  # two load-report intervals, so the reports show the traffic
    collect_snapshots(env, pulsar_cluster["brokers"][0]["adminUrl"])
    ours = generator_bundles(generator, 4)
    conf = {"mode": "drain", "brokers": [drained], "actions_per_minute": 30}
    drain = run_plan_cycle(env, name, "Approve", conf, timeout=900, dag="maintenance")
    assert drain["tasks"]["execute"] == "success", drain
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    [latest] = list_plans(store, name, limit=1)
    plan = show_plan(store, latest.id).to_json()
    assert plan["status"] == "executed" and plan["maintenance"]["mode"] == "drain"
    with PulsarAdminClient(pulsar_cluster["brokers"][0]["adminUrl"]) as client:
        assert movable_owned(client, name, drained) == []
        rollback = run_plan_cycle(env, name, "Approve", {"plan": plan["id"]}, timeout=900, dag="rollback")
        assert rollback["tasks"]["execute"] == "success", rollback
        back = owners(client, pulsar_cluster, ours)
        assert sum(back.get(bundle) == drained for bundle in ours) >= 0.99 * len(ours), back
        assert fence_name(drained) not in client.isolation_policies(name)
    [undo] = list_plans(store, name, limit=1)
    assert show_plan(store, undo.id).document.maintenance.rolls_back == plan["id"]
    generator.stop()
    assert generator.report().complete
    store.dispose()
