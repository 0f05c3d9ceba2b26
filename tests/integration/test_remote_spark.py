"""The plan DAG's spark-submit against a Spark standalone cluster that does not share this host's loopback.

The master and two workers (pyspark's own `spark-class`) run in another network namespace, joined to this one
by a veth pair (10.x addresses): 127.0.0.1 there is their own loopback. The plan DAG runs here (`dag.test()`),
its spark-submit task the driver, with `spark_default` naming `spark://<the namespace's address>:7077`. The
executors read the samples from the same filesystem and connect back to the driver.

- By default the driver keeps Spark's own address (this host's, reachable from the namespace): the plan is
  made, and the executors in the namespace connected to a driver that was not on loopback.
- With the former default forced (`SPARK_LOCAL_IP=127.0.0.1`, what the DAG passed before), the executors
  cannot reach the driver and the master replaces them without end: no plan.

The deployment's Spark conf (the workers' Python, executor memory) reaches spark-submit from the settings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.store.database import Store
from planner.store.models import Plan
from pulsar_rebalance_devtools.demo import airflow_environment, migrate_airflow
from pulsar_rebalance_devtools.netns import network_namespace
from tests.integration.conftest import stop_process_group
from tests.spark.cluster import StandaloneCluster, standalone_cluster, worker_python
from tests.spark.test_on_a_cluster import CLUSTER, PLAN_SETTINGS, planner_home  # noqa: F401 - the snapshots' fixture

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

DAG_ID = f"pulsar_rebalance_plan_{CLUSTER}"
FAILED_EXECUTORS = 6


@pytest.fixture(scope="module")
def remote_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneCluster, Path, str]]:
    """(the cluster, its workers' Python, this side's address)."""
    root = tmp_path_factory.mktemp("remote-spark")
    python = worker_python(root)
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root and iproute2 (ip netns, veth)")
    namespace = f"prs{os.getpid()}"
    with (
        network_namespace(namespace, 160 + os.getpid() % 60) as (here, there),
        standalone_cluster(root, address=there, namespace=namespace) as cluster,
    ):
        yield cluster, python, here


def plan_dag_environment(tmp_path: Path, home: Path, cluster: StandaloneCluster, python: Path) -> dict[str, str]:
    """Airflow running this project's DAGs on a copy of the planner home, `spark_default` the namespace's
    master, the deployment's Spark conf in the planner settings; no driver address from anyone."""
    target = tmp_path / "home"
    shutil.copytree(home, target)
    env = airflow_environment(
        tmp_path / "airflow",
        {"cluster": CLUSTER, "brokers": [{"adminUrl": "http://127.0.0.1:1"}]},
        f"sqlite:///{target / 'planner.db'}",
        target,
    )
    for name in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME", "SPARK_CONF_DIR", "PYSPARK_PYTHON"):
        env.pop(name, None)
    host, port = cluster.master_url.rsplit(":", 1)
    spark_conf = {
        "spark.pyspark.python": str(python),
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
    }
    env.update(
        {
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": host, "port": int(port)}),
            "PULSAR_REBALANCE_SPARK__CONF": json.dumps(spark_conf),
            "PULSAR_REBALANCE_PLAN_PROFILE": "manual",
        }
    )
    migrate_airflow(env)
    return env


def the_plan(env: dict[str, str]) -> list[int]:
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    try:
        with store.session() as session:
            return list(session.scalars(select(Plan.id)))
    finally:
        store.dispose()


def plan_dag_run(env: dict[str, str], root: Path, cluster: StandaloneCluster) -> dict[str, Any] | None:
    """One run of the plan DAG (`dag.test()`, the gate rejected), in its own process group; its task states, or
    None when it was stopped: after FAILED_EXECUTORS executors could not reach the driver (the job would wait
    for ever), or after 10 minutes. Stopping the group stops spark-submit's JVM too."""
    conf = {"strategy": "UniformLoadShedder", "settings": PLAN_SETTINGS}
    command = [sys.executable, "-m", "pulsar_rebalance_devtools.airflow_cycle", DAG_ID, "Reject", json.dumps(conf)]
    started = time.time()
    with (root / "cycle.out").open("wb") as out, (root / "cycle.err").open("wb") as err:
        run = subprocess.Popen(command, env=env, stdout=out, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while run.poll() is None and time.monotonic() < deadline:
            if len(refused(executor_stderrs(cluster, started))) >= FAILED_EXECUTORS:
                break
            time.sleep(2)
    finally:
        finished = run.poll() == 0
        stop_process_group(run, timeout=10)
    if not finished:
        return None
    return json.loads((root / "cycle.out").read_text().strip().splitlines()[-1])


def test_the_plan_dags_spark_submit_plans_on_a_cluster_in_another_network_namespace(remote_spark, request, tmp_path):
    cluster, python, _ = remote_spark
    env = plan_dag_environment(tmp_path, request.getfixturevalue("planner_home"), cluster, python)
    started = time.time()
    outcome = plan_dag_run(env, tmp_path, cluster)
    executors = executor_stderrs(cluster, started)
    assert outcome is not None, ((tmp_path / "cycle.err").read_text()[-3000:], refused(executors)[-1:])
    assert outcome["tasks"]["spark_plan"] == "success", outcome
    [plan_id] = the_plan(env)
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    plan = show_plan(store, plan_id).to_json()
    store.dispose()
    assert plan["status"] == "rejected"
    unloads = [action for action in plan["actions"] if action["kind"] == "unload"]
    assert unloads and {action["source"] for action in unloads} == {"hot:8080"}, plan["actions"]
    assert plan["usageModels"], "the usage models are fitted on the executors"
    # The executors ran in the namespace and reached the driver on an address of this host, not on loopback.
    assert any("Successfully registered with driver" in log for log in executors)
    drivers = set(re.findall(r"spark://CoarseGrainedScheduler@([^:\s]+):\d+", "\n".join(executors)))
    assert drivers and not {address for address in drivers if address.startswith("127.")}, drivers


def test_with_the_former_loopback_default_no_plan_is_made(remote_spark, request, tmp_path):
    """What the DAG passed before on every master: executors elsewhere are told to reach the driver at
    127.0.0.1, their own loopback, which refuses them; the master replaces each one that exits, so the job would
    wait for ever."""
    cluster, python, _ = remote_spark
    home = request.getfixturevalue("planner_home")
    env = {**plan_dag_environment(tmp_path, home, cluster, python), "SPARK_LOCAL_IP": "127.0.0.1"}
    started = time.time()
    assert plan_dag_run(env, tmp_path, cluster) is None
    executors = executor_stderrs(cluster, started)
    assert len(refused(executors)) >= FAILED_EXECUTORS, (tmp_path / "cycle.err").read_text()[-3000:]
    assert not [log for log in executors if "Successfully registered with driver" in log]
    assert the_plan(env) == []


def executor_stderrs(cluster: StandaloneCluster, since: float) -> list[str]:
    """The stderr of every executor the workers started after `since` (`work-*/app-*/<n>/stderr`)."""
    return [
        path.read_text(errors="replace")
        for path in cluster.root.glob("work-*/app-*/*/stderr")
        if path.parent.stat().st_mtime >= since
    ]


def refused(logs: list[str]) -> list[str]:
    return [log for log in logs if re.search(r"Failed to connect to \S*/127\.0\.0\.1:\d+", log)]
