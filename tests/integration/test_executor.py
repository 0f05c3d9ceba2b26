"""The executor on the real local cluster: exactly the approved actions, each once, re-checked first.
(Kill-and-rerun, and a broker stopped mid-plan: tests/integration/test_reliability_on_cluster.py.)"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.errors import InputError
from planner.execute.executor import execute_plan
from planner.execute.live import LiveCluster
from planner.lifecycle import Decision
from planner.plan.document import PlanDocument
from planner.pulsar.bundle_range import BundleName
from planner.settings import ExecutorSettings
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.models import ActionExecution, AuditEvent, PlanAction, RecentlyUnloaded
from planner.store.plans import commit_plan
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.executor_support import CountingClient, approved, approved_plan, owners, unload

pytestmark = pytest.mark.integration

FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=30, verify_interval_seconds=0.5)


@pytest.fixture
def setup(pulsar_cluster, traffic_generator, tmp_path):
    source, destination = pulsar_cluster["brokers"][0]["id"], pulsar_cluster["brokers"][1]["id"]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=5) for i in range(4)])
    generator.place_bundles({i: source for i in range(4)})
    generator.start()  # clients look the bundles up again after each unload
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    bundles = [
        f"{generator.namespace}/0x{generator.boundaries[i]:08x}_0x{generator.boundaries[i + 1]:08x}" for i in range(4)
    ]
    return pulsar_cluster, generator, store, bundles, source, destination


def test_approved_unloads_land_on_their_destination_with_audit_rows(setup):
    cluster, _, store, bundles, source, destination = setup
    plan_id = approved_plan(store, cluster, bundles[:3], source, destination)
    client = CountingClient(cluster["brokers"][0]["adminUrl"])
    report = execute_plan(store, client, plan_id, FAST)
    assert report.status == "executed", report
    assert all(owners(client, cluster, bundles[:3]).get(b) == destination for b in bundles[:3])
    assert owners(client, cluster, bundles)[bundles[3]] == source
    assert show_plan(store, plan_id).status == "executed"
    with store.session() as session:
        events = [e.event for e in session.scalars(select(AuditEvent).order_by(AuditEvent.id))]
        assert "plan.approved" in events and events.count("action.succeeded") == 3
        assert {row.bundle for row in session.scalars(select(RecentlyUnloaded))} == set(bundles[:3])


def test_a_bundle_moved_by_someone_else_is_skipped_with_a_reason(setup):
    cluster, generator, store, bundles, source, destination = setup
    third = cluster["brokers"][2]["id"]
    plan_id = approved_plan(store, cluster, bundles[:2], source, destination)
    moved = BundleName.parse(bundles[0]).range
    generator.move_bundle(str(moved), generator.topics_in(moved)[0], third)
    report = execute_plan(store, CountingClient(cluster["brokers"][0]["adminUrl"]), plan_id, FAST)
    assert report.results[0] == "skipped" and f"owned by {third}" in report.reasons[0]
    assert report.results[1] == "succeeded"


def test_admin_failures_are_retried_boundedly_then_the_plan_stops_partial(setup):
    cluster, _, store, bundles, source, destination = setup
    plan_id = approved_plan(store, cluster, bundles, source, destination)
    client = CountingClient(cluster["brokers"][0]["adminUrl"], fail_unloads=True)
    settings = ExecutorSettings(actions_per_minute=0, max_failures=2, attempts_per_action=2)
    report = execute_plan(store, client, plan_id, settings)
    assert report.status == "partial"
    assert [report.results[i] for i in range(4)] == ["failed", "failed", "not-run", "not-run"]
    with store.session() as session:
        assert len(list(session.scalars(select(ActionExecution)))) == 4  # 2 actions x 2 attempts
    assert show_plan(store, plan_id).status == "partial"


def test_a_plan_needs_an_approval_of_its_exact_actions(setup):
    cluster, _, store, bundles, source, destination = setup
    actions = [
        {
            "kind": "unload",
            "bundle": bundles[0],
            "source": source,
            "destination": destination,
            "msgRate": 1.0,
            "throughput": 1.0,
            "reason": "test",
        }
    ]
    plan = {"cluster": cluster["cluster"], "strategy": "AvgShedder", "actions": actions, "stateAfter": {}}
    committed = commit_plan(
        store, PlanDocument.parse(plan, "plan"), admin_url="http://x:1", run_key="exact", expected_version=0
    )
    client = CountingClient(cluster["brokers"][0]["adminUrl"])
    with pytest.raises(InputError, match="not approved"):
        execute_plan(store, client, committed.plan_id, FAST)
    with pytest.raises(InputError, match="does not match"):
        record_decision(store, committed.plan_id, Decision.APPROVED, approver="bob", approved_hash="0" * 64)
    record_decision(store, committed.plan_id, Decision.REJECTED, approver="bob", approved_hash="0" * 64)
    assert show_plan(store, committed.plan_id).status == "rejected"
    with pytest.raises(InputError, match="not approved"):
        execute_plan(store, client, committed.plan_id, FAST)
    assert client.unloads == []


class Pulsar307Client(CountingClient):
    """The real cluster as a 3.0.7 broker would describe itself (its own version, 4.2.4, cannot be changed)."""

    def broker_version(self):
        return "3.0.7"


def test_before_pulsar_4_2_a_second_destination_for_the_same_range_waits_until_the_first_is_taken_up(
    pulsar_cluster, traffic_generator, tmp_path
):
    source, destination = pulsar_cluster["brokers"][0]["id"], pulsar_cluster["brokers"][1]["id"]
    # Two namespaces with the same four ranges, no traffic: nobody looks an unloaded bundle up.
    first, second = (traffic_generator([BundleTraffic(bundle=0, topics=1, rate=1)]) for _ in range(2))
    for generator in (first, second):
        generator.place_bundles({0: source})
    bundles = [f"{g.namespace}/0x{g.boundaries[0]:08x}_0x{g.boundaries[1]:08x}" for g in (first, second)]
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    plan_id = approved_plan(store, pulsar_cluster, bundles, source, destination)
    settings = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=3, verify_interval_seconds=0.5)
    client = Pulsar307Client(pulsar_cluster["brokers"][0]["adminUrl"])

    report = execute_plan(store, client, plan_id, settings)
    assert report.results == {0: "succeeded", 1: "deferred"}, report
    assert f"{bundles[0]} has the same range and nobody owns it yet" in report.reasons[1]
    assert client.unloads == [bundles[0]]  # the second destination was not sent over the first
    # A client looks the first bundle up: its destination is taken, and a rerun sends the second.
    first.owner(next(iter(first.topics)))
    again = execute_plan(store, client, plan_id, settings)
    assert again.results == {0: "succeeded", 1: "succeeded"} and again.status == "executed", again
    assert client.unloads == bundles
    # The cluster's own release (4.2.4) keys destinations by full bundle name: no wait there.
    assert not LiveCluster(CountingClient(pulsar_cluster["brokers"][0]["adminUrl"]), "c").destinations_keyed_by_range


def test_an_unload_without_a_destination_is_sent_as_such_and_pulsar_places_the_bundle(setup):
    cluster, _, store, bundles, source, _ = setup
    plan_id = approved(store, cluster, [{**unload(bundles[0], source, source), "destination": None}])
    client = CountingClient(cluster["brokers"][0]["adminUrl"])
    report = execute_plan(store, client, plan_id, FAST)
    assert report.status == "executed" and report.results[0] in ("succeeded", "placed-elsewhere"), report
    assert client.unloads == [bundles[0]]
    with store.session() as session:
        assert [row.destination for row in session.scalars(select(PlanAction))] == [None]
