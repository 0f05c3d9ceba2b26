"""Prediction accuracy: errors per broker and plan, the cluster's distribution and trend, the alert's crossings, the
store's query of measured plans, the measuring path's snapshot reads, and the `accuracy` command."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from planner import cli
from planner.audit.accuracy import (
    AccuracyBound,
    AlertState,
    Direction,
    Distribution,
    PlanError,
    cluster_accuracy,
    crossing,
    percentile,
    plan_error,
    trend,
)
from planner.audit.outcomes import BOUND_EVENT, bound_state, check_bound, cluster_outcomes
from planner.lifecycle import PlanStatus
from planner.orchestrate.measure import record_outcome, snapshot_load
from planner.plan.outcome import Disturbance, DisturbanceNote, PlanOutcome, plan_outcome
from planner.store.audit_log import cluster_events
from planner.store.database import Store
from planner.store.models import ActionExecution, Cluster, Plan, PlanMeasurement, Snapshot
from planner.store.plans import Measurement, commit_plan, measured_plans, record_measurement
from tests.builders import broker
from tests.unit.test_plan_outcome import BUNDLE, EXECUTED, document, measured, planned, record

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def outcome(plan_id: int, errors: tuple[float, float], *, at: datetime = NOW, disturbed: bool = False) -> PlanOutcome:
    """A plan whose two brokers ended `errors` score points off their prediction (40 each)."""
    base = plan_outcome(record(document()), Measurement(11, NOW, measured(), planned()))
    brokers = tuple(
        replace(broker, score_predicted=40.0, score_measured=40.0 + error)
        for broker, error in zip(base.brokers, errors, strict=True)
    )
    notes = (DisturbanceNote(Disturbance.TRAFFIC_CHANGED, "the cluster's messages went up"),) if disturbed else ()
    return replace(base, plan_id=plan_id, measured_at=at, brokers=brokers, disturbances=notes)


def test_a_plans_error_is_its_largest_broker_error_with_mean_and_bias() -> None:
    error = plan_error(outcome(1, (3.0, -1.0)))
    assert error is not None
    assert (error.score, error.mean_score, error.bias) == (3.0, 2.0, 1.0)
    assert [(b.broker, b.score) for b in error.brokers] == [("a:8080", 3.0), ("b:8080", -1.0)]
    unmeasured = replace(
        outcome(2, (0, 0)), brokers=tuple(replace(b, score_measured=None) for b in outcome(2, (0, 0)).brokers)
    )
    assert plan_error(unmeasured) is None


def test_percentiles_interpolate_between_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 0.9) == pytest.approx(7.6)  # 4 + 0.6 * (10 - 4), as numpy's default
    assert percentile([5.0], 0.9) == 5.0
    figures = Distribution.of([plan_error(outcome(i, (e, 0.0))) for i, e in enumerate(values)])  # type: ignore[misc]
    assert (figures.count, figures.p50, figures.max) == (5, 3.0, 10.0)
    assert figures.bias == pytest.approx(sum(values) / 2 / 5)


def errors_over_weeks(scores: list[float]) -> list[PlanError]:
    return [
        plan_error(outcome(i, (score, 0.0), at=NOW + timedelta(days=7 * i)))  # type: ignore[misc]
        for i, score in enumerate(scores)
    ]


def test_the_trend_compares_the_recent_half_with_the_older_and_gives_a_slope_per_week() -> None:
    improving = trend(errors_over_weeks([8.0, 7.0, 3.0, 2.0]))
    assert improving.direction is Direction.IMPROVING and improving.older_p90 == pytest.approx(7.9)
    assert improving.recent_p90 == pytest.approx(2.9) and improving.slope_per_week == pytest.approx(-2.2)
    assert trend(errors_over_weeks([2.0, 3.0, 7.0, 8.0])).direction is Direction.WORSENING
    assert trend(errors_over_weeks([2.0, 2.5, 2.2, 2.4])).direction is Direction.STEADY
    assert trend(errors_over_weeks([2.0, 9.0, 1.0])).direction is Direction.UNKNOWN


def test_the_cluster_figures_leave_disturbed_plans_out_of_the_models_distribution() -> None:
    outcomes = [
        outcome(1, (2.0, -1.0), at=NOW - timedelta(days=3)),
        outcome(2, (20.0, 5.0), at=NOW - timedelta(days=2), disturbed=True),
        outcome(3, (4.0, 1.0), at=NOW - timedelta(days=1)),
        outcome(4, (50.0, 0.0), at=NOW - timedelta(days=30)),  # outside the window
    ]
    accuracy = cluster_accuracy("west", outcomes, NOW - timedelta(days=7), NOW)
    assert [plan.plan_id for plan in accuracy.plans] == [1, 2, 3]
    assert accuracy.undisturbed.count == 2 and accuracy.undisturbed.max == 4.0
    assert accuracy.overall.count == 3 and accuracy.overall.max == 20.0
    assert [plan.plan_id for plan in accuracy.misses] == [2, 3, 1]
    assert accuracy.reasons == {Disturbance.TRAFFIC_CHANGED: 1}
    document = accuracy.to_json()
    assert set(document) == {"cluster", "since", "until", "undisturbed", "all", "trend", "reasons", "misses", "plans"}
    assert document["misses"][0]["disturbances"][0]["reason"] == "traffic-changed"  # type: ignore[index]


def test_the_alert_fires_once_per_crossing() -> None:
    bound = AccuracyBound(p90=5.0, window=timedelta(days=7))
    high = cluster_accuracy("west", [outcome(i, (9.0, 0.0)) for i in range(3)], NOW - timedelta(days=1), NOW)
    low = cluster_accuracy("west", [outcome(i, (1.0, 0.0)) for i in range(3)], NOW - timedelta(days=1), NOW)
    few = cluster_accuracy("west", [outcome(1, (9.0, 0.0))], NOW - timedelta(days=1), NOW)
    left = crossing(None, high, bound)
    assert left is not None and left.state is AlertState.OUTSIDE and "above the bound of 5" in left.text
    assert crossing(AlertState.OUTSIDE, high, bound) is None  # still outside: told already
    back = crossing(AlertState.OUTSIDE, low, bound)
    assert back is not None and back.state is AlertState.WITHIN
    assert crossing(None, low, bound) is None and crossing(AlertState.WITHIN, low, bound) is None
    assert crossing(None, few, bound) is None  # one plan's error is no p90


# --- the store ---------------------------------------------------------------------------------------------------


def snapshot_row(
    store: Store, cluster: str, taken_at: datetime, archive: str = "-", missing: dict | None = None
) -> int:
    with store.session() as session:
        row = Snapshot(
            cluster_id=session.query(Cluster).filter_by(name=cluster).one().id,
            taken_at=taken_at,
            brokers=2,
            bundles=1,
            partial=bool(missing),
            missing_brokers=missing or {},
            archive_path=archive,
        )
        session.add(row)
        session.flush()
        return row.id


def executed_plan(
    store: Store, run: str, *, measured_at: datetime | None, scores: tuple[float, float] = (43, 38)
) -> int:
    plan = document()
    plan_id = commit_plan(store, plan, admin_url="http://west:8080", run_key=run, expected_version=0).plan_id
    with store.session() as session:
        row = session.get(Plan, plan_id)
        row.status = PlanStatus.EXECUTED.value
        for action in row.actions:
            session.add(ActionExecution(action_id=action.id, attempt=1, status="succeeded", finished_at=EXECUTED))
    if measured_at is not None:
        snapshot = snapshot_row(store, "west", measured_at)
        after = replace(
            measured(),
            snapshot_id=snapshot,
            brokers={
                "a:8080": replace(measured().brokers["a:8080"], cpu=scores[0]),
                "b:8080": measured().brokers["b:8080"],
            },
        )
        record_measurement(store, plan_id, after, planned=planned())
        with store.session() as session:
            session.query(PlanMeasurement).filter(PlanMeasurement.plan_id == plan_id).update(
                {"measured_at": measured_at}
            )
    return plan_id


@pytest.fixture
def store(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    yield store
    store.dispose()


def reset_state(store: Store) -> None:
    """Plans of one strategy commit at increasing state versions: the test commits each at version 0."""
    from planner.store.models import StrategyState

    with store.session() as session:
        session.query(StrategyState).delete()


def test_measured_plans_are_those_measured_in_the_window_with_their_newest_measurement(store) -> None:
    old = executed_plan(store, "run-1", measured_at=NOW - timedelta(days=10))
    reset_state(store)
    recent = executed_plan(store, "run-2", measured_at=NOW - timedelta(days=1))
    reset_state(store)
    executed_plan(store, "run-3", measured_at=None)  # never measured
    found = measured_plans(store, "west", since=NOW - timedelta(days=7), until=NOW)
    assert [plan.record.id for plan in found] == [recent]
    assert [plan.record.id for plan in measured_plans(store, "west")] == [old, recent]
    assert measured_plans(store, "east") == []
    # Measured again: the newest measurement counts, once.
    again = replace(measured(), snapshot_id=snapshot_row(store, "west", NOW))
    record_measurement(store, recent, again, planned=planned())
    [plan] = measured_plans(store, "west", since=NOW - timedelta(days=7))
    assert plan.measurement.snapshot_id == again.snapshot_id and plan.measurement.planned == planned()
    [rebuilt] = cluster_outcomes(store, "west", NOW - timedelta(days=7), datetime.now(UTC) + timedelta(minutes=1))
    assert rebuilt.plan_id == recent and not rebuilt.disturbed


def test_check_bound_records_a_crossing_once(store) -> None:
    for index in range(3):
        executed_plan(store, f"run-{index}", measured_at=NOW - timedelta(hours=index + 1), scores=(60, 38))
        reset_state(store)
    bound = AccuracyBound(p90=5.0, window=timedelta(days=7))
    alert = check_bound(store, "west", bound, NOW, actor="test")
    assert alert is not None and alert.state is AlertState.OUTSIDE and alert.p90 == pytest.approx(20.0)
    assert check_bound(store, "west", bound, NOW, actor="test") is None
    assert bound_state(store, "west") is AlertState.OUTSIDE
    assert len(cluster_events(store, "west", BOUND_EVENT, NOW - timedelta(days=30))) == 1
    back = check_bound(store, "west", AccuracyBound(p90=50.0, window=timedelta(days=7)), NOW, actor="test")
    assert back is not None and back.state is AlertState.WITHIN and bound_state(store, "west") is AlertState.WITHIN


def test_the_measuring_path_reads_usage_traffic_clock_and_owners_from_the_archive(store, tmp_path) -> None:
    executed = executed_plan(store, "run-1", measured_at=None)
    reports = {
        "a:8080": broker(cpu=(30, 100), bandwidth_in=(5, 100), rate_in=120, rate_out=80, throughput_in=9e4),
        "b:8080": broker(cpu=(60, 100), rate_in=50, bundles=[BUNDLE]),
    }
    raw = {name: report.model_dump_json(by_alias=True) for name, report in reports.items()}
    raw["a:8080"] = json.loads(raw["a:8080"]) | {"lastUpdate": 1234, "startTimestamp": 99}
    raw["a:8080"] = json.dumps(raw["a:8080"])
    archive = tmp_path / "archive.json.gz"
    archive.write_bytes(gzip.compress(json.dumps({"loadReports": raw}).encode()))
    snapshot = snapshot_row(store, "west", NOW, str(archive), missing={"c:8080": "HTTP 500"})
    load = snapshot_load(store, snapshot, [BUNDLE])
    a = load.brokers["a:8080"]
    figures = (a.cpu, a.bandwidth_in, a.score, a.msg_rate, a.msg_rate_in, a.throughput_in)
    assert figures == pytest.approx((30, 5, 30, 200, 120, 9e4))  # float32, as Pulsar's percentUsage
    assert (a.last_update, a.start_timestamp) == (1234, 99)
    assert load.owners == {BUNDLE: "b:8080"} and load.missing == {"c:8080": "HTTP 500"}
    with store.session() as session:
        session.get(Plan, executed).snapshot_id = snapshot
    measurement, result = record_outcome(store, executed, snapshot, actor="test")
    assert measurement.planned is not None and measurement.planned.snapshot_id == snapshot
    assert Disturbance.PARTIAL_SNAPSHOT in result.reasons


# --- the command -------------------------------------------------------------------------------------------------


def test_the_accuracy_command_prints_stable_json_and_refuses_bad_input_in_one_line(store, tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'planner.db'}"
    plan_id = executed_plan(store, "run-1", measured_at=datetime.now(UTC) - timedelta(hours=1))
    assert cli.main(["accuracy", "west", "--json", "--db", url]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["undisturbed"]["count"] == 1 and document["bound"] == {"p90": 10.0, "state": None}
    assert [plan["plan"] for plan in document["plans"]] == [plan_id]
    assert cli.main(["accuracy", "plan", str(plan_id), "--json", "--db", url]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["plan"] == plan_id and [b["broker"] for b in shown["brokers"]] == ["a:8080", "b:8080"]
    assert shown["brokers"][0]["score"]["error"] == pytest.approx(3.0) and shown["disturbed"] is False
    assert cli.main(["accuracy", "west", "--db", url]) == 0
    assert "biggest misses" in capsys.readouterr().out
    assert cli.main(["accuracy", "plan", str(plan_id), "--db", url]) == 0
    assert "undisturbed" in capsys.readouterr().out
    for argv, words in [
        (["accuracy", "nowhere"], "cluster 'nowhere' is not in the store"),
        (["accuracy", "plan", "x1"], "PLAN_ID must be a plan id"),
        (["accuracy", "plan", "999"], "unknown plan 999"),
        (["accuracy", "west", "--since", "yesterday"], "--since must be an ISO 8601"),
        (["accuracy", "west", "--since", "2026-01-01", "--days", "3"], "either --since or --days"),
        (["accuracy", "plan"], "expected accuracy CLUSTER"),
    ]:
        assert cli.main([*argv, "--db", url]) == 2, argv
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err


def test_a_plan_never_measured_is_named(store, tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'planner.db'}"
    plan_id = commit_plan(store, document(), admin_url="http://west:8080", run_key="r", expected_version=0).plan_id
    assert cli.main(["accuracy", "plan", str(plan_id), "--db", url]) == 2
    assert "has no measurement" in capsys.readouterr().err
    assert cli.main(["accuracy", "measure", str(plan_id), "--db", url]) == 2
    assert "was never executed" in capsys.readouterr().err


# --- the review pages ----------------------------------------------------------------------------------------------


def test_the_cluster_and_plan_pages_show_the_errors_and_why(store, tmp_path) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from planner.audit.review.app import URL_PREFIX, create_app

    recent = datetime.now(UTC) - timedelta(hours=2)
    plans = []
    for index, score in enumerate((45, 41, 70)):
        plans.append(
            executed_plan(store, f"run-{index}", measured_at=recent + timedelta(minutes=index), scores=(score, 38))
        )
        reset_state(store)
    disturbed = executed_plan(store, "run-9", measured_at=recent + timedelta(minutes=9), scores=(90, 38))
    with store.session() as session:  # Pulsar placed its bundle elsewhere
        [action] = session.get(Plan, disturbed).actions
        session.add(ActionExecution(action_id=action.id, attempt=2, status="placed-elsewhere", error="on c:8080"))
    parent = FastAPI()
    parent.mount(URL_PREFIX, create_app(lambda: store, lambda: tmp_path, []))
    client = TestClient(parent)
    page = client.get(f"{URL_PREFIX}/clusters/west")
    assert page.status_code == 200, page.text
    assert 'id="accuracy-chart"' in page.text and f"plan {disturbed}: " in page.text  # the point's tooltip
    misses = page.text[page.text.index('id="accuracy-misses"') :]
    assert misses.index(f"#{disturbed}") < misses.index(f"#{plans[2]}") and "landed-elsewhere" in misses
    figures = client.get(f"{URL_PREFIX}/api/clusters/west/accuracy").json()
    assert figures["undisturbed"]["count"] == 3 and figures["all"]["max"] == pytest.approx(50.0)
    assert figures["undisturbed"]["p50"] == pytest.approx(5.0) and "chart" not in figures
    shown = client.get(f"{URL_PREFIX}/plans/{disturbed}").text
    assert 'id="outcome"' in shown and "landed-elsewhere" in shown and "disturbed" in shown
    assert client.get(f"{URL_PREFIX}/api/plans/{plans[0]}/outcome").json()["brokers"][0]["score"]["error"] == 5.0
    assert client.get(f"{URL_PREFIX}/api/plans/999/outcome").status_code == 404


def test_measuring_waits_for_fresh_reports_that_agree_twice(store, tmp_path) -> None:
    from planner.collect.collector import CollectResult
    from planner.orchestrate.measure import collect_fresh

    commit_plan(store, document(), admin_url="http://west:8080", run_key="r", expected_version=0)

    def snapshot(index: int, last_update: int, rate: float) -> int:
        report = broker(cpu=(30, 100), rate_in=rate).model_dump(mode="json", by_alias=True) | {
            "lastUpdate": last_update
        }
        archive = tmp_path / f"archive-{index}.json.gz"
        archive.write_bytes(gzip.compress(json.dumps({"loadReports": {"a:8080": json.dumps(report)}}).encode()))
        return snapshot_row(store, "west", NOW, str(archive))

    taken = [snapshot(0, 100, 50.0), snapshot(1, 2000, 80.0), snapshot(2, 3000, 100.0), snapshot(3, 4000, 102.0)]
    results = iter(CollectResult(snapshot_id, "west", 1, 0, False, {}) for snapshot_id in taken)
    sleeps: list[float] = []
    result, settled = collect_fresh(lambda: next(results), store, 1000, 60.0, sleep=sleeps.append)
    # Stale first, then fresh but still moving (80 -> 100 msg/s), then two that agree within 5 %.
    assert (result.snapshot_id, settled, len(sleeps)) == (taken[3], True, 3)
    once = iter(CollectResult(snapshot_id, "west", 1, 0, False, {}) for snapshot_id in taken)
    first, settled = collect_fresh(lambda: next(once), store, 1000, 0.0, sleep=sleeps.append)
    assert (first.snapshot_id, settled) == (taken[0], False)  # no wait: the first snapshot, not settled


def test_a_measurement_that_fails_after_execute_is_a_warning_and_the_execution_stands(monkeypatch, capsys) -> None:
    from planner.cli import accuracy as accuracy_cli
    from planner.cli.execution import _measure_after
    from planner.execute.report import ActionResult, ExecutionReport
    from planner.lifecycle import AttemptStatus, PlanStatus

    def failing(*args, **kwargs):
        raise RuntimeError("snapshot 9 holds no broker's load report: nothing to measure")

    monkeypatch.setattr(accuracy_cli, "measure_executed", failing)
    moved = ExecutionReport(7, PlanStatus.EXECUTED, actions={0: ActionResult(0, AttemptStatus.SUCCEEDED)})
    assert _measure_after(None, None, moved) is None  # type: ignore[arg-type]
    err = capsys.readouterr().err.strip()
    assert err.startswith("warning: plan 7 not measured: snapshot 9") and "accuracy measure 7" in err
    nothing_moved = ExecutionReport(7, PlanStatus.PARTIAL, actions={0: ActionResult(0, AttemptStatus.FAILED)})
    assert _measure_after(None, None, nothing_moved) is None and capsys.readouterr().err == ""  # type: ignore[arg-type]

    def defect(*args, **kwargs):
        raise KeyError("a defect is not a measurement failure")

    monkeypatch.setattr(accuracy_cli, "measure_executed", defect)
    with pytest.raises(KeyError):
        _measure_after(None, None, moved)  # type: ignore[arg-type]


def test_the_report_task_tells_the_notifiers_of_a_crossing_once(store, tmp_path, monkeypatch) -> None:
    from planner.airflow.tasks import tell_outcome
    from planner.orchestrate.measure import MeasuredOutcome
    from tests.receivers import notification_env, webhook_receiver

    runs = []
    for index in range(3):
        # Run keys as the plan DAG commits them: the run id, the cluster, the rest.
        executed_plan(store, f"run-{index}:west:1", measured_at=NOW - timedelta(hours=3 - index), scores=(60, 38))
        runs.append(f"run-{index}")
        reset_state(store)
    bound = AccuracyBound(p90=5.0, window=timedelta(days=7))
    [*_, newest] = measured_plans(store, "west")
    outcome = plan_outcome(newest.record, newest.measurement)
    with webhook_receiver() as receiver:
        for name, value in notification_env(None, receiver).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("PULSAR_REBALANCE_DB_URL", f"sqlite:///{tmp_path / 'planner.db'}")
        for _ in range(2):  # the report task run twice (a cleared task): the crossing is told the first time only
            alert = check_bound(store, "west", bound, NOW, actor="test")
            measured = MeasuredOutcome(newest.measurement, outcome, True, alert)
            tell_outcome("west", runs[-1], PlanStatus.EXECUTED, measured, {})
        events = [document["event"] for _, _, document in receiver.received]
    assert events.count("accuracy-outside") == 1 and len(events) == 3, events
    [told] = [document for _, _, document in receiver.received if document["event"] == "accuracy-outside"]
    assert told["plan"] == newest.record.id and told["cluster"] == "west" and "20.0" in told["text"], told
