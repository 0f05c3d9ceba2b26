"""The review pages and their JSON API on a store filled through the planner's own functions (plan,
commit, decision, execution records, measurement). Authentication here is a stand-in header check;
tests/integration/test_review_pages.py runs the same app inside a real Airflow api-server."""

from __future__ import annotations

import html as html_module
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.testclient import TestClient

from planner.audit.review.app import URL_PREFIX, create_app
from planner.lifecycle import Decision
from planner.plan.document import PlanDocument
from planner.plan.planning import make_plan
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import load_data_from_json
from planner.samples.dataset import write_snapshot_samples
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.models import ActionExecution, Cluster, Plan, Snapshot
from planner.store.plans import BrokerSample, SnapshotLoad, commit_plan, record_measurement
from tests.builders import broker

TOKEN = "reviewer-token"
EXAMPLE = load_data_from_json(Path("examples/load-data.json").read_text())


def require_token(authorization: str | None = Header(default=None)) -> None:
    if authorization != f"Bearer {TOKEN}":
        raise HTTPException(status_code=401, detail="Not authenticated")


def clusters_of_the_caller(x_clusters: str | None = Header(default=None)) -> frozenset[str] | None:
    """Stands in for the auth manager: the clusters whose plan DAG the caller may read."""
    return None if x_clusters is None else frozenset(filter(None, x_clusters.split(",")))


def commit(store, cluster, run, strategy="UniformLoadShedder", data=EXAMPLE):
    plan = make_plan(cluster, data, PulsarConfig.from_settings({"minUnloadMessage": "0"}), strategy, None).to_json()
    return commit_plan(
        store,
        PlanDocument.parse(plan, "plan"),
        admin_url=f"http://{cluster}:8080",
        run_key=f"{run}:{cluster}:{strategy}",
        expected_version=0 if run.endswith("-1") else 1,
    ).plan_id


@pytest.fixture
def filled(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    home = tmp_path / "home"
    pending = commit(store, "east", "manual__run-1")
    executed = commit(store, "west", "scheduled__run-1", strategy="AvgShedder")
    rejected = commit(store, "east", "manual__run-2")
    record_decision(store, rejected, Decision.REJECTED, approver=None, approved_hash="")
    with store.session() as session:
        plan = session.get(Plan, executed)
        actions_hash, actions = plan.actions_hash, list(plan.actions)
    record_decision(store, executed, Decision.APPROVED, approver="alice", approved_hash=actions_hash)
    now = datetime.now(UTC)
    with store.session() as session:
        west = session.query(Cluster).filter_by(name="west").one()
        snapshots = []
        for minutes in (30, 20, 10):
            row = Snapshot(
                cluster_id=west.id,
                taken_at=now - timedelta(minutes=minutes),
                brokers=2,
                bundles=0,
                partial=False,
                missing_brokers={},
                archive_path="-",
            )
            session.add(row)
            session.flush()
            snapshots.append((row.id, row.taken_at))
        for index, action in enumerate(actions):
            session.add(ActionExecution(action_id=action.id, attempt=1, status="failed", error="HTTP 503 from broker"))
            session.add(
                ActionExecution(
                    action_id=action.id,
                    attempt=2,
                    status="succeeded" if index else "skipped",
                    error=None if index else "bundle moved by someone else",
                )
            )
        session.get(Plan, executed).status = "executed"
    for snapshot_id, taken_at in snapshots:
        cpu = 90 - (now - taken_at).seconds / 60  # the hot broker heats up over the window
        write_snapshot_samples(
            home,
            "west",
            snapshot_id,
            taken_at,
            {"hot:8080": broker(cpu=(cpu, 100), rate_in=500), "cold:8080": broker(cpu=(100 - cpu, 100), rate_in=100)},
        )
    measured = SnapshotLoad(
        snapshots[-1][0], now, {"hot:8080": BrokerSample(score=55.0, msg_rate=300.0, throughput=0.0)}
    )
    record_measurement(store, executed, measured)
    parent = FastAPI()
    parent.mount(URL_PREFIX, create_app(lambda: store, lambda: home, [Depends(require_token)], clusters_of_the_caller))
    client = TestClient(parent, headers={"Authorization": f"Bearer {TOKEN}"})
    yield client, {"pending": pending, "executed": executed, "rejected": rejected}
    store.dispose()


def test_every_page_refuses_anonymous_requests(filled):
    client, ids = filled
    anonymous = TestClient(client.app)
    for path in (
        "/plans",
        f"/plans/{ids['executed']}",
        f"/plans/{ids['executed']}/download",
        "/clusters/west",
        "/api/plans",
        f"/api/plans/{ids['executed']}",
        "/api/clusters",
        "/api/clusters/west/history",
        "/runs/d/manual__run-1",
        "/api/openapi.json",
    ):
        assert anonymous.get(URL_PREFIX + path).status_code == 401, path
    assert (
        TestClient(client.app, headers={"Authorization": "Bearer forged"}).get(f"{URL_PREFIX}/plans").status_code == 401
    )


def test_pages_are_read_only(filled):
    client, ids = filled
    assert client.post(f"{URL_PREFIX}/api/plans/{ids['pending']}").status_code == 405
    assert client.delete(f"{URL_PREFIX}/plans/{ids['pending']}").status_code == 405


def test_plan_list_filters_and_paginates(filled):
    client, ids = filled
    everything = client.get(f"{URL_PREFIX}/api/plans").json()
    assert [p["id"] for p in everything["items"]] == sorted(ids.values(), reverse=True)
    assert everything["total"] == 3
    by_id = {p["id"]: p for p in everything["items"]}
    assert by_id[ids["executed"]]["approver"] == "alice" and by_id[ids["executed"]]["status"] == "executed"
    assert by_id[ids["rejected"]]["status"] == "rejected" and by_id[ids["pending"]]["approver"] is None
    assert by_id[ids["pending"]]["actions"] >= 1
    east = client.get(f"{URL_PREFIX}/api/plans", params={"cluster": "east"}).json()
    assert {p["id"] for p in east["items"]} == {ids["pending"], ids["rejected"]}
    pending = client.get(f"{URL_PREFIX}/api/plans", params={"status": "pending"}).json()
    assert [p["id"] for p in pending["items"]] == [ids["pending"]]
    today = datetime.now(UTC).date()
    assert client.get(f"{URL_PREFIX}/api/plans", params={"created_from": str(today)}).json()["total"] == 3
    assert (
        client.get(f"{URL_PREFIX}/api/plans", params={"created_to": str(today - timedelta(days=1))}).json()["total"]
        == 0
    )
    first = client.get(f"{URL_PREFIX}/api/plans", params={"per_page": 2}).json()
    second = client.get(f"{URL_PREFIX}/api/plans", params={"per_page": 2, "page": 2}).json()
    assert (first["pages"], len(first["items"]), len(second["items"])) == (2, 2, 1)
    assert {p["id"] for p in first["items"] + second["items"]} == set(ids.values())


def test_bad_filters_name_the_field(filled):
    client, _ = filled
    bad_status = client.get(f"{URL_PREFIX}/api/plans", params={"status": "done"})
    assert bad_status.status_code == 400 and "status" in bad_status.json()["detail"]
    bad_date = client.get(f"{URL_PREFIX}/api/plans", params={"created_from": "yesterday"})
    assert bad_date.status_code == 400 and "created_from" in bad_date.json()["detail"]
    reversed_range = client.get(
        f"{URL_PREFIX}/api/plans", params={"created_from": "2026-02-02", "created_to": "2026-02-01"}
    )
    assert reversed_range.status_code == 400 and "created_from" in reversed_range.json()["detail"]
    assert client.get(f"{URL_PREFIX}/api/plans", params={"per_page": 10_000}).status_code == 422


def test_list_page_renders_filters_rows_and_page_links(filled):
    client, ids = filled
    page = client.get(f"{URL_PREFIX}/plans", params={"cluster": "east", "per_page": 1})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert f'href="{URL_PREFIX}/plans/{ids["rejected"]}"' in html and f'/plans/{ids["executed"]}"' not in html
    assert '<option value="east" selected>' in html
    assert 'rel="next" href="?cluster=east&amp;per_page=1&amp;page=2"' in html
    assert "2 plan(s); page 1 of 2" in html
    # The filter form submits every field; empty ones mean "any".
    form = client.get(
        f"{URL_PREFIX}/plans", params={"cluster": "", "status": "rejected", "created_from": "", "created_to": ""}
    )
    assert form.status_code == 200 and f'/plans/{ids["rejected"]}"' in form.text and "1 plan(s)" in form.text


def test_plan_page_shows_actions_chart_pairs_approval_log_and_raw_json(filled):
    client, ids = filled
    plan = client.get(f"{URL_PREFIX}/api/plans/{ids['executed']}").json()
    html = client.get(f"{URL_PREFIX}/plans/{ids['executed']}").text
    assert '<figure id="load-chart"><svg' in html and "Measured after" in html
    for action in plan["actions"]:
        assert action["bundle"] in html and action["attempts"][0]["error"] == "HTTP 503 from broker"
    assert "HTTP 503 from broker" in html and "bundle moved by someone else" in html
    assert plan["approval"]["approver"] == "alice" and "alice" in html
    assert plan["pairs"] and 'id="pairs"' in html
    assert plan["measured"]["brokers"]["hot:8080"]["score"] == 55.0
    assert [e["event"] for e in plan["audit"]][:2] == ["plan.created", "plan.approved"]
    assert "plan.measured" in [e["event"] for e in plan["audit"]]
    download = client.get(f"{URL_PREFIX}/plans/{ids['executed']}/download")
    assert download.headers["content-disposition"] == f'attachment; filename="pulsar-plan-{ids["executed"]}.json"'
    assert download.json() == plan
    assert json.loads(html_module.unescape(html.split('<pre id="raw-json">')[1].split("</pre>")[0])) == plan


def test_unknown_plan_and_cluster_are_404_with_the_name(filled):
    client, _ = filled
    missing = client.get(f"{URL_PREFIX}/plans/999")
    assert missing.status_code == 404 and "999" in missing.json()["detail"]
    assert "nowhere" in client.get(f"{URL_PREFIX}/clusters/nowhere").json()["detail"]


def test_cluster_history_has_samples_and_chart(filled):
    client, _ = filled
    history = client.get(f"{URL_PREFIX}/api/clusters/west/history", params={"window": "6h"}).json()
    assert len(history["samples"]) == 6 and {s["broker"] for s in history["samples"]} == {"hot:8080", "cold:8080"}
    hot = [s["score"] for s in history["samples"] if s["broker"] == "hot:8080"]
    assert hot == sorted(hot) and hot[0] == pytest.approx(60, abs=0.1)
    html = client.get(f"{URL_PREFIX}/clusters/west").text
    assert '<figure id="history-chart"><svg' in html
    assert client.get(f"{URL_PREFIX}/api/clusters/west/history", params={"window": "1y"}).status_code == 422


def test_run_link_leads_to_the_runs_plan(filled):
    client, ids = filled
    found = client.get(f"{URL_PREFIX}/runs/pulsar_rebalance_plan_west/scheduled__run-1", follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"] == f"{URL_PREFIX}/plans/{ids['executed']}"
    assert "No plan for this run" in client.get(f"{URL_PREFIX}/runs/pulsar_rebalance_plan_west/manual__x").text
    assert client.get(f"{URL_PREFIX}/runs/other_dag/scheduled__run-1").status_code == 404


def test_each_clusters_dag_shows_its_own_plan_for_a_run_id_they_share(tmp_path):
    """Scheduled run ids are the same in every cluster's plan DAG: the DAG, not the run id alone, picks the plan."""
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    shared_run = "scheduled__run-1"
    west, east = commit(store, "west", shared_run), commit(store, "east", shared_run)
    client = TestClient(create_app(lambda: store, lambda: tmp_path, []))
    for dag_id, plan_id in (
        ("pulsar_rebalance_plan_west", west),
        ("pulsar_rebalance_plan_east", east),
        ("pulsar_rebalance_maintenance_east", east),
    ):
        found = client.get(f"/runs/{dag_id}/{shared_run}", follow_redirects=False)
        assert found.status_code == 303 and found.headers["location"] == f"/plans/{plan_id}", dag_id
    assert "No plan for this run" in client.get(f"/runs/pulsar_rebalance_plan_north/{shared_run}").text
    for unknown in ("pulsar_rebalance_collect", "other_dag", "pulsar_rebalance_plan_"):
        assert client.get(f"/runs/{unknown}/{shared_run}").status_code == 404, unknown
    store.dispose()


def test_the_openapi_document_is_served_to_logged_in_users_only(filled):
    client, _ = filled
    document = client.get(f"{URL_PREFIX}/api/openapi.json")
    assert document.status_code == 200 and "/api/plans/{plan_id}" in document.json()["paths"]


def test_a_user_sees_only_the_clusters_whose_plan_dag_they_may_read(filled):
    client, ids = filled
    east_only = {"X-Clusters": "east"}
    listed = client.get(f"{URL_PREFIX}/api/plans", headers=east_only).json()
    assert {plan["cluster"] for plan in listed["items"]} == {"east"} and listed["total"] == 2
    assert client.get(f"{URL_PREFIX}/api/clusters", headers=east_only).json() == {"clusters": ["east"]}
    assert "west" not in client.get(f"{URL_PREFIX}/plans", headers=east_only).text
    for path in (
        f"/api/plans/{ids['executed']}",
        f"/plans/{ids['executed']}",
        f"/plans/{ids['executed']}/download",
        "/api/clusters/west/history",
        "/clusters/west",
        "/runs/d/scheduled__run-1",
    ):
        assert client.get(URL_PREFIX + path, headers=east_only).status_code == 404, path
    assert client.get(f"{URL_PREFIX}/api/plans/{ids['pending']}", headers=east_only).status_code == 200
    nothing = {"X-Clusters": ""}
    assert client.get(f"{URL_PREFIX}/api/plans", headers=nothing).json()["total"] == 0


def test_a_drain_plan_page_shows_the_mode_and_the_drained_brokers_bundles_over_time(filled, tmp_path):
    client, _ = filled
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    document = {
        "cluster": "west",
        "strategy": "drain",
        "actions": [
            {"kind": "unload", "bundle": "t/ns/0x00000000_0xffffffff", "source": "hot:8080", "destination": "cold:8080"}
        ],
        "notes": ["drain hot:8080: 1 bundles, 500.0 msg/s onto 1 brokers"],
        "maintenance": {
            "mode": "drain",
            "brokers": ["hot:8080"],
            "overCapacity": ["cold:8080"],
            "scaleEvent": {"id": 3, "kind": "removal", "broker": "hot:8080"},
        },
    }
    plan_id = commit_plan(
        store,
        PlanDocument.parse(document, "plan"),
        admin_url="http://west:8080",
        run_key="drain-1:west:drain",
        expected_version=0,
    ).plan_id
    html = client.get(f"{URL_PREFIX}/plans/{plan_id}").text
    assert 'id="maintenance"' in html and "drain" in html and "predicted over the overload threshold: cold:8080" in html
    assert "drain hot:8080: 1 bundles" in html
    assert "<th>Scale event</th><td>#3: hot:8080 marked for removal (proposed, not asked for)</td>" in html
    progress = html.split('id="drain-progress"')[1].split("</table>")[0]
    assert progress.count("<tr>") == 1 + 3  # the header and the fixture's three snapshots of the last half hour
    assert client.get(f"{URL_PREFIX}/api/plans/{plan_id}").json()["maintenance"]["mode"] == "drain"
    store.dispose()


def test_the_cluster_page_says_the_latest_run_found_the_cluster_balanced_and_why(filled, tmp_path):
    from tests.unit.test_balance import cluster

    client, _ = filled
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    empty = commit(store, "north", "scheduled__run-1", strategy="AvgShedder", data=cluster({"a:80": 50, "b:80": 44}))
    store.dispose()
    html = client.get(f"{URL_PREFIX}/clusters/north").text
    latest = html[html.index('<p id="latest-run">') :]
    latest = latest[: latest.index("</p>")]
    assert f'href="{URL_PREFIX}/plans/{empty}"' in latest and "status-empty" in latest
    assert "Balanced, nothing to do: no broker pair&#39;s score gap reaches the low threshold 15" in latest
    assert "(score spread 6.0)" in latest
    page = client.get(f"{URL_PREFIX}/plans/{empty}").text
    assert '<p id="balance"><strong>Balanced, nothing to do' in page


def test_plans_are_found_by_a_bundle_or_a_broker_they_touch(filled, tmp_path):
    client, ids = filled
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    with store.session() as session:
        actions = {plan_id: list(session.get(Plan, plan_id).actions) for plan_id in ids.values()}
    store.dispose()
    [action, *_] = actions[ids["executed"]]
    namespace_free = action.bundle.rsplit("/", 1)[1].upper()  # the range only, in other case
    found = client.get(f"{URL_PREFIX}/api/plans", params={"q": namespace_free}).json()
    expected = {plan_id for plan_id, rows in actions.items() if any(row.bundle == action.bundle for row in rows)}
    assert {p["id"] for p in found["items"]} == expected and ids["executed"] in expected
    by_broker = client.get(f"{URL_PREFIX}/api/plans", params={"q": action.source}).json()
    assert ids["executed"] in {p["id"] for p in by_broker["items"]}
    # LIKE's wildcards are text here: "%" matches no bundle and no broker.
    assert client.get(f"{URL_PREFIX}/api/plans", params={"q": "%"}).json()["total"] == 0
    html = client.get(f"{URL_PREFIX}/plans", params={"q": action.source}).text
    assert f'value="{action.source}"' in html and '<table id="plans" class="sortable">' in html


def test_charts_follow_the_theme_tell_30_brokers_apart_and_have_tooltips():
    from planner.audit.review.charts import PALETTE, history_chart, plan_chart

    now = datetime.now(UTC)
    brokers = [f"broker-{index}:8080" for index in range(30)]
    samples = [
        {"broker": name, "takenAt": (now - timedelta(minutes=m)).isoformat(), "score": i + m / 10, "msgRate": 10.0 * i}
        for i, name in enumerate(brokers)
        for m in (20, 10)
    ]
    svg = history_chart(samples, [])
    assert len(set(PALETTE)) == 30
    # Each broker's line in a colour of its own (score and msg/s lines share it).
    colours = set(re.findall(r"stroke: (#[0-9a-f]{6})", svg)) & set(PALETTE)
    assert len(colours) == 30
    assert "<title>broker-29:8080: score 30.0% at" in svg and "<title>broker-29:8080: 290.0 msg/s at" in svg
    assert "var(--fg)" in svg and "#010101" not in svg and "fill: #ffffff" not in svg
    bars = plan_chart(
        [
            {"broker": name, "scoreBefore": 50.0, "scoreAfter": 40.0, "msgRateBefore": 100.0, "msgRateAfter": 80.0}
            for name in brokers[:3]
        ],
        None,
    )
    assert "<title>broker-2:8080: predicted after 80.0 msg/s</title>" in bars
