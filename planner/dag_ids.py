"""The ids of the DAGs that commit plans, one of each per cluster: the prefix and the cluster's name. Kept free of
Airflow imports, so the review pages can tell a DAG's cluster from its id."""

from __future__ import annotations

PLAN_DAG_PREFIX = "pulsar_rebalance_plan_"  # + the cluster's name: one plan DAG per cluster
MAINTENANCE_DAG_PREFIX = "pulsar_rebalance_maintenance_"  # drain and fill, triggered with params
ROLLBACK_DAG_PREFIX = "pulsar_rebalance_rollback_"  # the inverse of an executed plan, triggered with its id


def cluster_of_dag(dag_id: str) -> str | None:
    """The cluster whose plans a DAG commits (plan, maintenance or rollback DAG); None for any other DAG."""
    for prefix in (PLAN_DAG_PREFIX, MAINTENANCE_DAG_PREFIX, ROLLBACK_DAG_PREFIX):
        if dag_id.startswith(prefix) and len(dag_id) > len(prefix):
            return dag_id.removeprefix(prefix)
    return None
