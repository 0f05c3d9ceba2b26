"""Install into an existing Airflow, as a platform team would, and run the whole cycle there.

The wheel is built from the checkout and installed with its `airflow`, `spark` and `postgres` extras into
a fresh virtualenv (the newest releases the version ranges allow; the dev environment tests the pinned
lower end). Nothing of the checkout is on that Airflow's path. Its DAG folder holds only the README's
one-line DAG file. A real api-server, scheduler, dag-processor and triggerer run on loopback, on a
PostgreSQL metadata database, and every task runs in its own fresh working directory and HOME
(`installed/fresh_home_executor.py`), as on separate workers: only the configured storage root and the
store are shared. The connections and the settings Variable are created through the REST API, the
`pulsar` connection is tested through it, and the approval is given through the HITL REST API. The
approved plan waits, deferred, for an execution window set in the Variable; the scheduler and the
triggerer are killed and restarted while it waits, and it executes when the window opens.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from psycopg import sql
from sqlalchemy import select

from planner.store.database import Store
from planner.store.models import AuditEvent, Plan
from pulsar_rebalance_devtools.traffic import BundleTraffic
from tests.integration.conftest import CYCLE_CONF, PostgresServer, _free_port, stop_process_group
from tests.integration.packaging import REPO, built_wheel, fresh_venv

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def readme_dag_line() -> str:
    """The DAG file the README tells a team to write: the line that imports the factory."""
    lines = [line.strip() for line in (REPO / "README.md").read_text().splitlines()]
    [line] = [line for line in lines if line.startswith("from planner.airflow.dags import")]
    return line


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the built wheel and a stock Airflow from PyPI; returns its root."""
    root = tmp_path_factory.mktemp("installed")
    fresh_venv(root, f"{built_wheel(tmp_path_factory)}[airflow,spark,postgres]")
    return root


def airflow_command(env: dict[str, str], cwd: Path, *arguments: str) -> str:
    done = subprocess.run(
        [f"{env['VIRTUAL_ENV']}/bin/airflow", *arguments], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"airflow {' '.join(arguments)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


class Components:
    """Airflow's components as separate processes, each restartable (a crash and a restart, e.g. an upgrade)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.processes: dict[str, tuple[subprocess.Popen[bytes], Any]] = {}

    def start(self, component: str) -> None:
        log = (self.logs / f"{component}.log").open("ab")
        command = [f"{self.env['VIRTUAL_ENV']}/bin/airflow", component]
        process = subprocess.Popen(
            command, env=self.env, cwd=self.logs, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes[component] = (process, log)

    def kill_and_restart(self, component: str) -> None:
        process, log = self.processes.pop(component)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        log.close()
        self.start(component)

    def stop(self) -> None:
        for process, log in self.processes.values():
            stop_process_group(process, timeout=60)
            log.close()


@contextlib.contextmanager
def airflow_components(env: dict[str, str], logs: Path) -> Iterator[Components]:
    components = Components(env, logs)
    try:
        for component in COMPONENTS:
            components.start(component)
        yield components
    finally:
        components.stop()


class Api:
    def __init__(self, url: str, password: str) -> None:
        self.url = url
        self.session = requests.Session()
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(f"{url}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the api-server did not start")
            time.sleep(1)
        token = requests.post(f"{url}/auth/token", json={"username": "admin", "password": password}, timeout=30)
        token.raise_for_status()
        self.session.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, f"{self.url}{path}", timeout=60, **kwargs)
        assert response.status_code < 300, f"{method} {path}: {response.status_code} {response.text[:2000]}"
        return response.json() if response.content else None

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float, logs: Path) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in {"success", "failed"}:
                return self.task_states(dag_id, run_id)
            time.sleep(2)
        raise AssertionError(f"{dag_id} {run_id} did not finish: {self.task_states(dag_id, run_id)}\n{tail(logs)}")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        instances = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {f"{ti['task_id']}[{ti['map_index']}]": ti["state"] for ti in instances}


def api_server_env(root: Path, port: int) -> tuple[dict[str, str], str]:
    """The environment of Airflow components whose api-server listens on loopback `port` (their tasks reach it):
    one user `admin`, whose password (returned) is written under `root`, and fresh secret keys."""
    password = secrets.token_urlsafe(12)
    (root / "passwords.json").write_text(json.dumps({"admin": password}))
    env = {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }
    return env, password


def variable_body(settings: dict[str, Any]) -> dict[str, str]:
    return {"key": "pulsar_rebalance_settings", "value": json.dumps(settings)}


def tail(logs: Path) -> str:
    return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}" for path in logs.glob("*.log"))


@pytest.fixture
def airflow_databases(postgres_server: PostgresServer) -> Iterator[tuple[str, str]]:
    names = [f"installed_airflow_{secrets.token_hex(4)}", f"installed_store_{secrets.token_hex(4)}"]
    with postgres_server.connect_admin() as connection:
        for name in names:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield names[0], names[1]
    with postgres_server.connect_admin() as connection:
        for name in names:
            connection.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.slow  # 5 minutes, 2 of them waiting for the execution window to open; the DAG tests cover the rest
def test_the_installed_package_runs_the_cycle_in_a_stock_airflow_with_tasks_on_separate_workers(
    installed, pulsar_cluster, traffic_generator, postgres_server, airflow_databases, tmp_path
):
    airflow_db, store_db = airflow_databases
    cluster = pulsar_cluster["cluster"]
    admin_url = pulsar_cluster["brokers"][0]["adminUrl"]
    hot = pulsar_cluster["brokers"][0]["id"]
    port = _free_port()
    server_env, password = api_server_env(tmp_path, port)
    dags, executor_dir, shared, logs = (tmp_path / name for name in ("dags", "executor", "shared", "logs"))
    for folder in (dags, executor_dir, shared, logs):
        folder.mkdir()
    (dags / "pulsar_rebalance.py").write_text(readme_dag_line() + "\n")
    shutil.copy(REPO / "tests" / "integration" / "installed" / "fresh_home_executor.py", executor_dir)
    venv = installed / "venv"
    env = {
        "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
        "VIRTUAL_ENV": str(venv),
        "HOME": str(tmp_path / "scheduler-home"),
        "LANG": "C.UTF-8",
        # Only the test's executor is added to the path: nothing of the checkout.
        "PYTHONPATH": str(executor_dir),
        "FRESH_HOME_LOG": str(tmp_path / "homes.log"),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "fresh_home_executor.FreshHomeLocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_server.url(airflow_db),
        # psycopg 3 is async too; Airflow's default async URL would need asyncpg.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": postgres_server.url(airflow_db),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # The settings a deployment sets in the environment: the clusters, when plans run, shared storage.
        "PULSAR_REBALANCE_CLUSTER_NAMES": cluster,
        "PULSAR_REBALANCE_PLAN_PROFILE": "manual",  # no scheduled plan run during the test
        "PULSAR_REBALANCE_STORAGE": shared.as_uri(),
    } | server_env
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    airflow_command(env, tmp_path, "db", "migrate")

    # The provider and its plugin, as Airflow lists them.
    providers = airflow_command(env, tmp_path, "providers", "list", "-o", "json")
    assert "pulsar-rebalance" in [entry["package_name"] for entry in json.loads(providers[providers.index("[") :])]
    plugins = airflow_command(env, tmp_path, "plugins", "-o", "json")
    assert "pulsar_rebalance" in [entry["name"] for entry in json.loads(plugins[plugins.index("[") :])]

    generator = traffic_generator([BundleTraffic(bundle=i, topics=1, rate=40) for i in range(4)])
    generator.place_bundles(dict.fromkeys(range(4), hot))
    generator.start()
    time.sleep(12)  # two load-report intervals, so the reports show the traffic

    with airflow_components(env, logs) as components:
        api = Api(f"http://127.0.0.1:{port}", password)
        # The Pulsar connection through its own type, tested through the REST API like the UI's Test button.
        pulsar_connection = {
            "connection_id": f"pulsar_{cluster}",
            "conn_type": "pulsar",
            "host": admin_url,
            "extra": json.dumps({"verify_tls": True, "actions_per_minute": 120}),
        }
        tested = api.call("POST", "/api/v2/connections/test", json=pulsar_connection)
        assert tested["status"] is True and "active broker" in tested["message"], tested
        unreachable = api.call(
            "POST", "/api/v2/connections/test", json={**pulsar_connection, "host": "http://127.0.0.1:9"}
        )
        assert unreachable["status"] is False, unreachable
        api.call("POST", "/api/v2/connections", json=pulsar_connection)
        api.call(
            "POST",
            "/api/v2/connections",
            json={
                "connection_id": "pulsar_rebalance_db",
                "conn_type": "postgres",
                "host": postgres_server.host,
                "port": postgres_server.port,
                "login": "postgres",
                "password": postgres_server.password,
                "schema": store_db,
            },
        )
        # Settings through the Airflow Variable; the executor's also from the connection and the run's params.
        variable: dict[str, Any] = {"measure_wait": 30, "executor": {"settle_seconds": 5, "max_failures": 2}}
        api.call("POST", "/api/v2/variables", json=variable_body(variable))

        deadline = time.monotonic() + 180
        while api.session.get(f"{api.url}/api/v2/dags/pulsar_rebalance_plan_{cluster}", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, f"the DAGs were not parsed:\n{tail(logs)}"
            time.sleep(2)
        assert api.call("GET", "/api/v2/importErrors")["total_entries"] == 0

        collect_runs = [
            api.call("POST", "/api/v2/dags/pulsar_rebalance_collect/dagRuns", json={"logical_date": None})["dag_run_id"]
            for _ in range(3)
        ]
        for run_id in collect_runs:
            states = api.wait_for_run("pulsar_rebalance_collect", run_id, 300, logs)
            assert set(states.values()) == {"success"}, states

        plan_dag = f"pulsar_rebalance_plan_{cluster}"
        conf = {**CYCLE_CONF, "max_actions": 10}
        run_id = api.call("POST", f"/api/v2/dags/{plan_dag}/dagRuns", json={"logical_date": None, "conf": conf})[
            "dag_run_id"
        ]
        deadline = time.monotonic() + 600
        while True:
            pending = api.call("GET", f"/api/v2/dags/{plan_dag}/dagRuns/{run_id}/hitlDetails")["hitl_details"]
            if pending:
                break
            states = api.task_states(plan_dag, run_id)
            assert "failed" not in states.values() and "upstream_failed" not in states.values(), states
            assert time.monotonic() < deadline, f"no approval was requested: {states}\n{tail(logs)}"
            time.sleep(3)
        [gate] = pending
        assert f"http://127.0.0.1:{port}/pulsar-planner/plans/" in gate["body"], gate["body"]
        # An execution window that opens a minute or two from now: the approved plan waits for it.
        opening = (datetime.now(UTC) + timedelta(seconds=150)).replace(second=0, microsecond=0)
        window = {"cron": f"{opening.minute} {opening.hour} * * *", "duration": 600, "timezone": "UTC"}
        variable["execution_windows"] = [window]
        api.call("PATCH", "/api/v2/variables/pulsar_rebalance_settings", json={**variable_body(variable)})
        api.call(
            "PATCH",
            f"/api/v2/dags/{plan_dag}/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails",
            json={"chosen_options": ["Approve"], "params_input": {}},
        )
        # Deferred to the triggerer, it holds no worker slot; the scheduler and the triggerer are killed and
        # restarted while it waits, and it goes on when the window opens.
        deadline = time.monotonic() + 120
        while (states := api.task_states(plan_dag, run_id)).get("execution_window[-1]") != "deferred":
            assert time.monotonic() < deadline and datetime.now(UTC) < opening, f"not deferred: {states}"
            time.sleep(1)
        for component in ("scheduler", "triggerer"):
            components.kill_and_restart(component)
        assert api.task_states(plan_dag, run_id)["execution_window[-1]"] == "deferred"
        states = api.wait_for_run(plan_dag, run_id, 600, logs)
        assert states["execute[-1]"] == "success" and states["report[-1]"] == "success", f"{states}\n{tail(logs)}"

        # XCom carried URIs under the shared storage root, no worker's local path.
        prepared = api.call(
            "GET", f"/api/v2/dags/{plan_dag}/dagRuns/{run_id}/taskInstances/prepare/xcomEntries/return_value"
        )["value"]
        prepared = json.loads(prepared) if isinstance(prepared, str) else prepared
        assert all(uri.startswith(shared.as_uri()) for uri in prepared.values()), prepared

        # The review pages, served by the installed plugin behind Airflow's login.
        store = Store(postgres_server.url(store_db))
        with store.session() as session:
            plan = session.scalars(select(Plan)).one()
            unloads = [(a.bundle, a.source, a.destination) for a in plan.actions if a.kind == "unload"]
            events = {
                event.event: event for event in session.scalars(select(AuditEvent).where(AuditEvent.plan_id == plan.id))
            }
        page = api.session.get(f"{api.url}/pulsar-planner/plans/{plan.id}", timeout=30)
        assert page.status_code == 200 and cluster in page.text
        assert requests.get(f"{api.url}/pulsar-planner/plans/{plan.id}", timeout=30).status_code == 401
        views = api.call("GET", "/api/v2/plugins")["plugins"]
        assert any(view["name"] == "Rebalance plans" for plugin in views for view in plugin.get("external_views", []))

    generator.stop()
    assert plan.status == "executed"
    approved = events["plan.approved"].details
    assert approved["source"] == "airflow-hitl" and approved["approverId"] == "admin", approved
    started = events["plan.execution-started"]
    assert started.at.replace(tzinfo=started.at.tzinfo or UTC) >= opening, (started.at, opening)
    used = started.details["settings"]
    # Defaults, then the Variable, then the connection's extras, then the run's params.
    assert used["settle_seconds"] == 5 and used["max_failures"] == 2
    assert used["actions_per_minute"] == 120 and used["max_actions"] == 10
    assert unloads and all(source == hot for _, source, _ in unloads)
    # The plan covers the whole cluster: other tests' namespaces (without traffic, so nobody looks their bundles
    # up again) may have bundles in it too. The generator's bundles carry traffic: they are on the destinations.
    moved = [(name, destination) for name, _, destination in unloads if name.startswith(f"{generator.namespace}/")]
    assert moved, unloads
    for bundle_name, destination in moved:
        bundle_range = bundle_name.rsplit("/", 1)[1]
        probe = next(topic for topic, bundle in generator.topics.items() if str(bundle) == bundle_range)
        assert generator.owner(probe) == destination

    # Every task ran in a home of its own.
    homes = [line.split("\t") for line in (tmp_path / "homes.log").read_text().splitlines()]
    assert len(homes) >= 3 + 7 and len({home for _, home in homes}) == len(homes), homes
