"""The review pages inside a real Airflow api-server (plugin loaded from plugins/), on the store the
approved plan DAG run filled: the JSON API with Airflow tokens, and the pages in headless Chromium, in
light and dark mode. Screenshots go to test-output/review-pages/."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest
import requests
from playwright.sync_api import Page

from tests.integration.conftest import SCREENSHOTS, airflow_api_server, logged_in

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.browser]


@pytest.fixture(scope="module")
def server(approved_cycle):
    with airflow_api_server(approved_cycle["env"], {"reviewer": "viewer", "platform": "admin"}) as running:
        yield running


@pytest.fixture(scope="module")
def plan(server):
    [only] = server.session("reviewer").get(f"{server.url}/pulsar-planner/api/plans", timeout=30).json()["items"]
    return only


@pytest.fixture
def page(browser, server) -> Iterator[Page]:
    with logged_in(browser, server, "reviewer", "/pulsar-planner/plans") as opened:
        yield opened


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
    run_key = detail["runKey"].split(f":{cluster}:")[0]  # the run id (which has colons of its own)
    link = session.get(
        f"{server.url}/pulsar-planner/runs/pulsar_rebalance_plan_{cluster}/{run_key}", allow_redirects=False, timeout=30
    )
    assert link.status_code == 303 and link.headers["location"].endswith(f"/pulsar-planner/plans/{plan['id']}")


def test_the_approval_request_links_to_the_gates_required_action_form(page, server, plan, approved_cycle):
    [request] = [body for _, _, body in approved_cycle["receiver"].received if body["event"] == "awaiting-approval"]
    form = request["link"]
    # Airflow's own route for the gate's task instance, served where `[api] base_url` says.
    _, dags, dag_id, runs, run_id, tasks, task_id, action = urlsplit(form).path.split("/")
    assert form.startswith(server.url) and (dags, runs, tasks, action) == ("dags", "runs", "tasks", "required_actions")
    answered = server.session("reviewer").get(
        f"{server.url}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/-1/hitlDetails",
        timeout=30,
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["chosen_options"] == ["Approve"] and f"(plan {plan['id']})" in answered.json()["subject"]
    # The link opens the Required Action in the UI: the gate's request, as the approver saw it.
    page.goto(form)
    page.get_by_text(f"(plan {plan['id']})").first.wait_for(timeout=30_000)
    assert urlsplit(page.url).path.endswith("/tasks/approve/required_actions")
    page.screenshot(path=SCREENSHOTS / "required-action.png", full_page=True)


def test_the_connection_form_offers_the_webhook_type(server):
    offered = server.session("platform").get(f"{server.url}/ui/connections/hook_meta", timeout=60)
    assert offered.status_code == 200, offered.text
    [webhook] = [meta for meta in offered.json() if meta["connection_type"] == "pulsar_rebalance_webhook"]
    assert webhook["hook_name"] == "Pulsar rebalance webhook"
    assert {"headers", "routing_key"} <= set(webhook["extra_fields"])


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
    # The report task measured it: each broker's prediction against its measured load, and whether it was disturbed.
    assert page.locator("#outcome tbody tr").count() >= 2 and page.locator("#outcome-disturbed").count() == 1
    # The configuration the plan used: the cycle's two settings highlighted over the cluster's own values, the
    # release the brokers run, and no warning (the local cluster's own shedding and splitting are off).
    overrides = page.locator("#configuration tr.override code").all_inner_texts()
    assert sorted(overrides) == ["maxUnloadPercentage", "minUnloadMessage"], overrides
    assert page.locator("#configuration tbody tr").count() > 50
    assert "cluster" in page.locator("#configuration tbody").inner_text()
    plain = page.locator("#configuration tr:not(.override):not(.disagree) td").first
    highlighted = page.locator("#configuration tr.override td").first

    def background_of(cell) -> str:
        return cell.evaluate("cell => getComputedStyle(cell).backgroundColor")

    assert background_of(highlighted) != background_of(plain)
    assert "(the brokers' release)" in page.locator("#release").inner_text()
    assert page.locator("#policies-read").inner_text() == "read"
    assert page.locator("#competing-controllers").count() == 0
    with page.expect_download() as download:
        page.click("text=Download the plan as JSON")
    assert download.value.suggested_filename == f"pulsar-plan-{plan['id']}.json"
    page.screenshot(path=SCREENSHOTS / "plan-detail.png", full_page=True)

    page.click("text=cluster load history")
    page.wait_for_url(f"**/pulsar-planner/clusters/{plan['cluster']}")
    assert page.locator("#history-chart svg").count() == 1
    assert page.locator("#executions tbody tr").count() == 1
    assert page.locator("#accuracy-chart svg").count() == 1 and page.locator("#accuracy-misses tbody tr").count() == 1
    page.screenshot(path=SCREENSHOTS / "cluster-history.png", full_page=True)


def test_pages_appear_inside_the_airflow_ui(page, server):
    page.goto(f"{server.url}/plugin/pulsar-rebalance-plans")
    frame = page.frame_locator("iframe")
    assert frame.locator("h1").inner_text(timeout=30_000) == "Rebalance plans"
    page.screenshot(path=SCREENSHOTS / "inside-airflow.png", full_page=True)


def msg_rates(page: Page) -> list[float]:
    return [float(text.replace(",", "")) for text in page.locator("#actions tbody td:nth-child(6)").all_inner_texts()]


def background(page: Page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_pages_follow_the_theme_sort_search_and_show_tooltips(browser, server, plan, theme):
    expected = {"light": "rgb(255, 255, 255)", "dark": "rgb(17, 19, 23)"}[theme]
    with logged_in(browser, server, "reviewer", "/pulsar-planner/plans", color_scheme=theme) as page:
        assert page.evaluate("document.documentElement.dataset.theme") == theme and background(page) == expected
        page.screenshot(path=SCREENSHOTS / f"plans-{theme}.png", full_page=True)

        page.goto(f"{server.url}/pulsar-planner/plans/{plan['id']}")
        assert background(page) == expected
        # A tooltip on every bar (score and msg/s; before, predicted, measured) of every broker.
        brokers = page.locator("#brokers tbody tr").count()
        assert page.locator("#load-chart svg g[id^=bar-] > title").count() == brokers * 2 * 3
        # Sort the actions by msg/s, both ways.
        header = page.locator("#actions thead th", has_text="msg/s")
        header.click()
        ascending = [
            float(v.replace(",", "")) for v in page.locator("#actions tbody td:nth-child(6)").all_inner_texts()
        ]
        assert ascending == sorted(ascending) and header.get_attribute("aria-sort") == "ascending"
        header.click()
        descending = [
            float(v.replace(",", "")) for v in page.locator("#actions tbody td:nth-child(6)").all_inner_texts()
        ]
        assert descending == sorted(ascending, reverse=True)
        page.screenshot(path=SCREENSHOTS / f"plan-{theme}.png", full_page=True)
        # Search one bundle: its row only.
        bundle = page.locator("#actions tbody td:nth-child(3)").first.inner_text()
        page.fill("#search-actions", bundle.rsplit("/", 1)[1])
        assert page.locator("#actions tbody tr:visible").count() == 1
        page.fill("#search-actions", "no-such-bundle")
        assert page.locator("#actions tbody tr:visible").count() == 0
        page.fill("#search-actions", "")
        assert page.locator("#actions tbody tr:visible").count() == plan["actions"]

        page.goto(f"{server.url}/pulsar-planner/clusters/{plan['cluster']}")
        assert background(page) == expected
        assert page.locator("#history-chart svg g[id^=line-] > title").count() >= 2 * 3  # three brokers
        page.screenshot(path=SCREENSHOTS / f"cluster-{theme}.png", full_page=True)


def test_the_pages_follow_the_mode_chosen_in_airflow_over_the_systems(browser, server):
    with logged_in(browser, server, "reviewer", "/pulsar-planner/plans", color_scheme="light") as page:
        # Airflow's UI keeps the user's choice in localStorage "theme"; the plugin page is on the same origin.
        page.evaluate("localStorage.setItem('theme', 'dark')")
        page.goto(f"{server.url}/plugin/pulsar-rebalance-plans")
        frame = page.frame_locator("iframe")
        assert frame.locator("h1").inner_text(timeout=30_000) == "Rebalance plans"
        assert frame.locator("html").get_attribute("data-theme") == "dark"
        page.screenshot(path=SCREENSHOTS / "inside-airflow-dark.png", full_page=True)
