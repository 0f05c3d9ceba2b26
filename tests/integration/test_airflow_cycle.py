"""A full cycle with real Airflow on the real local cluster: collect, plan (Spark), approve through
the REST API, execute; and the reject path."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import select

from planner.collect.admin_client import PulsarAdminClient
from planner.failpoints import ENV as FAILPOINT_ENV
from planner.store.database import Store
from planner.store.models import Approval, AuditEvent, Plan, PlanMeasurement
from planner.store.plans import Measurement
from pulsar_rebalance_devtools.demo import run_plan_cycle
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.conftest import (
    APPROVERS_MAIL,
    CYCLE_CONF,
    OUTSIDE_POLICY,
    airflow_env,
    collect_snapshots,
    skewed_airflow_env,
)
from tests.integration.executor_support import approved, owners, unload
from tests.integration.test_exactly_once import _wait_stopped
from tests.receivers import Mailbox

pytestmark = [pytest.mark.integration, pytest.mark.airflow]


def test_approved_plan_is_executed_and_audited(approved_cycle):
    outcome, landed, hot = approved_cycle["outcome"], approved_cycle["landed"], approved_cycle["hot"]
    assert outcome["tasks"]["execute"] == "success" and outcome["tasks"]["report"] == "success", outcome
    store = Store(approved_cycle["env"]["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        plan = session.scalars(select(Plan)).one()
        assert plan.status == "executed"
        unloads = [a for a in plan.actions if a.kind == "unload"]
        assert unloads and all(a.source == hot for a in unloads)
        events = [e.event for e in session.scalars(select(AuditEvent).where(AuditEvent.plan_id == plan.id))]
        measured = Measurement.of(
            session.scalars(select(PlanMeasurement).where(PlanMeasurement.plan_id == plan.id)).one()
        )
        requested = session.scalars(
            select(AuditEvent).where(AuditEvent.plan_id == plan.id, AuditEvent.event == "plan.approval-requested")
        ).one()
    assert "plan.approved" in events and events.count("action.succeeded") == len(unloads)
    # Outside the configured policy, so a person was asked; the request records the rule that failed.
    [verdict] = requested.details["policies"]["verdicts"]
    assert verdict["policy"] == OUTSIDE_POLICY["name"] and not verdict["approves"], verdict
    assert [check["rule"] for check in verdict["checks"] if not check["holds"]] == ["maxMsgRateShare"], verdict
    assert "plan.measured" in events and set(measured.brokers) >= {hot}
    # Measured once the brokers reported after the moves: the hot broker carries less than before.
    [before] = [broker for broker in plan.details["brokers"] if broker["broker"] == hot]
    assert measured.brokers[hot]["msgRate"] < 0.9 * before["msgRateBefore"], (measured.brokers, before)
    for action in unloads:
        assert landed[action.bundle.rsplit("/", 1)[1]] == action.destination
    # Told by email and webhook: the plan awaits approval, was approved (by whom), was executed; each with the
    # plan's one-line summary and its review page. The request, sent through the gate's notifiers, links to the
    # gate's Required Action form under `[api] base_url` first.
    told = [body for path, _, body in approved_cycle["receiver"].received if path.endswith("/secret-path")]
    assert [body["event"] for body in told] == ["awaiting-approval", "approved", "executed"], told
    base, cluster = (
        approved_cycle["env"]["AIRFLOW__API__BASE_URL"],
        approved_cycle["env"]["PULSAR_REBALANCE_CLUSTER_NAMES"],
    )
    run_id = plan.run_key.split(f":{cluster}:")[0]
    form = f"{base}/dags/pulsar_rebalance_plan_{cluster}/runs/{run_id}/tasks/approve/required_actions?map_index=-1"
    review = f"{base}/pulsar-planner/plans/{plan.id}"
    assert told[0]["link"] == form and told[0]["review_link"] == review, told[0]
    assert all(body["plan"] == plan.id and body["link"] == review for body in told[1:])
    assert told[1]["details"][0].startswith("Approved by ")
    # The deployment's own notifier (the `approval_notifiers` setting), rendered from the gate's context.
    [approvers] = [mail for to, mail in approved_cycle["mailbox"].messages if to == [APPROVERS_MAIL]]
    assert approvers["Subject"] == f"[pulsar-rebalance] {cluster}: plan {plan.id} awaits approval"
    assert f"Decide at {form} (approve)" in Mailbox.html(approvers)
    mails = [(to, mail) for to, mail in approved_cycle["mailbox"].messages if to != [APPROVERS_MAIL]]
    assert [mail["Subject"].rsplit(" plan ", 1)[1] for _, mail in mails] == [
        f"{plan.id} awaits approval",
        f"{plan.id} was approved",
        f"{plan.id} was executed",
    ]
    assert all(told[0]["summary"] in Mailbox.html(mail) for _, mail in mails)


@pytest.fixture
def skewed_env(pulsar_cluster, traffic_generator, tmp_path):
    return skewed_airflow_env(pulsar_cluster, traffic_generator, tmp_path)


@pytest.mark.slow  # a second whole DAG cycle; the policy's verdicts have unit tests, the gate runs in CI
def test_a_plan_inside_an_approval_policy_runs_with_nobody_at_the_gate(pulsar_cluster, pulsar_rebalance_policy_env):
    env = pulsar_rebalance_policy_env
    # Nobody answers: had the policy not approved, the run would wait at the gate until this timeout.
    outcome = run_plan_cycle(env, pulsar_cluster["cluster"], "ui", CYCLE_CONF, timeout=420)
    assert outcome["tasks"]["execute"] == "success" and outcome["tasks"]["report"] == "success", outcome
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        plan = session.scalars(select(Plan)).one()
        events = session.scalars(select(AuditEvent).where(AuditEvent.plan_id == plan.id)).all()
        approval = session.scalars(select(Approval).where(Approval.plan_id == plan.id)).one()
        action_count = len(plan.actions)
    assert plan.status == "executed" and approval.source == "policy" and approval.approver == "policy:routine"
    [approved] = [event for event in events if event.event == "plan.approved"]
    assert approved.actor == "policy:routine"
    checks = {check["rule"]: check for check in approved.details["policy"]["checks"]}
    assert checks["maxActions"]["limit"] == 20 and checks["maxActions"]["value"] == action_count
    assert checks["maxMsgRateShare"]["holds"] and 0 < checks["maxMsgRateShare"]["value"] <= 0.9
    # No request for a person was made.
    assert "plan.approval-requested" not in [event.event for event in events]
    assert [event.actor for event in events if event.event == "plan.execution-started"] == ["airflow:policy:routine"]
    store.dispose()


@pytest.fixture
def pulsar_rebalance_policy_env(pulsar_cluster, traffic_generator, tmp_path):
    policy = {"name": "routine", "clusters": [pulsar_cluster["cluster"]], "max_actions": 20, "max_msg_rate_share": 0.9}
    return skewed_airflow_env(
        pulsar_cluster,
        traffic_generator,
        tmp_path,
        # A policy of another cluster first: it must not count.
        PULSAR_REBALANCE_APPROVAL_POLICIES=json.dumps([{"name": "elsewhere", "clusters": ["other-*"]}, policy]),
    )


def rejected_plan_events(env):
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        plan = session.scalars(select(Plan)).one()
        events = session.scalars(select(AuditEvent).where(AuditEvent.plan_id == plan.id)).all()
        return plan.status, [(event.event, event.actor) for event in events]


@pytest.mark.slow  # kept out of CI's run for time, like the timeout below; the approved cycle stays in it
def test_rejected_plan_runs_nothing(pulsar_cluster, skewed_env):
    outcome = run_plan_cycle(skewed_env, pulsar_cluster["cluster"], "Reject", CYCLE_CONF, timeout=600)
    assert outcome["tasks"]["execute"] == "skipped", outcome
    status, events = rejected_plan_events(skewed_env)
    assert status == "rejected"
    [(_, reviewer)] = [entry for entry in events if entry[0] == "plan.rejected"]
    assert reviewer != "timeout" and not any(event.startswith("action.") for event, _ in events)


@pytest.mark.slow
def test_unanswered_gate_applies_the_default_reject_after_its_timeout(pulsar_cluster, skewed_env):
    env = {**skewed_env, "PULSAR_REBALANCE_APPROVAL_TIMEOUT": "20"}
    started = time.monotonic()
    outcome = run_plan_cycle(env, pulsar_cluster["cluster"], "timeout", CYCLE_CONF, timeout=600)
    assert outcome["tasks"]["approve"] == "success" and outcome["tasks"]["execute"] == "skipped", outcome
    assert outcome["tasks"]["report"] == "success", outcome
    assert time.monotonic() - started > 20
    status, events = rejected_plan_events(env)
    assert status == "rejected"
    assert ("plan.rejected", "timeout") in events and not any(event.startswith("action.") for event, _ in events)


def test_a_cli_drain_and_an_airflow_plan_run_at_once_move_each_bundle_once(pulsar_cluster, traffic_generator, tmp_path):
    """A drain of the hot broker executed from the CLI holds the cluster (stopped right after its claim) while the
    plan DAG runs on the same load: the DAG's execute task is refused while the drain holds the cluster and waits;
    the drain resumes and finishes; the DAG's plan then runs and skips every bundle the drain already moved. Each
    bundle is requested once in all (the attempts recorded across both plans), and ends where the drain put it."""
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    hot, target = brokers[0], brokers[1]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=40) for i in range(4)])
    generator.place_bundles(dict.fromkeys(range(4), hot))
    generator.start()
    time.sleep(12)  # two load-report intervals, so the reports show the traffic
    env = airflow_env(pulsar_cluster, tmp_path)
    collect_snapshots(env, pulsar_cluster["brokers"][0]["adminUrl"])
    ours = [f"{generator.namespace}/0x{low:08x}_0x{high:08x}" for low, high in itertools.pairwise(generator.boundaries)]
    db_url = env["PULSAR_REBALANCE_DB_URL"]
    store = Store(db_url)
    drain = approved(store, pulsar_cluster, [unload(bundle, hot, target) for bundle in ours])
    admin_url = pulsar_cluster["brokers"][0]["adminUrl"]
    command = [sys.executable, "-m", "planner.cli", "execute", str(drain), "--admin-url", admin_url]
    cli = subprocess.Popen(
        [*command, "--db", db_url, "--actions-per-minute", "0", "--verify-timeout", "15", "--no-measure"],
        env={**os.environ, FAILPOINT_ENV: "executor.claimed"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_stopped(cli)

    def resume_when_the_dag_is_refused() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            with store.session() as session:
                refused = session.scalar(
                    select(AuditEvent).where(AuditEvent.event == "plan.claim-refused", AuditEvent.plan_id != drain)
                )
            if refused is not None:
                break
            time.sleep(1)
        cli.send_signal(signal.SIGCONT)

    resumer = threading.Thread(target=resume_when_the_dag_is_refused, daemon=True)
    resumer.start()
    try:
        outcome = run_plan_cycle(env, pulsar_cluster["cluster"], "Approve", CYCLE_CONF, timeout=900)
    finally:
        cli.send_signal(signal.SIGCONT)
    out, err = cli.communicate(timeout=300)
    resumer.join(timeout=5)
    assert cli.returncode == 0 and json.loads(out)["status"] == "executed", err
    assert outcome["tasks"]["execute"] == "success", outcome
    with store.session() as session:
        dag_plan = session.scalars(select(Plan).where(Plan.id != drain)).one()
        planned = {action.bundle for action in dag_plan.actions}
        refused = session.scalars(
            select(AuditEvent).where(AuditEvent.plan_id == dag_plan.id, AuditEvent.event == "plan.claim-refused")
        ).all()
        sending = session.scalars(select(AuditEvent).where(AuditEvent.event == "action.sending")).all()
        skipped = session.scalars(
            select(AuditEvent).where(AuditEvent.plan_id == dag_plan.id, AuditEvent.event == "action.skipped")
        ).all()
    assert refused and refused[0].details["otherPlan"] == drain
    overlapping = planned & set(ours)
    assert overlapping, "the DAG's plan moves none of the drained bundles: nothing overlapped"
    assert {event.details["bundle"] for event in skipped} >= overlapping
    requested = [event.details["bundle"] for event in sending if event.details["bundle"] in ours]
    assert sorted(requested) == sorted(ours), requested
    with PulsarAdminClient(admin_url) as client:
        assert owners(client, pulsar_cluster, ours) == dict.fromkeys(ours, target)
    store.dispose()
