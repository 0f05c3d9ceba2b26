"""Airflow plugin: the plan review and audit pages (`planner.audit.review`), behind Airflow's own login.

Registered through the package's `airflow.plugins` entry point, so installing the package is enough.
Every request, the OpenAPI document's included, must carry a valid Airflow token (the UI's session
cookie or a bearer header) for a user allowed to read DAGs; anonymous requests get 401. A user sees the
plans, runs and load history of a cluster only if the auth manager lets them read that cluster's plan
DAG (`pulsar_rebalance_plan_<cluster>`); the others answer 404.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends

from planner.airflow.tasks import store
from planner.audit.review.app import URL_PREFIX, create_app
from planner.dag_ids import PLAN_DAG_PREFIX
from planner.settings import planner_settings


def readable_clusters(user: GetUserDep) -> frozenset[str]:
    """The clusters whose plan DAG the user may read, as the auth manager decides per DAG."""
    dag_ids = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    return frozenset(dag_id.removeprefix(PLAN_DAG_PREFIX) for dag_id in dag_ids if dag_id.startswith(PLAN_DAG_PREFIX))


def storage_root() -> Path:
    return planner_settings(airflow=True).storage_root


review_app = create_app(store, storage_root, [Depends(requires_access_dag("GET"))], readable_clusters)


class PulsarRebalancePlugin(AirflowPlugin):
    name = "pulsar_rebalance"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": review_app, "url_prefix": URL_PREFIX, "name": "Pulsar rebalance plans"}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {
            "name": "Rebalance plans",
            "href": f"{URL_PREFIX}/plans",
            "url_route": "pulsar-rebalance-plans",
            "destination": "nav",
            "nav_top_level": True,
        },
        {
            "name": "Plan",
            "href": URL_PREFIX + "/runs/{DAG_ID}/{RUN_ID}",
            "url_route": "pulsar-rebalance-run-plan",
            "destination": "dag_run",
        },
    ]
