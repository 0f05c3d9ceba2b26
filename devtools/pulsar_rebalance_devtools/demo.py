"""`pulsar-rebalance-dev demo`: the whole product on one machine.

Starts the local Pulsar cluster, puts skewed traffic on it (every bundle of a namespace on one
broker), collects load, runs the plan DAG in a real Airflow (Spark job, commit, approval gate), then
either approves itself (`--approve`) or waits for a person in the Airflow UI, executes, and reports
the measured load before and after.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from planner import progress
from planner.airflow.dags import DAG_FILE
from planner.audit.plan_records import show_plan
from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import collect
from planner.lifecycle import PlanStatus
from planner.samples.dataset import snapshot_broker_load
from planner.settings import planner_home
from planner.store.database import Store
from planner.store.plans import list_plans
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator

logger = logging.getLogger(__name__)

# 320 msg/s on the first broker, 160 on the third, none on the second: UniformLoadShedder takes 60 % of the gap
# between the first and the second (192 msg/s), two of the first broker's four 80 msg/s bundles, and Pulsar's
# placement (LeastLongTermMessageRate, which a shedding cycle does not preallocate) sends both to the idle broker:
# 160/160/160, balanced in one plan.
DEMO_CONF = {"strategy": "UniformLoadShedder", "settings": {"minUnloadMessage": 0, "maxUnloadPercentage": 0.6}}


def airflow_environment(airflow_home: Path, cluster: dict[str, Any], db_url: str, home: Path) -> dict[str, str]:
    """Environment for Airflow processes that run this project's DAGs against `cluster` on loopback, installed
    as a deployment would: the one-line DAG file in an otherwise empty DAG folder, the plugin by its entry point."""
    name = cluster["cluster"]
    for folder in ("dags", "plugins"):
        (airflow_home / folder).mkdir(parents=True, exist_ok=True)
    (airflow_home / "dags" / "pulsar_rebalance.py").write_text(DAG_FILE)
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(airflow_home / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(airflow_home / "plugins"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        f"AIRFLOW_CONN_PULSAR_{name.upper()}": json.dumps(
            {"conn_type": "pulsar", "host": cluster["brokers"][0]["adminUrl"]}
        ),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PULSAR_REBALANCE_HOME": str(home),
        "PULSAR_REBALANCE_DB_URL": db_url,
        "PULSAR_REBALANCE_CLUSTER_NAMES": name,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def migrate_airflow(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True)


def run_plan_cycle(
    env: dict[str, str],
    cluster: str,
    decision: str,
    conf: dict[str, Any],
    timeout: float | None = None,
    dag: str = "plan",
) -> dict[str, Any]:
    """One run of the cluster's plan DAG, or its `maintenance` or `rollback` DAG (`decision`: Approve, Reject,
    or `ui` for a person). On a terminal, a spinner names the task under way.

    `dag.test()` ignores SIGTERM while it waits at the gate; on `timeout` the run is killed outright.
    """
    dag_id = f"pulsar_rebalance_{dag}_{cluster}"
    command = [sys.executable, "-m", "pulsar_rebalance_devtools.airflow_cycle", dag_id, decision, json.dumps(conf)]
    with (
        tempfile.TemporaryFile("w+") as out,
        tempfile.TemporaryFile("w+") as err,
        progress.steps(f"DAG {dag_id}") as step,
    ):
        run = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        while run.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                run.kill()
                run.wait()
                err.seek(0)
                raise RuntimeError(f"the {dag} DAG run did not end within {timeout} s:\n{err.read()[-6000:]}")
            if progress.shown():  # read Airflow's database only for a person watching
                with contextlib.suppress(sqlite3.Error):
                    step(_tasks_under_way(Path(env["AIRFLOW_HOME"]) / "airflow.db", dag_id))
            time.sleep(1)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if run.returncode != 0:
        raise RuntimeError(f"the {dag} DAG run failed:\n{stderr[-4000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def _tasks_under_way(database: Path, dag_id: str) -> str:
    """The newest run's tasks that are not done yet, read from the demo's own Airflow metadata database."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1)) as connection:
        rows = connection.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = "
            "(SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1)",
            (dag_id, dag_id),
        ).fetchall()
    busy = [f"{task} ({state})" for task, state in rows if state in ("running", "deferred", "awaiting_input", "queued")]
    done = sum(1 for _, state in rows if state in ("success", "skipped"))
    return f"{done} task(s) done; " + (", ".join(busy) if busy else "starting")


def _load(home: Path, cluster: str, snapshot_id: int, measure: str) -> dict[str, float]:
    return {broker: load[measure] for broker, load in snapshot_broker_load(home, cluster, snapshot_id).items()}


def settled_snapshot(client: PulsarAdminClient, store: Store, home: Path, timeout: float = 90.0) -> Any:
    """Collect until two snapshots in a row show the same per-broker rates (±5 %): the moves are reported."""
    time.sleep(15)  # three report intervals: the new owners have reported the moved traffic at least once
    deadline = time.monotonic() + timeout
    previous = collect(client, store, home)
    while True:
        time.sleep(5)
        current = collect(client, store, home)
        old = _load(home, current.cluster, previous.snapshot_id, "msgRate")
        new = _load(home, current.cluster, current.snapshot_id, "msgRate")
        steady = all(abs(new.get(b, 0) - rate) <= 0.05 * max(rate, 1.0) for b, rate in old.items())
        if steady or time.monotonic() > deadline:
            return current
        previous = current


def closing_table(before: dict[str, float], after: dict[str, float]) -> str:
    """msg/s per broker before and after the plan, as a table for the terminal. Broker scores are left out:
    brokers on one machine share its CPU and NIC, so their scores rise and fall together whatever moves."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="msg/s per broker (in + out)", title_justify="left")
    table.add_column("broker")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for broker in sorted(before.keys() | after.keys()):
        table.add_row(broker, f"{before.get(broker, 0.0):.0f}", f"{after.get(broker, 0.0):.0f}")
    console = Console(width=80, color_system=None)
    with console.capture() as captured:
        console.print(table)
    return captured.get().rstrip()


def run_demo(approve: bool, brokers: int = 3, port: int = 8080) -> dict[str, Any]:
    home = planner_home() / "demo"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    db_url = f"sqlite:///{home / 'planner.db'}"
    print(f"starting a fresh {brokers}-broker Pulsar cluster on 127.0.0.1 (the first run downloads Pulsar)...")
    local_cluster.wipe()  # the demo's cluster starts empty, so its plan is about the demo's traffic only
    cluster = local_cluster.start(brokers=brokers)
    hot, warm = cluster["brokers"][0]["id"], cluster["brokers"][-1]["id"]
    generator = TrafficGenerator.for_cluster(
        cluster,
        f"demo/skewed-{secrets.token_hex(3)}",
        [BundleTraffic(bundle=i, topics=1, rate=40) for i in range(6)],
        num_bundles=6,
    )
    generator.setup()
    print(
        f"putting four bundles of {generator.namespace} on {hot} and two on {warm}, and producing 240 msg/s...",
        flush=True,
    )
    generator.place_bundles({i: hot if i < 4 else warm for i in range(6)})
    generator.start()
    try:
        store = Store(db_url)
        client = PulsarAdminClient(cluster["brokers"][0]["adminUrl"])
        # Plan on settled load: a report taken while the traffic still ramps up gives UniformLoadShedder a
        # smaller budget (one bundle instead of two), and the demo would end unbalanced by luck.
        with progress.steps("waiting for the load reports to settle") as step:
            step("collecting")
            before = settled_snapshot(client, store, home)
        env = airflow_environment(home / "airflow", cluster, db_url, home)
        migrate_airflow(env)
        server = None
        if not approve:
            server = subprocess.Popen(
                [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            print(
                f"approve or reject the plan at http://127.0.0.1:{port}/ (Browse → Required Actions); waiting...",
                flush=True,
            )
        try:
            run = run_plan_cycle(env, cluster["cluster"], "Approve" if approve else "ui", DEMO_CONF)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
        after = settled_snapshot(client, store, home)
        name = cluster["cluster"]
        [latest] = list_plans(store, name, limit=1)
        plan = show_plan(store, latest.id)
        actions = plan.to_json()["actions"]
        executed = run["tasks"].get("execute") == "success" and plan.status is PlanStatus.EXECUTED
        print(json.dumps({"plan": plan.id, "status": plan.status.value, "actions": actions}, indent=2))
        rates_before = _load(home, name, before.snapshot_id, "msgRate")
        rates_after = _load(home, name, after.snapshot_id, "msgRate")
        print(closing_table(rates_before, rates_after), flush=True)
        return {
            "plan": plan.id,
            "actions": len(actions),
            "executed": len(actions) if executed else 0,
            "msgRateBefore": rates_before,
            "msgRateAfter": rates_after,
        }
    finally:
        generator.stop()
        generator.delete_namespace()
