"""Each extra works alone: the wheel installed bare, with `[spark]` only and with `[airflow]` only, each into a
fresh virtualenv from PyPI (the newest releases the ranges allow), runs the commands that extra is for.

- bare: the CLI imports, and every command that needs neither Airflow nor Spark runs (the shedders on the
  README's example LoadData, the simulator with its plot, the store's commands); `plan run` and `spark-code`
  say which extra they need instead of a traceback.
- `[spark]`: collects from the local cluster, then `plan run` on a local Spark master (the brokers' usage models
  are fitted through `applyInPandas`) and the plan committed; Spark Connect's client imports; pyspark prints no
  warning about the pandas it got.
- `[airflow]`: `airflow providers list` shows the provider, its notifier and connection type with no error,
  and the README's DAG file imports and builds the DAGs.

The bare install is in CI; the other two install pyspark or Airflow once more each (over a minute apiece even from
pip's cache) and are in the slow run.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.integration.packaging import REPO, built_distributions, clean_env, fresh_venv

pytestmark = pytest.mark.integration

# pyspark's warning when the installed pandas is outside the range it supports (pyspark/sql/pandas/utils.py).
PANDAS_WARNING = "does not yet fully support pandas"


def run(venv: Path, cwd: Path, *command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A console script of `venv`, from a directory outside the checkout, with nothing of the dev environment."""
    environment = {**clean_env(), "PATH": f"{venv}/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(venv), **(env or {})}
    return subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=600,
        check=False,
    )


def succeeds(venv: Path, cwd: Path, *command: str, env: dict[str, str] | None = None) -> str:
    done = run(venv, cwd, *command, env=env)
    assert done.returncode == 0, (
        f"{' '.join(command)}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    assert "Traceback" not in done.stderr and PANDAS_WARNING not in done.stderr, done.stderr[-3000:]
    return done.stdout


def installed(venv: Path) -> set[str]:
    listed = json.loads(succeeds(venv, venv, "pip", "list", "--format", "json", "--disable-pip-version-check"))
    return {entry["name"].lower() for entry in listed}


@pytest.fixture(scope="module")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return built_distributions(tmp_path_factory)


def test_the_wheel_and_sdist_carry_the_license_notice_and_metadata(distributions):
    wheel, sdist = distributions
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata] = [name for name in names if name.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode()
        [licensed] = [name for name in names if name.endswith(".dist-info/licenses/LICENSE")]
        assert "Apache License" in archive.read(licensed).decode()
    assert any(name.endswith(".dist-info/licenses/NOTICE") for name in names), names
    assert "License-Expression: Apache-2.0" in headers
    assert "Classifier: Framework :: Apache Airflow :: Provider" in headers
    assert 'Requires-Dist: pyspark[connect,sql]<4.3,>=4.2; extra == "spark"' in headers, headers
    assert 'Requires-Dist: pandas<3,>=2.2; extra == "spark"' in headers
    listing = subprocess.run(["tar", "tzf", str(sdist)], capture_output=True, text=True, check=True).stdout
    assert {"LICENSE", "NOTICE"} <= {Path(name).name for name in listing.split()}


def test_the_bare_wheel_runs_every_command_that_needs_neither_airflow_nor_spark(distributions, tmp_path):
    wheel, _ = distributions
    venv = fresh_venv(tmp_path, str(wheel))
    assert not {"apache-airflow", "pyspark", "pandas", "psycopg"} & installed(venv)
    succeeds(venv, tmp_path, "pip", "check", "--disable-pip-version-check")
    home = {"PULSAR_REBALANCE_HOME": str(tmp_path / "home")}

    assert "usage: pulsar-rebalance" in succeeds(venv, tmp_path, "pulsar-rebalance", "--help")
    for command in ("shed", "split-candidates", "split-positions", "topic-bundle", "collect", "snapshots"):
        succeeds(venv, tmp_path, "pulsar-rebalance", command, "--help")
    for command in (
        "load-data",
        "plan",
        "plans",
        "spark-code",
        "approve",
        "execute",
        "stop",
        "rollback",
        "simulate",
        "db",
    ):
        succeeds(venv, tmp_path, "pulsar-rebalance", command, "--help")

    example = str(REPO / "examples" / "load-data.json")
    shed = json.loads(
        succeeds(venv, tmp_path, "pulsar-rebalance", "shed", "--load-data", example, "--strategy", "AvgShedder")
    )
    assert shed["runs"], shed
    assert "bundles" in json.loads(
        succeeds(venv, tmp_path, "pulsar-rebalance", "split-candidates", "--load-data", example)
    )
    positions = succeeds(
        venv, tmp_path, "pulsar-rebalance", "split-positions", "--algorithm", "range_equally_divide",
        "--bundle", "0x00000000_0xffffffff",
    )  # fmt: skip
    assert json.loads(positions)["positions"]
    topic = succeeds(
        venv, tmp_path, "pulsar-rebalance", "topic-bundle", "--boundaries", "0x00000000,0x80000000,0xffffffff",
        "persistent://t/ns/topic",
    )  # fmt: skip
    assert json.loads(topic)["bundle"].startswith("0x")
    # The simulator on a scenario the package ships, with its plot (matplotlib and pillow).
    simulated = succeeds(
        venv, tmp_path, "pulsar-rebalance", "simulate", "--scenario", "spike", "--minutes", "30",
        "--plot", str(tmp_path / "spike.png"),
    )  # fmt: skip
    assert json.loads(simulated)["scenario"] == "spike"
    assert (tmp_path / "spike.png").read_bytes().startswith(b"\x89PNG")
    # The store's commands on the default SQLite store.
    succeeds(venv, tmp_path, "pulsar-rebalance", "db", "upgrade", env=home)
    succeeds(venv, tmp_path, "pulsar-rebalance", "snapshots", env=home)
    succeeds(venv, tmp_path, "pulsar-rebalance", "plan", "list", env=home)

    # The Spark commands name the extra they need, in one line, without a traceback.
    for command in (["plan", "run", "--cluster", "c1"], ["spark-code", "--out", str(tmp_path / "code")]):
        refused = run(venv, tmp_path, "pulsar-rebalance", *command, env=home)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.strip().endswith("install pulsar-rebalance[spark]"), refused.stderr
    # An unreachable cluster is a runtime failure of the collect, not a missing module.
    collected = run(venv, tmp_path, "pulsar-rebalance", "collect", "--admin-url", "http://127.0.0.1:9", env=home)
    assert collected.returncode == 1 and "Traceback" not in collected.stderr, collected.stderr


@pytest.mark.slow  # installs pyspark once more (~1 minute from pip's cache)
@pytest.mark.spark
def test_the_spark_extra_alone_plans_on_a_local_master(distributions, pulsar_cluster, tmp_path):
    wheel, _ = distributions
    venv = fresh_venv(tmp_path, f"{wheel}[spark]")
    assert "apache-airflow" not in installed(venv)
    succeeds(venv, tmp_path, "pip", "check", "--disable-pip-version-check")
    # Spark Connect's client has what it needs (grpc, protobufs, zstandard), and pandas is one pyspark supports:
    # the check that warns is run with warnings as errors.
    check = tmp_path / "check_spark_extra.py"
    check.write_text(
        "from pyspark.sql.connect.utils import check_dependencies\n"
        "from pyspark.sql.pandas.utils import require_minimum_pandas_version\n"
        "check_dependencies()\n"
        "import pyspark.sql.connect.session\n"
        "require_minimum_pandas_version()\n"
    )
    succeeds(venv, tmp_path, "python", "-W", "error", str(check))
    env = {"PULSAR_REBALANCE_HOME": str(tmp_path / "home"), "SPARK_LOCAL_IP": "127.0.0.1"}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    admin_url = pulsar_cluster["brokers"][0]["adminUrl"]
    for _ in range(2):
        succeeds(venv, tmp_path, "pulsar-rebalance", "collect", "--admin-url", admin_url, env=env)
    planned = succeeds(
        venv, tmp_path, "pulsar-rebalance", "plan", "run", "--cluster", pulsar_cluster["cluster"],
        "--strategy", "AvgShedderPredictive", "--master", "local[1]", env=env,
    )  # fmt: skip
    [committed] = json.loads(planned)["plans"]
    assert committed["cluster"] == pulsar_cluster["cluster"] and committed["plan"], committed
    shown = json.loads(succeeds(venv, tmp_path, "pulsar-rebalance", "plan", "show", str(committed["plan"]), env=env))
    assert shown["cluster"] == pulsar_cluster["cluster"], shown


@pytest.mark.slow  # installs Airflow once more (~2 minutes from pip's cache)
@pytest.mark.airflow
def test_the_airflow_extra_alone_lists_the_provider_and_imports_the_dag_file(distributions, tmp_path):
    wheel, _ = distributions
    venv = fresh_venv(tmp_path, f"{wheel}[airflow]")
    assert "pyspark" not in installed(venv)
    succeeds(venv, tmp_path, "pip", "check", "--disable-pip-version-check")
    env = {"AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    providers = run(venv, tmp_path, "airflow", "providers", "list", "-o", "json", env=env)
    assert providers.returncode == 0, providers.stderr[-3000:]
    assert "Traceback" not in providers.stderr and "ERROR" not in providers.stderr, providers.stderr[-3000:]
    listed = json.loads(providers.stdout[providers.stdout.index("[") :])
    assert "pulsar-rebalance" in [entry["package_name"] for entry in listed]
    for listing, expected in (
        ("notifications", "planner.airflow.notifications.PlanWebhookNotifier"),
        ("hooks", "pulsar"),
    ):
        shown = run(venv, tmp_path, "airflow", "providers", listing, "-o", "json", env=env)
        assert shown.returncode == 0 and expected in shown.stdout, (
            f"{listing}: {shown.stdout[-2000:]}{shown.stderr[-2000:]}"
        )
    # The README's DAG file, alone in a folder outside the checkout, builds the DAGs.
    dags = tmp_path / "dags"
    dags.mkdir()
    dag_line = next(
        line.strip() for line in (REPO / "README.md").read_text().splitlines() if "planner.airflow.dags import" in line
    )
    (dags / "pulsar_rebalance.py").write_text(dag_line + "\n")
    built = succeeds(
        venv, tmp_path, "python", "-c",
        "import runpy; names = runpy.run_path('dags/pulsar_rebalance.py');"
        "from airflow.sdk import DAG; print(sorted(n.dag_id for n in names.values() if isinstance(n, DAG)))",
        env=env,
    )  # fmt: skip
    assert "pulsar_rebalance_collect" in built, built
