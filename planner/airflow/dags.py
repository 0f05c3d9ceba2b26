"""The product's DAGs, built for the configured clusters (wiring only; the logic is in `planner.airflow.tasks`).

Add them to an Airflow by one line in a file of its DAG folder:

    from planner.airflow.dags import *  # noqa: F403 - the pulsar-rebalance DAGs

Every `import *` builds them afresh from the settings in the environment (`cluster_names`, `plan_profile`;
the approval gate's `approval_timeout` and `approvers` as defaults): the collect DAG (which also proposes a
maintenance run per scale event: `planner.orchestrate.scale_events`), and per cluster a plan DAG

    prepare → Spark job (spark-submit on `spark_default`) → commit → [empty plan: stop] → approval gate
    (an approval policy, or a person; Reject after the response timeout) → execution window (deferred
    until one opens) → execute → report,

a maintenance DAG (drain or fill, triggered with params) of the same shape, and a rollback DAG (commit the
inverse of an executed plan → the same gate, execute and report).

Parsing reads neither the Airflow Variable nor any database, as Airflow asks of top-level code: the
dag-processor parses the file every `[dag_processor] refresh_interval`, and every task's process parses it
again. What may come from the Variable is read when a task runs (the gate's timeout and approvers, the Spark
submission's options, everything the tasks read); the settings that shape the DAGs (`cluster_names`,
`plan_profile`) come from the environment only. A task's process builds only the DAG it runs (Airflow's
parsing context), not all 3N+1.

`build_dags()` returns the same DAGs by id, for code that assembles its own DAG file.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset, AssetAlias, Param, dag, get_current_context, get_parsing_context, task
from airflow.task.trigger_rule import TriggerRule

from planner import dag_ids
from planner.airflow import tasks as airflow_tasks
from planner.airflow.operators import ExecutionWindowOperator, PlanApprovalOperator
from planner.airflow.provider import executor_json_types
from planner.airflow.schedule import plan_schedule, samples_asset_name
from planner.airflow.spark_operator import PlanSparkSubmitOperator
from planner.plan.shedding.registry import MODULAR_STRATEGIES
from planner.settings import ExecutorSettings, PlannerSettings, planner_settings

# The whole DAG file a deployment needs (dags/pulsar_rebalance.py is exactly this).
DAG_FILE = "from planner.airflow.dags import *  # noqa: F403 - the pulsar-rebalance DAGs (planner/airflow/dags.py)\n"
COLLECT_DAG_ID = "pulsar_rebalance_collect"
REPLAY_DAG_ID = "pulsar_rebalance_replay"
SAMPLES = AssetAlias("pulsar_rebalance_samples")


def plan_job_file() -> str:
    """The Spark job's file, where the package is installed (not relative to any DAG folder)."""
    spec = importlib.util.find_spec("spark_jobs.plan_job")
    if spec is None or spec.origin is None:
        raise ImportError("spark_jobs.plan_job is not installed: install the pulsar-rebalance package")
    return spec.origin


def _executor_params() -> dict[str, Param]:
    """One optional param per executor setting; empty means the connection's extra or the configured value."""
    fields = ExecutorSettings.model_fields
    return {
        name: Param(None, type=[kind, "null"], description=f"Executor: {fields[name].description}")
        for name, kind in executor_json_types().items()
    }


def _cluster_dag(prefix: str, cluster: str, schedule: Any, params: dict[str, Param]) -> dict[str, Any]:
    """The arguments every per-cluster DAG shares: one run at a time, the executor's settings as params."""
    return {
        "dag_id": f"{prefix}{cluster}",
        "schedule": schedule,
        "start_date": datetime(2026, 1, 1),
        "catchup": False,
        "max_active_runs": 1,
        "tags": ["pulsar-rebalance", prefix.removeprefix("pulsar_rebalance_").rstrip("_"), cluster],
        "params": {**params, **_executor_params()},
    }


def collect_dag() -> DAG:
    @dag(
        dag_id=COLLECT_DAG_ID,
        schedule="*/5 * * * *",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["pulsar-rebalance", "collect"],
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    )
    def pulsar_rebalance_collect() -> None:
        @task
        def clusters() -> list[str]:
            return airflow_tasks.configured_clusters()

        @task(outlets=[SAMPLES], map_index_template="{{ cluster }}")
        def collect(cluster: str, *, outlet_events=None) -> dict:  # noqa: ANN001 - injected by Airflow
            result = airflow_tasks.collect_cluster(cluster)
            outlet_events[SAMPLES].add(Asset(samples_asset_name(cluster)), extra=result)
            return result

        # After the collects, even when one failed: brokers that joined, and a maintenance run per open scale event
        # (a fill, a drain), triggered under the event's own run id, so a repeated trigger adds no run.
        @task(trigger_rule=TriggerRule.ALL_DONE)
        def scale_events() -> list[dict]:
            return airflow_tasks.propose_scale_events()

        collected = collect.expand(cluster=clusters())
        proposed = scale_events()
        collected >> proposed
        # No logical date: two events of one cluster proposed at once are two runs, told apart by their run ids.
        TriggerDagRunOperator.partial(
            task_id="propose_plan",
            logical_date=None,
            skip_when_already_exists=True,
            map_index_template="{{ task.trigger_run_id }}",
        ).expand_kwargs(proposed)

    return pulsar_rebalance_collect()


def replay_dag() -> DAG:
    """Once a day, each cluster's last week replayed under every strategy, its live plans checked against their
    replanning from the recording, and the result stored for the review's replay page."""

    @dag(
        dag_id=REPLAY_DAG_ID,
        schedule="@daily",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["pulsar-rebalance", "replay"],
    )
    def pulsar_rebalance_replay() -> None:
        @task
        def clusters() -> list[str]:
            return airflow_tasks.configured_clusters()

        @task(map_index_template="{{ cluster }}")
        def replay(cluster: str) -> dict:
            return airflow_tasks.replay_cluster(cluster)

        replay.expand(cluster=clusters())

    return pulsar_rebalance_replay()


def _spark_plan(cluster: str, uris: Any) -> Any:
    """prepare's URIs → the Spark job (spark-submit on `spark_default`) → commit; returns the commit's summary."""
    spark_job = PlanSparkSubmitOperator(
        task_id="spark_plan",
        application=plan_job_file(),
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
        # The driver's address, Spark conf, files and packages: decided when it runs (`planner.spark_submit`).
    )

    @task
    def commit(uris: dict, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
        return airflow_tasks.commit_plan_output(cluster, uris, run_id)

    summary = commit(uris)
    uris >> spark_job >> summary
    return summary


def _approve_execute_report(cluster: str, settings: PlannerSettings, summary: Any) -> None:
    """[empty plan: stop] → approval gate (Reject after the response timeout) → execution window → execute → report."""

    @task.short_circuit
    def has_actions(summary: dict) -> bool:
        if summary["actions"] == 0:  # the run stops here; say why, as the stored empty plan does
            logging.getLogger(__name__).info("Plan %s is empty. %s", summary["plan"], summary.get("balance", ""))
        return summary["actions"] > 0

    # The gate shows and binds the plan this run stored, and records the answer in the planner's store. Its
    # timeout and approvers here are the environment's; the gate applies the settings as they are when it runs.
    gate = PlanApprovalOperator(
        task_id="approve",
        cluster=cluster,
        defaults=["Reject"],
        response_timeout=settings.approval_timeout,
        assigned_users=[approver.model_dump() for approver in settings.approvers] or None,
    )

    # The decision is read from the planner's store; the gate's XCom is only audited if nothing backs it.
    @task
    def execute(claimed: dict | None, params=None, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
        return airflow_tasks.execute_approved(cluster, run_id, claimed, airflow_tasks.executor_overrides(params))

    # Not a direct downstream of the gate (a Reject skips those).
    @task(trigger_rule=TriggerRule.ALL_DONE)
    def report(run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
        return airflow_tasks.report_outcome(cluster, run_id, get_current_context())

    # Approved plans execute inside the cluster's execution windows (none set: at once), waiting deferred.
    window = ExecutionWindowOperator(task_id="execution_window", cluster=cluster)

    has_actions(summary) >> gate >> window
    window >> execute(gate.output) >> report()


def plan_dag(cluster: str, settings: PlannerSettings) -> DAG:
    @dag(
        **_cluster_dag(
            dag_ids.PLAN_DAG_PREFIX,
            cluster,
            plan_schedule(cluster, settings.plan_profile),
            {
                # On a cluster of the extensible load manager the plan is TransferShedder's, whatever this says.
                "strategy": Param("AvgShedder", enum=[s.name for s in MODULAR_STRATEGIES]),
                "settings": Param(
                    {},
                    type="object",
                    description="Pulsar configuration keys over the cluster's own, e.g. maxUnloadPercentage; "
                    "empty: the brokers' configuration and release as the latest collect read them",
                ),
                "recompute_averages": Param(
                    False,
                    type="boolean",
                    description="Recompute the bundle averages from the samples, not fold onto the stored state",
                ),
            },
        )
    )
    def pulsar_rebalance_plan() -> None:
        @task
        def prepare(params=None, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
            return airflow_tasks.prepare_plan(
                cluster, params["strategy"], params["settings"], run_id, params.get("recompute_averages", False)
            )

        _approve_execute_report(cluster, settings, _spark_plan(cluster, prepare()))

    return pulsar_rebalance_plan()


def maintenance_dag(cluster: str, settings: PlannerSettings) -> DAG:
    """Drain or fill brokers, triggered with params; the pace is the executor's `actions_per_minute`."""

    @dag(
        **_cluster_dag(
            dag_ids.MAINTENANCE_DAG_PREFIX,
            cluster,
            None,
            {
                "mode": Param("drain", enum=["drain", "fill"], description="drain: empty the brokers; fill: bring up"),
                "brokers": Param(
                    [],
                    type="array",
                    items={"type": "string"},
                    description="Broker ids (host:port). Fill with none: the brokers owning nothing (newly joined).",
                ),
                "max_moves": Param(None, type=["integer", "null"], minimum=1, description="Fill: unloads at most"),
                "scale_event": Param(
                    None,
                    type=["integer", "null"],
                    minimum=1,
                    description="The scale event this plan answers (`brokers events`); its mode and broker are the "
                    "event's. The collect DAG sets it when it proposes the plan",
                ),
                "settings": Param(
                    {},
                    type="object",
                    description="Pulsar configuration keys over the cluster's own (overload threshold); empty: the "
                    "brokers' own",
                ),
            },
        )
    )
    def pulsar_rebalance_maintenance() -> None:
        @task
        def prepare(params=None, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
            maintenance = {"mode": params["mode"], "brokers": params["brokers"], "maxMoves": params.get("max_moves")}
            return airflow_tasks.prepare_plan(
                cluster,
                "AvgShedder",
                params["settings"],
                run_id,
                maintenance=maintenance,
                scale_event=params.get("scale_event"),
            )

        _approve_execute_report(cluster, settings, _spark_plan(cluster, prepare()))

    return pulsar_rebalance_maintenance()


def rollback_dag(cluster: str, settings: PlannerSettings) -> DAG:
    """The inverse of an executed plan, triggered with its id, through the same gate and executor."""

    @dag(
        **_cluster_dag(
            dag_ids.ROLLBACK_DAG_PREFIX,
            cluster,
            None,
            {"plan": Param(None, type=["integer", "null"], minimum=1, description="The executed plan to roll back")},
        )
    )
    def pulsar_rebalance_rollback() -> None:
        @task
        def commit(params=None, run_id=None) -> dict:  # noqa: ANN001 - injected by Airflow
            return airflow_tasks.commit_rollback(cluster, params["plan"], run_id)

        _approve_execute_report(cluster, settings, commit())

    return pulsar_rebalance_rollback()


def build_dags(settings: PlannerSettings | None = None, dag_id: str | None = None) -> dict[str, DAG]:
    """The collect DAG, and a plan, maintenance and rollback DAG per cluster of `settings` (default: the
    environment's, read without the Airflow Variable), by DAG id. With `dag_id` only that DAG, or none if it is
    not one of them: pass `get_parsing_context().dag_id`, so that a task's process builds only its own DAG."""
    settings = settings or planner_settings()
    builders: dict[str, Callable[[], DAG]] = {COLLECT_DAG_ID: collect_dag, REPLAY_DAG_ID: replay_dag}
    for cluster in settings.cluster_names:
        for prefix, build in (
            (dag_ids.PLAN_DAG_PREFIX, plan_dag),
            (dag_ids.MAINTENANCE_DAG_PREFIX, maintenance_dag),
            (dag_ids.ROLLBACK_DAG_PREFIX, rollback_dag),
        ):
            builders[prefix + cluster] = functools.partial(build, cluster, settings)
    if dag_id is not None:
        builders = {dag_id: builders[dag_id]} if dag_id in builders else {}
    return {built_id: build() for built_id, build in builders.items()}


def __getattr__(name: str) -> Any:
    # `from planner.airflow.dags import *` asks for `__all__`, then each name in it: the DAGs are built when
    # a DAG file is parsed, never at this module's import, so every parse sees the current settings. The
    # dag-processor's parse has no parsing context and builds them all; a task's process, only its DAG.
    if name == "__all__":
        _built.clear()
        _built.update(build_dags(dag_id=get_parsing_context().dag_id))
        return [_global_name(dag_id) for dag_id in _built]
    for dag_id, built in _built.items():
        if _global_name(dag_id) == name:
            return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_built: dict[str, DAG] = {}


def _global_name(dag_id: str) -> str:
    """A distinct Python name per DAG id: every character but letters and digits escaped as `_HH`."""
    return "dag_" + "".join(character if character.isalnum() else f"_{ord(character):02x}" for character in dag_id)
