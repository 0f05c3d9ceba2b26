"""A full cycle with real Airflow on the real local cluster: collect, plan (Spark), approve through
the REST API, execute; and the reject path."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sqlalchemy import select

from planner.demo import airflow_environment, migrate_airflow, run_plan_cycle
from planner.store.database import Store
from planner.store.models import AuditEvent, Plan
from planner.traffic import BundleTraffic

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

CONF = {"strategy": "UniformLoadShedder", "settings": {"minUnloadMessage": 0, "maxUnloadPercentage": 0.5}}


@pytest.fixture
def airflow_env(pulsar_cluster, tmp_path):
    env = airflow_environment(
        tmp_path / "airflow", pulsar_cluster, f"sqlite:///{tmp_path / 'planner.db'}", tmp_path / "home"
    )
    migrate_airflow(env)
    return env


def collect(env, admin_url, times=3):
    for _ in range(times):
        subprocess.run(
            [sys.executable, "-m", "planner.cli", "collect", "--admin-url", admin_url],
            env=env,
            check=True,
            capture_output=True,
        )
        time.sleep(2)


def run_cycle(env, cluster, decision):
    return run_plan_cycle(env, cluster, decision, CONF, timeout=600)


@pytest.fixture
def skewed(pulsar_cluster, traffic_generator):
    hot = pulsar_cluster["brokers"][0]["id"]
    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=40) for i in range(4)])
    generator.place_bundles({i: hot for i in range(4)})
    generator.start()
    time.sleep(12)  # two load-report intervals, so the reports show the traffic
    return generator, hot


def test_approved_plan_is_executed_and_audited(pulsar_cluster, airflow_env, skewed):
    generator, hot = skewed
    collect(airflow_env, pulsar_cluster["brokers"][0]["adminUrl"])
    outcome = run_cycle(airflow_env, pulsar_cluster["cluster"], "Approve")
    assert outcome["tasks"]["execute"] == "success" and outcome["tasks"]["report"] == "success", outcome
    store = Store(airflow_env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        plan = session.scalars(select(Plan)).one()
        assert plan.status == "executed"
        unloads = [a for a in plan.actions if a.kind == "unload"]
        assert unloads and all(a.source == hot for a in unloads)
        events = [e.event for e in session.scalars(select(AuditEvent))]
    assert "plan.approved" in events and events.count("action.succeeded") == len(unloads)
    for action in unloads:
        bundle_range = action.bundle.rsplit("/", 1)[1]
        probe = next(t for t, b in generator.topics.items() if str(b) == bundle_range)
        assert generator.owner(probe) == action.destination


def test_rejected_plan_runs_nothing(pulsar_cluster, airflow_env, skewed):
    collect(airflow_env, pulsar_cluster["brokers"][0]["adminUrl"])
    outcome = run_cycle(airflow_env, pulsar_cluster["cluster"], "Reject")
    assert outcome["tasks"]["execute"] == "skipped", outcome
    store = Store(airflow_env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        plan = session.scalars(select(Plan)).one()
        assert plan.status == "rejected"
        events = [e.event for e in session.scalars(select(AuditEvent))]
    assert "plan.rejected" in events and not any(event.startswith("action.") for event in events)
