"""Calibration on the live path: the store's measured outcomes teach the next plan, the plan run hands the
calibration to the job, and the plan predicts with it and names it."""

from __future__ import annotations

from dataclasses import replace

from planner.lifecycle import AttemptStatus, PlanStatus
from planner.orchestrate.calibrate import cluster_calibration, observation_of
from planner.orchestrate.runner import PlanRequest, job_request
from planner.plan.calibration import Calibration, calibrate, model_version
from planner.plan.cluster_plan import ClusterLoad, plan_cluster
from planner.plan.document import CalibrationRecord, PlanDocument
from planner.plan.outcome import Disturbance, plan_outcome
from planner.plan.request import ClusterInputs
from planner.plan.usage_model import BROKER, RecentLoad, ResourceFit, UsageModels
from planner.store.models import ActionExecution, Plan
from planner.store.plans import Measurement, commit_plan, record_measurement
from planner.store.snapshots import list_snapshots
from tests.builders import broker, bundle, bundle_data, load_data
from tests.unit.test_collect_declarations import CLUSTER, client, cluster, store  # noqa: F401 (fixtures)
from tests.unit.test_plan_outcome import EXECUTED, MEASURED, document, measured, planned, record

# CPU 0.1 % per msg/s on both brokers; the outcome's brokers used 0.17 and 0.18 (`test_plan_outcome.measured`).
CPU = ResourceFit(30.0, 0.1, 0.0, 0.95, 100, BROKER)
NIC = ResourceFit(1.0, 0.0, 0.0, 0.95, 100, BROKER)
MODELS = UsageModels(
    brokers={name: {"cpu": CPU, "bandwidthIn": NIC, "bandwidthOut": NIC} for name in ("a:8080", "b:8080")}
)


def with_models(plan: PlanDocument) -> PlanDocument:
    return plan.model_copy(update={"usage_models": MODELS.to_json()})


def test_an_executed_plans_outcome_raises_the_cost_the_model_underestimated() -> None:
    outcome = plan_outcome(record(with_models(document())), Measurement(11, MEASURED, measured(), planned()))
    assert not outcome.disturbed
    calibration = calibrate([observation_of(outcome, MODELS)])
    assert calibration.plans == ("plan-7",)
    # 100 msg/s moved changed the brokers' CPU by 17 and 18 points where the model said 10: shrunk towards 1.
    assert 1.3 < calibration.scale("a:8080", "cpu") < 1.7 and 1.3 < calibration.scale("b:8080", "cpu") < 1.7
    assert calibration.scale("a:8080", "bandwidthIn") == 1.0  # no NIC cost modelled, none learnt


def test_a_disturbed_outcome_teaches_nothing_and_is_counted_by_its_reason() -> None:
    failed = record(with_models(document()), status=AttemptStatus.FAILED, error="refused")
    outcome = plan_outcome(failed, Measurement(11, MEASURED, measured(), planned()))
    assert outcome.disturbed
    calibration = calibrate([observation_of(outcome, MODELS)])
    assert calibration.identity and calibration.plans == ()
    assert calibration.skipped == {Disturbance.NOT_APPLIED.value: 1}


def uneven():
    """a:8080 at 8,000 msg/s in, b:8080 at 2,000, c:8080 at 1,000: UniformLoadShedder moves a bundle off a."""
    hot = [bundle(index) for index in range(8)]
    return load_data(
        {
            "a:8080": broker(cpu=(60, 100), rate_in=8000, throughput_in=8e5, bundles=hot),
            "b:8080": broker(cpu=(20, 100), rate_in=2000, throughput_in=2e5, bundles=[bundle(9)]),
            "c:8080": broker(cpu=(10, 100), rate_in=1000, throughput_in=1e5, bundles=[bundle(10)]),
        },
        {
            **{name: bundle_data(1000, 0, 1e5, 0) for name in (*hot, bundle(10))},
            bundle(9): bundle_data(2000, 0, 2e5, 0),
        },
    )


# 0.005 % CPU per msg/s: a 1,000 msg/s bundle costs 5 points.
LIGHT = UsageModels(
    brokers={
        name: {"cpu": replace(CPU, per_msg=0.005), "bandwidthIn": NIC, "bandwidthOut": NIC}
        for name in ("a:8080", "b:8080", "c:8080")
    }
)


def plan_with(calibration: CalibrationRecord | None) -> PlanDocument:
    inputs = ClusterInputs(calibration=calibration)
    load = ClusterLoad(uneven(), 1, {}, {})
    return plan_cluster("east", load, inputs, "UniformLoadShedder", now_millis=0, usage_models=LIGHT)


def test_the_plan_predicts_with_the_calibration_keeps_the_fit_and_names_both() -> None:
    plain = plan_with(None)
    [action] = plain.actions
    destination = action.destination
    assert destination is not None
    doubled = Calibration(scales={destination: {BROKER: {"cpu": 2.0}}}, plans=("plan-1", "plan-2"))
    calibrated = plan_with(CalibrationRecord.of(doubled))
    assert calibrated.actions == plain.actions
    before = {forecast.broker: forecast.score_before for forecast in plain.brokers}
    predicted = {forecast.broker: forecast.score_after for forecast in plain.brokers}
    predicted_calibrated = {forecast.broker: forecast.score_after for forecast in calibrated.brokers}
    assert predicted[destination] - before[destination] == 5.0
    assert predicted_calibrated[destination] - before[destination] == 10.0
    assert predicted_calibrated["a:8080"] == predicted["a:8080"] == before["a:8080"] - 5.0
    # The fit as fitted (what the next calibration judges), its version, and the calibration applied.
    assert calibrated.usage_models == LIGHT.to_json() and calibrated.model_version == model_version(LIGHT)
    assert calibrated.calibration is not None and calibrated.calibration.version == doubled.version
    assert plain.calibration is None and plain.model_version == model_version(LIGHT)
    # Switched off: learnt and recorded, not applied.
    off = plan_with(CalibrationRecord.of(doubled, enabled=False))
    assert {forecast.broker: forecast.score_after for forecast in off.brokers} == predicted
    assert off.calibration is not None and not off.calibration.enabled
    assert PlanDocument.parse(calibrated.to_json(), "plan") == calibrated


def measured_plan(store, run: str) -> int:  # noqa: F811 (the store fixture)
    plan = with_models(document()).model_copy(update={"cluster": CLUSTER})
    plan_id = commit_plan(store, plan, admin_url="http://fake", run_key=run, expected_version=0).plan_id
    with store.session() as session:
        row = session.get(Plan, plan_id)
        row.status = PlanStatus.EXECUTED.value
        for action in row.actions:
            session.add(ActionExecution(action_id=action.id, attempt=1, status="succeeded", finished_at=EXECUTED))
    snapshot = list_snapshots(store, CLUSTER, limit=1)[0].id
    record_measurement(store, plan_id, replace(measured(), snapshot_id=snapshot), planned=planned())
    return plan_id


def test_the_plan_run_hands_the_clusters_calibration_to_the_job(cluster, store, tmp_path) -> None:  # noqa: F811
    from planner.collect.collector import collect

    entry, _ = cluster
    collect(client(entry), store, tmp_path)
    plan_id = measured_plan(store, "measured-1")
    learnt = cluster_calibration(store, CLUSTER, 5)
    assert learnt.plans == (f"plan-{plan_id}",) and learnt.scales["a:8080"][BROKER]["cpu"] > 1.3

    asked = PlanRequest(clusters=(CLUSTER,), strategy="UniformLoadShedder", settings={}, calibration_window=5)
    request = job_request(store, asked)
    assert request.inputs[CLUSTER].calibration == learnt
    # Through the job's input file as written and read.
    assert type(request).model_validate_json(request.model_dump_json()).inputs[CLUSTER].calibration == learnt
    off = job_request(store, replace(asked, calibrate=False)).inputs[CLUSTER].calibration
    assert off is not None and not off.enabled and off.version == learnt.version
    assert job_request(store, replace(asked, calibration_window=None)).inputs[CLUSTER].calibration is None


def test_plans_show_and_the_plan_page_name_the_model_and_the_calibration(store, tmp_path) -> None:  # noqa: F811
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from planner.audit.plan_records import show_plan
    from planner.audit.review.app import URL_PREFIX, create_app

    learnt = Calibration(scales={"c:8080": {BROKER: {"cpu": 2.0}}}, plans=("plan-1", "plan-2"))
    record = CalibrationRecord.of(replace(learnt, skipped={"traffic-changed": 1}))
    calibrated = commit_plan(store, plan_with(record), admin_url="http://east", run_key="r1", expected_version=0)
    plain = commit_plan(store, plan_with(None), admin_url="http://east", run_key="r2", expected_version=1)

    shown = show_plan(store, calibrated.plan_id).to_json()
    assert shown["modelVersion"] == model_version(LIGHT)
    assert shown["calibration"]["version"] == record.version and shown["calibration"]["plans"] == ["plan-1", "plan-2"]

    parent = FastAPI()
    parent.mount(URL_PREFIX, create_app(lambda: store, lambda: tmp_path, []))
    client = TestClient(parent)
    page = client.get(f"{URL_PREFIX}/plans/{calibrated.plan_id}").text
    line = page.split('id="prediction-model">')[1].split("</p>")[0]
    assert model_version(LIGHT) in line and record.version in line
    assert "learnt from 2 executed plans; skipped 1 traffic-changed" in line
    line = client.get(f"{URL_PREFIX}/plans/{plain.plan_id}").text.split('id="prediction-model">')[1].split("</p>")[0]
    assert "uncalibrated" in line
    assert 'class="muted start"' not in page  # the predictions start from the reports: nothing more to say

    # b's samples of the last 15 minutes averaged 56 points at 1,900 msg/s: at its 2,000 now it starts from 56.5.
    recent = RecentLoad(usage=56.0, messages=1900.0, volume=0.0, samples=3)
    fits = {**LIGHT.brokers["b:8080"], "cpu": replace(LIGHT.brokers["b:8080"]["cpu"], recent=recent)}
    models = UsageModels(brokers={**LIGHT.brokers, "b:8080": fits})
    load = ClusterLoad(uneven(), 1, {}, {})
    smoothed = plan_cluster("east", load, ClusterInputs(), "UniformLoadShedder", now_millis=0, usage_models=models)
    [start] = [forecast.score_start for forecast in smoothed.brokers if forecast.broker == "b:8080"]
    assert start == 56.0 + 0.005 * 100
    committed = commit_plan(store, smoothed, admin_url="http://east", run_key="r3", expected_version=2)
    assert "from 56.5</span>" in client.get(f"{URL_PREFIX}/plans/{committed.plan_id}").text
