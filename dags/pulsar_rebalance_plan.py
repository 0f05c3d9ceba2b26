"""Plan, approve, execute and report, one DAG per configured cluster (wiring only; logic in planner).

prepare → Spark job (spark-submit on `spark_default`) → commit → [empty plan: stop] → approval gate
(default Reject after the response timeout) → execute → report.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, task
from airflow.task.trigger_rule import TriggerRule

from planner.airflow import tasks as airflow_tasks
from planner.airflow.operators import PlanApprovalOperator
from planner.plan.shedding.registry import STRATEGIES

PLAN_JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "plan_job.py")
# Loopback for local masters; a cluster deployment binds the driver where executors can reach it.
SPARK_DRIVER_BIND_ADDRESS = os.environ.get("PULSAR_REBALANCE_SPARK_LOCAL_IP", "127.0.0.1")
RESPONSE_TIMEOUT = timedelta(seconds=int(os.environ.get("PULSAR_REBALANCE_APPROVAL_TIMEOUT", 4 * 3600)))


def build(cluster: str) -> None:
    @dag(
        dag_id=f"{airflow_tasks.PLAN_DAG_PREFIX}{cluster}",
        schedule=airflow_tasks.plan_schedule(cluster),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["pulsar-rebalance", "plan", cluster],
        params={
            "strategy": Param("AvgShedder", enum=[strategy.name for strategy in STRATEGIES]),
            "settings": Param({}, type="object", description="Pulsar configuration keys, e.g. maxUnloadPercentage"),
            "base_url": Param("http://127.0.0.1:8080", type="string", description="Airflow UI address for links"),
        },
    )
    def plan_dag() -> None:
        @task
        def prepare(params=None, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
            return airflow_tasks.prepare_plan(cluster, params["strategy"], params["settings"], run_id)

        paths = prepare()
        spark_job = SparkSubmitOperator(
            task_id="spark_plan",
            application=PLAN_JOB,
            conn_id="spark_default",
            name=f"pulsar-rebalance-plan-{cluster}",
            application_args=[
                "--samples",
                "{{ ti.xcom_pull(task_ids='prepare')['samples'] }}",
                "--input",
                "{{ ti.xcom_pull(task_ids='prepare')['input'] }}",
                "--output",
                "{{ ti.xcom_pull(task_ids='prepare')['output'] }}",
            ],
            conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
            env_vars={"SPARK_LOCAL_IP": SPARK_DRIVER_BIND_ADDRESS},
        )

        @task
        def commit(paths: dict, params=None, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
            return airflow_tasks.commit_plan_output(cluster, paths, run_id, params["base_url"])

        @task.short_circuit
        def has_actions(summary: dict) -> bool:
            return summary["actions"] > 0

        summary = commit(paths)
        paths >> spark_job >> summary
        # The gate shows and binds the plan this run stored, and records the answer in the planner's store.
        gate = PlanApprovalOperator(
            task_id="approve",
            cluster=cluster,
            defaults=["Reject"],
            response_timeout=RESPONSE_TIMEOUT,
            assigned_users=airflow_tasks.approvers() or None,
        )

        # The decision is read from the planner's store; the gate's XCom is only audited if nothing backs it.
        @task
        def execute(claimed: dict | None, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
            return airflow_tasks.execute_approved(cluster, run_id, claimed)

        # Not a direct downstream of the gate (a Reject skips those).
        @task(trigger_rule=TriggerRule.ALL_DONE)
        def report(run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
            return airflow_tasks.report_outcome(cluster, run_id)

        has_actions(summary) >> gate
        execute(gate.output) >> report()

    plan_dag()


for configured in airflow_tasks.configured_clusters():
    build(configured)
