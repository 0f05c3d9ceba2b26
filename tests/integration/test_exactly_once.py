"""Exactly once on the real cluster, counted at a loopback proxy in front of the brokers:
- a lost answer (the broker acted, the answer was withheld past the timeout, or a 502 came after
  forwarding) is reconciled with the cluster, not resent; a request that never reached a broker is;
- a request that reaches the broker only after its client gave up is waited for (the settle time runs from the
  request's end past the brokers' unload timeout), not resent;
- a real `execute` process frozen (SIGSTOP) after recording its intent, past its lease, while a second run
  finishes the plan, sends nothing when resumed and exits 2 with one line;
- two approved plans moving the same bundle, executed at once: one waits (refused, naming the other), and
  the bundle moves once;
- the execute step, a real `pulsar-rebalance execute` process, is SIGKILLed at every step boundary in
  turn and rerun: every unload reaches a broker once, ownership ends as planned, the trail is complete;
- two executions of one plan, on SQLite and on PostgreSQL: one sends, the other refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.collect.admin_client import PulsarAdminClient
from planner.execute.executor import EXECUTOR_POINTS, execute_plan
from planner.failpoints import ENV as FAILPOINT_ENV
from planner.settings import ExecutorSettings
from planner.store.database import Store
from planner.store.models import ActionExecution, AuditEvent, PlanAction
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.admin_proxy import AdminProxy, Fault
from tests.integration.executor_support import approved, owners, unload

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

FAULTY = ExecutorSettings(
    actions_per_minute=0,
    verify_timeout_seconds=20,
    verify_interval_seconds=0.5,
    settle_seconds=3,
    request_timeout_seconds=3,
    lease=timedelta(seconds=60),
)
# The CLI's settings in the kill test: a short lease, so a rerun takes over soon after a kill.
# Measuring the load afterwards is not what these tests prove (test_accuracy_on_cluster.py does): left out.
CLI_SETTINGS = [
    *("--no-measure", "--actions-per-minute", "0", "--request-timeout", "4", "--verify-timeout", "8"),
    *("--settle", "2", "--lease", "15", "--wait-for-claim", "40"),
]


@pytest.fixture
def proxy(pulsar_cluster):
    fronted = AdminProxy([broker["id"] for broker in pulsar_cluster["brokers"]])
    with fronted.running():
        yield fronted


def bundles_on(generator, count):
    return [
        f"{generator.namespace}/0x{generator.boundaries[i]:08x}_0x{generator.boundaries[i + 1]:08x}"
        for i in range(count)
    ]


def busy_namespace(traffic_generator, source, count):
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=5) for i in range(count)], num_bundles=count)
    generator.place_bundles(dict.fromkeys(range(count), source))
    generator.start()  # clients look their bundles up again after each unload, as in production
    return generator


def attempt_statuses(store, plan_id):
    with store.session() as session:
        rows = session.execute(
            select(PlanAction.sequence, ActionExecution.status)
            .join(ActionExecution, ActionExecution.action_id == PlanAction.id)
            .where(PlanAction.plan_id == plan_id)
            .order_by(PlanAction.sequence, ActionExecution.attempt)
        ).all()
    found: dict[int, list[str]] = {}
    for sequence, status in rows:
        found.setdefault(sequence, []).append(status)
    return found


def audit(store, plan_id):
    with store.session() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.plan_id == plan_id).order_by(AuditEvent.id)))


@pytest.mark.parametrize("fault", ["hold", "bad-gateway"])
def test_a_lost_answer_is_reconciled_with_the_cluster_not_resent(
    fault, pulsar_cluster, traffic_generator, proxy, tmp_path
):
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = busy_namespace(traffic_generator, brokers[0], 2)
    bundles = bundles_on(generator, 2)
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    plan_id = approved(store, pulsar_cluster, [unload(bundle, brokers[0], brokers[1]) for bundle in bundles])
    proxy.faults.append(Fault(fault, seconds=10))
    with PulsarAdminClient(proxy.admin_url, timeout=(5.0, FAULTY.request_timeout_seconds)) as client:
        report = execute_plan(store, client, plan_id, FAULTY)
    assert report.status == "executed", report.to_json()
    assert sorted(put.path.split("/")[-2] for put in proxy.puts("/unload")) == sorted(
        bundle.rsplit("/", 1)[1] for bundle in bundles
    ), "one PUT per action reached a broker"
    assert attempt_statuses(store, plan_id)[0] == ["reconciled-applied"]
    assert report.actions[0].reconciled and report.to_json()["reconciliations"] == 1
    events = [(event.event, event.details.get("sequence")) for event in audit(store, plan_id)]
    assert ("action.unknown", 0) in events and ("action.reconciled-applied", 0) in events
    assert owners(client, pulsar_cluster, bundles) == dict.fromkeys(bundles, brokers[1])
    store.dispose()


def test_a_request_that_never_reached_a_broker_is_sent_again_once_the_cluster_shows_it(
    pulsar_cluster, traffic_generator, proxy, tmp_path
):
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = busy_namespace(traffic_generator, brokers[0], 1)
    [bundle] = bundles_on(generator, 1)
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    plan_id = approved(store, pulsar_cluster, [unload(bundle, brokers[0], brokers[2])])
    proxy.faults.append(Fault("drop"))
    with PulsarAdminClient(proxy.admin_url, timeout=(5.0, FAULTY.request_timeout_seconds)) as client:
        report = execute_plan(store, client, plan_id, FAULTY)
    assert report.status == "executed", report.to_json()
    assert attempt_statuses(store, plan_id)[0] == ["reconciled-not-applied", "succeeded"]
    assert len(proxy.puts("/unload")) == 1
    assert owners(client, pulsar_cluster, [bundle]) == {bundle: brokers[2]}
    store.dispose()


def _wait_stopped(process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until the process stopped itself at its failpoint (state T); fails if it ended instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the process ended (exit {process.returncode}) before its failpoint: {process.stderr.read()}")
        state = Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    pytest.fail("the process never reached its failpoint")


def _execute_process(plan_id, admin_url, db_url, failpoint=None) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != FAILPOINT_ENV}
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    command = [sys.executable, "-m", "planner.cli", "execute", str(plan_id), "--admin-url", admin_url]
    return subprocess.Popen(
        [*command, *CLI_SETTINGS, "--db", db_url], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _execute_without_waiting(plan_id, admin_url, db_url) -> subprocess.CompletedProcess:
    """A real `execute` with the CLI's defaults: a claim someone else holds is refused at once."""
    env = {key: value for key, value in os.environ.items() if key != FAILPOINT_ENV}
    command = [sys.executable, "-m", "planner.cli", "execute", str(plan_id), "--admin-url", admin_url, "--db", db_url]
    return subprocess.run([*command, "--no-measure"], env=env, capture_output=True, text=True, timeout=120)


MOVED = {"succeeded", "reconciled-applied"}
# Every step boundary, in order; "in-flight" is the PUT sent and answered by the broker, its answer not yet read.
KILL_POINTS = [EXECUTOR_POINTS[0], EXECUTOR_POINTS[1], "in-flight", *EXECUTOR_POINTS[2:]]


def test_killed_at_every_step_boundary_each_action_takes_effect_once(
    pulsar_cluster, traffic_generator, proxy, tmp_path
):
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = busy_namespace(traffic_generator, brokers[0], 2)
    bundles = bundles_on(generator, 2)
    db_url = f"sqlite:///{tmp_path / 'planner.db'}"
    store = Store(db_url)
    figures = []
    for point in KILL_POINTS:
        before = {bundle: owner for bundle, owner in owners_of(pulsar_cluster, bundles).items()}
        planned = {bundle: brokers[(brokers.index(before[bundle]) + 1) % len(brokers)] for bundle in bundles}
        plan_id = approved(store, pulsar_cluster, [unload(b, before[b], planned[b]) for b in bundles])
        puts_before = len(proxy.puts("/unload"))
        started = time.monotonic()
        if point == "in-flight":
            fault = Fault("park")
            proxy.faults.append(fault)
            process = _execute_process(plan_id, proxy.admin_url, db_url)
            assert fault.parked.wait(120), "the unload never reached the proxy"
        else:
            process = _execute_process(plan_id, proxy.admin_url, db_url, failpoint=point)
            _wait_stopped(process)
        process.send_signal(signal.SIGKILL)
        process.wait()
        proxy.faults.clear()
        rerun = _execute_process(plan_id, proxy.admin_url, db_url)
        out, err = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, err
        report = json.loads(out)
        assert report["status"] == "executed", (point, report)
        sent = [put.path for put in proxy.puts("/unload")[puts_before:]]
        assert sorted(sent) == sorted(set(sent)) and len(sent) == len(bundles), (point, sent)
        assert owners_of(pulsar_cluster, bundles) == planned, point
        statuses = attempt_statuses(store, plan_id)
        # Each action ends moved as planned: not skipped (a resend finding the bundle gone) nor placed elsewhere.
        assert all(attempts[-1] in MOVED for attempts in statuses.values()), (point, statuses)
        events = [event.event for event in audit(store, plan_id)]
        assert events.count("plan.execution-finished") == 1 and "plan.claimed" in events, (point, events)
        assert show_plan(store, plan_id).status == "executed"
        figures.append(f"{point}: {statuses} in {time.monotonic() - started:.0f} s")
    print("\nkilled at every step boundary, then rerun:\n  " + "\n  ".join(figures))
    store.dispose()


def owners_of(cluster, bundles):
    with PulsarAdminClient(cluster["brokers"][0]["adminUrl"]) as client:
        deadline = time.monotonic() + 30
        while True:  # a bundle unloaded and not yet looked up again has no owner for a moment
            found = owners(client, cluster, bundles)
            if len(found) == len(bundles) or time.monotonic() > deadline:
                return found
            time.sleep(0.5)


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_executions_of_one_plan_one_sends_the_other_refuses(
    database, pulsar_cluster, traffic_generator, proxy, tmp_path, request
):
    db_url = request.getfixturevalue("postgres_url") if database == "postgresql" else f"sqlite:///{tmp_path / 'p.db'}"
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = busy_namespace(traffic_generator, brokers[0], 2)
    bundles = bundles_on(generator, 2)
    store = Store(db_url)
    plan_id = approved(store, pulsar_cluster, [unload(bundle, brokers[0], brokers[1]) for bundle in bundles])
    first = _execute_process(plan_id, proxy.admin_url, db_url, failpoint="executor.claimed")
    _wait_stopped(first)  # it holds the claim
    second = _execute_without_waiting(plan_id, proxy.admin_url, db_url)
    assert second.returncode == 2 and "is being executed by cli:" in second.stderr, second.stderr
    assert proxy.puts("/unload") == []
    first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0 and json.loads(out)["status"] == "executed", err
    assert len(proxy.puts("/unload")) == len(bundles)
    assert [event.event for event in audit(store, plan_id)].count("plan.claim-refused") == 1
    store.dispose()


def test_a_request_that_reaches_the_broker_after_its_client_gave_up_is_waited_for_not_resent(
    pulsar_cluster, traffic_generator, proxy, tmp_path
):
    """The proxy holds the unload 8 s, then forwards it to its owner; the client gives up after 3 s. The
    settle time (2 s here, less than the request timeout) used to run from the request's start, so the executor
    looked, found the bundle still on its source and sent it again. It now runs from the request's end for the
    brokers' unload timeout (15 s on the local cluster, read from their runtime configuration) plus 5 s."""
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = busy_namespace(traffic_generator, brokers[0], 1)
    [bundle] = bundles_on(generator, 1)
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    plan_id = approved(store, pulsar_cluster, [unload(bundle, brokers[0], brokers[1])])
    proxy.faults.append(Fault("delay", seconds=8))
    started = time.monotonic()
    settings = FAULTY.model_copy(update={"settle_seconds": 2.0})
    with PulsarAdminClient(proxy.admin_url, timeout=(5.0, settings.request_timeout_seconds)) as client:
        report = execute_plan(store, client, plan_id, settings)
    waited = time.monotonic() - started
    assert report.status == "executed", report.to_json()
    assert len(proxy.puts("/unload")) == 1, "the unload was sent again while the first was on its way"
    assert attempt_statuses(store, plan_id)[0] == ["reconciled-applied"]
    assert owners(client, pulsar_cluster, [bundle]) == {bundle: brokers[1]}
    assert waited >= 3 + 15 + 5 - 1, waited
    print(f"\nforwarded 8 s late: reconciled after {waited:.1f} s, one PUT")
    store.dispose()


def test_a_run_frozen_past_its_lease_sends_nothing_once_resumed(pulsar_cluster, traffic_generator, proxy, tmp_path):
    """A real `execute` is frozen right after committing `sending` (SIGSTOP, as a VM or container pause), its
    lease runs out, a second run takes the plan over and finishes it; resumed, the first re-checks its claim before
    the request leaves and exits 2 with one line, having sent nothing."""
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = busy_namespace(traffic_generator, brokers[0], 2)
    bundles = bundles_on(generator, 2)
    db_url = f"sqlite:///{tmp_path / 'planner.db'}"
    store = Store(db_url)
    plan_id = approved(store, pulsar_cluster, [unload(bundle, brokers[0], brokers[2]) for bundle in bundles])
    frozen = _execute_process(plan_id, proxy.admin_url, db_url, failpoint="executor.attempt-recorded")
    _wait_stopped(frozen)
    second = _execute_process(plan_id, proxy.admin_url, db_url)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0 and json.loads(out)["status"] == "executed", err
    assert len(proxy.puts("/unload")) == len(bundles)
    frozen.send_signal(signal.SIGCONT)
    out, err = frozen.communicate(timeout=120)
    assert frozen.returncode == 2, (out, err)
    # Its progress lines (the action it started before it was frozen), then one line of error, the last.
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "taken over by another run" in errors[0] and err.endswith(errors[0] + "\n"), err
    assert len(proxy.puts("/unload")) == len(bundles), "the resumed run sent after losing its claim"
    assert owners_of(pulsar_cluster, bundles) == dict.fromkeys(bundles, brokers[2])
    # The frozen run's intent was settled by the second run: the record tells what happened to it.
    assert attempt_statuses(store, plan_id)[0] == ["reconciled-not-applied", "succeeded"]
    store.dispose()


def test_two_plans_moving_the_same_bundle_at_once_move_it_once(pulsar_cluster, traffic_generator, proxy, tmp_path):
    """A drain started from the CLI while another approved plan executes (or a rollback while its original
    resumes): the second plan is refused while the first holds the cluster, naming it, and sends nothing; run
    afterwards, it finds the bundle gone from its planned source and skips it. One PUT reached a broker."""
    brokers = [broker["id"] for broker in pulsar_cluster["brokers"]]
    generator = busy_namespace(traffic_generator, brokers[0], 1)
    [bundle] = bundles_on(generator, 1)
    db_url = f"sqlite:///{tmp_path / 'planner.db'}"
    store = Store(db_url)
    rebalance = approved(store, pulsar_cluster, [unload(bundle, brokers[0], brokers[1])])
    drain = approved(store, pulsar_cluster, [unload(bundle, brokers[0], brokers[2])])
    first = _execute_process(rebalance, proxy.admin_url, db_url, failpoint="executor.claimed")
    _wait_stopped(first)
    second = _execute_without_waiting(drain, proxy.admin_url, db_url)
    assert second.returncode == 2 and f"is being executed by plan {rebalance}" in second.stderr, second.stderr
    assert second.stderr.count("\n") == 1
    assert proxy.puts("/unload") == []
    first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0 and json.loads(out)["status"] == "executed", err
    again = _execute_process(drain, proxy.admin_url, db_url)
    out, err = again.communicate(timeout=300)
    # Its only action skipped, the drain did nothing: it ends partial, which the CLI exits with 3 (EXIT_PARTIAL).
    assert again.returncode == 3, err
    assert json.loads(out)["status"] == "partial" and json.loads(out)["actions"][0]["status"] == "skipped"
    assert len(proxy.puts("/unload")) == 1
    assert owners_of(pulsar_cluster, [bundle]) == {bundle: brokers[1]}
    store.dispose()
