"""What an approval binds and what keeps two runs apart, checked in-process: the approved TTL and windows against
every override, one plan at a time per cluster, a rollback ending its original, and the settle time of an
unanswered request counted from its end past the broker's own unload timeout. The same guarantees with real
processes and a real broker: tests/integration/test_exactly_once.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text, update

from planner.audit.plan_records import show_plan
from planner.collect.admin_client import AdminError, PulsarAdminClient
from planner.errors import InputError
from planner.execute.claim import ClaimLostError, PlanClaimedError, claim_plan, release, renew
from planner.execute.executor import ExecutorSettings, execute_plan
from planner.lifecycle import Decision
from planner.plan.document import PlanDocument
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.models import ActionExecution, AuditEvent, Plan, PlanAction
from planner.store.plans import commit_plan, read_state

NO_CLUSTER = "http://127.0.0.1:9"  # nothing listens: a run that reached for the cluster fails there
BUNDLE = "t/ns/0x00000000_0x80000000"


def unload(bundle: str = BUNDLE, source: str = "a:8080", destination: str = "b:8080") -> dict:
    return {"kind": "unload", "bundle": bundle, "source": source, "destination": destination, "reason": "test"}


@pytest.fixture
def store(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    yield store
    store.dispose()


def committed(store, cluster="c1", actions=None, run_key="run-1", **extra) -> int:
    plan = {"cluster": cluster, "strategy": "AvgShedder", "actions": actions or [unload()], "stateAfter": {}, **extra}
    version = read_state(store, cluster, plan["strategy"]).version
    return commit_plan(
        store, PlanDocument.parse(plan, "plan"), admin_url=NO_CLUSTER, run_key=run_key, expected_version=version
    ).plan_id


def approve(store, plan_id: int) -> int:
    record_decision(
        store, plan_id, Decision.APPROVED, approver="alice", approved_hash=show_plan(store, plan_id).actions_hash
    )
    return plan_id


def events(store, name, plan_id=None):
    with store.session() as session:
        query = select(AuditEvent).where(AuditEvent.event == name)
        if plan_id is not None:
            query = query.where(AuditEvent.plan_id == plan_id)
        return list(session.scalars(query))


def attempts(store, plan_id):
    with store.session() as session:
        return list(
            session.scalars(
                select(ActionExecution.status)
                .join(PlanAction, PlanAction.id == ActionExecution.action_id)
                .where(PlanAction.plan_id == plan_id)
                .order_by(ActionExecution.id)
            )
        )


def age(store, plan_id, by: timedelta) -> None:
    with store.session() as session:
        session.execute(update(Plan).where(Plan.id == plan_id).values(created_at=datetime.now(UTC) - by))


# --- the approval binds the TTL and the windows ---------------------------------------------------------------


@pytest.mark.parametrize("override", [timedelta(seconds=1e8), timedelta(days=365)])
def test_no_override_extends_the_approved_ttl(store, override, monkeypatch):
    """Approved under a 6 h TTL, a 30-day-old plan expires whatever TTL the run is given (an option, the
    environment, a DAG param or a connection extra all arrive as the executor's settings)."""
    plan_id = approve(store, committed(store))
    age(store, plan_id, timedelta(days=30))
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTOR__TTL", str(override.total_seconds()))
    with PulsarAdminClient(NO_CLUSTER) as client:
        report = execute_plan(store, client, plan_id, ExecutorSettings(ttl=override))
    assert report.status == "expired" and set(report.results.values()) == {"not-run"}
    assert attempts(store, plan_id) == []
    [expired] = events(store, "plan.expired")
    assert expired.details["ttlSeconds"] == 6 * 3600


def test_an_override_may_shorten_the_approved_ttl(store):
    plan_id = approve(store, committed(store))
    age(store, plan_id, timedelta(hours=2))
    with PulsarAdminClient(NO_CLUSTER) as client:
        report = execute_plan(store, client, plan_id, ExecutorSettings(ttl=timedelta(hours=1)))
    assert report.status == "expired"


def closed_window(now: datetime) -> dict:
    """A window that opened two hours ago for one hour: closed now, opening again tomorrow."""
    opened = now - timedelta(hours=2)
    return {"cron": f"{opened.minute} {opened.hour} * * *", "duration": 3600, "timezone": "UTC"}


def test_the_executor_enforces_the_windows_the_approval_bound(store, monkeypatch):
    """Bound at approval: the setting removed afterwards (or an Airflow wait cleared, or the CLI) changes nothing."""
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTION_WINDOWS", json.dumps([closed_window(datetime.now(UTC))]))
    plan_id = approve(store, committed(store))
    monkeypatch.delenv("PULSAR_REBALANCE_EXECUTION_WINDOWS")
    with PulsarAdminClient(NO_CLUSTER) as client, pytest.raises(InputError, match="approved execution windows"):
        execute_plan(store, client, plan_id, ExecutorSettings())
    assert attempts(store, plan_id) == [] and show_plan(store, plan_id).status == "approved"
    assert len(events(store, "plan.outside-windows", plan_id)) == 1
    # Set aside explicitly: the run goes on (here to a cluster nobody answers for, whose controllers are not asked
    # about), and the trail says so.
    with PulsarAdminClient(NO_CLUSTER, timeout=(0.5, 0.5)) as client:
        report = execute_plan(
            store, client, plan_id, ExecutorSettings(), ignore_windows=True, allow_beside_broker_controllers=True
        )
    assert report.status == "partial"
    [ignored] = events(store, "plan.windows-ignored", plan_id)
    assert ignored.details["open"] is False and ignored.details["windows"]


def test_a_plan_approved_under_an_open_window_stops_when_it_closes(store, monkeypatch):
    now = datetime.now(UTC)
    window = {"cron": f"{now.minute} {now.hour} * * *", "duration": 600, "timezone": "UTC"}
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTION_WINDOWS", json.dumps([window]))
    plan_id = approve(store, committed(store, actions=[unload(), unload("t/ns/0x80000000_0xffffffff")]))
    clock = iter([now + timedelta(seconds=step) for step in range(0, 7200, 1200)] + [now + timedelta(hours=3)] * 50)
    with PulsarAdminClient(NO_CLUSTER, timeout=(0.5, 0.5)) as client:
        report = execute_plan(
            store, client, plan_id, ExecutorSettings(), now=lambda: next(clock), allow_beside_broker_controllers=True
        )
    assert any("windows closed" in reason for reason in report.reasons.values()), report.to_json()


# --- one execution per cluster ---------------------------------------------------------------------------------


def test_one_plan_at_a_time_sends_to_a_cluster(store):
    """A drain from the CLI and a rebalance from Airflow, or a rollback and its original: the second waits."""
    first = approve(store, committed(store, run_key="airflow-run"))
    second = approve(store, committed(store, run_key="cli-drain"))
    elsewhere = approve(store, committed(store, cluster="c2", run_key="other-cluster"))
    start = datetime(2026, 11, 26, 10, tzinfo=UTC)
    lease = timedelta(minutes=5)
    held = claim_plan(store, first, "airflow:execute", lease, start)
    with pytest.raises(PlanClaimedError, match=f"cluster c1 is being executed by plan {first} \\(airflow:execute"):
        claim_plan(store, second, "cli:ops", lease, start + timedelta(minutes=1))
    [refused] = events(store, "plan.claim-refused", second)
    assert refused.details["otherPlan"] == first
    claim_plan(store, elsewhere, "cli:ops", lease, start)  # another cluster is not held
    # The claim on the plan itself is free: the refusal came from the cluster, and it released what it took.
    with store.session() as session:
        assert session.get(Plan, second).claim_token is None
    # The holder paused past its lease: the cluster passes to the next plan, and the paused run is fenced off.
    taken = claim_plan(store, second, "cli:ops", lease, start + timedelta(minutes=6))
    with store.session() as session, pytest.raises(ClaimLostError):
        renew(session, held, lease, start + timedelta(minutes=7))
    with store.session() as session:
        release(session, taken)
    # Its own plan's claim is still its token, but the cluster's is not: the paused run stays fenced off.
    with store.session() as session, pytest.raises(ClaimLostError):
        renew(session, held, lease, start + timedelta(minutes=8))


def test_a_lost_claim_is_a_one_line_refusal():
    assert issubclass(ClaimLostError, InputError)  # the CLI exits 2 with one line, no traceback


# --- a rollback ends its original ------------------------------------------------------------------------------


def test_a_rollback_ends_the_plan_it_undoes(store):
    original = approve(store, committed(store, run_key="original"))
    with store.session() as session:
        session.execute(update(Plan).where(Plan.id == original).values(status="partial"))
    rollback = {"mode": "rollback", "rollsBack": original}
    back = unload(source="b:8080", destination="a:8080")
    undo = approve(store, committed(store, actions=[back], run_key="undo", strategy="rollback", maintenance=rollback))
    # A cluster nobody answers for: its brokers' controllers are not asked about.
    with PulsarAdminClient(NO_CLUSTER, timeout=(0.5, 0.5)) as client:
        execute_plan(store, client, undo, ExecutorSettings(), allow_beside_broker_controllers=True)
        assert show_plan(store, original).status == "rolled-back"
        [ended] = events(store, "plan.rolled-back", original)
        assert ended.details["rolledBackBy"] == undo
        with pytest.raises(InputError, match="is rolled-back"):
            execute_plan(store, client, original, ExecutorSettings())
        # A second rollback of the same plan would undo it twice.
        again = approve(
            store, committed(store, actions=[back], run_key="undo-2", strategy="rollback", maintenance=rollback)
        )
        with pytest.raises(InputError, match=f"plan {undo} already rolled back"):
            execute_plan(store, client, again, ExecutorSettings(), allow_beside_broker_controllers=True)
        # The rollback itself may be resumed: it ended the original, not itself.
        assert show_plan(store, undo).status == "partial"
        execute_plan(store, client, undo, ExecutorSettings(), allow_beside_broker_controllers=True)


# --- an unanswered request settles from its end, past the broker's unload timeout ------------------------------


class SlowBroker(PulsarAdminClient):
    """A broker behind a slow path: an unload reaches it `reaches_after` seconds after it was sent (a proxy that
    holds the request), the answer is lost at the 30 s request timeout, and the move completes `completes_after`
    seconds after sending; in between the source lists the bundle as inactive, as Pulsar does while it closes the
    bundle's topics. Time is the test's own clock."""

    def __init__(
        self, clock: list[float], reaches_after: float, completes_after: float, unload_timeout_ms: str = "20000"
    ) -> None:
        super().__init__(NO_CLUSTER)
        self.clock, self.unload_timeout_ms = clock, unload_timeout_ms
        self.reaches_after, self.completes_after = reaches_after, completes_after
        self.sent_at: list[float] = []

    def runtime_configuration(self):
        return {"namespaceBundleUnloadingTimeoutMs": self.unload_timeout_ms}

    def broker_version(self):
        return "4.2.4"

    def active_brokers(self, cluster):
        return ["a:8080", "b:8080"]

    def bundle_boundaries(self, namespace):
        return [0, 0x80000000, 0xFFFFFFFF]

    def isolation_policies(self, cluster):
        return {}

    def failure_domains(self, cluster):
        return {}

    def anti_affinity_group(self, namespace):
        return None

    def dynamic_configuration(self):
        # The brokers' own shedding and splitting off, as the executor requires.
        return {"loadBalancerSheddingEnabled": "false", "loadBalancerAutoBundleSplitEnabled": "false"}

    def runtime_configuration_of(self, broker_id):
        return {}

    def owned_bundles(self, cluster, broker_id):
        since = self.clock[0] - self.sent_at[0] if self.sent_at else -1.0
        owner = "b:8080" if since >= self.completes_after else "a:8080"
        if broker_id != owner:
            return {}
        return {BUNDLE: {"is_active": not self.reaches_after <= since < self.completes_after}}

    def unload_bundle(self, namespace, bundle_range, destination=None):
        self.sent_at.append(self.clock[0])
        self.clock[0] += 30.0  # the request timeout passes
        raise AdminError("a:8080", "PUT", "/unload", "Read timed out", may_have_applied=True)


def run_on(store, broker: SlowBroker, plan_id: int, clock: list[float], settings: ExecutorSettings):
    start = datetime.now(UTC)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return execute_plan(store, broker, plan_id, settings, now=lambda: start + timedelta(seconds=clock[0]), sleep=sleep)


@pytest.mark.parametrize(
    ("reaches_after", "completes_after", "unload_timeout_ms"),
    [
        (0.0, 36.0, "20000"),  # the broker takes 36 s over it; its answer is lost at the 30 s request timeout
        (62.0, 64.0, "40000"),  # the request reaches the broker 32 s after the client gave up (a slow proxy)
        (62.0, 64.0, ""),  # the same, the timeout not readable: Pulsar's default 60 s is assumed
    ],
)
def test_a_slow_unload_is_waited_for_not_sent_twice(store, reaches_after, completes_after, unload_timeout_ms):
    """With the default settings the executor waits, from the end of the request, the broker's unload timeout
    plus 5 s (more than the 30 s settle time) and while the source lists the bundle as inactive, then sees the
    move and records the attempt as applied."""
    clock = [0.0]
    broker = SlowBroker(clock, reaches_after, completes_after, unload_timeout_ms)
    plan_id = approve(store, committed(store))
    report = run_on(store, broker, plan_id, clock, ExecutorSettings(actions_per_minute=0))
    assert len(broker.sent_at) == 1, "sent again while the broker could still act on the first request"
    assert attempts(store, plan_id) == ["reconciled-applied"]
    assert report.status == "executed"
    with store.session() as session:
        [row] = session.scalars(select(ActionExecution))
        assert row.request_ended_at is not None


def test_an_unload_still_in_progress_stays_in_doubt_and_is_never_resent(store):
    clock = [0.0]
    broker = SlowBroker(clock, reaches_after=0.0, completes_after=1e9, unload_timeout_ms="10000")
    plan_id = approve(store, committed(store))
    report = run_on(store, broker, plan_id, clock, ExecutorSettings(actions_per_minute=0))
    assert len(broker.sent_at) == 1
    assert attempts(store, plan_id) == ["unknown"] and report.status == "partial"
    assert "still in progress" in report.actions[0].reason
    assert events(store, "action.in-progress", plan_id)
    # A rerun settles it again, and sends nothing while the source still lists it as inactive.
    report = run_on(store, broker, plan_id, clock, ExecutorSettings(actions_per_minute=0))
    assert len(broker.sent_at) == 1 and attempts(store, plan_id) == ["unknown"]


def test_a_run_paused_before_its_request_leaves_sends_nothing_once_another_run_took_over(store, monkeypatch):
    """Paused right after committing `sending` (a VM or container pause) past its lease, while another run claims
    the plan and finishes: on resuming, the claim is checked again before the request leaves, and the run stops
    with a one-line error, sending nothing."""
    clock = [0.0]
    broker = SlowBroker(clock, reaches_after=0.0, completes_after=0.0)
    plan_id = approve(store, committed(store))

    def paused(name: str) -> None:
        if name == "executor.attempt-recorded":  # another run takes the claims over, then finishes
            later = datetime.now(UTC) + timedelta(hours=1)
            taken = claim_plan(store, plan_id, "airflow:execute (resumed task)", timedelta(minutes=5), later)
            with store.session() as session:
                release(session, taken)

    monkeypatch.setattr("planner.execute.executor.failpoint", paused)
    with pytest.raises(ClaimLostError, match="taken over by another run"):
        run_on(store, broker, plan_id, clock, ExecutorSettings(actions_per_minute=0))
    assert broker.sent_at == []


def test_an_attempt_removed_from_the_store_is_not_taken_as_never_tried(store):
    """Someone with the rights to drop the store's guards deletes a lost request's attempt row: the audit log still
    records it, so the executor refuses to send rather than treat the action as never tried."""
    clock = [0.0]
    broker = SlowBroker(clock, reaches_after=0.0, completes_after=1e9, unload_timeout_ms="10000")
    plan_id = approve(store, committed(store))
    run_on(store, broker, plan_id, clock, ExecutorSettings(actions_per_minute=0))
    assert attempts(store, plan_id) == ["unknown"]
    with store.session() as session:
        guards = session.execute(
            text("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'action_executions'")
        ).scalars()
        for guard in list(guards):
            session.execute(text(f'DROP TRIGGER "{guard}"'))
        session.execute(text("DELETE FROM action_executions"))
    with pytest.raises(InputError, match=r"audit log records attempt\(s\) \[1\]"):
        run_on(store, broker, plan_id, clock, ExecutorSettings(actions_per_minute=0))
    assert len(broker.sent_at) == 1
    assert events(store, "action.evidence-missing", plan_id)


class SlowSplitter(SlowBroker):
    """The same slow path for a split: the namespace's boundaries change `completes_after` seconds after sending."""

    def bundle_boundaries(self, namespace):
        since = self.clock[0] - self.sent_at[0] if self.sent_at else -1.0
        return [0, 0x40000000, 0x80000000, 0xFFFFFFFF] if since >= self.completes_after else [0, 0x80000000, 0xFFFFFFFF]

    def split_bundle(self, namespace, bundle_range, **options):
        self.unload_bundle(namespace, bundle_range)


def test_a_slow_split_is_waited_for_not_sent_twice(store):
    """A split the broker carries out after the answer was lost (the request reached it 32 s after its client
    gave up): reconciled from the namespace's boundaries once the settle from the request's end has passed."""
    clock = [0.0]
    broker = SlowSplitter(clock, reaches_after=62.0, completes_after=64.0, unload_timeout_ms="40000")
    split = {"kind": "split", "bundle": BUNDLE, "source": "a:8080", "destination": None}
    split |= {"splitAlgorithm": "range_equally_divide"}
    plan_id = approve(store, committed(store, actions=[{**split, "reason": "test"}]))
    report = run_on(store, broker, plan_id, clock, ExecutorSettings(actions_per_minute=0))
    assert len(broker.sent_at) == 1, "the split was sent again while the first could still take effect"
    assert attempts(store, plan_id) == ["reconciled-applied"] and report.status == "executed"
