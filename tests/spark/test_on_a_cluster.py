"""The planning job on a real Spark standalone cluster and through Spark Connect, as a team would run it.

The cluster's workers have a Python with numpy, pandas and pyarrow only and cannot see the checkout
(`tests/spark/cluster.py`): whatever of the project the executors run must come with the job. The same
snapshots are planned on `local[2]`, on `spark://` (the CLI as the driver, and spark-submit from the plan
DAG's SparkSubmitOperator) and through `sc://`, and the plans must be the same.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from planner.audit.plan_records import show_plan
from planner.pulsar.model import NamespaceBundleStats
from planner.samples.dataset import write_snapshot_samples
from planner.store.database import Store
from planner.store.models import Cluster, Plan, Snapshot
from pulsar_rebalance_devtools.demo import airflow_environment, migrate_airflow, run_plan_cycle
from spark_jobs.session import JOB_DEFAULTS
from tests.builders import broker, bundle
from tests.spark.cluster import (
    PYSPARK_HOME,
    REPO,
    connect_server,
    spark_environment,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

CLUSTER = "fleet"
SNAPSHOTS = 30
PLAN_SETTINGS = {"minUnloadMessage": "0", "maxUnloadPercentage": "0.5"}
VOLATILE = {"id", "createdAt", "runKey"}


def skewed(index: int) -> dict[str, Any]:
    """Three brokers, all traffic on the first; enough history for the usage models (>= 12 reports each)."""
    hot = {bundle(i): {"msgRateIn": 100.0 + i + index % 3, "msgThroughputIn": 1e5, "topics": 2} for i in range(6)}
    stats = {name: NamespaceBundleStats.model_validate(values) for name, values in hot.items()}
    rate = sum(s.msg_rate_in for s in stats.values())
    return {
        "hot:8080": broker(cpu=(60 + index % 5, 100), rate_in=rate, bundles=stats, last_stats=stats),
        "warm:8080": broker(cpu=(10, 100)),
        "cold:8080": broker(cpu=(5, 100)),
    }


@pytest.fixture(scope="module")
def planner_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A planner home with SNAPSHOTS snapshots of CLUSTER taken over the last hour, registered in its store."""
    home = tmp_path_factory.mktemp("fleet-home")
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=SNAPSHOTS)
    for index in range(SNAPSHOTS):
        write_snapshot_samples(home, CLUSTER, index + 1, start + timedelta(minutes=index), skewed(index))
    archive = home / "archive.json.gz"
    with gzip.open(archive, "wt") as handle:
        json.dump({"bundleBoundaries": {}}, handle)
    store = Store(f"sqlite:///{home / 'planner.db'}")
    with store.session() as session:
        row = Cluster(name=CLUSTER, admin_url="http://127.0.0.1:1")
        session.add(row)
        session.flush()
        for index in range(SNAPSHOTS):
            session.add(
                Snapshot(
                    id=index + 1,
                    cluster_id=row.id,
                    taken_at=start + timedelta(minutes=index),
                    brokers=3,
                    bundles=6,
                    partial=False,
                    missing_brokers={},
                    archive_path=str(archive),
                )
            )
    store.dispose()
    return home


def copy_home(home: Path, target: Path) -> dict[str, str]:
    """A copy of the planner home (samples and store), so each run plans from the same state."""
    shutil.copytree(home, target)
    return {
        **os.environ,
        "PULSAR_REBALANCE_HOME": str(target),
        "PULSAR_REBALANCE_DB_URL": f"sqlite:///{target / 'planner.db'}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
    }


def cli(env: Mapping[str, str], *arguments: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "planner.cli", *arguments], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (
        f"pulsar-rebalance {' '.join(arguments)}:\n{done.stderr[:3000]}\n...\n{done.stderr[-1500:]}"
    )
    return json.loads(done.stdout)


def plan_with_cli(home: Path, target: Path, master: str, *conf: str) -> dict[str, Any]:
    env = copy_home(home, target)
    settings = [f"--set={key}={value}" for key, value in PLAN_SETTINGS.items()]
    spark_conf = [f"--conf={entry}" for entry in conf]
    [planned] = cli(
        env,
        "plan",
        "--cluster",
        CLUSTER,
        "--strategy",
        "UniformLoadShedder",
        "--master",
        master,
        *settings,
        *spark_conf,
    )["plans"]
    return cli(env, "plan", "show", str(planned["plan"]))


def same(left: Any, right: Any, path: str = "plan") -> None:
    """Equal, but for the run's identity, and floats within 1e-9 (Spark may add partial sums in another order)."""
    if isinstance(left, dict) and isinstance(right, dict):
        assert set(left) - VOLATILE == set(right) - VOLATILE, path
        for key in set(left) - VOLATILE:
            same(left[key], right[key], f"{path}.{key}")
    elif isinstance(left, list) and isinstance(right, list):
        assert len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            same(a, b, f"{path}[{index}]")
    elif isinstance(left, float) or isinstance(right, float):
        assert math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-9), (path, left, right)
    else:
        assert left == right, (path, left, right)


@pytest.fixture(scope="module")
def local_plan(planner_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    plan = plan_with_cli(planner_home, tmp_path_factory.mktemp("local") / "home", "local[2]")
    assert any(action["kind"] == "unload" for action in plan["actions"]), plan["actions"]
    assert plan["usageModels"], "the usage models are fitted on the executors"
    return plan


def executor_conf(python: Path) -> list[str]:
    return [f"spark.pyspark.python={python}", "spark.executor.memory=512m", "spark.cores.max=2"]


def test_the_cli_plans_on_a_standalone_cluster_as_on_a_local_master(
    standalone_spark, planner_home, local_plan, tmp_path
):
    running, python = standalone_spark
    plan = plan_with_cli(planner_home, tmp_path / "home", running.master_url, *executor_conf(python))
    same(plan, local_plan)


@pytest.mark.slow  # about 75 s; `scripts/test.sh -m slow`
def test_the_plan_dags_spark_submit_runs_on_the_standalone_cluster(
    standalone_spark, planner_home, local_plan, tmp_path
):
    """The DAG's SparkSubmitOperator submits to the master of `spark_default`; the team's spark-defaults.conf
    says which Python the workers have. The gate is rejected: only the committed plan matters here."""
    running, python = standalone_spark
    target = tmp_path / "home"
    shutil.copytree(planner_home, target)
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.pyspark.python {python}\nspark.pyspark.driver.python {sys.executable}\n"
        "spark.executor.memory 512m\nspark.cores.max 2\n"
    )
    env = airflow_environment(
        tmp_path / "airflow",
        {"cluster": CLUSTER, "brokers": [{"adminUrl": "http://127.0.0.1:1"}]},
        f"sqlite:///{target / 'planner.db'}",
        target,
    )
    host, port = running.master_url.rsplit(":", 1)
    env.update(
        {
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": host, "port": int(port)}),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
            "PULSAR_REBALANCE_PLAN_PROFILE": "manual",
        }
    )
    migrate_airflow(env)
    conf = {"strategy": "UniformLoadShedder", "settings": PLAN_SETTINGS}
    outcome = run_plan_cycle(env, CLUSTER, "Reject", conf, timeout=900)
    assert outcome["tasks"]["spark_plan"] == "success", outcome
    store = Store(env["PULSAR_REBALANCE_DB_URL"])
    with store.session() as session:
        plan_id = session.scalars(select(Plan.id)).one()
    plan = show_plan(store, plan_id).to_json()
    assert plan["status"] == "rejected"
    same({**plan, "status": None}, {**local_plan, "status": None})


@pytest.mark.slow  # about 55 s; `scripts/test.sh -m slow`
def test_the_cli_plans_through_spark_connect_as_on_a_local_master(standalone_spark, planner_home, local_plan, tmp_path):
    running, python = standalone_spark
    with connect_server(tmp_path, running, python) as server:
        plan = plan_with_cli(planner_home, tmp_path / "home", server.url)
        probe = probe_executors(server.url)
    same(plan, local_plan)
    # What the executors had: the workers' Python, no checkout, no pydantic: the job brought what it used.
    assert probe == {"python": str(python), "checkout": False, "pydantic": False}, probe


def probe_executors(url: str) -> dict[str, Any]:
    script = textwrap.dedent(
        f"""
        import json, os, sys
        import pandas as pd
        from pyspark.sql import SparkSession

        def probe(frames):
            import importlib.util
            for _ in frames:
                yield pd.DataFrame({{"seen": [json.dumps({{
                    "python": sys.executable,
                    "checkout": os.path.exists({str(REPO / "planner")!r}),
                    "pydantic": importlib.util.find_spec("pydantic") is not None,
                }})]}})

        spark = SparkSession.builder.remote({url!r}).getOrCreate()
        [row] = spark.range(1, numPartitions=1).mapInPandas(probe, "seen string").collect()
        print(row["seen"])
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_teams_spark_settings_win_over_the_jobs(standalone_spark, tmp_path):
    """spark-submit's --conf and the cluster's spark-defaults.conf keep their values; the job's tuning fills in
    only the keys nobody set; the workers' Python is the team's, never the driver's."""
    running, python = standalone_spark
    env = spark_environment(tmp_path)
    (Path(env["SPARK_CONF_DIR"]) / "spark-defaults.conf").write_text(
        f"spark.sql.files.maxPartitionBytes 64m\nspark.pyspark.python {python}\n"
        f"spark.pyspark.driver.python {sys.executable}\nspark.executor.memory 512m\n"
    )
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            import json, sys
            from spark_jobs.session import JOB_DEFAULTS, spark_session

            spark = spark_session(None)
            executor = spark.range(1, numPartitions=1).rdd.map(lambda _: sys.executable).collect()[0]
            print(json.dumps({"settings": {key: spark.conf.get(key) for key in JOB_DEFAULTS}, "executor": executor}))
            spark.stop()
            """
        )
    )
    done = subprocess.run(
        [
            str(PYSPARK_HOME / "bin" / "spark-submit"),
            "--master",
            running.master_url,
            "--conf",
            "spark.sql.shuffle.partitions=3",
            str(probe),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["settings"]["spark.sql.shuffle.partitions"] == "3"  # spark-submit --conf
    assert seen["settings"]["spark.sql.files.maxPartitionBytes"] == "64m"  # the cluster's defaults
    for key in ("spark.sql.session.timeZone", "spark.sql.codegen.aggregate.map.twolevel.enabled"):
        assert seen["settings"][key] == JOB_DEFAULTS[key]  # nobody set it: the job's tuning
    assert seen["executor"] == str(python)
