"""The review's prediction accuracy: the cluster page's section (each measured plan's error over time, the p90 as
it grew, the bound, the biggest misses and why) and the plan page's (predicted against measured per broker, and the
plan's disturbances), with their JSON (`planner.audit.accuracy`, `planner.plan.outcome`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from fastapi import FastAPI, HTTPException, Query

from planner.audit.accuracy import ClusterAccuracy, PlanError, percentile
from planner.audit.outcomes import bound_state, cluster_accuracy_of, configured_bound, outcome_of_plan
from planner.audit.review.charts import _STYLE, _svg
from planner.errors import InputError, NotFoundError
from planner.plan.outcome import PlanOutcome
from planner.settings import planner_settings
from planner.store.database import Store

Visible = Callable[[frozenset[str] | None, str, str], None]
DaysQuery = Annotated[int | None, Query(ge=1, le=3660)]
UNDISTURBED, DISTURBED, P90, BOUND = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"


def accuracy_chart(plans: Sequence[PlanError], bound: float) -> str:
    """Each measured plan's error (its largest broker score error) at its measurement, disturbed plans apart, the
    undisturbed plans' p90 as it stood after each, and the bound. Hovering a point names the plan and its reasons."""
    tooltips: dict[str, str] = {}
    with plt.rc_context(_STYLE):
        figure, axis = plt.subplots(figsize=(11, 3.4))
        seen: list[float] = []
        p90_times, p90_values = [], []
        for plan in plans:
            disturbed = plan.disturbed
            (point,) = axis.plot(
                [plan.measured_at],
                [plan.score],
                marker="x" if disturbed else "o",
                linestyle="none",
                color=DISTURBED if disturbed else UNDISTURBED,
            )
            gid = f"plan-error-{plan.plan_id}"
            point.set_gid(gid)
            why = "; ".join(f"{note.reason.value}: {note.detail}" for note in plan.disturbances) or "undisturbed"
            tooltips[gid] = f"plan {plan.plan_id}: {plan.score:,.1f} points ({why})"
            if not disturbed:
                seen.append(plan.score)
                p90_times.append(plan.measured_at)
                p90_values.append(percentile(seen, 0.9))
        axis.plot([], [], marker="o", linestyle="none", color=UNDISTURBED, label="plan error")
        axis.plot([], [], marker="x", linestyle="none", color=DISTURBED, label="plan error, disturbed")
        if p90_times:
            axis.step(p90_times, p90_values, where="post", color=P90, label="p90 (undisturbed)")
        axis.axhline(bound, color=BOUND, linestyle="--", linewidth=1, label=f"bound {bound:g}")
        axis.set_ylabel("score error (points)")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        axis.xaxis.set_major_formatter(mdates.ConciseDateFormatter(axis.xaxis.get_major_locator()))
        figure.tight_layout()
        return _svg(figure, "Prediction error per executed plan", tooltips)


def cluster_section(store: Store, cluster: str, days: int | None = None) -> dict[str, Any]:
    """What the cluster page shows of the accuracy: the figures (JSON), the bound and its state, and the chart."""
    settings = planner_settings()
    now = datetime.now(UTC)
    window = timedelta(days=days) if days is not None else settings.accuracy_window
    accuracy: ClusterAccuracy = cluster_accuracy_of(store, cluster, now - window, now)
    bound = configured_bound(settings)
    state = bound_state(store, cluster)
    return {
        **accuracy.to_json(),
        "bound": {"p90": bound.p90, "state": state.value if state is not None else None},
        "chart": accuracy_chart(accuracy.plans, bound.p90) if accuracy.plans else None,
    }


def plan_section(store: Store, plan_id: int) -> dict[str, Any] | None:
    """The plan's outcome (JSON) with its errors, or None when it was never measured."""
    try:
        outcome: PlanOutcome = outcome_of_plan(store, plan_id)
    except NotFoundError:
        return None
    return outcome.to_json()


def register_accuracy_pages(app: FastAPI, store: Callable[[], Store], readable: Any, visible: Visible) -> None:
    """The accuracy JSON behind the app's dependencies and the caller's clusters (`readable`); the pages show the
    same through `cluster_section` and `plan_section`."""

    @app.get("/api/clusters/{cluster}/accuracy")
    def api_accuracy(cluster: str, days: DaysQuery = None, allowed: frozenset[str] | None = readable) -> dict:
        visible(allowed, cluster, f"cluster {cluster!r}")
        section = cluster_section(store(), cluster, days)
        section.pop("chart")
        return section

    @app.get("/api/plans/{plan_id}/outcome")
    def api_outcome(plan_id: int, allowed: frozenset[str] | None = readable) -> dict:
        try:
            outcome = outcome_of_plan(store(), plan_id)
        except InputError as error:
            raise HTTPException(status_code=404, detail=str(error)) from error
        visible(allowed, outcome.cluster, f"plan {plan_id}")
        return outcome.to_json()
