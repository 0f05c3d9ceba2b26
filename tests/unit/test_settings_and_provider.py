"""One settings model, the `pulsar` connection type and its hook, the provider info and the one-line DAG file."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.settings import ExecutorSettings, planner_settings, reference_markdown

REPO = Path(__file__).resolve().parents[2]


def test_the_settings_reference_in_the_docs_is_generated_from_the_models():
    assert (REPO / "docs" / "settings.md").read_text() == reference_markdown(), (
        "docs/settings.md is stale: python -m planner.settings > docs/settings.md"
    )


def test_every_setting_variable_the_code_reads_is_in_the_reference():
    """No `PULSAR_REBALANCE_*` variable is read anywhere but through the settings models."""
    reference = (REPO / "docs" / "settings.md").read_text()
    readers = subprocess.run(
        ["git", "grep", "-n", "-E", r"environ(\.get)?[\[(]\"PULSAR_REBALANCE_", "--", "planner", "spark_jobs"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert readers == "", readers
    for name in ("PULSAR_REBALANCE_STORAGE", "PULSAR_REBALANCE_MEASURE_WAIT", "PULSAR_REBALANCE_EXECUTOR__TTL"):
        assert f"`{name}`" in reference


def test_environment_values_are_parsed_and_bad_ones_name_the_setting(monkeypatch):
    monkeypatch.setenv("PULSAR_REBALANCE_CLUSTER_NAMES", " east, west ")
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVERS", "7:Alice Doe,bob")
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVAL_TIMEOUT", "90")
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTOR__MAX_ACTIONS", "5")
    monkeypatch.setenv("PULSAR_REBALANCE_STORAGE", "file:///mnt/shared/rebalance")
    settings = planner_settings()
    assert settings.cluster_names == ("east", "west")
    assert [(a.id, a.name) for a in settings.approvers] == [("7", "Alice Doe"), ("bob", "bob")]
    assert settings.approval_timeout == timedelta(seconds=90)
    assert settings.executor.max_actions == 5 and settings.executor.ttl == timedelta(hours=6)
    assert settings.storage_root == "file:///mnt/shared/rebalance"
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTOR__MAX_ACTIONS", "many")
    with pytest.raises(
        InputError, match=r"executor\.max_actions: .* \(set by PULSAR_REBALANCE_EXECUTOR__MAX_ACTIONS\)"
    ):
        planner_settings()
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTOR__MAX_ACTIONS", "5")
    monkeypatch.setenv("PULSAR_REBALANCE_STORAGE", "/mnt/shared/rebalance")
    assert planner_settings().storage_root == "file:///mnt/shared/rebalance"
    monkeypatch.setenv("PULSAR_REBALANCE_STORAGE", "s3://samples/prod?endpoint_override=127.0.0.1:9000&scheme=http")
    assert planner_settings().storage_root.startswith("s3://samples/prod?")
    for refused in ("ftp://elsewhere/x", "s3://KEY:SECRET@samples/prod", "s3:///no-bucket"):
        monkeypatch.setenv("PULSAR_REBALANCE_STORAGE", refused)
        with pytest.raises(InputError, match="storage"):
            _ = planner_settings().storage_root


def test_executor_settings_layer_and_refuse_unknown_or_bad_values():
    base = ExecutorSettings(settle_seconds=5)
    layered = base.overridden({"actions_per_minute": 120, "max_actions": None}, "connection pulsar_x")
    assert layered.actions_per_minute == 120 and layered.max_actions == 100 and layered.settle_seconds == 5
    assert layered.overridden({"ttl": "60"}, "run params").ttl == timedelta(seconds=60)
    with pytest.raises(InputError, match=r"connection pulsar_x: unknown executor setting\(s\) \['pace'\]"):
        base.overridden({"pace": 1}, "connection pulsar_x")
    with pytest.raises(InputError, match=r"run params: .*max_failures"):
        base.overridden({"max_failures": 0}, "run params")
    with pytest.raises(InputError, match="lease"):
        ExecutorSettings.build({"lease": 10})


@pytest.fixture
def airflow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")


def _connection(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_the_pulsar_hook_reads_the_connection_form(airflow_home, monkeypatch):
    from planner.airflow.hooks import PulsarAdminHook

    _connection(
        monkeypatch,
        "pulsar_east",
        conn_type="pulsar",
        host="https://pulsar-east.example:8443",
        password="s3cr3t-token",
        extra={
            "ca_file": "/etc/ca.pem",
            "extra__pulsar__client_cert": "/etc/me.pem",
            "client_key": "",
            "max_actions": 7,
        },
    )
    hook = PulsarAdminHook.for_cluster("east")
    settings = hook.cluster_settings()
    assert settings.name == "east" and settings.admin_url == "https://pulsar-east.example:8443"
    assert settings.token.get_secret_value() == "s3cr3t-token" and settings.username is None
    assert str(settings.ca_file) == "/etc/ca.pem" and str(settings.client_cert) == "/etc/me.pem"
    assert settings.client_key is None  # an empty form field is unset
    assert hook.executor_settings(ExecutorSettings()).max_actions == 7
    assert "s3cr3t-token" not in repr(settings)

    _connection(
        monkeypatch,
        "pulsar_basic",
        conn_type="pulsar",
        host="10.0.0.5:8080",
        login="ops",
        password="pw",
        extra={"auth": "basic"},
    )
    basic = PulsarAdminHook.for_cluster("basic").cluster_settings()
    assert basic.admin_url == "https://10.0.0.5:8080" and basic.username == "ops" and basic.token is None

    _connection(monkeypatch, "pulsar_typo", conn_type="pulsar", host="https://h:1", extra={"verify": False})
    with pytest.raises(InputError, match=r"connection pulsar_typo: unknown extra field\(s\) \['verify'\]"):
        PulsarAdminHook.for_cluster("typo").cluster_settings()
    _connection(monkeypatch, "pulsar_bad", conn_type="pulsar", host="https://h:1", extra={"max_failures": 0})
    with pytest.raises(InputError, match=r"connection pulsar_bad: .*max_failures"):
        PulsarAdminHook.for_cluster("bad").executor_settings(ExecutorSettings())


def test_test_connection_reports_an_unreachable_admin_api(airflow_home, monkeypatch):
    from planner.airflow.hooks import PulsarAdminHook

    _connection(monkeypatch, "pulsar_down", conn_type="pulsar", host="http://127.0.0.1:9")
    ok, message = PulsarAdminHook.for_cluster("down").test_connection()
    assert ok is False and "127.0.0.1:9" in message


def test_the_store_hook_caches_one_store_per_url(airflow_home, monkeypatch, tmp_path):
    from planner.airflow.hooks import PlannerStoreHook

    monkeypatch.delenv("PULSAR_REBALANCE_DB_URL", raising=False)
    _connection(monkeypatch, "pulsar_rebalance_db", conn_type="sqlite", host=str(tmp_path / "store.db"))
    first, second = PlannerStoreHook().get_conn(), PlannerStoreHook().get_conn()
    assert first is second and first.engine.url.database == str(tmp_path / "store.db")
    _connection(
        monkeypatch,
        "pulsar_rebalance_db",
        conn_type="postgres",
        host="db",
        port=5432,
        login="u",
        password="p",
        schema="planner",
    )
    assert PlannerStoreHook().database_url() == "postgresql+psycopg://u:p@db:5432/planner"


def test_the_provider_declares_the_connection_type_hook_and_plugin():
    from planner.airflow.provider import get_provider_info

    info = get_provider_info()
    [connection] = [entry for entry in info["connection-types"] if entry["connection-type"] == "pulsar"]
    assert connection["hook-class-name"] == "planner.airflow.hooks.PulsarAdminHook"
    assert {"ca_file", "verify_tls", "client_cert", "client_key", "auth"} <= set(connection["conn-fields"])
    assert set(ExecutorSettings.model_fields) <= set(connection["conn-fields"])
    metadata = (REPO / "pyproject.toml").read_text()
    assert 'provider_info = "planner.airflow.provider:get_provider_info"' in metadata
    assert 'pulsar_rebalance = "planner.airflow.plugin:PulsarRebalancePlugin"' in metadata


def test_the_dag_file_is_the_one_documented_line_and_needs_no_path_of_the_checkout():
    from planner.airflow.dags import DAG_FILE, plan_job_file

    assert (REPO / "dags" / "pulsar_rebalance.py").read_text() == DAG_FILE
    assert DAG_FILE.strip() in (REPO / "README.md").read_text()
    assert Path(plan_job_file()).resolve() == (REPO / "spark_jobs" / "plan_job.py").resolve()


def test_the_pure_planner_and_cli_import_without_airflow_spark_or_pulsar_client():
    """The CLI's modules and the planning core, with airflow, pyspark and pulsar made unimportable."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'airflow', 'pyspark', 'pulsar', 'psycopg', 'fastapi'}:\n"
        "            raise ImportError(f'blocked {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from planner import cli\n"
        "from planner.plan import planning\n"
        "from planner.orchestrate import runner\n"
        "from planner.execute import executor\n"
        "from planner.collect import collector\n"
        "sys.exit(cli.main(['split-positions', '--algorithm', 'range_equally_divide', "
        "'--bundle', '0x00000000_0xffffffff']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["positions"]
