"""The review pages' charts, rendered on the server as inline SVG (no JavaScript needed to read them)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # the api-server has no display

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

# Text stays text in the SVG: smaller, selectable, and readable by tests and screen readers.
_STYLE = {"svg.fonttype": "none", "font.size": 9}


def _svg(figure: Figure, title: str) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Title": title})
    plt.close(figure)
    document = buffer.getvalue()
    return document[document.index("<svg") :]


def plan_chart(brokers: Sequence[Mapping[str, Any]], measured: Mapping[str, Mapping[str, float]] | None) -> str:
    """Per-broker bars: score and msg/s before, predicted after, and measured after when the plan has run."""
    names = [broker["broker"] for broker in brokers]
    positions = np.arange(len(names))
    series = [("before", "Before", "#8c8c8c"), ("after", "Predicted after", "#1f77b4")]
    if measured:
        series.append(("measured", "Measured after", "#2ca02c"))
    width = 0.8 / len(series)
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(1, 2, figsize=(11, 3.2 + 0.1 * len(names)))
        for axis, (key, label) in zip(
            axes, (("score", "Score (weighted max usage, %)"), ("msgRate", "msg/s")), strict=True
        ):
            for index, (when, legend, color) in enumerate(series):
                if when == "measured":
                    values = [measured.get(name, {}).get(key, 0.0) for name in names]  # type: ignore[union-attr]
                else:
                    values = [broker[f"{key}{when.capitalize()}"] for broker in brokers]
                axis.bar(positions + (index - (len(series) - 1) / 2) * width, values, width, label=legend, color=color)
            axis.set_title(label)
            axis.set_xticks(positions, names, rotation=30, ha="right")
            axis.grid(axis="y", alpha=0.3)
        axes[0].legend(loc="upper right")
        figure.tight_layout()
        return _svg(figure, "Per-broker load before and after the plan")


def history_chart(samples: Sequence[Mapping[str, Any]], executions: Sequence[Mapping[str, Any]]) -> str:
    """Score and msg/s per broker over time, with a dashed line at every plan execution."""
    by_broker: dict[str, list[Mapping[str, Any]]] = {}
    for sample in samples:
        by_broker.setdefault(sample["broker"], []).append(sample)
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
        for broker, rows in sorted(by_broker.items()):
            times = [datetime.fromisoformat(row["takenAt"]) for row in rows]
            axes[0].plot(times, [row["score"] for row in rows], label=broker, linewidth=1.2)
            axes[1].plot(times, [row["msgRate"] for row in rows], label=broker, linewidth=1.2)
        for execution in executions:
            moment = datetime.fromisoformat(execution["at"])
            for axis in axes:
                axis.axvline(moment, color="#d62728", linestyle="--", linewidth=1)
            axes[0].annotate(
                f"plan {execution['plan']}",
                (mdates.date2num(moment), 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                color="#d62728",
            )
        axes[0].set_ylabel("score (%)")
        axes[1].set_ylabel("msg/s")
        for axis in axes:
            axis.grid(alpha=0.3)
        if by_broker:
            axes[0].legend(loc="upper left", fontsize=8)
        axes[1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(axes[1].xaxis.get_major_locator()))
        figure.tight_layout()
        return _svg(figure, "Broker load over time")
