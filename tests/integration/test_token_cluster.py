"""The whole cycle on a cluster with Pulsar's token authentication on: collect, plan (Spark), approve,
execute and report work with the token from the Airflow connection, and the token is written nowhere:
no file of Airflow, the planner or the brokers' logs, no table of either database, no process argument."""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from pathlib import Path

import pytest
import requests
from sqlalchemy import select

from planner.store.database import Store
from planner.store.models import Plan
from pulsar_rebalance_devtools.demo import run_plan_cycle
from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator
from tests.integration.conftest import CYCLE_CONF, TEST_TENANT, airflow_env, collect_snapshots

# In the slow run for CI time: a second cluster and a whole cycle (the admin-token leak check runs in CI too,
# in tests/integration/test_reliability_on_cluster.py).
pytestmark = [pytest.mark.integration, pytest.mark.reliability, pytest.mark.airflow, pytest.mark.slow]


def test_the_whole_cycle_runs_with_the_token_and_the_token_is_written_nowhere(token_cluster, tmp_path):
    token = Path(token_cluster["tokenFile"]).read_text().strip()
    admin_url = token_cluster["brokers"][0]["adminUrl"]
    assert requests.get(f"{admin_url}/admin/v2/clusters", timeout=10).status_code == 401
    headers = {"Authorization": f"Bearer {token}"}
    assert requests.get(f"{admin_url}/admin/v2/clusters", headers=headers, timeout=10).json() == ["secure"]
    hot = token_cluster["brokers"][0]["id"]
    generator = TrafficGenerator.for_cluster(
        token_cluster, f"{TEST_TENANT}/secure-{secrets.token_hex(3)}", [BundleTraffic(i, 1, 40) for i in range(4)]
    )
    generator.setup()
    try:
        generator.place_bundles(dict.fromkeys(range(4), hot))
        generator.start()
        time.sleep(12)  # two load-report intervals
        env = airflow_env(token_cluster, tmp_path)
        connection = f"AIRFLOW_CONN_PULSAR_{token_cluster['cluster'].upper()}"
        env[connection] = json.dumps({**json.loads(env[connection]), "password": token})
        collect_snapshots(env, admin_url, token=token)
        outcome = run_plan_cycle(env, token_cluster["cluster"], "Approve", CYCLE_CONF, timeout=900)
    finally:
        generator.stop()
        generator.delete_namespace()
    assert outcome["tasks"]["execute"] == "success" and outcome["tasks"]["report"] == "success", outcome
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        plan = session.scalars(select(Plan)).one()
        assert plan.status == "executed" and plan.actions
    # Everywhere something of the run is written: Airflow's home (task logs, its SQLite database), the
    # planner's home (archives, samples, run files) and store, and the brokers' logs.
    places = [Path(env["AIRFLOW_HOME"]), Path(env["PULSAR_REBALANCE_HOME"]), Path(token_cluster["logDir"])]
    files = [path for place in places for path in place.rglob("*") if path.is_file()] + [tmp_path / "planner.db"]
    assert any(path.suffix == ".log" for path in files) and len(files) > 10
    assert [str(path) for path in files if token.encode() in path.read_bytes()] == []
    for database in (Path(env["AIRFLOW_HOME"]) / "airflow.db", tmp_path / "planner.db"):
        connection_to = sqlite3.connect(database)
        tables = [row[0] for row in connection_to.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in connection_to.execute(f'SELECT * FROM "{table}"'):
                assert token not in repr(row), (database.name, table)
        connection_to.close()
    # The brokers got the key and token as file paths, never as process arguments.
    for process in token_cluster["processes"]:
        assert token.encode() not in Path(f"/proc/{process['pid']}/cmdline").read_bytes(), process["name"]
    store.dispose()
    print(f"\ntoken cluster: plan {plan.id} executed; token absent from {len(files)} files and both databases")
