"""The CLI's `approve` follows the approvers setting: an OS user decides only as the approver listed for them
(`os:<user>`), `--as` cannot name anyone else, and every refusal is audited with nothing recorded."""

from __future__ import annotations

import getpass
import json

import pytest
from sqlalchemy import func, select

from planner import cli
from planner.plan.document import PlanDocument
from planner.store.database import Store
from planner.store.models import Approval, AuditEvent
from planner.store.plans import commit_plan

OS_USER = "carol"


@pytest.fixture
def plan(tmp_path, monkeypatch):
    """A pending plan, its store's URL, and the store; the CLI runs as OS user carol."""
    monkeypatch.setattr(getpass, "getuser", lambda: OS_USER)
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    unload = {"kind": "unload", "bundle": "t/ns/0x00000000_0xffffffff", "source": "a:8080", "destination": "b:8080"}
    document = {"cluster": "c1", "strategy": "AvgShedder", "actions": [unload]}
    plan_id = commit_plan(
        store, PlanDocument.parse(document, "plan"), admin_url="http://127.0.0.1:9", run_key="r1", expected_version=0
    ).plan_id
    yield plan_id, str(store.engine.url), store
    store.dispose()


def approvals(store) -> list[tuple[str, str | None, str | None]]:
    with store.session() as session:
        return [(row.decision, row.approver, row.approver_id) for row in session.scalars(select(Approval))]


def refusals(store) -> list[str]:
    with store.session() as session:
        events = session.scalars(select(AuditEvent).where(AuditEvent.event == "plan.decision-refused"))
        return [event.details["reason"] for event in events]


@pytest.mark.parametrize("decision", [[], ["--reject"]])
def test_an_os_user_who_is_not_an_approver_is_refused_and_audited(plan, monkeypatch, capsys, decision):
    plan_id, url, store = plan
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVERS", "carol,os:alice:Alice Doe")  # Airflow's carol is not the OS's
    assert cli.main(["approve", str(plan_id), *decision, "--as", "Alice Doe", "--db", url]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "OS user 'carol' is not an approver" in error and "PULSAR_REBALANCE_APPROVERS" in error
    assert approvals(store) == []
    assert len(refusals(store)) == 1


def test_as_names_only_the_os_users_own_approver(plan, monkeypatch, capsys):
    plan_id, url, store = plan
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVERS", "7:Alice Doe,os:carol:Carol Ng")
    assert cli.main(["approve", str(plan_id), "--as", "Alice Doe", "--db", url]) == 2
    assert "decides as 'Carol Ng' (PULSAR_REBALANCE_APPROVERS), not as 'Alice Doe'" in capsys.readouterr().err
    assert approvals(store) == [] and len(refusals(store)) == 1
    assert cli.main(["approve", str(plan_id), "--as", "Carol Ng", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out)["approver"] == "Carol Ng"
    assert approvals(store) == [("approved", "Carol Ng", "os:carol")]


def test_without_the_as_option_the_os_user_decides_under_their_approvers_name(plan, monkeypatch):
    plan_id, url, store = plan
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVERS", "os:carol:Carol Ng")
    assert cli.main(["approve", str(plan_id), "--reject", "--db", url]) == 0
    assert approvals(store) == [("rejected", "Carol Ng", "os:carol")]


def test_without_approvers_any_os_user_decides_under_any_name(plan, monkeypatch):
    plan_id, url, store = plan
    monkeypatch.delenv("PULSAR_REBALANCE_APPROVERS", raising=False)
    assert cli.main(["approve", str(plan_id), "--as", "anyone", "--db", url]) == 0
    assert approvals(store) == [("approved", "anyone", "os:carol")]


def test_approval_policies_decide_whoever_runs_the_command(plan, monkeypatch, capsys):
    plan_id, url, store = plan
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVERS", "os:alice")
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVAL_POLICIES", json.dumps([{"name": "small", "max_actions": 1}]))
    assert cli.main(["approve", str(plan_id), "--by-policy", "--db", url]) == 0, capsys.readouterr().err
    assert approvals(store) == [("approved", "policy:small", None)]
    with store.session() as session:
        assert (
            session.scalar(select(func.count()).select_from(AuditEvent).where(AuditEvent.event.like("%refused"))) == 0
        )
