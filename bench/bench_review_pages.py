"""The review pages with 10,000 plans in the store (goal: the list page under a second server-side).

Fills a fresh store through the planner's own commit (plans of the shipped example's LoadData, across
4 clusters, a third of them decided and executed), then times each page in-process (FastAPI's test
client: routing, queries, templates, charts; no network), best and median of repeated requests.
Usage: python bench/bench_review_pages.py [--plans N] [--db-url URL]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from planner.audit.review.app import URL_PREFIX, create_app
from planner.lifecycle import Decision
from planner.plan.document import PlanDocument
from planner.plan.planning import make_plan
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import load_data_from_json
from planner.store.approvals import record_decision
from planner.store.database import Store
from planner.store.plans import commit_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "load-data.json"
CLUSTERS = ("east", "west", "north", "south")


def fill(store: Store, plans: int) -> None:
    data = load_data_from_json(EXAMPLE.read_text())
    plan = make_plan("east", data, PulsarConfig.from_settings({"minUnloadMessage": "0"}), "UniformLoadShedder", None)
    document = plan.to_json()
    versions = dict.fromkeys(CLUSTERS, 0)
    started = time.perf_counter()
    for index in range(plans):
        cluster = CLUSTERS[index % len(CLUSTERS)]
        committed = commit_plan(
            store,
            PlanDocument.parse({**document, "cluster": cluster}, "plan"),
            admin_url=f"http://{cluster}:8080",
            run_key=f"bench-{index}",
            expected_version=versions[cluster],
        )
        versions[cluster] = committed.state_version
        if index % 3 == 0:
            decision = Decision.APPROVED if index % 2 == 0 else Decision.REJECTED
            record_decision(store, committed.plan_id, decision, approver="bench", approved_hash=plan.actions_hash)
    print(f"filled {plans:,} plans in {time.perf_counter() - started:.1f} s")


def timed(client: TestClient, path: str, repeats: int) -> tuple[float, float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(path)
        seconds.append(time.perf_counter() - started)
        response.raise_for_status()
    return min(seconds), statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--db-url", help="an empty database to fill (default: a temporary SQLite file)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        store = Store(args.db_url or f"sqlite:///{scratch}/planner.db")
        fill(store, args.plans)
        parent = FastAPI()
        parent.mount(URL_PREFIX, create_app(lambda: store, lambda: Path(scratch), []))
        client = TestClient(parent)
        middle = args.plans // 2
        pages = {
            "list, first page": "/plans",
            "list, page 200 of 400": "/plans?page=200",
            "list, cluster + status filter": "/plans?cluster=west&status=approved",
            "list, date range": "/plans?created_from=2020-01-01&created_to=2100-01-01&page=100",
            "list API (JSON)": "/api/plans?per_page=100",
            "plan detail with chart": f"/plans/{middle}",
            "plan API (JSON)": f"/api/plans/{middle}",
        }
        print(f"{'page':<34}{'best (ms)':>12}{'median (ms)':>14}")
        for name, path in pages.items():
            best, median = timed(client, URL_PREFIX + path, args.repeats)
            print(f"{name:<34}{best * 1000:>12.1f}{median * 1000:>14.1f}")
        store.dispose()


if __name__ == "__main__":
    main()
