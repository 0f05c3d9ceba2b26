"""Parsing the DAG file reads no Airflow Variable and no database, and a task's process builds only its own DAG;
what may come from the Variable is read when the tasks run."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID
from sqlalchemy import event
from sqlalchemy.engine import Engine

from planner.errors import InputError

DAGS = Path(__file__).resolve().parents[2] / "dags"
CLUSTERS = ("local", "prod-east", "eu_1")
ALL_DAGS = {
    "pulsar_rebalance_collect",
    "pulsar_rebalance_replay",
    *(f"pulsar_rebalance_{kind}_{cluster}" for kind in ("plan", "maintenance", "rollback") for cluster in CLUSTERS),
}


@pytest.fixture
def airflow_env(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("PULSAR_REBALANCE_CLUSTER_NAMES", ",".join(CLUSTERS))
    monkeypatch.delenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, raising=False)
    monkeypatch.delenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, raising=False)


def set_variable(monkeypatch, values: dict) -> None:
    """The settings Variable, through Airflow's own environment-variable secrets backend."""
    monkeypatch.setenv("AIRFLOW_VAR_PULSAR_REBALANCE_SETTINGS", json.dumps(values))


def parse(dag_id: str | None = None):
    """The DAG folder as the dag-processor parses it, or as a task's process of `dag_id` does (the same
    parsing context Airflow's task runner sets)."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager

    if dag_id is None:
        return DagBag(dag_folder=str(DAGS))
    try:
        with _airflow_parsing_context_manager(dag_id=dag_id, task_id="prepare"):
            return DagBag(dag_folder=str(DAGS))
    finally:  # the manager restores only variables that were set before; a task's process ends there
        os.environ.pop(_AIRFLOW_PARSING_CONTEXT_DAG_ID, None)
        os.environ.pop(_AIRFLOW_PARSING_CONTEXT_TASK_ID, None)


def test_parsing_reads_no_variable_and_no_database(airflow_env, monkeypatch):
    from airflow.sdk import Connection, Variable

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"read at parse time: {args}")

    monkeypatch.setattr(Variable, "get", refuse)
    monkeypatch.setattr(Connection, "get", refuse)
    statements: list[str] = []

    def record(conn, cursor, statement, *args):
        statements.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        for dag_id in (None, "pulsar_rebalance_plan_prod-east"):
            bag = parse(dag_id)
            assert bag.import_errors == {}
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert statements == []
    assert set(parse().dag_ids) == ALL_DAGS


def test_the_variable_does_not_change_the_parsed_dags(airflow_env, monkeypatch):
    set_variable(monkeypatch, {"approval_timeout": 60, "approvers": ["alice:Alice"], "spark_local_ip": "10.0.0.7"})
    gate = parse().dags["pulsar_rebalance_plan_local"].task_dict["approve"]
    assert gate.response_timeout == timedelta(hours=4) and gate.assigned_users is None


@pytest.mark.parametrize(
    "dag_id",
    [
        "pulsar_rebalance_collect",
        "pulsar_rebalance_replay",
        "pulsar_rebalance_plan_prod-east",
        "pulsar_rebalance_maintenance_eu_1",
        "pulsar_rebalance_rollback_local",
    ],
)
def test_a_task_process_builds_only_the_dag_it_runs(airflow_env, dag_id):
    everything = parse()
    bag = parse(dag_id)
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {dag_id}
    # The same DAG as the dag-processor's, as Airflow stores it.
    from airflow.serialization.serialized_objects import DagSerialization

    serialized = [DagSerialization.to_dict(bag.dags[dag_id]) for bag in (bag, everything)]
    assert serialized[0] == serialized[1]


def test_a_task_of_another_dag_file_builds_none_of_these(airflow_env):
    bag = parse("someone_elses_dag")
    assert bag.import_errors == {} and bag.dag_ids == []
    # A cluster that is not configured has no DAG either.
    assert parse("pulsar_rebalance_plan_nowhere").dag_ids == []


def test_the_gate_asks_and_checks_under_the_settings_as_they_are_when_it_runs(airflow_env, monkeypatch):
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    from planner.airflow import notifications
    from planner.airflow import tasks as airflow_tasks

    gate = parse("pulsar_rebalance_plan_local").dags["pulsar_rebalance_plan_local"].task_dict["approve"]
    set_variable(monkeypatch, {"approval_timeout": 60, "approvers": ["alice:Alice"]})
    pending = SimpleNamespace(approved_by=None, policy_checks=(), subject="Rebalance local", markdown="plan")
    monkeypatch.setattr(airflow_tasks, "request_approval", lambda cluster, run_id: pending)
    monkeypatch.setattr(airflow_tasks, "notify_plan", lambda *args, **kwargs: None)
    monkeypatch.setattr(airflow_tasks, "plan_message", lambda *args, **kwargs: None)
    monkeypatch.setattr(notifications, "approval_form_url", lambda context: "form")
    asked: dict = {}
    monkeypatch.setattr(
        ApprovalOperator, "execute", lambda self, context: asked.update(t=self.response_timeout, u=self.assigned_users)
    )
    gate.execute({"run_id": "manual__1"})
    assert asked == {"t": timedelta(seconds=60), "u": [{"id": "alice", "name": "Alice"}]}

    # Resumed in a new process, from a fresh parse: the answer is checked against the same approvers.
    gate = parse("pulsar_rebalance_plan_local").dags["pulsar_rebalance_plan_local"].task_dict["approve"]
    recorded: dict = {}
    monkeypatch.setattr(airflow_tasks, "record_gate_decision", lambda *args, **kwargs: recorded.update(kwargs))
    monkeypatch.setattr(ApprovalOperator, "execute_complete", lambda self, context, event: None)
    answer = {"chosen_options": ["Approve"], "responded_by_user": {"id": "alice", "name": "Alice"}}
    gate.execute_complete({"run_id": "manual__1"}, {**answer, "responded_at": datetime.now(UTC)})
    assert recorded["assigned"] == ["alice"]


def test_the_spark_submission_is_read_when_the_task_runs(airflow_env, monkeypatch):
    spark_plan = parse("pulsar_rebalance_plan_local").dags["pulsar_rebalance_plan_local"].task_dict["spark_plan"]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    set_variable(monkeypatch, {"spark_local_ip": "10.0.0.7", "spark": {"conf": {"spark.executor.memory": "2g"}}})
    submission = spark_plan.submission()
    assert submission.env_vars == {"SPARK_LOCAL_IP": "10.0.0.7"}
    assert submission.conf["spark.executor.memory"] == "2g"


@pytest.mark.parametrize("field", ["cluster_names", "plan_profile"])
def test_the_variable_refuses_the_settings_that_shape_the_dags(airflow_env, monkeypatch, field):
    from planner.settings import planner_settings

    set_variable(monkeypatch, {field: "prod" if field == "cluster_names" else "nightly"})
    with pytest.raises(InputError, match=f"{field} shapes the DAGs.*PULSAR_REBALANCE_{field.upper()}"):
        planner_settings(airflow=True)
