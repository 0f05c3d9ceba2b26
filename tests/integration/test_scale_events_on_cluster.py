"""A broker added to the running local cluster gets a fill plan proposed with no one asking.

A real Airflow (LocalExecutor scheduler, dag-processor and api-server, each a process of its own, started as
`test_collect_processes_in_airflow.py` starts them) serves the local cluster, with traffic on its brokers. The collect
DAG, unpaused, makes its scheduled run: the cluster's baseline. A broker is added (`local_cluster.add_broker`); the
collect DAG runs again, triggered as its schedule would at the next 5 minutes, and nothing else is asked: its
`scale_events` task records the join and triggers the maintenance DAG, whose Spark job plans the fill of the new
broker, and the plan waits at the approval gate (the one approval policy covers drains of removals only, so a person
must look). The gate is then answered Reject, and a further collect proposes nothing more: the event is planned.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.lifecycle import ScaleEventKind, ScaleEventState
from planner.store.database import Store
from planner.store.models import AuditEvent
from planner.store.plans import list_plans
from planner.store.scale_events import list_scale_events
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.conftest import _free_port, airflow_env
from tests.integration.test_install_into_airflow import Api, Components, api_server_env, tail

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

COLLECT = "pulsar_rebalance_collect"
POLICY = {"name": "scale-in", "modes": ["drain"], "scale_events": ["removal"]}


@contextlib.contextmanager
def running_airflow(cluster: dict[str, Any], root: Path) -> Iterator[tuple[Api, dict[str, str], Path]]:
    """This checkout's Airflow serving the local cluster: api-server, scheduler and dag-processor."""
    env = airflow_env(cluster, root)
    port = _free_port()
    server_env, password = api_server_env(root, port)
    logs = root / "logs"
    logs.mkdir()
    env |= server_env | {
        "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "PULSAR_REBALANCE_PLAN_PROFILE": "manual",  # no plan DAG run of its own beside the maintenance one
        "PULSAR_REBALANCE_APPROVAL_POLICIES": json.dumps([POLICY]),
    }
    components = Components(env, logs)
    try:
        for component in ("api-server", "scheduler", "dag-processor"):
            components.start(component)
        yield Api(f"http://127.0.0.1:{port}", password), env, logs
    finally:
        components.stop()


def runs(api: Api, dag_id: str) -> list[dict[str, Any]]:
    return sorted(api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"], key=lambda run: run["run_after"])


def wait_for(what: str, condition: Callable[[], Any], timeout: float, logs: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(3)
    raise AssertionError(f"{what} within {timeout} s\n{tail(logs)}")


def under_way(api: Api, dag_id: str) -> list[dict[str, Any]]:
    return [run for run in runs(api, dag_id) if run["state"] in ("queued", "running")]


def finished_collects(api: Api) -> list[dict[str, Any]]:
    return [run for run in runs(api, COLLECT) if run["state"] in ("success", "failed")]


def test_a_broker_added_to_the_running_cluster_gets_a_fill_plan_proposed_with_no_one_asking(
    pulsar_cluster, traffic_generator, tmp_path
):
    name = pulsar_cluster["cluster"]
    maintenance = f"pulsar_rebalance_maintenance_{name}"
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=4) for i in range(9)], num_bundles=9)
    generator.place_bundles({i: brokers[i % len(brokers)] for i in range(9)})
    generator.start()
    time.sleep(12)  # two load-report intervals, so the reports show the traffic
    added = False
    with running_airflow(pulsar_cluster, tmp_path) as (api, env, logs):
        store = Store(env["PULSAR_REBALANCE_DB_URL"])
        try:
            wait_for(
                "the DAGs are parsed", lambda: api.session.get(f"{api.url}/api/v2/dags/{maintenance}").ok, 180, logs
            )
            assert api.call("GET", "/api/v2/importErrors")["total_entries"] == 0
            for dag_id in (COLLECT, maintenance):
                api.call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})
            # Unpaused, the collect DAG makes its scheduled run: the baseline, which proposes nothing.
            baseline = wait_for("the scheduled collect", lambda: finished_collects(api), 300, logs)[0]
            assert baseline["run_type"] == "scheduled" and baseline["state"] == "success", api.task_states(
                COLLECT, baseline["dag_run_id"]
            )
            assert list_scale_events(store, name) == [] and runs(api, maintenance) == []

            grown = local_cluster.add_broker()
            added = True
            [new] = [broker["id"] for broker in grown["brokers"] if broker["id"] not in brokers]
            time.sleep(12)  # the new broker's first load reports

            # The next collect, as the schedule starts it; again while the new broker's report is not yet read.
            def proposed() -> list[dict[str, Any]]:
                if not under_way(api, COLLECT):
                    api.call("POST", f"/api/v2/dags/{COLLECT}/dagRuns", json={"logical_date": None})
                return runs(api, maintenance)

            [run] = wait_for("a maintenance run proposed", proposed, 300, logs)
            [event] = list_scale_events(store, name)
            assert (event.kind, event.broker) == (ScaleEventKind.JOIN, new)
            assert run["dag_run_id"] == f"scale-event-{event.id}"
            assert run["conf"] == {"mode": "fill", "brokers": [new], "scale_event": event.id}

            # The fill is planned and committed, and waits at the gate: no policy covers a join's fill.
            def requested() -> Any:
                plans = list_plans(store, name, limit=1)
                if not plans:
                    return None
                with store.session() as session:
                    asked = session.scalars(
                        select(AuditEvent).where(
                            AuditEvent.plan_id == plans[0].id, AuditEvent.event == "plan.approval-requested"
                        )
                    ).all()
                return plans[0] if asked else None

            stored = wait_for("the fill plan at the approval gate", requested, 900, logs)
            plan = show_plan(store, stored.id)
            document = plan.checked_document()
            assert plan.status.value == "pending" and document.mode == "fill"
            assert document.maintenance.brokers == [new]
            assert document.maintenance.scale_event.model_dump() == {"id": event.id, "kind": "join", "broker": new}
            assert document.actions and all(action.destination == new for action in document.actions)
            [event] = list_scale_events(store, name)
            assert (event.state, event.plan_id, event.run_id) == (
                ScaleEventState.PLANNED,
                stored.id,
                f"scale-event-{event.id}",
            )
            with store.session() as session:
                request = session.scalars(
                    select(AuditEvent).where(
                        AuditEvent.plan_id == stored.id, AuditEvent.event == "plan.approval-requested"
                    )
                ).one()
            [verdict] = request.details["policies"]["verdicts"]
            assert {check["rule"] for check in verdict["checks"] if not check["holds"]} == {"mode", "scaleEvents"}
            tasks = api.task_states(maintenance, run["dag_run_id"])
            assert tasks["approve[-1]"] == "awaiting_input", tasks

            # Rejected at the gate; one more collect proposes nothing: the event is planned.
            path = f"/api/v2/dags/{maintenance}/dagRuns/{run['dag_run_id']}/taskInstances/approve/-1/hitlDetails"
            api.call("PATCH", path, json={"chosen_options": ["Reject"], "params_input": {}})
            api.wait_for_run(maintenance, run["dag_run_id"], 300, logs)
            wait_for("no collect under way", lambda: not under_way(api, COLLECT), 300, logs)
            again = api.call("POST", f"/api/v2/dags/{COLLECT}/dagRuns", json={"logical_date": None})["dag_run_id"]
            states = api.wait_for_run(COLLECT, again, 300, logs)
            assert states["scale_events[-1]"] == "success" and "propose_plan[0]" not in states, states
            assert [r["dag_run_id"] for r in runs(api, maintenance)] == [run["dag_run_id"]]
            assert len(list_scale_events(store, name)) == 1
            print(f"\nfill of {new} proposed as plan {stored.id} with {len(document.actions)} unloads, at the gate")
        finally:
            store.dispose()
            generator.stop()
            if added:
                local_cluster.remove_broker()
                time.sleep(1)
