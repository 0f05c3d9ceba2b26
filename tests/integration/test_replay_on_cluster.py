"""The Proof of the replay (issue #36): on the real local cluster with traffic, live plans made by the Spark job,
approved and executed; then the replay of that recorded window, whose check replans each live plan from the
recording and finds it equal. The same check with the replay broken (its team settings lost) finds them unequal.
Slow: a few minutes of collects, Spark plan runs and executions (`scripts/test.sh -m slow`)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from planner.cli import main
from planner.execute.executor import execute_plan
from planner.lifecycle import Decision
from planner.orchestrate.runner import PlanRequest, run_plan
from planner.samples.dataset import samples_root
from planner.settings import ExecutorSettings
from planner.simulator import live_check
from planner.simulator.live_check import check_live_plans
from planner.simulator.recorded import read_history
from planner.store.approvals import record_decision
from planner.store.database import Store
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.executor_support import CountingClient

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

FAST = ExecutorSettings(actions_per_minute=0, verify_timeout_seconds=15, verify_interval_seconds=0.5)
# UniformLoadShedder plans on the generator's small rates with these team settings: the replay must read them back
# from each plan's recorded configuration.
SETTINGS = {"minUnloadMessage": 0, "maxUnloadPercentage": 0.5}
ROUNDS = 3


def test_a_replay_of_the_recorded_window_replans_the_live_plans_that_ran(
    pulsar_cluster, traffic_generator, spark, tmp_path, monkeypatch, capsys
):
    name = pulsar_cluster["cluster"]
    hot = pulsar_cluster["brokers"][0]["id"]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=2, rate=40) for i in range(6)], num_bundles=6)
    generator.place_bundles(dict.fromkeys(range(6), hot))
    generator.start()
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    client = CountingClient(pulsar_cluster["brokers"][0]["adminUrl"])
    from planner.collect.collector import collect

    start = datetime.now(UTC) - timedelta(seconds=1)
    executed = []
    for _ in range(ROUNDS):
        for _ in range(3):
            collect(client, store, tmp_path)
            time.sleep(5)
        request = PlanRequest(clusters=(name,), strategy="UniformLoadShedder", settings=SETTINGS)
        [(commit, result)] = run_plan(store, samples_root(tmp_path), request, spark=spark).values()
        if result.plan.actions:
            record_decision(
                store, commit.plan_id, Decision.APPROVED, approver="alice", approved_hash=result.plan.actions_hash
            )
            report = execute_plan(store, client, commit.plan_id, FAST)
            executed.append((commit.plan_id, report.status))
    collect(client, store, tmp_path)
    end = datetime.now(UTC)
    assert executed, "no live plan moved anything: the check would compare empty plans only"

    history = read_history(tmp_path, store, name, start, end)
    check = check_live_plans(store, tmp_path, history, start, end)
    print(json.dumps(check.to_json(), indent=2))
    assert check.checked == ROUNDS
    assert check.consistent, check.to_json()
    assert sum(bool(plan.live) for plan in check.plans) == len(executed)

    # The same through the command, with every strategy replayed and the result stored.
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(tmp_path))
    monkeypatch.setenv("PULSAR_REBALANCE_DB_URL", f"sqlite:///{tmp_path / 'planner.db'}")
    window = ["--from", start.isoformat(), "--to", end.isoformat()]
    capsys.readouterr()
    assert main(["simulate", "--replay", name, *window, "--check-live", "--store"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["live"]["consistent"] and out["live"]["checked"] == ROUNDS
    assert {"UniformLoadShedder", "offline:UniformLoadShedder"} <= set(out["policies"])

    # Broken once: a replay that loses the team's settings the live plans recorded plans nothing on these rates.
    monkeypatch.setattr(live_check, "team_settings", lambda document: {})
    broken = check_live_plans(store, tmp_path, history, start, end)
    assert not broken.consistent
    client.close()
    store.dispose()
