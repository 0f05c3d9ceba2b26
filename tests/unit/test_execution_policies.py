"""The executor against the cluster as it is when it runs: every destination checked against the policies in force
(a policy changed after the approval refuses that destination, the other moves go on; policies that cannot be read
send no destination), and no run beside the brokers' own load shedding or bundle splitting unless the cluster's
settings allow it, checked before anything is sent and again with each batch of actions, from every entry point.

Three fake brokers on their own loopback addresses (isolation policies match brokers by host) answer as Pulsar's
admin API does; the bundles they own change when an unload is sent."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy import select

from planner import cli
from planner.actions import actions_hash
from planner.approval.policies import decide
from planner.audit.plan_records import show_plan
from planner.collect.admin_client import PulsarAdminClient
from planner.errors import InputError
from planner.execute import declared
from planner.execute.executor import ExecutorSettings, execute_plan
from planner.lifecycle import AttemptStatus, Decision
from planner.plan.document import PlanDocument
from planner.pulsar.controllers import Controller, controllers_on
from planner.settings import ApprovalPolicy
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.models import AuditEvent
from planner.store.plans import commit_plan, read_state
from tests.fake_pulsar import FakePulsar, Reply

CLUSTER = "fake"
MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
OFF = {"loadBalancerSheddingEnabled": "false", "loadBalancerAutoBundleSplitEnabled": "false"}
FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=0, verify_interval_seconds=0.05)
NAMESPACES = ("t/guarded", "t/free", "t/other", "t/more")
FULL = "0x00000000_0xffffffff"


def bundle(namespace: str) -> str:
    return f"{namespace}/{FULL}"


@dataclass
class Cluster:
    """Brokers A, B, C (127.0.0.2-4); A's admin URL answers for the cluster. Every namespace has one bundle."""

    brokers: list[FakePulsar]
    owners: dict[str, str] = field(default_factory=dict)

    @property
    def entry(self) -> FakePulsar:
        return self.brokers[0]

    @property
    def ids(self) -> list[str]:
        return [broker.broker_id for broker in self.brokers]

    def own(self, owned: str, broker: str) -> None:
        self.owners[owned] = broker
        for other in self.ids:
            mine = {name: {"is_active": True} for name, owner in self.owners.items() if owner == other}
            self.entry.route("GET", f"/admin/v2/brokers/{CLUSTER}/{other}/ownedNamespaces", Reply(200, mine))

    def isolate(self, namespaces: list[str], hosts: list[str], name: str = "pinned") -> None:
        policy = {
            "namespaces": [re.escape(namespace) for namespace in namespaces],
            "primary": [re.escape(host) for host in hosts],
            "secondary": [],
            "auto_failover_policy": {"policy_type": "min_available", "parameters": {"min_limit": "1"}},
        }
        self.policies({name: policy})

    def policies(self, isolation: object, status: int = 200) -> None:
        path = f"/admin/v2/clusters/{CLUSTER}/namespaceIsolationPolicies"
        self.entry.route("GET", path, Reply(status, isolation))

    def configure(self, dynamic: dict[str, str], **runtime: str) -> None:
        """The dynamic configuration's values, and each broker's own runtime configuration (Pulsar's defaults
        otherwise: shedding and splitting on)."""
        self.entry.route("GET", "/admin/v2/brokers/configuration/values", Reply(200, dynamic))
        for broker in self.brokers:
            values = {"loadManagerClassName": MODULAR, "clusterName": CLUSTER, **runtime}
            broker.route("GET", "/admin/v2/brokers/configuration/runtime", Reply(200, values))

    def unloads(self) -> list[str]:
        return [request.path for request in self.entry.requests if request.method == "PUT"]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    brokers = [FakePulsar(host=f"127.0.0.{index}") for index in (2, 3, 4)]
    found = Cluster(brokers)
    entry = found.entry
    entry.route("GET", f"/admin/v2/brokers/{CLUSTER}", Reply(200, found.ids))
    entry.route("GET", "/admin/v2/brokers/version", Reply(200, "4.2.4"))
    entry.route("GET", f"/admin/v2/clusters/{CLUSTER}/failureDomains", Reply(200, {}))
    for namespace in NAMESPACES:
        entry.route("GET", f"/admin/v2/namespaces/{namespace}/bundles", Reply(200, {"boundaries": FULL.split("_")}))
        entry.route("GET", f"/admin/v2/namespaces/{namespace}/antiAffinity", Reply(200, ""))
        entry.route("PUT", f"/admin/v2/namespaces/{namespace}/{FULL}/unload", Reply(204))
        found.own(bundle(namespace), found.ids[0])
    found.policies({})
    found.configure(OFF)
    yield found
    for broker in brokers:
        broker.close()


class MovingClient(PulsarAdminClient):
    """The real client; an unload it sends moves the bundle to its destination in the fake cluster, as Pulsar does,
    and `after_unload` runs once it has (an operator changing something during the execution)."""

    def __init__(self, cluster: Cluster, after_unload=None) -> None:
        super().__init__(cluster.entry.url, timeout=(1.0, 1.0), retries=0)
        self.cluster, self.after_unload = cluster, after_unload

    def unload_bundle(self, namespace, bundle_range, destination=None):
        super().unload_bundle(namespace, bundle_range, destination)
        self.cluster.own(f"{namespace}/{bundle_range}", destination or self.cluster.ids[1])
        if self.after_unload is not None:
            self.after_unload()


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    yield opened
    opened.dispose()


def unload(namespace: str, source: str, destination: str | None) -> dict:
    return {"kind": "unload", "bundle": bundle(namespace), "source": source, "destination": destination}


def approved(store: Store, actions: list[dict], cluster_view: dict | None = None, run_key: str = "run-1") -> int:
    plan = {"cluster": CLUSTER, "strategy": "AvgShedder", "actions": [{**a, "reason": "test"} for a in actions]}
    if cluster_view is not None:
        plan["clusterView"] = cluster_view
    committed = commit_plan(
        store,
        PlanDocument.parse({**plan, "stateAfter": {}}, "plan"),
        admin_url="http://127.0.0.2:1",
        run_key=run_key,
        expected_version=read_state(store, CLUSTER, "AvgShedder").version,
    )
    record_decision(
        store,
        committed.plan_id,
        Decision.APPROVED,
        approver="alice",
        approved_hash=actions_hash([{**a, "reason": "test"} for a in actions]),
        source="policy",
    )
    return committed.plan_id


def events(store: Store, name: str) -> list[AuditEvent]:
    with store.session() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.event == name)))


# --- each destination against the policies in force --------------------------------------------------------------


def test_a_policy_set_after_the_approval_refuses_its_destination_and_the_other_moves_go_on(cluster, store):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/guarded", a, c), unload("t/free", a, c)])
    # After the approval, an operator confines t/guarded to A and B: C stays shared, so t/free may still go there.
    cluster.isolate(["t/guarded"], ["127.0.0.2", "127.0.0.3"])
    report = execute_plan(store, MovingClient(cluster), plan_id, FAST)

    refused, moved = report.actions[0], report.actions[1]
    assert refused.status is AttemptStatus.SKIPPED, report.to_json()
    assert "isolation policy pinned" in refused.reason and c in refused.reason, refused.reason
    assert moved.status is AttemptStatus.SUCCEEDED, report.to_json()
    assert cluster.unloads() == [f"/admin/v2/namespaces/t/free/{FULL}/unload"]
    assert cluster.owners[bundle("t/guarded")] == a and cluster.owners[bundle("t/free")] == c
    [audited] = events(store, "action.destination-refused")
    assert audited.details["bundle"] == bundle("t/guarded") and "pinned" in audited.details["refusal"]
    assert report.status == "executed"


def test_a_destination_of_a_namespace_the_policies_do_not_cover_may_not_take_another_tenants_broker(cluster, store):
    """A broker that is primary in any policy is not shared: only the namespaces that policy isolates may go there."""
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)])
    cluster.isolate(["t/guarded"], ["127.0.0.4"])
    report = execute_plan(store, MovingClient(cluster), plan_id, FAST)
    assert report.actions[0].status is AttemptStatus.SKIPPED and "primary broker of isolation policy pinned" in (
        report.actions[0].reason
    )
    assert cluster.unloads() == []


def test_policies_that_cannot_be_read_send_no_destination(cluster, store):
    """Fail closed: a destination that cannot be checked is not sent, and a rerun sends it once it can. An unload
    without a destination is Pulsar's to place, through its own filters, and is sent."""
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/guarded", a, c), unload("t/free", a, None)])
    cluster.policies({"reason": "metadata store timeout"}, status=500)
    report = execute_plan(store, MovingClient(cluster), plan_id, FAST)
    deferred = report.actions[0]
    assert deferred.status is AttemptStatus.DEFERRED and "could not be read" in deferred.reason, report.to_json()
    assert cluster.unloads() == [f"/admin/v2/namespaces/t/free/{FULL}/unload"]
    assert report.status == "partial"

    cluster.policies({})  # readable again: the rerun checks and sends it
    again = execute_plan(store, MovingClient(cluster), plan_id, FAST)
    assert again.actions[0].status is AttemptStatus.SUCCEEDED and again.status == "executed", again.to_json()
    assert cluster.owners[bundle("t/guarded")] == c


def test_a_policy_pulsar_would_refuse_to_read_is_no_permission_to_send(cluster, store):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/guarded", a, c)])
    cluster.policies({"broken": {"namespaces": ["t/guarded"], "primary": ["127.0.0.4"], "auto_failover_policy": {}}})
    report = execute_plan(store, MovingClient(cluster), plan_id, FAST)
    assert report.actions[0].status is AttemptStatus.DEFERRED and "min_limit" in report.actions[0].reason
    assert cluster.unloads() == []


def test_an_anti_affinity_group_is_counted_on_the_ownership_at_execution_time(cluster, store):
    """t/guarded and t/other share a group; t/other was moved to C after the plan was made: Pulsar would now keep
    t/guarded off C (C holds one namespace of the group, A and B none once it leaves A)."""
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/guarded", a, c), unload("t/free", a, c)])
    for namespace in ("t/guarded", "t/other"):
        cluster.entry.route("GET", f"/admin/v2/namespaces/{namespace}/antiAffinity", Reply(200, "replicated"))
    cluster.own(bundle("t/other"), c)
    report = execute_plan(store, MovingClient(cluster), plan_id, FAST)
    refused = report.actions[0]
    assert refused.status is AttemptStatus.SKIPPED and "anti-affinity group replicated" in refused.reason, (
        report.to_json()
    )
    assert report.actions[1].status is AttemptStatus.SUCCEEDED
    assert cluster.unloads() == [f"/admin/v2/namespaces/t/free/{FULL}/unload"]


def test_the_policies_are_read_once_per_batch_and_a_change_is_seen_in_the_next(cluster, store, monkeypatch):
    a, _, c = cluster.ids
    path = ("GET", f"/admin/v2/clusters/{CLUSTER}/namespaceIsolationPolicies")
    actions = [unload(namespace, a, c) for namespace in ("t/free", "t/other", "t/more")]
    plan_id = approved(store, actions)
    execute_plan(store, MovingClient(cluster), plan_id, FAST)
    assert cluster.entry.calls[path] == 1, "read once for the batch, not once per action"

    # Batches of no length: every action reads them again, and a policy set after the first move is seen.
    monkeypatch.setattr(declared, "MAX_AGE_SECONDS", 0.0)
    for namespace in ("t/free", "t/other", "t/more"):
        cluster.own(bundle(namespace), a)
    plan_id = approved(store, actions, run_key="run-2")
    report = execute_plan(
        store,
        MovingClient(cluster, after_unload=lambda: cluster.isolate(["t/other", "t/more"], ["127.0.0.3"])),
        plan_id,
        FAST,
    )
    statuses = [report.actions[sequence].status for sequence in range(3)]
    assert statuses == [AttemptStatus.SUCCEEDED, AttemptStatus.SKIPPED, AttemptStatus.SKIPPED], report.to_json()


# --- the brokers' own controllers ----------------------------------------------------------------------------------


def test_the_brokers_own_shedding_refuses_the_run_before_anything_is_sent(cluster, store):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)])
    cluster.configure({}, loadBalancerSheddingEnabled="true", loadBalancerAutoBundleSplitEnabled="false")
    with pytest.raises(InputError, match=r"loadBalancerSheddingEnabled=true on 127\.0\.0\.2.*This run sent nothing"):
        execute_plan(store, MovingClient(cluster), plan_id, FAST)
    assert cluster.unloads() == [] and show_plan(store, plan_id).status == "approved"
    [audited] = events(store, "plan.broker-controllers-on")
    assert audited.details["seen"]["on"] == {broker: ["loadBalancerSheddingEnabled"] for broker in cluster.ids}
    # Allowed by the cluster's settings: the same plan runs.
    report = execute_plan(store, MovingClient(cluster), plan_id, FAST, allow_beside_broker_controllers=True)
    assert report.status == "executed" and len(cluster.unloads()) == 1
    [started] = events(store, "plan.execution-started")
    assert started.details["allowBesideBrokerControllers"] is True


def test_the_dynamic_configuration_overrides_the_brokers_own_and_an_unreadable_broker_counts_as_on(cluster, store):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)])
    # broker.conf says on (Pulsar's defaults), and one broker's configuration cannot be read...
    cluster.configure({})
    cluster.brokers[2].route("GET", "/admin/v2/brokers/configuration/runtime", Reply(500, {"reason": "down"}))
    with pytest.raises(InputError, match=r"bundle splitting is on .*cannot tell whether 127\.0\.0\.4"):
        execute_plan(store, MovingClient(cluster), plan_id, FAST)
    # ... but the dynamic configuration switches both off for every broker, the unreadable one included.
    cluster.entry.route("GET", "/admin/v2/brokers/configuration/values", Reply(200, OFF))
    assert execute_plan(store, MovingClient(cluster), plan_id, FAST).status == "executed"


def test_shedding_switched_on_during_the_execution_starts_no_further_action(cluster, store, monkeypatch):
    monkeypatch.setattr(declared, "MAX_AGE_SECONDS", 0.0)
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c), unload("t/other", a, c), unload("t/more", a, c)])

    def switched_on() -> None:
        cluster.entry.route(
            "GET", "/admin/v2/brokers/configuration/values", Reply(200, {**OFF, Controller.SHEDDING: "true"})
        )

    report = execute_plan(store, MovingClient(cluster, after_unload=switched_on), plan_id, FAST)
    assert report.actions[0].status is AttemptStatus.SUCCEEDED
    assert [report.actions[sequence].status for sequence in (1, 2)] == ["not-run", "not-run"], report.to_json()
    assert "loadBalancerSheddingEnabled" in report.actions[1].reason
    assert report.status == "partial" and len(cluster.unloads()) == 1
    assert len(events(store, "plan.broker-controllers-on")) == 1


def test_which_controllers_a_configuration_runs():
    assert controllers_on({}) == [Controller.SHEDDING, Controller.AUTO_SPLIT]  # Pulsar's defaults
    assert controllers_on({"loadBalancerSheddingEnabled": "false"}) == [Controller.AUTO_SPLIT]
    assert controllers_on({"loadBalancerSheddingEnabled": "TRUE", **OFF}, {Controller.SHEDDING: "true"}) == [
        Controller.SHEDDING
    ]
    # The load balancer switched off stops shedding on both load managers, splitting on the extensible one only.
    assert controllers_on({"loadBalancerEnabled": "false"}) == [Controller.AUTO_SPLIT]
    assert controllers_on({"loadBalancerEnabled": "false", "loadManagerClassName": EXTENSIBLE}) == []


# --- every entry point -------------------------------------------------------------------------------------------


def test_the_cli_exits_2_with_one_line_and_its_cluster_entry_may_allow_it(cluster, store, tmp_path, capsys):
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)])
    cluster.configure({}, loadBalancerAutoBundleSplitEnabled="true", loadBalancerSheddingEnabled="false")
    clusters = tmp_path / "clusters.toml"
    clusters.write_text(f'[[clusters]]\nname = "{CLUSTER}"\nadmin_url = "{cluster.entry.url}"\n')
    url = f"sqlite:///{tmp_path / 'planner.db'}"
    arguments = ["execute", str(plan_id), "--db", url, "--clusters", str(clusters), "--verify-timeout", "0"]
    assert cli.main(arguments) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "loadBalancerAutoBundleSplitEnabled=true" in error, error
    assert "allow_beside_broker_controllers" in error and cluster.unloads() == []

    clusters.write_text(clusters.read_text() + "allow_beside_broker_controllers = true\n")
    assert cli.main(arguments) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["plan"] == plan_id and len(cluster.unloads()) == 1


def test_the_airflow_execute_task_fails_clearly_and_its_connection_may_allow_it(cluster, store, monkeypatch, tmp_path):
    from planner.airflow import tasks

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setattr(tasks, "store", lambda: store)
    a, _, c = cluster.ids
    plan_id = approved(store, [unload("t/free", a, c)], run_key=f"manual__1:{CLUSTER}:AvgShedder")
    cluster.configure({}, loadBalancerSheddingEnabled="true")
    connection = {"conn_type": "pulsar", "host": cluster.entry.url, "extra": {"verify_timeout_seconds": 0}}
    monkeypatch.setenv(f"AIRFLOW_CONN_PULSAR_{CLUSTER.upper()}", json.dumps(connection))
    with pytest.raises(InputError, match="loadBalancerSheddingEnabled=true"):
        tasks.execute_approved(CLUSTER, "manual__1")
    assert cluster.unloads() == []

    connection["extra"] |= {"allow_beside_broker_controllers": True}
    monkeypatch.setenv(f"AIRFLOW_CONN_PULSAR_{CLUSTER.upper()}", json.dumps(connection))
    assert tasks.execute_approved(CLUSTER, "manual__1")["status"] == "executed"
    assert show_plan(store, plan_id).status == "executed"


# --- approval policies ---------------------------------------------------------------------------------------------


def test_an_approval_policy_refuses_a_plan_made_beside_the_brokers_own_controllers_unless_it_allows_it():
    from datetime import UTC, datetime

    view = {"competingControllers": ["loadBalancerSheddingEnabled"]}
    plan = PlanDocument.parse(
        {
            "cluster": CLUSTER,
            "strategy": "AvgShedder",
            "actions": [{**unload("t/free", "a:8080", "b:8080"), "reason": "test"}],
            "stateAfter": {},
            "clusterView": view,
        },
        "plan",
    )
    now = datetime.now(UTC)
    decision = decide([ApprovalPolicy(name="routine")], plan, now)
    assert decision.approved_by is None
    assert "brokerControllers: the brokers' own load balancing is still on (loadBalancerSheddingEnabled)" in (
        decision.why_not()
    )
    allowing = ApprovalPolicy(name="beside", allow_beside_broker_controllers=True)
    assert decide([allowing], plan, now).approved_by is not None
    quiet = plan.model_copy(update={"cluster_view": None})
    assert decide([ApprovalPolicy(name="routine")], quiet, now).approved_by is not None
