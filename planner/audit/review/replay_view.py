"""The review's replay page: what each strategy would have done on a cluster's own recorded traffic over the last
stored window, and whether the live plans of that window replan the same from the recording.

It reads the stored result (`planner.audit.replays`), written by the daily replay task and `simulate --replay
--store`; a week's replay is never computed inside a request.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse

from planner.audit.replays import StoredReplay, latest_replay
from planner.audit.review.charts import _STYLE, _svg, broker_colour
from planner.errors import NotFoundError

Visible = Callable[[frozenset[str] | None, str, str], None]
Render = Callable[..., HTMLResponse]


def replay_chart(replay: StoredReplay) -> str:
    """The hottest broker's score per hour under each strategy, one line each (dashed: Pulsar's in-broker ones)."""
    tooltips: dict[str, str] = {}
    with plt.rc_context(_STYLE):
        figure, axis = plt.subplots(figsize=(11, 3.6))
        for index, outcome in enumerate(replay.outcomes):
            hours = [replay.start + timedelta(hours=hour) for hour in range(len(outcome.hourly_max))]
            values = [float("nan") if value is None else value for value in outcome.hourly_max]
            style = {"color": broker_colour(index), "linestyle": "-" if outcome.offline else "--", "linewidth": 1.2}
            (line,) = axis.plot(hours, values, label=outcome.policy, **style)
            gid = f"replay-line-{index}"
            line.set_gid(gid)
            tooltips[gid] = f"{outcome.policy}: p95 {outcome.p95_score:.1f}, peak {outcome.peak_score:.1f}"
        axis.set_ylabel("hottest broker's score (%)")
        axis.grid(True, linewidth=0.4)
        axis.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        return _svg(figure, f"{replay.cluster}: hottest broker per hour under each strategy", tooltips)


def register_replay_pages(
    app: FastAPI, home: Callable[[], str | Path], readable: Any, visible: Visible, render: Render
) -> None:
    """The replay page and its JSON, behind the app's dependencies and the caller's clusters (`readable`)."""

    def stored(cluster: str, allowed: frozenset[str] | None) -> StoredReplay:
        visible(allowed, cluster, f"cluster {cluster!r}")
        try:
            return latest_replay(home(), cluster)
        except NotFoundError as error:
            raise HTTPException(status_code=404, detail=str(error)) from error

    @app.get("/api/clusters/{cluster}/replay")
    def api_replay(cluster: str, allowed: frozenset[str] | None = readable) -> dict[str, Any]:
        return stored(cluster, allowed).to_json()

    @app.get("/clusters/{cluster}/replay", response_class=HTMLResponse)
    def replay_page(request: Request, cluster: str, allowed: frozenset[str] | None = readable) -> HTMLResponse:
        replay = stored(cluster, allowed)
        return render(request, "replay.html", replay=replay, chart=replay_chart(replay))
