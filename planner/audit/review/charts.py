"""The review pages' charts, rendered on the server as inline SVG (no JavaScript needed to read them)."""

from __future__ import annotations

import html
import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # the api-server has no display

import matplotlib.colors
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

# Text stays text in the SVG: smaller, selectable, and readable by tests and screen readers. The foreground,
# grid and legend colours are placeholders the SVG's styles then take from the page's CSS variables, so one
# chart follows the page's light or dark theme; the background is transparent.
_FOREGROUND, _GRID, _LEGEND_FACE = "#010101", "#020202", "#030303"
_THEMED = {_FOREGROUND: "var(--fg)", _GRID: "var(--grid)", _LEGEND_FACE: "var(--bg)"}
_STYLE = {
    "svg.fonttype": "none",
    "font.size": 9,
    "text.color": _FOREGROUND,
    "axes.labelcolor": _FOREGROUND,
    "axes.edgecolor": _FOREGROUND,
    "xtick.color": _FOREGROUND,
    "ytick.color": _FOREGROUND,
    "grid.color": _GRID,
    "legend.facecolor": _LEGEND_FACE,
    "legend.edgecolor": _GRID,
    "figure.facecolor": "none",
    "axes.facecolor": "none",
    "savefig.facecolor": "none",
}
# 30 colours told apart: tab10's, then tab20b's and tab20c's darker pairs; lines past the tenth are dashed too.
PALETTE: tuple[str, ...] = tuple(
    matplotlib.colors.to_hex(colour)
    for colour in (
        *matplotlib.colormaps["tab10"].colors,
        *(matplotlib.colormaps["tab20b"].colors[index] for index in (0, 2, 4, 6, 8, 10, 12, 14, 16, 18)),
        *(matplotlib.colormaps["tab20c"].colors[index] for index in (0, 2, 4, 6, 8, 10, 12, 14, 16, 18)),
    )
)


def broker_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _svg(figure: Figure, title: str, tooltips: Mapping[str, str]) -> str:
    """The figure as inline SVG, themed, with a tooltip (`<title>`) on each element whose gid has one."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Title": title})
    plt.close(figure)
    document = buffer.getvalue()
    document = document[document.index("<svg") :]
    for placeholder, variable in _THEMED.items():
        document = document.replace(placeholder, variable)
    for gid, text in tooltips.items():
        document = document.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{html.escape(text)}</title>', 1)
    return document


def plan_chart(brokers: Sequence[Mapping[str, Any]], measured: Mapping[str, Mapping[str, float]] | None) -> str:
    """Per-broker bars: score and msg/s before, predicted after, and measured after when the plan has run."""
    names = [broker["broker"] for broker in brokers]
    positions = np.arange(len(names))
    series = [("before", "Before", "#8c8c8c"), ("after", "Predicted after", "#1f77b4")]
    if measured:
        series.append(("measured", "Measured after", "#2ca02c"))
    width = 0.8 / len(series)
    tooltips: dict[str, str] = {}
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(1, 2, figsize=(11, 3.2 + 0.1 * len(names)))
        for axis, (key, label, unit) in zip(
            axes, (("score", "Score (weighted max usage, %)", "%"), ("msgRate", "msg/s", " msg/s")), strict=True
        ):
            for index, (when, legend, color) in enumerate(series):
                if when == "measured":
                    values = [measured.get(name, {}).get(key, 0.0) for name in names]  # type: ignore[union-attr]
                else:
                    values = [broker[f"{key}{when.capitalize()}"] for broker in brokers]
                offsets = positions + (index - (len(series) - 1) / 2) * width
                bars = axis.bar(offsets, values, width, label=legend, color=color)
                for name, value, bar in zip(names, values, bars, strict=True):
                    gid = f"bar-{key}-{when}-{len(tooltips)}"
                    bar.set_gid(gid)
                    tooltips[gid] = f"{name}: {legend.lower()} {value:,.1f}{unit}"
            axis.set_title(label)
            axis.set_xticks(positions, names, rotation=30, ha="right")
            axis.grid(axis="y", alpha=0.3)
        # Beside the bars, not over them.
        axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        figure.tight_layout()
        return _svg(figure, "Per-broker load before and after the plan", tooltips)


def history_chart(samples: Sequence[Mapping[str, Any]], executions: Sequence[Mapping[str, Any]]) -> str:
    """Score and msg/s per broker over time, with a dashed line at every plan execution. Each broker keeps its
    colour (30 told apart); hovering a line names the broker and its last values; the legend is outside."""
    by_broker: dict[str, list[Mapping[str, Any]]] = {}
    for sample in samples:
        by_broker.setdefault(sample["broker"], []).append(sample)
    tooltips: dict[str, str] = {}
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
        for index, (broker, rows) in enumerate(sorted(by_broker.items())):
            times = [datetime.fromisoformat(row["takenAt"]) for row in rows]
            style = {"color": broker_colour(index), "linestyle": "-" if index < 10 else "--", "linewidth": 1.2}
            for axis, key, prefix, unit in ((axes[0], "score", "score ", "%"), (axes[1], "msgRate", "", " msg/s")):
                values = [row[key] for row in rows]
                (line,) = axis.plot(times, values, label=broker, **style)
                gid = f"line-{key}-{index}"
                line.set_gid(gid)
                tooltips[gid] = (
                    f"{broker}: {prefix}{values[-1]:,.1f}{unit} at {times[-1]:%Y-%m-%d %H:%M} "
                    f"(from {min(values):,.1f} to {max(values):,.1f})"
                )
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
            columns = 1 if len(by_broker) <= 15 else 2
            axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=8, ncols=columns)
        axes[1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(axes[1].xaxis.get_major_locator()))
        figure.tight_layout()
        return _svg(figure, "Broker load over time", tooltips)
