"""The DAG files import cleanly and are wired as documented."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow")))
    os.environ["PULSAR_REBALANCE_CLUSTER_NAMES"] = ",".join(CLUSTERS)
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


CLUSTERS = ("local", "prod-east")


def test_dag_files_import_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {
        "pulsar_rebalance_collect",
        "pulsar_rebalance_replay",
        *(f"pulsar_rebalance_{kind}_{cluster}" for kind in ("plan", "maintenance", "rollback") for cluster in CLUSTERS),
    }


def test_maintenance_and_rollback_dags_are_triggered_by_hand_and_go_through_the_same_gate(dagbag):
    maintenance = dagbag.dags["pulsar_rebalance_maintenance_local"]
    rollback = dagbag.dags["pulsar_rebalance_rollback_local"]
    gated = {"has_actions", "approve", "execution_window", "execute", "report"}
    assert set(maintenance.task_dict) == {"prepare", "spark_plan", "commit", *gated}
    assert set(rollback.task_dict) == {"commit", *gated}
    for dag in (maintenance, rollback):
        assert type(dag.timetable).__name__ == "NullTimetable" and dag.max_active_runs == 1
        assert dag.task_dict["approve"].defaults == ["Reject"]
        assert "actions_per_minute" in dag.params  # the pace
    assert maintenance.params.get_param("mode").schema["enum"] == ["drain", "fill"]
    assert maintenance.params.get_param("scale_event").schema["type"] == ["integer", "null"]


def test_collect_dag_runs_every_five_minutes_with_one_task_per_cluster(dagbag):
    dag = dagbag.dags["pulsar_rebalance_collect"]
    assert dag.timetable.expression == "*/5 * * * *"
    assert dag.max_active_runs == 1 and not dag.catchup
    # After the collects (even a failed one): the scale events observed, a maintenance run proposed per open one.
    assert set(dag.task_dict) == {"clusters", "collect", "scale_events", "propose_plan"}
    assert dag.task_dict["scale_events"].upstream_task_ids == {"collect"}
    assert dag.task_dict["scale_events"].trigger_rule == "all_done"
    propose = dag.task_dict["propose_plan"]
    assert propose.upstream_task_ids == {"scale_events"} and propose.partial_kwargs["skip_when_already_exists"]
    assert "pulsar-rebalance" in dag.tags


def test_plan_dag_gates_execution_behind_an_approval_that_defaults_to_reject(dagbag):
    dag = dagbag.dags["pulsar_rebalance_plan_local"]
    assert dag.timetable.expression == "0 * * * *"
    assert dag.max_active_runs == 1 and not dag.catchup
    assert set(dag.task_dict) == {
        *("prepare", "spark_plan", "commit", "has_actions", "approve", "execution_window", "execute", "report")
    }
    gate = dag.task_dict["approve"]
    assert gate.defaults == ["Reject"] and gate.options == ["Approve", "Reject"]
    assert gate.response_timeout.total_seconds() == 4 * 3600
    # Execute and report find the plan and its decision in the planner's store, not in the commit's XCom.
    assert dag.task_dict["execute"].upstream_task_ids == {"approve", "execution_window"}
    assert dag.task_dict["execution_window"].upstream_task_ids == {"approve"}
    assert dag.task_dict["report"].upstream_task_ids == {"execute"}
    assert gate.cluster == "local" and "subject" not in gate.template_fields
    assert dag.task_dict["spark_plan"]._conn_id == "spark_default"
    assert dag.task_dict["report"].trigger_rule == "all_done"
    assert set(dag.params.get_param("strategy").schema["enum"]) == {
        "AvgShedder",
        "AvgShedderPredictive",
        "UniformLoadShedder",
        "ThresholdShedder",
        "OverloadShedder",
    }


@pytest.mark.parametrize(
    ("profile", "expected"),
    [("hourly", "0 * * * *"), ("nightly", "0 2 * * *"), ("*/30 * * * *", "*/30 * * * *"), ("manual", None)],
)
def test_plan_schedule_profiles_by_time(profile, expected, monkeypatch):
    from planner.airflow.schedule import plan_schedule

    monkeypatch.setenv("PULSAR_REBALANCE_PLAN_PROFILE", profile)
    assert plan_schedule("local") == expected


def test_plan_dag_can_follow_the_collect_dags_assets(tmp_path, monkeypatch):
    """With the `assets` profile each cluster's plan DAG runs after a fresh collect of that cluster;
    with `hourly+assets` also on the hour."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("PULSAR_REBALANCE_CLUSTER_NAMES", "local,prod-east")
    monkeypatch.setenv("PULSAR_REBALANCE_PLAN_PROFILE", "assets")
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    for cluster in ("local", "prod-east"):
        dag = bag.dags[f"pulsar_rebalance_plan_{cluster}"]
        assert [asset.name for asset in dag.timetable.asset_condition.objects] == [
            f"pulsar-rebalance-samples-{cluster}"
        ]
    monkeypatch.setenv("PULSAR_REBALANCE_PLAN_PROFILE", "hourly+assets")
    dag = DagBag(dag_folder=str(DAGS)).dags["pulsar_rebalance_plan_local"]
    assert "0 * * * *" in dag.timetable.summary and dag.timetable.asset_condition is not None


def test_replay_dag_replays_each_cluster_once_a_day(dagbag):
    dag = dagbag.dags["pulsar_rebalance_replay"]
    assert dag.timetable.expression == "0 0 * * *" and dag.max_active_runs == 1 and not dag.catchup
    assert set(dag.task_dict) == {"clusters", "replay"}
    assert dag.task_dict["replay"].upstream_task_ids == {"clusters"}
