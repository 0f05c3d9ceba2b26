"""Fixtures for tests against real components: a local Pulsar cluster and a throwaway PostgreSQL.

- `pulsar_cluster` (session): the cluster description from `pulsar_rebalance_devtools.local_cluster`; reuses a running
  cluster (e.g. one started with the CLI) and stops the cluster at the end only if it started it.
- `token_cluster` (module): a second, token-authenticated cluster on other ports, stopped at the end
  (`separate_cluster` starts such clusters, on another release or with broker.conf keys of their own too).
- `cluster_policies` (function): a `PolicyWriter` on the default cluster that sets Pulsar's own policies (namespace
  isolation, failure domains, anti-affinity groups, dynamic configuration) through the admin API and removes each
  after the test (`policy_writer` for another cluster).
- `traffic_generator` (function): a factory for `TrafficGenerator`s on fresh namespaces, each stopped
  and its namespace force-deleted after the test.
- `approved_cycle` (session): one collect → plan (Spark) → approve → execute → report run of the real
  plan DAG on skewed traffic, shared by the tests that check its outcome.
- `airflow_api_server(env, users)`: a real Airflow api-server on loopback with the project's plugin and
  password logins (Airflow's simple auth manager), stopped on exit.
- `postgres_server` (session) / `postgres_url` (function): a PostgreSQL cluster from Debian's
  packages started with initdb/pg_ctl in a temporary directory on 127.0.0.1, and a SQLAlchemy URL
  to a fresh database that is dropped after the test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import psycopg
import pytest
import requests
from psycopg import sql

from planner.collect.admin_client import AdminAuth, PulsarAdminClient
from planner.collect.collector import collect
from planner.store.database import Store
from pulsar_rebalance_devtools import local_cluster
from pulsar_rebalance_devtools.demo import airflow_environment, migrate_airflow, run_plan_cycle
from pulsar_rebalance_devtools.traffic import BundleTraffic, TrafficGenerator

TEST_TENANT = "integration-tests"


@pytest.fixture(scope="session")
def pulsar_cluster() -> Iterator[dict[str, Any]]:
    """A running local cluster with at least two brokers (three when this fixture starts it)."""
    running = local_cluster.status()
    if running is not None and running["healthy"]:
        started_here = False
        cluster = running
    else:
        started_here = True
        cluster = local_cluster.start(brokers=3)
    # A cluster on another release or with broker settings of its own (`local-cluster start --pulsar-version/--set`)
    # is not the one these tests are written for.
    expected = local_cluster.settings_from_env().pulsar_version
    if cluster.get("pulsarVersion", expected) != expected or cluster.get("brokerSettings"):
        pytest.fail(
            f"the running local cluster runs Pulsar {cluster.get('pulsarVersion')} with broker settings "
            f"{cluster.get('brokerSettings') or 'shared only'}, not the default {expected}: stop it "
            "(`pulsar-rebalance-dev local-cluster stop`) and let the tests start one"
        )
    if len(cluster["brokers"]) < 2:
        pytest.fail(
            f"the running local cluster has {len(cluster['brokers'])} broker(s); the tests need at "
            "least 2: stop it (`pulsar-rebalance-dev local-cluster stop`) and let the tests start one"
        )
    try:
        yield cluster
    finally:
        if started_here:
            local_cluster.stop()


@contextlib.contextmanager
def separate_cluster(
    root: Path,
    cluster: str,
    ports: tuple[int, int, int, int],
    brokers: int,
    options: Mapping[str, str],
    broker_settings: Mapping[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """A local cluster beside the default one: its own name, home under `root`, ports (ZooKeeper, bookie, first
    web and first broker port), `options` (local cluster settings by environment name, the release among them) and
    `broker_settings` (broker.conf keys over the shared ones); stopped at the end."""
    zookeeper, bookie, web, broker = ports
    env = {
        "PULSAR_REBALANCE_HOME": str(root),
        local_cluster.ENV_CLUSTER: cluster,
        local_cluster.ENV_ZK_PORT: str(zookeeper),
        local_cluster.ENV_BOOKIE_PORT: str(bookie),
        local_cluster.ENV_WEB_PORT: str(web),
        local_cluster.ENV_BROKER_PORT: str(broker),
        **options,
    }
    # The settings are read from the environment: this cluster's, for this call only.
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        settings = local_cluster.settings_from_env()
    overrides = local_cluster.broker_setting_overrides(broker_settings or {})
    settings = dataclasses.replace(settings, broker_settings=overrides)
    try:
        yield local_cluster.start(brokers=brokers, settings=settings)
    finally:
        local_cluster.stop(settings)


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A second local cluster, two brokers with Pulsar's token authentication and authorization on, on its own
    ports and home beside the default one; stopped at the end. `tokenFile` names the superuser's token."""
    root = tmp_path_factory.mktemp("token-cluster")
    with separate_cluster(
        root, "secure", (22181, 23181, 28081, 26651), 2, {local_cluster.ENV_AUTH: "token"}
    ) as cluster:
        yield cluster


class PolicyWriter:
    """Pulsar's own policies, written through the cluster's admin REST API as an operator would, each undone (in
    reverse order) by `remove_all`: whatever a test leaves, the shared cluster goes on without it."""

    def __init__(self, cluster: Mapping[str, Any]) -> None:
        self.admin_url = cluster["brokers"][0]["adminUrl"]
        self.cluster = cluster["cluster"]
        self.headers = local_cluster.admin_headers(cluster)
        self._undo: list[tuple[str, str]] = []

    def _send(self, method: str, path: str, content_type: str | None = None, **body: Any) -> requests.Response:
        headers = self.headers | ({"Content-Type": content_type} if content_type else {})
        return requests.request(method, f"{self.admin_url}{path}", headers=headers, timeout=30, **body)

    def _write(self, path: str, undo: str | None = None, content_type: str | None = None, **body: Any) -> None:
        response = self._send("POST", path, content_type, **body)
        assert response.status_code in (200, 204), f"POST {path}: {response.status_code} {response.text[:500]}"
        self._undo.append(("DELETE", undo or path))

    def isolate(
        self,
        name: str,
        namespaces: Sequence[str],
        primary: Sequence[str],
        secondary: Sequence[str] = (),
        min_limit: int = 1,
        usage_threshold: int = 100,
        unload_scope: str | None = None,
    ) -> None:
        """A namespace isolation policy: `namespaces` and the brokers (host regexes) they may go to. Pulsar unloads
        the bundles of the namespaces it matches unless `unload_scope` is `none` (or `changed`: only those whose
        brokers changed)."""
        policy: dict[str, object] = {
            "namespaces": list(namespaces),
            "primary": list(primary),
            "secondary": list(secondary),
            "auto_failover_policy": {
                "policy_type": "min_available",
                "parameters": {"min_limit": str(min_limit), "usage_threshold": str(usage_threshold)},
            },
            **({"unload_scope": unload_scope} if unload_scope else {}),
        }
        self._write(f"/admin/v2/clusters/{self.cluster}/namespaceIsolationPolicies/{name}", json=policy)

    def failure_domain(self, name: str, brokers: Sequence[str]) -> None:
        self._write(f"/admin/v2/clusters/{self.cluster}/failureDomains/{name}", json={"brokers": list(brokers)})

    def anti_affinity(self, namespace: str, group: str) -> None:
        self._write(f"/admin/v2/namespaces/{namespace}/antiAffinity", content_type="application/json", data=group)

    def dynamic(self, key: str, value: str) -> None:
        """A dynamic configuration value for every broker, back to its broker.conf value at the end."""
        self._write(f"/admin/v2/brokers/configuration/{key}/{value}", undo=f"/admin/v2/brokers/configuration/{key}")

    def remove_all(self) -> None:
        failures = []
        while self._undo:
            method, path = self._undo.pop()
            response = self._send(method, path)
            if response.status_code not in (200, 204, 404):
                failures.append(f"{method} {path}: {response.status_code} {response.text[:200]}")
        assert not failures, f"policies left on the cluster: {failures}"


@contextlib.contextmanager
def policy_writer(cluster: Mapping[str, Any]) -> Iterator[PolicyWriter]:
    writer = PolicyWriter(cluster)
    try:
        yield writer
    finally:
        writer.remove_all()


@pytest.fixture
def cluster_policies(pulsar_cluster: dict[str, Any]) -> Iterator[PolicyWriter]:
    with policy_writer(pulsar_cluster) as writer:
        yield writer


@pytest.fixture
def traffic_generator(pulsar_cluster: dict[str, Any]) -> Iterator[Callable[..., TrafficGenerator]]:
    """`make(traffic, num_bundles=4, **options)`: a set-up (not started) generator on a new namespace."""
    generators: list[TrafficGenerator] = []

    def make(traffic: Sequence[BundleTraffic], num_bundles: int = 4, **options: Any) -> TrafficGenerator:
        namespace = f"{TEST_TENANT}/ns-{secrets.token_hex(4)}"
        generator = TrafficGenerator.for_cluster(pulsar_cluster, namespace, traffic, num_bundles=num_bundles, **options)
        generators.append(generator)
        generator.setup()
        return generator

    yield make
    for generator in generators:
        try:
            generator.stop()
        finally:
            generator.delete_namespace()


CYCLE_CONF = {
    "strategy": "UniformLoadShedder",
    "settings": {"minUnloadMessage": 0, "maxUnloadPercentage": 0.5},
    # Other tests' namespaces leave idle bundles on the hot broker, and its plan moves them too; nobody looks
    # them up, so their new owner never shows: waiting 15 s (not 60) for it keeps each cycle short.
    "verify_timeout_seconds": 15,
}
OUTSIDE_POLICY = {"name": "tiny-moves", "max_actions": 20, "max_msg_rate_share": 0.01}
APPROVERS_MAIL = "approvers@example.test"  # the approved cycle's notifier from the `approval_notifiers` setting


def airflow_env(cluster: Mapping[str, Any], root: Path) -> dict[str, str]:
    """A migrated Airflow home and an empty planner store under `root`, serving `cluster`."""
    env = airflow_environment(root / "airflow", dict(cluster), f"sqlite:///{root / 'planner.db'}", root / "home")
    migrate_airflow(env)
    return env


def collect_snapshots(env: Mapping[str, str], admin_url: str, times: int = 3, token: str | None = None) -> None:
    store, home = Store(env["PULSAR_REBALANCE_DB_URL"]), Path(env["PULSAR_REBALANCE_HOME"])
    with PulsarAdminClient(admin_url, auth=AdminAuth(token=token) if token else None) as client:
        for _ in range(times):
            collect(client, store, home)
            time.sleep(2)
    store.dispose()


def skewed_airflow_env(
    cluster: Mapping[str, Any], make_traffic: Callable[..., TrafficGenerator], root: Path, **settings: str
) -> dict[str, str]:
    """Every bundle of a fresh namespace on the first broker at 160 msg/s, reported; an Airflow home and a
    planner store for the cluster under `root` (environment `settings` added), with three snapshots taken."""
    generator = make_traffic([BundleTraffic(bundle=i, topics=1, rate=40) for i in range(4)])
    generator.place_bundles(dict.fromkeys(range(4), cluster["brokers"][0]["id"]))
    generator.start()
    time.sleep(12)  # two load-report intervals, so the reports show the traffic
    env = {**airflow_env(cluster, root), **settings}
    collect_snapshots(env, cluster["brokers"][0]["adminUrl"])
    return env


@pytest.fixture(scope="session")
def approved_cycle(pulsar_cluster: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every bundle of a namespace on one broker at 160 msg/s; the plan DAG run approved through the REST
    API, with notifications to an SMTP server and a webhook receiver on loopback. Yields the Airflow
    environment, the run's task states, where each bundle landed (the namespace is deleted before the other tests
    run), the hot broker, the mailbox and the receiver."""
    # Imported here: tests.receivers takes its port picker from this module.
    from tests.receivers import notification_env, smtp_server, webhook_receiver

    with smtp_server() as mailbox, webhook_receiver() as receiver:
        env = airflow_env(pulsar_cluster, tmp_path_factory.mktemp("approved-cycle"))
        env |= notification_env(mailbox, receiver)
        # Where the notifications' links point: the api-server the review page tests start serves there.
        env["AIRFLOW__API__BASE_URL"] = f"http://127.0.0.1:{_free_port()}"
        # A deployment's own notifier of the gate's request: the SMTP provider's, templated from the gate's context.
        approvers_mail = {
            "notifier": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
            "kwargs": {
                "to": APPROVERS_MAIL,
                "from_email": "planner@example.test",
                "subject": "{{ plan_notification.title }}",
                "html_content": "Decide at {{ plan_notification.link }} ({{ ti.task_id }})",
                "smtp_conn_id": "smtp_test",
            },
            "dags": [f"pulsar_rebalance_plan_{pulsar_cluster['cluster']}"],
        }
        env["PULSAR_REBALANCE_APPROVAL_NOTIFIERS"] = json.dumps([approvers_mail])
        # A policy this plan is outside of (it moves far more than 1 % of the msg/s): it goes to a person.
        env["PULSAR_REBALANCE_APPROVAL_POLICIES"] = json.dumps([OUTSIDE_POLICY])
        yield from _approved_cycle(pulsar_cluster, env, mailbox, receiver)


def _approved_cycle(
    pulsar_cluster: dict[str, Any], env: dict[str, str], mailbox: object, receiver: object
) -> Iterator[dict]:
    hot = pulsar_cluster["brokers"][0]["id"]
    namespace = f"{TEST_TENANT}/cycle-{secrets.token_hex(4)}"
    generator = TrafficGenerator.for_cluster(
        pulsar_cluster, namespace, [BundleTraffic(bundle=i, topics=1, rate=40) for i in range(4)]
    )
    generator.setup()
    try:
        generator.place_bundles({i: hot for i in range(4)})
        generator.start()
        time.sleep(12)  # two load-report intervals, so the reports show the traffic
        collect_snapshots(env, pulsar_cluster["brokers"][0]["adminUrl"])
        outcome = run_plan_cycle(env, pulsar_cluster["cluster"], "Approve", CYCLE_CONF, timeout=600)
        generator.stop()
        # Where each bundle landed, read now: the namespace goes before the other tests run, or its idle bundles
        # would be in every later plan of the session (an idle bundle's move waits for a lookup that never comes).
        landed = {str(bundle): generator.owner(topic) for topic, bundle in generator.topics.items()}
    finally:
        generator.stop()
        generator.delete_namespace()
    yield {
        "env": env,
        "outcome": outcome,
        "landed": landed,  # bundle range -> its owner after the run
        "hot": hot,
        "mailbox": mailbox,
        "receiver": receiver,
    }


@dataclass(frozen=True)
class AirflowServer:
    url: str
    passwords: dict[str, str]

    def token(self, user: str) -> str:
        response = requests.post(
            f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]}, timeout=30
        )
        response.raise_for_status()
        return response.json()["access_token"]

    def session(self, user: str) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.token(user)}"
        return session


SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "review-pages"
# Chromium's background services try to reach Google's hosts; this machine allows loopback only.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium (the Debian package) through Playwright."""
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@contextlib.contextmanager
def logged_in(browser: Any, server: AirflowServer, user: str, path: str, color_scheme: str = "light") -> Iterator[Any]:
    """A page logged in as `user` through Airflow's own login form, at `path`."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=color_scheme)
    opened = context.new_page()
    opened.goto(f"{server.url}/auth/login?next={quote(path, safe='')}")
    opened.fill("input[name=username]", user)
    opened.fill("input[name=password]", server.passwords[user])
    opened.keyboard.press("Enter")
    opened.wait_for_url(f"**{path}", timeout=30_000)
    try:
        yield opened
    finally:
        context.close()


def stop_process_group(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM to the process's group (started with `start_new_session`), SIGKILL if it outlives `timeout`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


@contextlib.contextmanager
def airflow_api_server(env: Mapping[str, str], users: Mapping[str, str]) -> Iterator[AirflowServer]:
    """`users`: name → role (viewer, user, op, admin). Logins need passwords: anonymous access is off."""
    home = Path(env["AIRFLOW_HOME"])
    passwords = {user: secrets.token_urlsafe(12) for user in users}
    (home / "test-passwords.json").write_text(json.dumps(passwords))
    # Where `[api] base_url` says it is (the links the runs sent point there), else anywhere free.
    port = urlsplit(env["AIRFLOW__API__BASE_URL"]).port if "AIRFLOW__API__BASE_URL" in env else _free_port()
    server_env = {
        **env,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{user}:{role}" for user, role in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "test-passwords.json"),
    }
    log = (home / f"api-server-{port}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=server_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(f"{url}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the api-server did not start; see {log.name}")
            time.sleep(1)
        yield AirflowServer(url, passwords)
    finally:
        stop_process_group(process)
        log.close()


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway PostgreSQL server: superuser `postgres` with a random password."""

    host: str
    port: int
    password: str

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres:{self.password}@{self.host}:{self.port}/{database}"

    def connect_admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host, port=self.port, user="postgres", password=self.password, dbname="postgres", autocommit=True
        )


def _postgres_bin_dir() -> Path:
    """The newest installed server's bin dir (`PG_BIN` overrides); initdb/pg_ctl are not on PATH on Debian."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    versions = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    versions.sort(key=lambda bin_dir: int(bin_dir.parent.name) if bin_dir.parent.name.isdigit() else 0)
    if versions:
        return versions[-1]
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    pytest.fail("PostgreSQL server binaries not found; run scripts/install_system_deps.sh (or set PG_BIN)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """initdb + pg_ctl in a temporary directory; as root the server runs as the `postgres` OS user."""
    bin_dir = _postgres_bin_dir()
    # PostgreSQL refuses to run as root: run it as `postgres`, which must own the directory it writes.
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    base = Path(tempfile.mkdtemp(prefix="pulsar-rebalance-pg-"))
    if as_user:
        account = pwd.getpwnam("postgres")
        os.chown(base, account.pw_uid, account.pw_gid)
    password = secrets.token_urlsafe(16)
    password_file = base / "password"
    password_file.write_text(password)
    if as_user:
        os.chown(password_file, account.pw_uid, account.pw_gid)
    data = base / "data"
    log_file = base / "postgres.log"
    port = _free_port()

    def run(*command: str) -> None:
        result = subprocess.run([*as_user, *command], capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            log_text = log_file.read_text() if log_file.exists() else ""
            raise RuntimeError(f"{' '.join(command)} failed: {result.stdout}{result.stderr}{log_text[-2000:]}")

    run(
        str(bin_dir / "initdb"),
        "-D",
        str(data),
        "-U",
        "postgres",
        "--auth=scram-sha-256",
        f"--pwfile={password_file}",
        "--encoding=UTF8",
        "--no-sync",
        "--no-instructions",
    )
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={base} "
        "-c fsync=off -c full_page_writes=off -c synchronous_commit=off"
    )
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log_file), "-o", options, "-w", "-t", "60", "start")
    try:
        yield PostgresServer("127.0.0.1", port, password)
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A SQLAlchemy URL (`postgresql+psycopg://`) to a fresh database, dropped after the test."""
    database = f"test_{secrets.token_hex(6)}"
    with postgres_server.connect_admin() as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        yield postgres_server.url(database)
    finally:
        with postgres_server.connect_admin() as connection:
            connection.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
