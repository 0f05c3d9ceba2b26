"""The review's capacity page: how many brokers of each kind the cluster needs with one down, which one it can
spare and how its headroom moves, over the last week of recorded snapshots (`planner.audit.capacity`).

A request never runs a long computation: the week is evaluated on at most `PAGE_MAX_MOMENTS` snapshots, and the
advice is kept `PAGE_CACHE_SECONDS` per cluster and target (one computation at a time per key); the page says when
it was computed. `pulsar-rebalance capacity` computes it on any window and more snapshots.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from planner.audit.capacity import PAGE_CACHE_SECONDS, PAGE_MAX_MOMENTS, AdviceCache
from planner.errors import InputError
from planner.settings import planner_settings
from planner.store.database import Store

Visible = Callable[[frozenset[str] | None, str, str], None]
Render = Callable[..., HTMLResponse]
TargetQuery = Annotated[float | None, Query(ge=1, le=1000)]


def register_capacity_pages(
    app: FastAPI,
    store: Callable[[], Store],
    home: Callable[[], str | Path],
    readable: Any,
    visible: Visible,
    render: Render,
    cache: AdviceCache | None = None,
) -> None:
    """The capacity page and its JSON, behind the app's dependencies and the caller's clusters (`readable`)."""
    advice_cache = cache or AdviceCache()

    def advice(cluster: str, allowed: frozenset[str] | None, target: float | None) -> dict[str, Any]:
        visible(allowed, cluster, f"cluster {cluster!r}")
        chosen = target if target is not None else planner_settings().capacity_target
        return advice_cache.advice_json(store(), home(), cluster, chosen)

    @app.get("/api/clusters/{cluster}/capacity")
    def api_capacity(
        cluster: str, target: TargetQuery = None, allowed: frozenset[str] | None = readable
    ) -> dict[str, Any]:
        try:
            return advice(cluster, allowed, target)
        except InputError as error:
            raise HTTPException(status_code=404, detail=str(error)) from error

    @app.get("/clusters/{cluster}/capacity", response_class=HTMLResponse)
    def capacity_page(
        request: Request, cluster: str, target: TargetQuery = None, allowed: frozenset[str] | None = readable
    ) -> HTMLResponse:
        try:
            document, problem = advice(cluster, allowed, target), None
        except InputError as error:
            document, problem = None, str(error)
        return render(
            request,
            "capacity.html",
            cluster=cluster,
            advice=document,
            problem=problem,
            moments=PAGE_MAX_MOMENTS,
            minutes=PAGE_CACHE_SECONDS // 60,
        )
