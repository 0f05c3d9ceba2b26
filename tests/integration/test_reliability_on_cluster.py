"""Reliability on the real local cluster (kills and lost answers: test_exactly_once.py): a broker stopped in the
middle of a plan, no message lost through unloads and splits, and approvals limited to the assigned
users with the admin token kept out of every log, table and XCom. Figures are printed (run with -s)."""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.execute.executor import execute_plan
from planner.pulsar.bundle_range import BundleName
from planner.settings import ExecutorSettings
from planner.store.database import Store
from planner.store.models import ActionExecution, AuditEvent, PlanAction
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.conftest import (
    CYCLE_CONF,
    SCREENSHOTS,
    AirflowServer,
    airflow_api_server,
    logged_in,
    skewed_airflow_env,
)
from tests.integration.executor_support import CountingClient, approved, owners, unload

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=30, verify_interval_seconds=0.5)


def bundle_names(generator, count):
    return [
        f"{generator.namespace}/0x{generator.boundaries[i]:08x}_0x{generator.boundaries[i + 1]:08x}"
        for i in range(count)
    ]


def test_a_broker_stopped_mid_plan_defers_its_actions_and_a_rerun_completes_them(
    pulsar_cluster, traffic_generator, tmp_path
):
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    assert len(brokers) >= 3, "needs a third broker to stop"
    source, kept, stopped = brokers[0], brokers[1], brokers[2]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=2) for i in range(6)], num_bundles=6)
    generator.place_bundles(dict.fromkeys(range(6), source))
    generator.start()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    bundles = bundle_names(generator, 6)
    plan_id = approved(
        store, pulsar_cluster, [unload(b, source, (kept, stopped)[i % 2]) for i, b in enumerate(bundles)]
    )
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    settings = ExecutorSettings(actions_per_minute=600, verify_timeout_seconds=30, verify_interval_seconds=0.5)
    pauses = []
    stopped_pid = None

    def pause(seconds):
        nonlocal stopped_pid
        if seconds == 60 / settings.actions_per_minute:
            pauses.append(seconds)
            if len(pauses) == 2:  # after two actions: one on each destination
                stopped_pid = local_cluster.stop_broker(brokers.index(stopped))
        time.sleep(seconds)

    try:
        first = execute_plan(store, client, plan_id, settings, sleep=pause)
        assert stopped_pid is not None
        assert first.status == "partial"
        assert [first.results[i] for i in range(6)] == ["succeeded", "succeeded"] + ["succeeded", "deferred"] * 2
        assert all(f"destination {stopped} is not an active broker" in first.reasons[i] for i in (3, 5))
        assert show_plan(store, plan_id).status == "partial"
    finally:
        local_cluster.start_broker(brokers.index(stopped))
    second = execute_plan(store, client, plan_id, FAST)
    assert second.status == "executed", second
    assert [second.results[i] for i in (3, 5)] == ["succeeded", "succeeded"]
    assert sorted(client.unloads) == sorted(bundles)  # nothing sent twice across both runs
    now = owners(client, pulsar_cluster, bundles)
    assert [now[bundles[i]] for i in (0, 2, 4)] == [kept] * 3 and [now[bundles[i]] for i in (3, 5)] == [stopped] * 2
    print(f"\nbroker stop: pid {stopped_pid} stopped after 2 of 6 actions; 2 deferred, completed by the rerun")
    store.dispose()


def test_no_message_is_lost_through_ten_unloads_and_two_splits(pulsar_cluster, traffic_generator, tmp_path):
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=2, rate=20) for i in range(4)])
    generator.place_bundles({i: brokers[i % 2] for i in range(4)})
    generator.start()
    time.sleep(3)
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    bundles = bundle_names(generator, 4)
    splits = []
    for bundle in bundles[:2]:
        name = BundleName.parse(bundle)
        middle = name.range.lower + (name.range.upper - name.range.lower) // 2
        splits.append(
            {
                "kind": "split",
                "bundle": bundle,
                "source": owners(client, pulsar_cluster, [bundle])[bundle],
                "destination": None,
                "msgRate": 40.0,
                "throughput": 0.0,
                "reason": "test",
                "splitAlgorithm": "specified_positions_divide",
                "splitPositions": [middle],
            }
        )
    assert execute_plan(store, client, approved(store, pulsar_cluster, splits), FAST).status == "executed"
    unloads = 0
    for _ in range(3):  # three rounds over the six bundles the splits left, each to another broker
        live = owners(client, pulsar_cluster, _current_bundles(client, generator))
        actions = [
            unload(bundle, owner, brokers[(brokers.index(owner) + 1) % len(brokers)]) for bundle, owner in live.items()
        ][:4]
        assert len(actions) == 4, live
        report = execute_plan(store, client, approved(store, pulsar_cluster, actions), FAST)
        assert report.status == "executed", report
        unloads += len(actions)
        time.sleep(2)
    generator.stop()  # drains: waits until consumers caught up with every acknowledged send
    traffic = generator.report()
    assert len(client.splits) == 2 and unloads >= 10
    assert traffic.complete, f"{sum(len(gaps) for gaps in traffic.missing.values())} messages lost: {traffic}"
    assert traffic.produced > 1000 and traffic.consumed >= traffic.produced
    print(
        f"\nno message loss: {unloads} unloads, 2 splits; produced {traffic.produced}, consumed "
        f"{traffic.consumed}, duplicates {traffic.duplicates}, send retries {traffic.send_retries}, missing 0"
    )
    store.dispose()


def _current_bundles(client, generator):
    boundaries = client.bundle_boundaries(generator.namespace)
    return [f"{generator.namespace}/0x{low:08x}_0x{high:08x}" for low, high in itertools.pairwise(boundaries)]


@dataclass
class GateWaiting:
    server: AirflowServer
    pending: dict
    run: subprocess.Popen
    hitl_path: str
    run_path: str


@contextlib.contextmanager
def plan_run_at_its_gate(env, cluster, tmp_path, users):
    """A plan DAG run (`dag.test()` in its own process) waiting at its approval gate, and a real api-server
    with password logins for `users` (name -> role) on the same metadata database."""
    # Files, not pipes: the run logs a lot while the test waits, and a full pipe would block it.
    out, err = (tmp_path / "cycle.out").open("w"), (tmp_path / "cycle.err").open("w")
    dag_id = f"pulsar_rebalance_plan_{cluster['cluster']}"
    run = subprocess.Popen(
        [sys.executable, "-m", "pulsar_rebalance_devtools.airflow_cycle", dag_id, "ui", json.dumps(CYCLE_CONF)],
        env=env,
        stdout=out,
        stderr=err,
    )
    try:
        with airflow_api_server(env, users) as server:
            viewer = server.session(next(iter(users)))
            deadline = time.monotonic() + 300
            while True:
                pending = viewer.get(
                    f"{server.url}/api/v2/dags/~/dagRuns/~/hitlDetails",
                    params={"response_received": "false"},
                    timeout=30,
                ).json()["hitl_details"]
                if pending or time.monotonic() > deadline or run.poll() is not None:
                    break
                time.sleep(2)
            assert pending, (tmp_path / "cycle.err").read_text()[-3000:]
            gate = pending[0]["task_instance"]
            time.sleep(3)  # answering within a second of the gate appearing can race the run's loop
            run_path = f"{server.url}/api/v2/dags/{gate['dag_id']}/dagRuns/{quote(gate['dag_run_id'], safe='')}"
            hitl_path = f"{run_path}/taskInstances/{gate['task_id']}/{gate['map_index']}/hitlDetails"
            yield GateWaiting(server, pending[0], run, hitl_path, run_path)
    finally:
        if run.poll() is None:
            run.kill()
        out.close()
        err.close()


def test_a_forged_approval_is_refused_and_audited(pulsar_cluster, traffic_generator, tmp_path):
    """A `user`-role Airflow user writes an "Approve" XCom for the gate and marks it success without
    answering it: the execute task refuses, sends nothing, and the attempt is in the audit trail."""
    env = skewed_airflow_env(pulsar_cluster, traffic_generator, tmp_path, PULSAR_REBALANCE_APPROVERS="alice:Alice")
    forged = {"chosen_options": ["Approve"], "params_input": {}, "responded_by_user": {"id": "alice", "name": "alice"}}
    with plan_run_at_its_gate(env, pulsar_cluster, tmp_path, {"mallory": "user", "alice": "user"}) as waiting:
        mallory = waiting.server.session("mallory")
        gate = f"{waiting.run_path}/taskInstances/approve"
        written = mallory.post(
            f"{gate}/xcomEntries", json={"key": "return_value", "value": forged, "map_index": -1}, timeout=30
        )
        assert written.status_code in (200, 201), written.text
        marked = mallory.patch(gate, json={"new_state": "success"}, timeout=30)
        assert marked.status_code == 200, marked.text
        waiting.run.wait(timeout=600)
    outcome = json.loads((tmp_path / "cycle.out").read_text().strip().splitlines()[-1])
    assert outcome["tasks"]["approve"] == "success" and outcome["tasks"]["execute"] == "failed", outcome
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        events = {event.event: event for event in session.scalars(select(AuditEvent))}
        actions, attempts = session.scalars(select(PlanAction)).all(), session.scalars(select(ActionExecution)).all()
    assert "plan.approved" not in events and "plan.execution-refused" in events
    assert "Approve" in events["plan.execution-refused"].details["claimed"]
    assert actions and attempts == [], "the plan had actions, and none was attempted"
    store.dispose()
    print("\nforged approval: XCom written and gate marked success by a user-role user; execute refused, audited")


def test_only_assigned_users_can_approve_and_the_admin_token_leaks_nowhere(
    pulsar_cluster, traffic_generator, tmp_path, browser
):
    token = f"pulsar-admin-token-{secrets.token_hex(12)}"
    env = skewed_airflow_env(pulsar_cluster, traffic_generator, tmp_path, PULSAR_REBALANCE_APPROVERS="alice")
    # The local cluster does not check it, but every admin call of the DAG's tasks carries it.
    connection = f"AIRFLOW_CONN_PULSAR_{pulsar_cluster['cluster'].upper()}"
    env[connection] = json.dumps({**json.loads(env[connection]), "password": token})
    with plan_run_at_its_gate(env, pulsar_cluster, tmp_path, {"alice": "user", "mallory": "admin"}) as waiting:
        alice, mallory = waiting.server.session("alice"), waiting.server.session("mallory")
        assert token not in waiting.pending["body"] and token not in waiting.pending["subject"]
        refused = mallory.patch(waiting.hitl_path, json={"chosen_options": ["Approve"], "params_input": {}}, timeout=30)
        assert refused.status_code == 403, refused.text
        # The gate as the approver sees it in Airflow's UI (the README's picture of the approval gate).
        gate = waiting.pending["task_instance"]
        path = f"/dags/{gate['dag_id']}/runs/{quote(gate['dag_run_id'], safe='')}/tasks/approve/required_actions"
        with logged_in(browser, waiting.server, "alice", path) as page:
            page.get_by_role("button", name="Approve").wait_for(timeout=60_000)
            assert page.get_by_text("actions hash").count() >= 1
            page.screenshot(path=SCREENSHOTS / "approval-gate.png", full_page=True)
        accepted = alice.patch(waiting.hitl_path, json={"chosen_options": ["Approve"], "params_input": {}}, timeout=30)
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["responded_by"]["id"] == "alice"
        waiting.run.wait(timeout=600)
    stdout, stderr = (tmp_path / "cycle.out").read_text(), (tmp_path / "cycle.err").read_text()
    outcome = json.loads(stdout.strip().splitlines()[-1])
    assert outcome["tasks"]["execute"] == "success", stderr[-3000:]
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        approval = session.scalars(select(AuditEvent).where(AuditEvent.event == "plan.approved")).one()
        assert approval.actor == "alice"
    store.dispose()
    # The token was used (every admin call carried it) but is written nowhere: not in Airflow's task
    # logs, its metadata database (XCom, rendered fields, HITL bodies), the planner's store or files.
    places = [Path(env["AIRFLOW_HOME"]), Path(env["PULSAR_REBALANCE_HOME"]), tmp_path / "planner.db"]
    files = [path for place in places for path in ([place] if place.is_file() else place.rglob("*")) if path.is_file()]
    assert any(path.suffix == ".log" for path in files) and len(files) > 10
    leaked = [str(path) for path in files if token.encode() in path.read_bytes()]
    assert leaked == [], leaked
    assert token not in stdout and token not in stderr
    airflow_db = sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db")
    tables = [row[0] for row in airflow_db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in tables:
        for row in airflow_db.execute(f'SELECT * FROM "{table}"'):
            assert token not in repr(row), table
    print(f"\nsecurity: 403 for mallory, 200 for alice; token absent from {len(files)} files and {len(tables)} tables")
    assert requests.get(f"{pulsar_cluster['brokers'][0]['adminUrl']}/admin/v2/clusters", timeout=10).ok
