"""Two plan runs for the same cluster at once, on SQLite and on a real PostgreSQL: both read the strategy
state, both plan (real AvgShedder runs, so the state holds real hit counters), both commit at the same
moment. Exactly one commits; the other fails with StaleStateError and writes nothing; the stored hit
counters are those of one run. A retried commit of a committed run changes nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import event, func, select

from planner.plan.document import PlanDocument
from planner.plan.planning import make_plan
from planner.pulsar.config import PulsarConfig
from planner.store.clusters import cluster_row
from planner.store.database import Store
from planner.store.models import AuditEvent, Plan, PlanAction, StrategyState
from planner.store.plans import CommitResult, StaleStateError, commit_plan, commit_plan_once, read_state
from tests.builders import broker, bundle, bundle_data, load_data

pytestmark = pytest.mark.reliability

CLUSTER = "race"
ADMIN_URL = "http://127.0.0.1:8080"
STRATEGY = "AvgShedder"
HOT_BUNDLES = [bundle(index) for index in range(6)]


def skewed_load_data():
    """Two AvgShedder pairs: hot/cold (high gap, fires on the second run) and a/b (low gap, only counts)."""
    return load_data(
        {
            "hot:8080": broker(cpu=(85, 100), rate_in=6000, rate_out=6000, bundles=HOT_BUNDLES),
            "a:8080": broker(cpu=(55, 100), rate_in=5000, rate_out=5000, bundles=[bundle(10), bundle(11)]),
            "b:8080": broker(cpu=(35, 100), rate_in=1000, rate_out=1000, bundles=[bundle(12)]),
            "cold:8080": broker(cpu=(20, 100), rate_in=500, rate_out=500, bundles=[bundle(13)]),
        },
        {
            **{name: bundle_data(500, 500) for name in HOT_BUNDLES},
            bundle(10): bundle_data(500, 500),
            bundle(11): bundle_data(300, 300),
            bundle(12): bundle_data(500, 500),
            bundle(13): bundle_data(250, 250),
        },
    )


def plan_from(state: dict[str, Any]) -> dict[str, Any]:
    return make_plan(CLUSTER, skewed_load_data(), PulsarConfig(), STRATEGY, state or None).to_json()


def counts(store: Store) -> dict[str, int]:
    with store.session() as session:
        return {
            "plans": session.scalar(select(func.count()).select_from(Plan)),
            "actions": session.scalar(select(func.count()).select_from(PlanAction)),
            "audit": session.scalar(select(func.count()).select_from(AuditEvent)),
            "states": session.scalar(select(func.count()).select_from(StrategyState)),
        }


def grown(before: dict[str, int], **more: int) -> dict[str, int]:
    return {table: count + more.get(table, 0) for table, count in before.items()}


def race(stores: tuple[Store, Store], runs: list[Callable[[Store], CommitResult]], writes: str) -> list[Any]:
    """Run both commits on their own thread and store, held at a barrier just before each one's first write
    to `writes` (UPDATE/INSERT strategy_states), so both transactions are open and have read the state.
    SQLite transactions take the write lock at BEGIN (the store opens them IMMEDIATE), so two can never
    both be open: there the second waits at BEGIN for the first to commit, and no barrier is held."""
    barrier = threading.Barrier(len(runs), timeout=10)
    serialized = stores[0].engine.dialect.name == "sqlite"

    def hold(_connection, _cursor, statement: str, *_: Any) -> None:
        if not serialized and statement.lstrip().upper().startswith(writes):
            barrier.wait()

    for store in stores:
        event.listen(store.engine, "before_cursor_execute", hold)

    def attempt(store: Store, run: Callable[[Store], CommitResult]) -> Any:
        try:
            return run(store)
        except Exception as error:  # the outcome under test, compared below
            return error

    try:
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            return list(pool.map(attempt, stores, runs))
    finally:
        for store in stores:
            event.remove(store.engine, "before_cursor_execute", hold)


def test_two_concurrent_plan_runs_commit_once_and_count_hits_once(stores):
    store = stores[0]
    first = plan_from({})
    commit_plan(store, PlanDocument.parse(first, "plan"), admin_url=ADMIN_URL, run_key="run-1", expected_version=0)
    before = counts(store)

    # Both runs read the same state and plan from it.
    read = [read_state(each, CLUSTER, STRATEGY) for each in stores]
    assert read[0] == read[1] and read[0].version == 1
    plans = [plan_from(stored.state) for stored in read]
    assert len(plans[0]["actions"]) == 2 and plans[0]["stateAfter"] == plans[1]["stateAfter"]
    # The reference: one run from the same state, counted once.
    once = plan_from(read[0].state)["stateAfter"]
    assert once["lowHitCount"] == {"a:8080": 2, "b:8080": 2}

    outcomes = race(
        stores,
        [
            lambda s, plan=plan, key=key: commit_plan(
                s, PlanDocument.parse(plan, "plan"), admin_url=ADMIN_URL, run_key=key, expected_version=1
            )
            for plan, key in zip(plans, ["run-2a", "run-2b"], strict=True)
        ],
        writes="UPDATE STRATEGY_STATES",
    )

    committed = [outcome for outcome in outcomes if isinstance(outcome, CommitResult)]
    refused = [outcome for outcome in outcomes if isinstance(outcome, StaleStateError)]
    assert len(committed) == 1 and len(refused) == 1, outcomes
    assert committed[0].created and committed[0].state_version == 2
    assert "another plan run committed first" in str(refused[0])

    # Nothing of the refused run was written: one plan, its two actions and one audit row more.
    after = counts(store)
    assert after == {
        **before,
        "plans": before["plans"] + 1,
        "actions": before["actions"] + 2,
        "audit": before["audit"] + 1,
    }
    stored = read_state(store, CLUSTER, STRATEGY)
    assert stored.version == 2 and stored.state == once  # hit counters counted once
    with store.session() as session:
        run_keys = set(session.scalars(select(Plan.run_key)))
    assert len(run_keys & {"run-2a", "run-2b"}) == 1

    # The losing run, planned again from the state it now reads, counts the next hit on top.
    again = read_state(stores[1], CLUSTER, STRATEGY)
    result = commit_plan(
        stores[1],
        PlanDocument.parse(plan_from(again.state), "plan"),
        admin_url=ADMIN_URL,
        run_key="run-3",
        expected_version=2,
    )
    assert result.created and read_state(store, CLUSTER, STRATEGY).state == plan_from(once)["stateAfter"]
    assert read_state(store, CLUSTER, STRATEGY).state["lowHitCount"]["a:8080"] == 3


def test_a_retried_commit_of_the_same_run_changes_nothing(stores):
    store = stores[0]
    commit_plan(
        store, PlanDocument.parse(plan_from({}), "plan"), admin_url=ADMIN_URL, run_key="run-1", expected_version=0
    )
    plan = plan_from(read_state(store, CLUSTER, STRATEGY).state)
    first = commit_plan_once(
        store, PlanDocument.parse(plan, "plan"), admin_url=ADMIN_URL, run_key="run-2", expected_version=1
    )
    before, state = counts(store), read_state(store, CLUSTER, STRATEGY)
    # The orchestrator retries the commit task: same run key, the version it read back then.
    retried = commit_plan_once(
        stores[1], PlanDocument.parse(plan, "plan"), admin_url=ADMIN_URL, run_key="run-2", expected_version=1
    )
    assert retried == CommitResult(first.plan_id, False, first.state_version)
    assert counts(store) == before and read_state(store, CLUSTER, STRATEGY) == state


def test_two_concurrent_first_plans_of_a_cluster_commit_once(stores):
    """No state row yet: both runs insert it; the loser must still fail cleanly and write nothing."""
    store = stores[0]
    with store.session() as session:  # the cluster is registered by its first snapshot, before any plan
        cluster_row(session, CLUSTER, ADMIN_URL)
    plans = [plan_from({}) for _ in stores]
    outcomes = race(
        stores,
        [
            lambda s, plan=plan, key=key: commit_plan(
                s, PlanDocument.parse(plan, "plan"), admin_url=ADMIN_URL, run_key=key, expected_version=0
            )
            for plan, key in zip(plans, ["first-a", "first-b"], strict=True)
        ],
        writes="INSERT INTO STRATEGY_STATES",
    )
    committed = [outcome for outcome in outcomes if isinstance(outcome, CommitResult)]
    assert len(committed) == 1, outcomes
    assert counts(store) == {"plans": 1, "actions": 0, "audit": 1, "states": 1}
    assert read_state(store, CLUSTER, STRATEGY).state == plans[0]["stateAfter"]
    refused = [outcome for outcome in outcomes if not isinstance(outcome, CommitResult)]
    assert isinstance(refused[0], StaleStateError), repr(refused[0])


def test_the_same_run_committed_twice_at_once_is_stored_once(stores):
    """Two workers retry the same run's commit at the same moment: one stores it, the other finds it."""
    store = stores[0]
    commit_plan(
        store, PlanDocument.parse(plan_from({}), "plan"), admin_url=ADMIN_URL, run_key="run-1", expected_version=0
    )
    plan = plan_from(read_state(store, CLUSTER, STRATEGY).state)
    before = counts(store)
    outcomes = race(
        stores,
        [
            lambda s: commit_plan_once(
                s, PlanDocument.parse(plan, "plan"), admin_url=ADMIN_URL, run_key="run-2", expected_version=1
            )
        ]
        * 2,
        writes="UPDATE STRATEGY_STATES",
    )
    assert counts(store) == {
        **before,
        "plans": before["plans"] + 1,
        "actions": before["actions"] + 2,
        "audit": before["audit"] + 1,
    }
    assert all(isinstance(outcome, CommitResult) for outcome in outcomes), outcomes
    assert sorted(outcome.created for outcome in outcomes) == [False, True]
