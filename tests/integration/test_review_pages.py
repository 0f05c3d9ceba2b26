"""The review pages inside a real Airflow api-server (plugin loaded from plugins/), on the store the
approved plan DAG run filled: the JSON API with Airflow tokens, and the pages in headless Chromium.
Screenshots go to test-output/review-pages/."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, Page, sync_playwright

from tests.integration.conftest import airflow_api_server

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.browser]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "review-pages"
# Chromium's background services try to reach Google's hosts; this machine allows loopback only.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def server(approved_cycle):
    with airflow_api_server(approved_cycle["env"], {"reviewer": "viewer"}) as running:
        yield running


@pytest.fixture(scope="module")
def plan(server):
    [only] = server.session("reviewer").get(f"{server.url}/pulsar-planner/api/plans", timeout=30).json()["items"]
    return only


@pytest.fixture(scope="module")
def browser() -> Browser:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, server) -> Page:
    """A page logged in as the reviewer through Airflow's own login form."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.goto(f"{server.url}/auth/login?next=%2Fpulsar-planner%2Fplans")
    opened.fill("input[name=username]", "reviewer")
    opened.fill("input[name=password]", server.passwords["reviewer"])
    opened.keyboard.press("Enter")
    opened.wait_for_url("**/pulsar-planner/plans", timeout=30_000)
    yield opened
    context.close()


def test_api_refuses_anonymous_and_forged_tokens(server, plan):
    paths = ("/pulsar-planner/plans", "/pulsar-planner/api/plans", f"/pulsar-planner/plans/{plan['id']}")
    for path in (*paths, "/pulsar-planner/api/openapi.json"):
        assert requests.get(server.url + path, timeout=30).status_code == 401, path
    document = server.session("reviewer").get(f"{server.url}/pulsar-planner/api/openapi.json", timeout=30)
    assert document.status_code == 200 and "/api/plans" in document.json()["paths"]
    forged = requests.get(
        f"{server.url}/pulsar-planner/api/plans", headers={"Authorization": "Bearer not.a.jwt"}, timeout=30
    )
    assert forged.status_code in {401, 403}


def test_api_serves_the_executed_cycle(server, plan, approved_cycle):
    session = server.session("reviewer")
    assert plan["status"] == "executed" and plan["actions"] >= 1 and plan["approver"]
    detail = session.get(f"{server.url}/pulsar-planner/api/plans/{plan['id']}", timeout=30).json()
    assert [a["result"] for a in detail["actions"]] == ["succeeded"] * len(detail["actions"])
    assert all(a["source"] == approved_cycle["hot"] for a in detail["actions"] if a["kind"] == "unload")
    assert detail["approval"]["decision"] == "approved" and detail["measured"]["brokers"]
    events = [event["event"] for event in detail["audit"]]
    chain = ["plan.created", "plan.approval-requested", "plan.approved", "plan.claimed", "plan.execution-started"]
    assert [event for event in events if event in chain] == chain and "plan.measured" in events
    cluster = detail["cluster"]
    history = session.get(f"{server.url}/pulsar-planner/api/clusters/{cluster}/history", timeout=60).json()
    assert [execution["plan"] for execution in history["executions"]] == [plan["id"]]
    assert len({sample["snapshotId"] for sample in history["samples"]}) >= 4  # three before, one after
    run_key = detail["runKey"].split(":")[0]
    link = session.get(
        f"{server.url}/pulsar-planner/runs/pulsar_rebalance_plan_{cluster}/{run_key}", allow_redirects=False, timeout=30
    )
    assert link.status_code == 303 and link.headers["location"].endswith(f"/pulsar-planner/plans/{plan['id']}")


def test_pages_render_filter_and_chart_in_chromium(page, server, plan):
    page.screenshot(path=SCREENSHOTS / "plans.png", full_page=True)
    rows = page.locator("#plans tbody tr")
    assert rows.count() == 1 and f"#{plan['id']}" in rows.first.inner_text()
    assert "executed" in rows.first.inner_text()

    page.select_option("#filter-status", "rejected")
    page.click("button[type=submit]")
    page.wait_for_url("**status=rejected**")
    assert page.locator("#plans tbody").inner_text().strip() == "No plans match."
    page.select_option("#filter-status", "executed")
    page.select_option("#filter-cluster", plan["cluster"])
    page.click("button[type=submit]")
    page.wait_for_url("**status=executed**")
    assert page.locator("#plans tbody tr").count() == 1
    page.screenshot(path=SCREENSHOTS / "plans-filtered.png", full_page=True)

    page.click(f"text=#{plan['id']}")
    page.wait_for_url(f"**/pulsar-planner/plans/{plan['id']}")
    assert page.locator("#load-chart svg").count() == 1
    assert page.locator("#load-chart svg").bounding_box()["width"] > 300
    assert "Measured after" in page.locator("#brokers thead").inner_text()
    assert page.locator("#actions tbody tr").count() == plan["actions"]
    assert page.locator("#execution-log tbody tr").count() >= plan["actions"]
    assert page.locator("#plan-status").inner_text() == "executed"
    with page.expect_download() as download:
        page.click("text=Download the plan as JSON")
    assert download.value.suggested_filename == f"pulsar-plan-{plan['id']}.json"
    page.screenshot(path=SCREENSHOTS / "plan-detail.png", full_page=True)

    page.click("text=cluster load history")
    page.wait_for_url(f"**/pulsar-planner/clusters/{plan['cluster']}")
    assert page.locator("#history-chart svg").count() == 1
    assert page.locator("#executions tbody tr").count() == 1
    page.screenshot(path=SCREENSHOTS / "cluster-history.png", full_page=True)


def test_pages_appear_inside_the_airflow_ui(page, server):
    page.goto(f"{server.url}/plugin/pulsar-rebalance-plans")
    frame = page.frame_locator("iframe")
    assert frame.locator("h1").inner_text(timeout=30_000) == "Rebalance plans"
    page.screenshot(path=SCREENSHOTS / "inside-airflow.png", full_page=True)
