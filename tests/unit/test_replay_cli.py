"""`simulate --replay` on a store and samples written through the product's own functions: snapshots staged,
archived and published as a collect does, live plans committed as the plan run does; the check of the live plans,
the stored result and the review's replay page."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from planner import storage
from planner.audit.replays import latest_replay
from planner.audit.review.app import URL_PREFIX, create_app
from planner.cli import main
from planner.collect.collector import load_data_for_snapshot
from planner.plan.cluster_plan import ClusterLoad, plan_cluster
from planner.plan.document import PlanDocument
from planner.plan.request import ClusterInputs
from planner.plan.usage_model import planning_models
from planner.pulsar.model import NamespaceBundleStats
from planner.samples.dataset import read_samples, write_snapshot_samples
from planner.simulator.live_check import check_live_plans
from planner.simulator.recorded import read_history
from planner.store.database import Store
from planner.store.plans import commit_plan_once, read_state
from planner.store.snapshots import NewSnapshot, publish_snapshot, stage_snapshot
from tests.builders import broker, bundle

CLUSTER = "east"
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
HARDWARE = {"a:8080": (8, 0.004, 3.0), "b:8080": (8, 0.002, 2.0), "c:8080": (8, 0.002, 2.0)}
STRATEGY = "UniformLoadShedder"


def reports_at(k: int) -> dict:
    """Broker a holds six busy bundles, b two, c none: UniformLoadShedder moves from a to c."""
    owners = {bundle(i): "a:8080" if i < 6 else "b:8080" for i in range(8)}
    reports = {}
    for broker_id, (cores, per_msg, background) in HARDWARE.items():
        stats = {
            name: NamespaceBundleStats(
                msg_rate_in=1000.0 + 100 * i + 50 * ((k + i) % 4), msg_rate_out=500.0, msg_throughput_in=1e5, topics=2
            )
            for i, (name, owner) in enumerate(sorted(owners.items()))
            if owner == broker_id
        }
        messages = sum(s.msg_rate_in + s.msg_rate_out for s in stats.values())
        reports[broker_id] = broker(
            cpu=((background + per_msg * messages) * cores, cores * 100),
            memory=(100, 1000),
            rate_in=sum(s.msg_rate_in for s in stats.values()),
            rate_out=sum(s.msg_rate_out for s in stats.values()),
            throughput_in=sum(s.msg_throughput_in for s in stats.values()),
            bundles=stats,
            last_stats=stats,
        )
    return reports


def collect_snapshot(store: Store, root: Path, taken_at: datetime, reports: dict) -> int:
    """Stage, archive, write the samples and publish, as a collect does."""
    new = NewSnapshot(CLUSTER, "http://east:8080", taken_at, len(reports), 8, {}, None, None)
    archive = storage.join(storage.to_uri(root), "archive", f"{taken_at:%Y%m%d%H%M}.json.gz")
    snapshot_id = stage_snapshot(store, new, lambda _: archive)
    document = {
        "loadReports": {b: r.model_dump_json(by_alias=True) for b, r in reports.items()},
        "bundleBoundaries": {},
    }
    storage.write_bytes(archive, gzip.compress(json.dumps(document).encode()))
    write_snapshot_samples(root, CLUSTER, snapshot_id, taken_at, reports)
    assert publish_snapshot(store, snapshot_id, CLUSTER, "test", brokers=len(reports), missing=[])
    return snapshot_id


def live_plan(store: Store, root: Path, snapshot_id: int, created_at: datetime) -> PlanDocument:
    """The plan the plan run would commit for this snapshot (the job's pure planner on the recorded load)."""
    rows = read_samples(root, "brokers", CLUSTER, up_to_snapshot=snapshot_id)
    models = planning_models(rows.to_pydict())
    stored = read_state(store, CLUSTER, STRATEGY)
    inputs = ClusterInputs(state=stored.state, include_splits=False)
    load = ClusterLoad(load_data_for_snapshot(store, root, snapshot_id), snapshot_id, {}, {})
    now = int(created_at.timestamp() * 1000)
    return plan_cluster(CLUSTER, load, inputs, STRATEGY, now_millis=now, usage_models=models)


def commit_live(store: Store, plan: PlanDocument, snapshot_id: int, created_at: datetime) -> int:
    version = read_state(store, CLUSTER, STRATEGY).version
    result = commit_plan_once(
        store,
        plan,
        admin_url="http://east:8080",
        run_key=f"scheduled__{snapshot_id}:{CLUSTER}:{STRATEGY}",
        expected_version=version,
        snapshot_id=snapshot_id,
    )
    from planner.store.models import Plan

    with store.session() as session:
        session.get(Plan, result.plan_id).created_at = created_at
    return result.plan_id


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    root = tmp_path / "home"
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(root))
    monkeypatch.setenv("PULSAR_REBALANCE_DB_URL", f"sqlite:///{tmp_path / 'planner.db'}")
    snapshots = [collect_snapshot(store, root, START + timedelta(minutes=5 * k), reports_at(k)) for k in range(16)]
    plans = []
    for k in (13, 15):
        created = START + timedelta(minutes=5 * k, seconds=30)
        plans.append(commit_live(store, live_plan(store, root, snapshots[k], created), snapshots[k], created))
    yield store, root, plans
    store.dispose()


def window() -> tuple[datetime, datetime]:
    return START, START + timedelta(hours=2)


def test_the_live_plans_replanned_from_the_recording_are_equal(recorded):
    store, root, plans = recorded
    history = read_history(root, store, CLUSTER, *window())
    check = check_live_plans(store, root, history, *window())
    assert [plan.plan for plan in check.plans] == plans
    assert check.plans[0].live, "the first live plan moves bundles"
    assert all(plan.equal for plan in check.plans) and check.consistent
    assert check.plans[0].minute == 65


def test_a_live_plan_that_differs_from_its_replanning_is_named(recorded):
    store, root, plans = recorded
    from planner.store.models import PlanAction

    with store.session() as session:  # the live plan sent one bundle elsewhere than the planner would have
        action = session.query(PlanAction).filter_by(plan_id=plans[0]).order_by(PlanAction.sequence).first()
        action.destination = "b:8080" if action.destination != "b:8080" else "c:8080"
        moved = action.bundle
    history = read_history(root, store, CLUSTER, *window())
    check = check_live_plans(store, root, history, *window())
    assert not check.consistent
    first = check.to_json()["results"][0]
    assert not first["equal"] and any(moved in text for text in first["onlyLive"])


def test_cli_replays_every_policy_checks_the_live_plans_and_stores_the_result(recorded, capsys):
    store, root, _ = recorded
    start, end = (moment.isoformat() for moment in window())
    code = main(["simulate", "--replay", CLUSTER, "--from", start, "--to", end, "--check-live", "--store"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["cluster"] == CLUSTER and out["snapshots"] == 16
    assert "ThresholdShedder" in out["policies"] and "offline:AvgShedder" in out["policies"]
    assert out["policies"]["offline:AvgShedder"]["p95Score"] > 0
    assert out["live"]["consistent"] and out["live"]["checked"] == 2
    stored = latest_replay(root, CLUSTER)
    assert stored.live is not None and stored.live.consistent
    assert {o.policy for o in stored.outcomes} == set(out["policies"])
    # the review's replay page shows the stored result, computing nothing
    parent = FastAPI()
    parent.mount(URL_PREFIX, create_app(lambda: store, lambda: root, []))
    page = TestClient(parent).get(f"{URL_PREFIX}/clusters/{CLUSTER}/replay")
    assert page.status_code == 200
    assert "offline:AvgShedder" in page.text and "consistent" in page.text
    api = TestClient(parent).get(f"{URL_PREFIX}/api/clusters/{CLUSTER}/replay").json()
    assert api["cluster"] == CLUSTER and api["live"]["consistent"]


def test_the_replay_page_says_when_no_replay_is_stored(recorded):
    store, root, _ = recorded
    parent = FastAPI()
    parent.mount(URL_PREFIX, create_app(lambda: store, lambda: root, []))
    page = TestClient(parent).get(f"{URL_PREFIX}/clusters/{CLUSTER}/replay")
    assert page.status_code == 404 and "no stored replay yet" in page.text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--from", "yesterday", "--to", "2026-03-02T10:00Z"], "invalid --from 'yesterday'"),
        (["--from", "2026-03-02T10:00Z"], "simulate --replay needs --to TIME"),
        (["--from", "2026-03-02T10:00Z", "--to", "2026-03-02T09:00Z"], "invalid --to 2026-03-02T09:00Z: not after"),
        (["--from", "2026-03-01T00:00Z", "--to", "2026-03-01T01:00Z"], "no published snapshot from"),
        (["--from", "2026-03-02T08:00Z", "--to", "2026-03-02T10:00Z", "--scenario", "spike"], "invalid --scenario"),
        (
            ["--from", "2026-03-02T08:00Z", "--to", "2026-03-02T10:00Z", "--cluster-policies", "both"],
            "invalid --cluster",
        ),
    ],
)
def test_cli_bad_input_is_one_line_naming_the_field_and_exit_2(recorded, capsys, argv, message):
    code = main(["simulate", "--replay", CLUSTER, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_the_daily_replay_stores_the_week_before_now_with_its_check(recorded):
    from planner.orchestrate.daily_replay import replay_last_week

    store, root, plans = recorded
    now = START + timedelta(hours=2)
    done = replay_last_week(store, root, CLUSTER, now)
    assert done.snapshots == 16 and done.live_plans == len(plans) and done.consistent
    stored = latest_replay(root, CLUSTER)
    assert stored.made_at == now and stored.start == START
    assert stored.live is not None and stored.live.equal == len(plans)


def test_cli_table_names_each_live_plan_and_plots_go_into_the_directory(recorded, capsys, tmp_path):
    start, end = (moment.isoformat() for moment in window())
    plots = tmp_path / "plots"
    argv = ["simulate", "--replay", CLUSTER, "--from", start, "--to", end, "--policy", "AvgShedder"]
    code = main([*argv, "--check-live", "--format", "table", "--plots", str(plots)])
    out = capsys.readouterr().out
    assert code == 0
    assert "scenario replay-east" in out and "AvgShedder" in out
    assert "live plans of east: 2 replanned from the recording, 2 equal (consistent)" in out
    assert (plots / "replay-east.png").stat().st_size > 0


def test_an_executed_unload_the_next_snapshot_shows_elsewhere_is_said_not_applied(recorded):
    from planner.store.models import ActionExecution, PlanAction

    store, root, plans = recorded
    finished = START + timedelta(minutes=66)  # after the first live plan, before the snapshot at minute 70
    with store.session() as session:
        action = session.query(PlanAction).filter_by(plan_id=plans[0]).order_by(PlanAction.sequence).first()
        session.add(ActionExecution(action_id=action.id, attempt=1, status="succeeded", finished_at=finished))
        bundle, source = action.bundle, action.source
    history = read_history(root, store, CLUSTER, *window())
    check = check_live_plans(store, root, history, *window())
    # The recording never moved it: the snapshot after the execution still has it on its source.
    assert check.plans[0].not_applied == (f"{bundle}: planned to c:8080, on {source} at snapshot 15",)
    assert check.plans[0].equal  # what was planned is still what the recording gives
    assert check.plans[1].not_applied == ()
