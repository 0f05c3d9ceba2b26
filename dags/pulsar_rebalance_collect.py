"""Collect every configured cluster's load through its admin API, every 5 minutes (wiring only)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, AssetAlias, dag, task

from planner.airflow import tasks as airflow_tasks

SAMPLES = AssetAlias("pulsar_rebalance_samples")


@dag(
    dag_id="pulsar_rebalance_collect",
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
        outlet_events[SAMPLES].add(Asset(airflow_tasks.samples_asset_name(cluster)), extra=result)
        return result

    collect.expand(cluster=clusters())


pulsar_rebalance_collect()
