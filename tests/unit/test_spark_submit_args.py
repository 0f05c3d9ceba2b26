"""The plan DAG's spark-submit as the real operator builds it when the task runs: the driver's address on a local
master only, the deployment's Spark conf, files and packages, Hadoop's s3a packages for `s3://` storage.

The command is the provider's own (`SparkSubmitHook._build_spark_submit_command`), captured instead of run.
"""

from __future__ import annotations

import json
import re

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from planner.airflow.spark_operator import connection_master, master_of
from planner.errors import InputError
from planner.settings import SparkSubmitSettings, planner_settings
from planner.spark_submit import (
    S3A_AWS_SDK,
    S3A_EXCLUSIONS,
    is_local_master,
    pyspark_hadoop_version,
    s3a_packages,
    spark_submission,
)
from tests.unit.test_dag_parse import airflow_env, parse, set_variable  # noqa: F401 - airflow_env is a fixture

# Airflow's home in the test's directory, and no parsing context left over.
pytestmark = pytest.mark.usefixtures("airflow_env")
DAG_ID = "pulsar_rebalance_plan_local"
S3 = "s3://samples/prod?endpoint_override=127.0.0.1:9000&scheme=http"


def use_master(monkeypatch, connection: dict) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))


def submitted(monkeypatch) -> tuple[list[str], dict[str, str]]:
    """Run the plan DAG's spark_plan task as a worker would (a fresh parse of its DAG); returns spark-submit's
    arguments and the environment variables it adds, without starting it."""
    seen: dict = {}

    def submit(self: SparkSubmitHook, application: str = "", **kwargs: object) -> None:
        seen["command"] = self._build_spark_submit_command(application)
        seen["env"] = dict(self._env or {})

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    task = parse(DAG_ID).dags[DAG_ID].task_dict["spark_plan"]
    task.execute({"run_id": "manual__1"})
    return seen["command"], seen["env"]


def option(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def confs(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, word in enumerate(command) if word == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[4,2]", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://10.0.0.2:7077", False),
        ("spark://m1:7077,m2:7077", False),
        ("yarn", False),
        ("k8s://https://kube:6443", False),
        ("localhost", False),
        ("spark://localhost:7077", False),  # a standalone master, even on this host: its workers may not be
    ],
)
def test_only_local_masters_are_local(master, local):
    assert is_local_master(master) is local


@pytest.mark.parametrize(
    "connection",
    [
        {"conn_type": "spark", "host": "local[2]"},
        {"conn_type": "spark", "host": "spark://10.0.0.2", "port": 7077},
        {"conn_type": "spark", "host": "10.0.0.2", "port": 7077},
        {"conn_type": "spark", "host": "yarn"},
        {"conn_type": "spark", "host": "spark://m1:7077,m2:7077"},
    ],
)
def test_the_master_is_the_one_the_provider_submits_to(monkeypatch, connection):
    use_master(monkeypatch, connection)
    assert connection_master("spark_default") == SparkSubmitHook(conn_id="spark_default")._connection["master"]


def test_a_kubernetes_master_is_the_hosts_url():
    # The provider's hook needs the Kubernetes provider for these; the rule is the same.
    assert master_of("spark", "k8s://https://kube", 6443) == "k8s://https://kube:6443"
    assert master_of("spark", "k8s://https://kube:6443", None) == "k8s://https://kube:6443"


def test_no_connection_is_the_providers_yarn(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    assert connection_master("spark_default") == SparkSubmitHook(conn_id="spark_default")._connection["master"]


def test_a_local_master_gets_the_driver_address_and_no_ui(monkeypatch):
    use_master(monkeypatch, {"conn_type": "spark", "host": "local[2]"})
    set_variable(monkeypatch, {"spark_local_ip": "127.0.0.2"})
    command, env = submitted(monkeypatch)
    assert option(command, "--master") == "local[2]"
    assert env == {"SPARK_LOCAL_IP": "127.0.0.2"}
    assert confs(command) == {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


def test_a_remote_master_gets_no_driver_address_and_the_deployments_options(monkeypatch):
    """Executors on other hosts connect back to the driver: no loopback address for it. The deployment's
    options reach spark-submit as its own (read from the Variable when the task runs)."""
    use_master(monkeypatch, {"conn_type": "spark", "host": "spark://10.0.0.2", "port": 7077})
    spark = {
        "conf": {
            "spark.executor.memory": "2g",
            "spark.driver.port": 40000,
            "spark.pyspark.python": "./environment/bin/python",
        },
        "py_files": ["s3a://code/pulsar_rebalance_code.zip"],
        "archives": ["s3a://code/venv.tar.gz#environment"],
        "packages": ["org.example:extra:1.0"],
        "exclude_packages": ["org.example:unwanted"],
        "repositories": ["https://maven.example.org/releases"],
    }
    set_variable(monkeypatch, {"spark_local_ip": "127.0.0.1", "spark": spark})
    command, env = submitted(monkeypatch)
    assert option(command, "--master") == "spark://10.0.0.2:7077"
    assert "SPARK_LOCAL_IP" not in env
    # The deployment's conf, and nothing of the DAG's: what it leaves unset keeps spark-defaults.conf's value.
    assert confs(command) == {
        "spark.executor.memory": "2g",
        "spark.driver.port": "40000",
        "spark.pyspark.python": "./environment/bin/python",
    }
    assert option(command, "--py-files") == "s3a://code/pulsar_rebalance_code.zip"
    assert option(command, "--archives") == "s3a://code/venv.tar.gz#environment"
    assert option(command, "--packages") == "org.example:extra:1.0"
    assert option(command, "--exclude-packages") == "org.example:unwanted"
    assert option(command, "--repositories") == "https://maven.example.org/releases"
    assert command[-7] == parse(DAG_ID).dags[DAG_ID].task_dict["spark_plan"].application  # then the job's 6 args


def test_the_environment_sets_the_submission_too(monkeypatch):
    use_master(monkeypatch, {"conn_type": "spark", "host": "yarn"})
    monkeypatch.setenv("PULSAR_REBALANCE_SPARK__CONF", '{"spark.driver.host": "10.0.0.7"}')
    monkeypatch.setenv("PULSAR_REBALANCE_SPARK__ARCHIVES", "hdfs:///envs/planner.tar.gz#environment")
    command, env = submitted(monkeypatch)
    assert "SPARK_LOCAL_IP" not in env
    assert confs(command)["spark.driver.host"] == "10.0.0.7"
    assert option(command, "--archives") == "hdfs:///envs/planner.tar.gz#environment"


def test_object_storage_brings_s3a_through_sparks_package_resolution(monkeypatch):
    use_master(monkeypatch, {"conn_type": "spark", "host": "spark://10.0.0.2", "port": 7077})
    monkeypatch.setenv("PULSAR_REBALANCE_STORAGE", S3)
    command, _ = submitted(monkeypatch)
    hadoop = pyspark_hadoop_version()
    assert option(command, "--packages") == (
        f"org.apache.hadoop:hadoop-aws:{hadoop},software.amazon.awssdk:s3:{S3A_AWS_SDK[hadoop]},"
        f"software.amazon.awssdk:s3-transfer-manager:{S3A_AWS_SDK[hadoop]}"
    )
    assert option(command, "--exclude-packages") == ",".join(S3A_EXCLUSIONS)
    assert "--jars" not in command


@pytest.mark.parametrize(
    "spark",
    [
        {"s3a_packages": False},
        {"conf": {"spark.jars": "/opt/jars/hadoop-aws.jar"}},
        {"conf": {"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.5.0"}},
        {"packages": ["org.apache.hadoop:hadoop-aws:3.4.1"]},
    ],
)
def test_a_deployment_that_brings_its_own_s3a_gets_none_added(spark):
    settings = SparkSubmitSettings.model_validate(spark)
    built = spark_submission(settings, "spark://h:7077", local_ip="127.0.0.1", storage_root=S3, hadoop="3.5.0")
    assert not any("awssdk" in package for package in built.packages)
    assert "software.amazon.awssdk:bundle" not in built.exclude_packages


def test_files_on_disk_need_no_s3a():
    built = spark_submission(
        SparkSubmitSettings(), "spark://h:7077", local_ip="127.0.0.1", storage_root="file:///data", hadoop="3.5.0"
    )
    assert built.packages == () and built.exclude_packages == ()


def test_the_s3a_versions_follow_the_installed_pyspark():
    """A pyspark upgrade that changes Hadoop fails here until S3A_AWS_SDK names its SDK (hadoop-project's POM)."""
    hadoop = pyspark_hadoop_version()
    assert hadoop in S3A_AWS_SDK
    assert s3a_packages(hadoop)[0] == f"org.apache.hadoop:hadoop-aws:{hadoop}"
    with pytest.raises(InputError, match=r"^spark.s3a_packages: no AWS SDK release known for Hadoop 9.9.9; set "):
        s3a_packages("9.9.9")


def test_the_log_line_names_no_conf_value():
    settings = SparkSubmitSettings.model_validate({"conf": {"spark.hadoop.fs.s3a.secret.key": "s3cr3t"}})
    built = spark_submission(settings, "yarn", local_ip="127.0.0.1", storage_root="file:///d", hadoop="3.5.0")
    line = built.describe()
    assert "s3cr3t" not in line and "spark.hadoop.fs.s3a.secret.key" in line
    assert "Spark's choice" in line


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CONF", '{"executor.memory": "2g"}', r"spark\.conf: 'executor\.memory' is not a Spark property"),
        ("PACKAGES", "org.example:extra", r"spark\.packages: 'org\.example:extra' is not a Maven coordinate"),
        ("EXCLUDE_PACKAGES", "org.example", r"spark\.exclude_packages: 'org\.example' is not `group:artifact`"),
        (
            "REPOSITORIES",
            "https://me:s3cr3t@maven.example/r",
            r"spark\.repositories: https://\.\.\.@\.\.\.: credentials",
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(monkeypatch, variable, value, message):
    monkeypatch.setenv(f"PULSAR_REBALANCE_SPARK__{variable}", value)
    with pytest.raises(InputError, match=message) as raised:
        planner_settings()
    assert "\n" not in str(raised.value)
    assert "s3cr3t" not in str(raised.value)
    assert re.search(f"PULSAR_REBALANCE_SPARK__{variable}", str(raised.value))


@pytest.mark.parametrize("flag", ["--s3a-packages", "--s3a-jars"])
def test_spark_code_prints_the_s3a_packages_for_spark_submit(capsys, tmp_path, flag):
    from planner.cli import main

    assert main(["spark-code", "--out", str(tmp_path), flag]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["packages"] == ",".join(s3a_packages(pyspark_hadoop_version()))
    assert printed["excludePackages"] == ",".join(S3A_EXCLUSIONS)
    assert "jars" not in printed  # nothing is resolved here: spark-submit does it
