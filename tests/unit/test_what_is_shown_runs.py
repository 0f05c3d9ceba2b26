"""What is shown is what runs: `plans show`, the review API, `approve` and the approval gate read a plan's actions
from its action rows, which the executor runs, never from the plan document's copy. A row edited before approval,
with the plan's hash and the document's hash updated to match, is shown as edited or refused; the old document's
action never appears."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from planner import cli
from planner.actions import actions_hash
from planner.airflow import tasks as airflow_tasks
from planner.audit.plan_records import show_plan
from planner.audit.review.app import create_app
from planner.errors import InputError
from planner.plan.document import PlanDocument
from planner.settings import PlannerSettings
from planner.store.database import Store
from planner.store.models import Approval, AuditEvent, Plan, PlanAction
from planner.store.plans import commit_plan, list_plans

PLANNED, EDITED = "b:8080", "x:6650"
RUN = "manual__run-1"


def unload(bundle: str) -> dict:
    return {"kind": "unload", "bundle": bundle, "source": "a:8080", "destination": PLANNED, "msgRate": 5.0}


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    yield opened
    opened.dispose()


@pytest.fixture
def tampered(store) -> int:
    """A pending plan whose second row was sent elsewhere after planning, its hashes made to match the rows."""
    actions = [unload("t/ns/0x00000000_0x80000000"), unload("t/ns/0x80000000_0xffffffff")]
    document = {"cluster": "c1", "strategy": "AvgShedder", "actions": actions, "stateAfter": {}}
    plan_id = commit_plan(
        store,
        PlanDocument.parse(document, "plan"),
        admin_url="http://127.0.0.1:9",
        run_key=f"{RUN}:c1:AvgShedder",
        expected_version=0,
    ).plan_id
    edited_hash = actions_hash([actions[0], {**actions[1], "destination": EDITED}])
    with store.session() as session:
        session.execute(
            update(PlanAction).where(PlanAction.plan_id == plan_id, PlanAction.sequence == 1).values(destination=EDITED)
        )
        plan = session.get(Plan, plan_id)
        plan.actions_hash = edited_hash
        plan.details = {**plan.details, "actionsHash": edited_hash}
    return plan_id


@pytest.fixture
def gate(store, monkeypatch):
    """The gate's task functions on this store, with settings from the environment and the cluster's connection
    (never used to send: the gate only reads its settings)."""
    monkeypatch.setattr(airflow_tasks, "store", lambda: store)
    monkeypatch.setattr(airflow_tasks, "planner_settings", lambda airflow=False: PlannerSettings())
    monkeypatch.setattr(airflow_tasks, "plan_url", lambda plan_id: f"http://review/plans/{plan_id}")
    monkeypatch.setenv("AIRFLOW_CONN_PULSAR_C1", json.dumps({"conn_type": "pulsar", "host": "http://127.0.0.1:9"}))
    return airflow_tasks


def destinations(plan: dict) -> list[str | None]:
    return [action["destination"] for action in plan["actions"]]


def events(store, name: str) -> list[AuditEvent]:
    with store.session() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.event == name)))


def test_plans_show_shows_the_rows_that_run(store, tampered, capsys):
    assert cli.main(["plans", "show", str(tampered), "--db", str(store.engine.url)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert destinations(shown) == [PLANNED, EDITED]
    assert shown["actions"][1]["msgRate"] == 5.0  # the reviewer's figures stay those recorded on the row
    assert list_plans(store)[0].actions == 2


def test_the_review_api_shows_the_rows_that_run(store, tampered, tmp_path):
    client = TestClient(create_app(lambda: store, lambda: tmp_path, []))
    answer = client.get(f"/api/plans/{tampered}")
    assert answer.status_code == 200, answer.text
    assert destinations(answer.json()) == [PLANNED, EDITED]
    assert EDITED in client.get(f"/plans/{tampered}").text


def test_approve_refuses_rows_edited_after_planning(store, tampered, capsys):
    arguments = ["approve", str(tampered), "--expect-hash", show_plan(store, tampered).actions_hash]
    assert cli.main([*arguments, "--db", str(store.engine.url)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "differ from the actions it was planned with" in error
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Approval)) == 0
    # Rejecting what was tampered with stays possible.
    assert cli.main(["approve", str(tampered), "--reject", "--db", str(store.engine.url)]) == 0


def test_the_gate_refuses_rows_edited_after_planning(store, tampered, gate):
    with pytest.raises(InputError, match="differ from the actions it was planned with; not put to review"):
        gate.request_approval("c1", RUN)
    assert events(store, "plan.approval-requested") == []


def test_the_gates_text_is_built_from_the_rows(store, gate):
    """Untampered, the gate's table lists each row's call as the executor makes it."""
    document = {"cluster": "c1", "strategy": "AvgShedder", "actions": [unload("t/ns/0x00000000_0xffffffff")]}
    commit_plan(
        store,
        PlanDocument.parse(document, "plan"),
        admin_url="http://127.0.0.1:9",
        run_key=f"{RUN}:c1:AvgShedder",
        expected_version=0,
    )
    request = gate.request_approval("c1", RUN)
    assert f"| 1 | unload | `t/ns/0x00000000_0xffffffff` | a:8080 | {PLANNED} |" in request.markdown
    assert [event.details["actionsHash"] for event in events(store, "plan.approval-requested")] == [
        request.actions_hash
    ]
