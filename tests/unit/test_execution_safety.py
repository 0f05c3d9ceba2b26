"""The executor's guards that hold before any request is sent: the claim and its lease, the approval hash
over the action rows, the TTL and resume window, and the lifecycles' transition tables. The requests
themselves, kills and lost answers are proved on the real cluster (tests/reliability/)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from planner import cli
from planner.actions import actions_hash
from planner.audit.plan_records import show_plan
from planner.collect.admin_client import PulsarAdminClient
from planner.errors import InputError
from planner.execute.claim import ClaimLostError, PlanClaimedError, claim_plan, renew
from planner.execute.executor import ExecutorSettings, execute_plan
from planner.lifecycle import (
    ATTEMPT_TRANSITIONS,
    PLAN_TRANSITIONS,
    AttemptStatus,
    Decision,
    IllegalTransitionError,
    PlanStatus,
    advance,
)
from planner.plan.document import PlanDocument
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.models import ActionExecution, AuditEvent, Plan, PlanAction
from planner.store.plans import commit_plan

# Nothing listens here: a test whose executor tried the cluster would fail with a connection error.
NO_CLUSTER = "http://127.0.0.1:9"


def unload(bundle: str, destination: str = "b:8080") -> dict:
    return {
        "kind": "unload",
        "bundle": bundle,
        "source": "a:8080",
        "destination": destination,
        "msgRate": 1.0,
        "throughput": 2.0,
        "reason": "test",
    }


@pytest.fixture
def store(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    yield store
    store.dispose()


def pending_plan(store, actions=None, run_key="run-1") -> int:
    actions = actions or [unload("t/ns/0x00000000_0x80000000"), unload("t/ns/0x80000000_0xffffffff")]
    plan = {"cluster": "c1", "strategy": "AvgShedder", "actions": actions, "stateAfter": {}}
    return commit_plan(
        store, PlanDocument.parse(plan, "plan"), admin_url=NO_CLUSTER, run_key=run_key, expected_version=0
    ).plan_id


def approved_plan(store, **options) -> int:
    plan_id = pending_plan(store, **options)
    record_decision(
        store, plan_id, Decision.APPROVED, approver="alice", approved_hash=show_plan(store, plan_id).actions_hash
    )
    return plan_id


def events(store, name):
    with store.session() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.event == name)))


def test_a_claimed_plan_is_refused_naming_the_holder_until_its_lease_expires(store):
    plan_id = approved_plan(store)
    start = datetime(2026, 11, 23, 10, tzinfo=UTC)
    first = claim_plan(store, plan_id, "run-A", timedelta(minutes=5), start)
    with pytest.raises(PlanClaimedError, match=r"executed by run-A since 2026-11-23T10:00:00\+00:00"):
        claim_plan(store, plan_id, "run-B", timedelta(minutes=5), start + timedelta(minutes=4))
    assert [event.details["heldBy"] for event in events(store, "plan.claim-refused")] == ["run-A"]
    # A crashed run's lease runs out: the plan can be resumed, and the old holder is fenced off.
    second = claim_plan(store, plan_id, "run-B", timedelta(minutes=5), start + timedelta(minutes=6))
    with store.session() as session, pytest.raises(ClaimLostError):
        renew(session, first, timedelta(minutes=5), start + timedelta(minutes=7))
    with store.session() as session:
        renew(session, second, timedelta(minutes=5), start + timedelta(minutes=7))


def test_a_second_execution_of_a_claimed_plan_sends_nothing_and_says_who_holds_it(store):
    plan_id = approved_plan(store)
    claim_plan(store, plan_id, "airflow:execute (worker-1 pid 42)", timedelta(minutes=5), datetime.now(UTC))
    with PulsarAdminClient(NO_CLUSTER) as client, pytest.raises(PlanClaimedError, match="worker-1 pid 42"):
        execute_plan(store, client, plan_id, ExecutorSettings())
    assert show_plan(store, plan_id).status == "approved"


def test_the_approval_binds_the_action_rows_that_run(store):
    plan_id = approved_plan(store)
    with store.session() as session:
        session.execute(
            update(PlanAction).where(PlanAction.plan_id == plan_id, PlanAction.sequence == 1).values(destination="x:1")
        )
    with PulsarAdminClient(NO_CLUSTER) as client, pytest.raises(InputError, match="differ from the approved"):
        execute_plan(store, client, plan_id, ExecutorSettings())
    assert len(events(store, "plan.hash-mismatch")) == 1
    # The claim is released on refusal: once the rows are as approved, the plan runs (here: expires at once).
    with store.session() as session:
        session.execute(
            update(PlanAction)
            .where(PlanAction.plan_id == plan_id, PlanAction.sequence == 1)
            .values(destination="b:8080")
        )
        session.execute(update(Plan).where(Plan.id == plan_id).values(created_at=datetime.now(UTC) - timedelta(days=1)))
    with PulsarAdminClient(NO_CLUSTER) as client:
        assert execute_plan(store, client, plan_id, ExecutorSettings()).status == "expired"


def test_the_hash_covers_what_is_sent_in_order_and_nothing_else():
    first, second = unload("t/ns/0x00000000_0x80000000"), unload("t/ns/0x80000000_0xffffffff")
    assert actions_hash([first, second]) != actions_hash([second, first])
    assert actions_hash([first]) != actions_hash([{**first, "destination": "c:8080"}])
    assert actions_hash([first]) == actions_hash([{**first, "reason": "reworded", "msgRate": 99.0}])
    split = {**first, "kind": "split", "splitAlgorithm": "range_equally_divide", "splitPositions": None}
    assert actions_hash([split]) != actions_hash([{**split, "splitPositions": [5]}])


def test_the_approval_binds_a_maintenance_plans_brokers(store):
    """The executor fences a drain's brokers: an approved drain whose brokers change afterwards does not run."""
    actions = [unload("t/ns/0x00000000_0x80000000")]
    drain = {"mode": "drain", "brokers": ["a:8080"]}
    plan = {"cluster": "c1", "strategy": "drain", "actions": actions, "stateAfter": {}, "maintenance": drain}
    plan_id = commit_plan(
        store, PlanDocument.parse(plan, "plan"), admin_url=NO_CLUSTER, run_key="drain-1", expected_version=0
    ).plan_id
    approved_hash = show_plan(store, plan_id).actions_hash
    assert approved_hash != actions_hash(actions)  # the drain is part of what is approved
    assert approved_hash == actions_hash(actions, {**drain, "overCapacity": ["b:8080"], "maxMoves": 9})
    record_decision(store, plan_id, Decision.APPROVED, approver="alice", approved_hash=approved_hash)
    with store.session() as session:
        row = session.get(Plan, plan_id)
        row.details = {**row.details, "maintenance": {**drain, "brokers": ["b:8080"]}}
    with PulsarAdminClient(NO_CLUSTER) as client, pytest.raises(InputError, match="differ from the approved"):
        execute_plan(store, client, plan_id, ExecutorSettings())
    assert len(events(store, "plan.hash-mismatch")) == 1


@pytest.mark.parametrize(
    ("age", "started", "status"),
    [
        (timedelta(hours=7), False, "expired"),  # never started, past the TTL
        (timedelta(hours=7, minutes=30), True, "expired"),  # started, past TTL + resume window
    ],
)
def test_the_ttl_holds_for_new_and_resumed_executions(store, age, started, status):
    plan_id = approved_plan(store)
    now = datetime.now(UTC)
    with store.session() as session:
        values = {"created_at": now - age}
        if started:
            values |= {"status": "executing", "execution_started_at": now - age + timedelta(hours=5)}
        session.execute(update(Plan).where(Plan.id == plan_id).values(**values))
    with PulsarAdminClient(NO_CLUSTER) as client:  # no request may be sent: nothing listens there
        report = execute_plan(store, client, plan_id, ExecutorSettings(ttl=timedelta(hours=6)))
    assert report.status == status and set(report.results.values()) == {"not-run"}
    assert show_plan(store, plan_id).status == status
    [expired] = events(store, "plan.expired")
    assert expired.details["ttlSeconds"] == 6 * 3600 and expired.details["resumeWindowSeconds"] == 3600


def test_lifecycles_refuse_edges_their_table_does_not_have(store):
    for source, targets in PLAN_TRANSITIONS.items():
        for target in PlanStatus:
            if target in targets:
                assert advance(source, target, "plan 1") is target
            else:
                with pytest.raises(IllegalTransitionError, match=f"plan 1: cannot go from {source.value}"):
                    advance(source, target, "plan 1")
    with pytest.raises(IllegalTransitionError):
        advance(AttemptStatus.UNKNOWN, AttemptStatus.SENDING, "action 0")  # no blind resend of one attempt
    assert AttemptStatus.SUCCEEDED not in ATTEMPT_TRANSITIONS[None]  # success is never recorded unsent
    plan_id = pending_plan(store)
    record_decision(store, plan_id, Decision.REJECTED, approver="bob", approved_hash="")
    with pytest.raises(InputError, match="already rejected by bob"):
        record_decision(
            store, plan_id, Decision.APPROVED, approver="alice", approved_hash=show_plan(store, plan_id).actions_hash
        )
    with PulsarAdminClient(NO_CLUSTER) as client, pytest.raises(InputError, match="not approved"):
        execute_plan(store, client, plan_id, ExecutorSettings())


def test_executor_settings_refuse_a_lease_shorter_than_one_step():
    with pytest.raises(InputError, match="lease"):
        ExecutorSettings.build(
            {"lease": timedelta(seconds=60), "request_timeout_seconds": 30, "verify_timeout_seconds": 60}
        )
    with pytest.raises(InputError, match="max_actions"):
        ExecutorSettings.build({"max_actions": 0})


def test_cli_approve_records_the_os_user_and_the_name_given(store, capsys, monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "ops7")
    plan_id = pending_plan(store)
    url = str(store.engine.url)
    assert cli.main(["approve", str(plan_id), "--as", "Alice Doe", "--expect-hash", "f" * 64, "--db", url]) == 2
    assert "not the reviewed" in capsys.readouterr().err
    assert cli.main(["approve", str(plan_id), "--as", "Alice Doe", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "plan": plan_id,
        "decision": "approved",
        "approver": "Alice Doe",
        "osUser": "ops7",
    }
    [approved] = events(store, "plan.approved")
    assert approved.actor == "cli:ops7 as Alice Doe" and approved.details["source"] == "cli"
    assert cli.main(["approve", str(plan_id), "--reject", "--db", url]) == 2
    assert "already approved" in capsys.readouterr().err


def test_cli_lists_and_shows_plans_in_both_grammars(store, capsys):
    plan_id = pending_plan(store)
    url = str(store.engine.url)
    for words in ([], ["list"]):
        assert cli.main(["plans", *words, "--db", url]) == 0
        [listed] = json.loads(capsys.readouterr().out)["plans"]
        assert listed["id"] == plan_id
    for command in (["plans", "show", str(plan_id)], ["plan", "show", str(plan_id)]):
        assert cli.main([*command, "--db", url]) == 0
        assert json.loads(capsys.readouterr().out)["actionsHash"] == show_plan(store, plan_id).actions_hash
    for words, message in (
        (["show"], "did you mean `plans show ID`"),
        (["show", "x"], "invalid plan id: expected a whole number, got 'x'"),
    ):
        assert cli.main(["plans", *words, "--db", url]) == 2
        assert message in capsys.readouterr().err
    assert cli.main(["plans", "--status", "bogus", "--db", url]) == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_cli_execute_refuses_bad_input_before_sending(store, capsys):
    plan_id = approved_plan(store)
    url = str(store.engine.url)
    for arguments, message in [
        (["--ttl", "-1"], "--ttl"),
        (["--cluster", "other"], "is for cluster 'c1'"),
        (["--admin-url", "ftp://x"], "--admin-url"),
        (["--attempts", "0", "--admin-url", NO_CLUSTER], None),
    ]:
        assert cli.main(["execute", str(plan_id), *arguments, "--db", url]) == 2, arguments
        error = capsys.readouterr().err
        assert error.startswith("error: ") and error.count("\n") == 1
        if message:
            assert message in error
    assert show_plan(store, plan_id).status == "approved"


@pytest.mark.parametrize(("started_ago", "waits"), [(2.0, 8.0), (30.0, None)])
def test_the_pace_holds_across_runs(store, started_ago, waits):
    """A rerun waits until 60/K seconds after the last request a stopped run sent, before anything else."""
    plan_id = approved_plan(store)
    sent_at = datetime.now(UTC) - timedelta(seconds=started_ago)
    with store.session() as session:
        first = session.scalar(select(PlanAction).where(PlanAction.plan_id == plan_id, PlanAction.sequence == 0))
        session.add(
            ActionExecution(action_id=first.id, attempt=1, status=AttemptStatus.SUCCEEDED.value, started_at=sent_at)
        )
    slept = []
    with PulsarAdminClient(NO_CLUSTER, timeout=(0.5, 0.5)) as client:
        execute_plan(
            store,
            client,
            plan_id,
            ExecutorSettings(actions_per_minute=6),
            sleep=slept.append,
            allow_beside_broker_controllers=True,  # a cluster nobody answers for: not asked about its controllers
        )
    # The wait is counted from whenever the rerun reads the clock: at most the time this test has taken since.
    elapsed = (datetime.now(UTC) - sent_at).total_seconds() - started_ago
    if waits is None:
        assert slept == []
    else:
        assert slept and waits - elapsed - 0.05 <= slept[0] <= waits
