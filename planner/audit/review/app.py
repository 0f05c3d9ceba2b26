"""The plan review and audit pages: server-rendered HTML plus the JSON API they are built from.

Read-only: every route is a GET. Authentication is the caller's: `create_app` takes the dependencies
every request must pass (the Airflow plugin passes Airflow's own token check), so no page, the OpenAPI
document included, is ever served anonymously. Authorization per cluster is the caller's too:
`readable_clusters` is a dependency that gives the clusters the requesting user may see (None: all);
the others' plans, runs and history answer 404, as if they did not exist.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from planner.audit.review.accuracy_view import cluster_section, plan_section, register_accuracy_pages
from planner.audit.review.capacity_view import register_capacity_pages
from planner.audit.review.charts import history_chart, plan_chart
from planner.audit.review.replay_view import register_replay_pages
from planner.audit.review.views import PlanView, cluster_history, drain_progress, page_json, read_plan_view
from planner.dag_ids import cluster_of_dag
from planner.errors import InputError, NotFoundError
from planner.plan.configuration import controller_text, mixed_releases_text, release_source_text, shown_configuration
from planner.plan.document import MaintenanceDocument
from planner.plan.maintenance import MaintenanceMode
from planner.store.clusters import cluster_names
from planner.store.database import Store
from planner.store.plans import MAX_PER_PAGE, PLAN_STATUSES, PlanFilter, plan_for_run, plan_page

URL_PREFIX = "/pulsar-planner"
HISTORY_WINDOWS = {
    "6h": timedelta(hours=6),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
# A drain plan's page shows the drained brokers' bundle counts from this long before the plan on.
DRAIN_HISTORY_BEFORE = timedelta(hours=1)

_templates = Environment(loader=PackageLoader("planner.audit.review", "templates"), autoescape=select_autoescape())
_templates.filters["number"] = lambda value, digits=1: "—" if value is None else f"{value:,.{digits}f}"
_templates.filters["as_json"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)
_templates.filters["release_source"] = release_source_text
_templates.filters["mixed_releases"] = mixed_releases_text
_templates.filters["controller"] = controller_text


def _day(name: str, value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as error:
        raise HTTPException(
            status_code=400, detail=f"plan filter: {name} must be a date YYYY-MM-DD (got {value!r})"
        ) from error


def _filters(
    cluster: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[str | None, Query()] = None,
    created_from: Annotated[str | None, Query()] = None,
    created_to: Annotated[str | None, Query()] = None,
    q: Annotated[str | None, Query(max_length=200, description="a bundle or broker (part of its name)")] = None,
    page: Annotated[int, Query(ge=1)] = 1,
    per_page: Annotated[int, Query(ge=1, le=MAX_PER_PAGE)] = 25,
) -> PlanFilter:
    # HTML forms send empty fields as empty strings: they mean "any".
    return _input(
        PlanFilter,
        cluster=cluster or None,
        status=status or None,
        created_from=_day("created_from", created_from),
        created_to=_day("created_to", created_to),
        search=(q or "").strip() or None,
        page=page,
        per_page=per_page,
    )


PlanFilterDep = Annotated[PlanFilter, Depends(_filters)]


def _input(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Calls into the queries, turning their input errors into HTTP errors that say what was wrong."""
    try:
        return function(*args, **kwargs)
    except InputError as error:
        raise HTTPException(status_code=404 if isinstance(error, NotFoundError) else 400, detail=str(error)) from error


def _everything() -> frozenset[str] | None:
    return None


def create_app(
    store: Callable[[], Store],
    home: Callable[[], str | Path],
    dependencies: Sequence[Any],
    readable_clusters: Callable[..., frozenset[str] | None] = _everything,
) -> FastAPI:
    """`store` and `home` are called lazily (the api-server may start before the store is configured)."""
    # FastAPI serves its own OpenAPI route outside the app's dependencies: it is served below, behind them.
    app = FastAPI(
        title="Pulsar rebalance plans",
        dependencies=list(dependencies),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    open_store = cache(store)
    readable_dependency = Depends(readable_clusters)

    def visible(readable: frozenset[str] | None, cluster: str, what: str) -> None:
        if readable is not None and cluster not in readable:
            raise HTTPException(status_code=404, detail=f"unknown {what}")

    def readable_plan(readable: frozenset[str] | None, plan_id: int) -> PlanView:
        view = _input(read_plan_view, open_store(), plan_id)
        visible(readable, view.plan.cluster, f"plan {plan_id}")
        return view

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    def render(request: Request, template: str, **context: Any) -> HTMLResponse:
        base = str(request.scope.get("root_path", "")).rstrip("/")
        page = _templates.get_template(template).render(base=base, statuses=PLAN_STATUSES, **context)
        return HTMLResponse(page)

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> RedirectResponse:
        return RedirectResponse(f"{str(request.scope.get('root_path', '')).rstrip('/')}/plans", status_code=303)

    @app.get("/api/plans")
    def api_plans(filters: PlanFilterDep, readable: frozenset[str] | None = readable_dependency) -> dict[str, Any]:
        return page_json(plan_page(open_store(), filters, readable))

    @app.get("/api/plans/{plan_id}")
    def api_plan(plan_id: int, readable: frozenset[str] | None = readable_dependency) -> dict[str, Any]:
        return readable_plan(readable, plan_id).to_json()

    @app.get("/api/clusters")
    def api_clusters(readable: frozenset[str] | None = readable_dependency) -> dict[str, Any]:
        return {"clusters": cluster_names(open_store(), readable)}

    @app.get("/api/clusters/{cluster}/history")
    def api_history(
        cluster: str,
        readable: frozenset[str] | None = readable_dependency,
        window: Annotated[str, Query(pattern="^(6h|24h|7d|30d)$")] = "24h",
    ) -> dict:
        visible(readable, cluster, f"cluster {cluster!r}")
        since = datetime.now(UTC) - HISTORY_WINDOWS[window]
        return _input(cluster_history, open_store(), home(), cluster, since)

    @app.get("/plans", response_class=HTMLResponse)
    def plans_page(
        request: Request, filters: PlanFilterDep, readable: frozenset[str] | None = readable_dependency
    ) -> HTMLResponse:
        result = page_json(plan_page(open_store(), filters, readable))
        query = {
            key: value
            for key, value in {
                "cluster": filters.cluster,
                "status": filters.status,
                "created_from": filters.created_from,
                "created_to": filters.created_to,
                "q": filters.search,
                "per_page": filters.per_page if filters.per_page != 25 else None,
            }.items()
            if value
        }
        return render(
            request,
            "plans.html",
            result=result,
            filters=filters,
            clusters=cluster_names(open_store(), readable),
            page_link=lambda page: "?" + urlencode({**query, "page": page}),
        )

    @app.get("/plans/{plan_id}", response_class=HTMLResponse)
    def plan_view(
        request: Request, plan_id: int, readable: frozenset[str] | None = readable_dependency
    ) -> HTMLResponse:
        view = readable_plan(readable, plan_id)
        stored, document = view.plan, view.plan.document
        measured = view.measured.brokers if view.measured is not None else None
        brokers = [broker.to_json() for broker in document.brokers]
        chart = plan_chart(brokers, measured) if brokers else None
        maintenance: MaintenanceDocument | None = document.maintenance
        progress = (
            _input(
                drain_progress,
                home(),
                open_store(),
                stored.cluster,
                maintenance.brokers,
                stored.created_at_utc - DRAIN_HISTORY_BEFORE,
            )
            if maintenance is not None and maintenance.mode == MaintenanceMode.DRAIN
            else None
        )
        plan = view.to_json()
        cluster_view = document.cluster_view
        return render(
            request,
            "plan.html",
            plan=plan,
            chart=chart,
            measured=measured or {},
            progress=progress,
            cluster_view=cluster_view,
            configuration=shown_configuration(cluster_view) if cluster_view is not None else [],
            outcome=plan_section(open_store(), plan_id),
        )

    @app.get("/plans/{plan_id}/download")
    def plan_download(plan_id: int, readable: frozenset[str] | None = readable_dependency) -> Response:
        plan = readable_plan(readable, plan_id).to_json()
        return JSONResponse(plan, headers={"Content-Disposition": f'attachment; filename="pulsar-plan-{plan_id}.json"'})

    @app.get("/clusters/{cluster}", response_class=HTMLResponse)
    def cluster_page(
        request: Request,
        cluster: str,
        readable: frozenset[str] | None = readable_dependency,
        window: Annotated[str, Query(pattern="^(6h|24h|7d|30d)$")] = "24h",
    ) -> HTMLResponse:
        visible(readable, cluster, f"cluster {cluster!r}")
        since = datetime.now(UTC) - HISTORY_WINDOWS[window]
        history = _input(cluster_history, open_store(), home(), cluster, since)
        chart = history_chart(history["samples"], history["executions"]) if history["samples"] else None
        accuracy = cluster_section(open_store(), cluster)
        return render(
            request,
            "cluster.html",
            history=history,
            chart=chart,
            window=window,
            windows=HISTORY_WINDOWS,
            accuracy=accuracy,
        )

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse, response_model=None)
    def run_page(
        request: Request, dag_id: str, run_id: str, readable: frozenset[str] | None = readable_dependency
    ) -> Response:
        # Each cluster's DAG has runs of the same scheduled ids: the DAG names the cluster whose plan to show.
        cluster = cluster_of_dag(dag_id)
        if cluster is None:
            raise HTTPException(status_code=404, detail=f"DAG {dag_id} commits no plans")
        visible(readable, cluster, f"DAG {dag_id}")
        plan_id = plan_for_run(open_store(), run_id, cluster)
        if plan_id is None:
            return render(request, "no_plan.html", dag_id=dag_id, run_id=run_id)
        base = str(request.scope.get("root_path", "")).rstrip("/")
        return RedirectResponse(f"{base}/plans/{plan_id}", status_code=303)

    register_replay_pages(app, home, readable_dependency, visible, render)
    register_capacity_pages(app, open_store, home, readable_dependency, visible, render)
    register_accuracy_pages(app, open_store, readable_dependency, visible)
    return app
