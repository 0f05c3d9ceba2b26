"""Comparison tables (text, JSON, Markdown) and score plots of simulation runs.

Plots need matplotlib, imported only when a plot is asked for, so the simulator itself runs (and is
tested) without it. Everything else here is pure formatting.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.simulator.engine import ClusterPolicyMode, RunResult, ignoring_policies, parse_policy, simulate
from planner.simulator.maintenance import MaintenanceRun
from planner.simulator.scenario import Scenario


@dataclass(frozen=True)
class Comparison:
    """Every policy run on one scenario with the same seed and traffic; with cluster policies compared, each
    offline policy's run ignoring them right after the one obeying them."""

    scenario: Scenario
    seed: int
    minutes: int
    target_spread: float
    runs: tuple[RunResult, ...]


def compare(
    scenario: Scenario,
    policies: Sequence[str],
    *,
    seed: int = 1,
    minutes: int | None = None,
    cadence_minutes: int | None = None,
    target_spread: float | None = None,
    overrides: dict[str, Any] | None = None,
    cluster_policies: ClusterPolicyMode = ClusterPolicyMode.OBEY,
    calibration: bool = False,
) -> Comparison:
    """`cluster_policies`: whether this product's plans obey the scenario's cluster policies, ignore them, or both;
    Pulsar's in-broker shedders obey them always, so they run once."""
    runs = tuple(
        simulate(
            scenario,
            parsed,
            seed=seed,
            minutes=minutes,
            cadence_minutes=cadence_minutes,
            target_spread=target_spread,
            overrides=overrides,
            ignore_cluster_policies=ignored,
            calibration=calibration,
        )
        for parsed in map(parse_policy, policies)
        for ignored in (ignoring_policies(cluster_policies, scenario) if parsed.offline else (False,))
    )
    return Comparison(
        scenario=scenario,
        seed=seed,
        minutes=runs[0].minutes if runs else (minutes or scenario.minutes),
        target_spread=runs[0].target_spread if runs else (target_spread or scenario.target_spread),
        runs=runs,
    )


def to_json(comparison: Comparison) -> dict[str, Any]:
    """The runs by policy; those of this product ignoring the cluster policies apart, under the same names."""
    document = {
        "scenario": comparison.scenario.name,
        "seed": comparison.seed,
        "minutes": comparison.minutes,
        "targetSpread": comparison.target_spread,
        "policies": {run.policy: run.metrics.to_json() for run in comparison.runs if not run.cluster_policies_ignored},
    }
    ignored = {run.policy: run.metrics.to_json() for run in comparison.runs if run.cluster_policies_ignored}
    if ignored:
        document["clusterPoliciesIgnored"] = ignored
    return document


Column = tuple[str, str, Callable[[RunResult], str]]

_COLUMNS: tuple[Column, ...] = (
    ("policy", "<", lambda run: run.label),
    ("min to balance", ">", lambda run: _maybe(run.metrics.minutes_to_balance)),
    ("rounds", ">", lambda run: _maybe(run.metrics.plans_to_balance)),
    ("moves", ">", lambda run: str(run.metrics.moves)),
    ("spike moves", ">", lambda run: str(run.metrics.spike_moves)),
    ("over-unload", ">", lambda run: str(run.metrics.over_unloading)),
    ("over-place", ">", lambda run: str(run.metrics.over_placement)),
    ("peak", ">", lambda run: f"{run.metrics.peak_score:.1f}"),
    ("final spread", ">", lambda run: f"{run.metrics.final_spread:.1f}"),
    ("disconnects", ">", lambda run: str(run.metrics.disconnections)),
    ("1st-round spread", ">", lambda run: _number(run.metrics.spread_after_first_plan)),
    ("1st-round moves", ">", lambda run: _number(run.metrics.moves_first_plan)),
    ("fewest moves", ">", lambda run: _number(run.metrics.moves_lower_bound)),
    ("prediction error", ">", lambda run: _number(run.metrics.prediction_error)),
)

# Shown for scenarios that declare cluster policies only (`planner.simulator.violations`).
_POLICY_COLUMNS: tuple[Column, ...] = (
    ("isolation violations", ">", lambda run: _violations(run, "isolation")),
    ("anti-affinity violations", ">", lambda run: _violations(run, "anti_affinity")),
    ("forbidden moves", ">", lambda run: _violations(run, "forbidden_moves")),
    ("refused moves", ">", lambda run: _violations(run, "refused_moves")),
)


def _violations(run: RunResult, field: str) -> str:
    violations = run.metrics.policy_violations
    return "-" if violations is None else str(getattr(violations, field))


def _columns(comparison: Comparison) -> tuple[Column, ...]:
    if any(run.metrics.policy_violations is not None for run in comparison.runs):
        return _COLUMNS + _POLICY_COLUMNS
    return _COLUMNS


def _maybe(value: int | None) -> str:
    return "never" if value is None else str(value)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.1f}"


def text_table(comparison: Comparison) -> str:
    columns = _columns(comparison)
    header = [name for name, _, _ in columns]
    rows = [[cell(run) for _, _, cell in columns] for run in comparison.runs]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(f"{c:{align}{w}}" for c, (_, align, _), w in zip(cells, columns, widths, strict=True))

    scenario = comparison.scenario
    title = (
        f"scenario {scenario.name}: {comparison.minutes} minutes, seed {comparison.seed}, "
        f"balanced = spread below {comparison.target_spread:g} points"
    )
    return "\n".join([title, line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)])


def markdown_table(comparison: Comparison) -> str:
    columns = _columns(comparison)
    header = [name for name, _, _ in columns]
    separator = [":--" if align == "<" else "--:" for _, align, _ in columns]
    rows = [[cell(run) for _, _, cell in columns] for run in comparison.runs]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, separator, *rows])


# --- plots ----------------------------------------------------------------------------------------


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plots need matplotlib: pip install matplotlib") from None
    return plt


def plot_png(comparison: Comparison) -> bytes:
    """One panel per policy: every broker's live score over time, the target band and the moves."""
    plt = _pyplot()
    runs = comparison.runs
    figure, axes = plt.subplots(
        len(runs), 1, figsize=(8.0, 0.4 + 1.45 * len(runs)), sharex=True, sharey=True, squeeze=False
    )
    peak = max((float(np.nanmax(run.scores)) for run in runs), default=100.0)
    for axis, run in zip(axes[:, 0], runs, strict=True):
        minutes = np.arange(len(run.scores))
        average = np.nanmean(run.scores, axis=1)
        half = comparison.target_spread / 2
        axis.fill_between(minutes, average - half, average + half, color="0.88", linewidth=0, zorder=0)
        for column, broker in enumerate(run.brokers):
            axis.plot(minutes, run.scores[:, column], linewidth=0.8, alpha=0.8, label=broker.rpartition(":")[0])
        move_minutes = sorted({move.minute for move in run.moves if not move.forced})
        if move_minutes:
            axis.vlines(move_minutes, 0, peak * 0.07, color="crimson", linewidth=0.8)
        metrics = run.metrics
        balanced = (
            "never balanced"
            if metrics.minutes_to_balance is None
            else f"balanced from minute {metrics.minutes_to_balance}"
        )
        axis.text(
            0.005,
            0.97,
            f"{run.label}: {metrics.moves} moves, {balanced}, final spread {metrics.final_spread:.0f}",
            transform=axis.transAxes,
            fontsize=7,
            va="top",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )
        axis.set_ylim(0, peak * 1.18)
        axis.tick_params(labelsize=7)
        axis.set_ylabel("score", fontsize=7)
    if len(runs[0].brokers) <= 8:
        axes[0, 0].legend(fontsize=6, ncol=min(8, len(runs[0].brokers)), loc="upper right", frameon=False)
    axes[-1, 0].set_xlabel(
        "minute   (grey band: cluster average ± target/2; red ticks: minutes with moves)", fontsize=7
    )
    figure.suptitle(f"{comparison.scenario.name}: live broker scores per policy", fontsize=9)
    figure.tight_layout(pad=0.4, h_pad=0.2, rect=(0, 0, 1, 0.985))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=72)
    plt.close(figure)
    return _small_png(buffer.getvalue())


def _small_png(data: bytes) -> bytes:
    """A 64-colour palette PNG: a third of the size, so the plots can live in the repository."""
    from PIL import Image  # installed with matplotlib

    image = Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    output = io.BytesIO()
    image.save(output, format="png", optimize=True)
    return output.getvalue()


def write_plot(comparison: Comparison, path: Path) -> None:
    _write_atomically(path, plot_png(comparison))


# --- the evaluation document ----------------------------------------------------------------------

_DEFINITIONS = """\
- **min to balance**: the first minute from which the spread (max - min live broker score) stays below the
  scenario's target until the end of the run; *never* if it does not.
- **rounds**: shedding cycles or executed plans that moved at least one bundle before that minute.
- **moves**: bundles the policy unloaded; every move disconnects the bundle's clients (**disconnects** counts
  the topics). Bundles reassigned because their broker stopped are not counted: they are the same for every policy.
- **spike moves**: moves whose source hosted a spiking bundle within the scenario's spike lag (default 10 minutes).
- **over-unload** / **over-place**: rounds after which a source ended more than 10 points
  (`loadBalancerBrokerThresholdShedderPercentage`) below the cluster average, or a destination more than 10
  points above it.
- **peak**: the highest live broker score of the run; **final spread**: the spread at the end.
- **1st-round spread** / **1st-round moves**: the spread the minute after the first round that moved bundles
  (an executed plan, or a shedding cycle), and the bundles it moved.
- **fewest moves**: a lower bound on the moves any single plan needs to reach the same spread from the same
  start (`planner/simulator/move_bound.py`). Both are taken on the live load of the round's minute: the spread
  is the one the round's own moves give on that load (the measured 1st-round spread differs from it by a
  minute of traffic noise), so the round's moves are one of the plans the bound covers. Shown only when all
  brokers have the same hardware, which the bound assumes. A bundle worth p points (the CPU it costs its
  owner) moves them from its source to its destination, and the average score A does not change. After a plan
  that reaches spread S every broker lies in [m, m + S] for some m with A - S <= m <= A. For a given m, each
  broker above m + S must shed at least s - m - S points, at best with its largest bundles, and each broker
  below m must receive m - s, at best with the cluster's largest bundles; every move leaves one broker and
  lands on one, so a plan needs at least the larger of the two sums of counts. The bound is the minimum of
  that over m, evaluated exactly at the points where a source's count changes. Unit tests check it against an
  exhaustive search on small clusters.
- **prediction error**: offline plans only: the largest difference between a broker's predicted score after
  a plan and its measured score the minute after the plan was executed, over all plans of the run.
"""

_POLICY_DEFINITIONS = """\
- **isolation violations**, **anti-affinity violations**, **forbidden moves**, **refused moves** (scenarios that
  declare cluster policies): bundles left at the end on a broker their namespace's isolation policy forbids (a
  namespace without a policy may not use another policy's primaries); anti-affinity namespaces left sharing a
  broker (a failure domain, with `failureDomainsEnabled`) beyond what the brokers they may use force; moves, the
  policy's own or a lookup's, onto a broker the isolation policy forbade at that minute; planned moves the
  executor refused because the policies in force forbade the destination. Rows marked *(cluster policies
  ignored)* are this product's plans made and executed as if the cluster had no policies (`--cluster-policies
  both`); Pulsar's in-broker shedders obey the policies always.
"""


def maintenance_markdown(drain: Sequence[MaintenanceRun], fill: Sequence[MaintenanceRun], pace: int) -> str:
    """The drain and fill comparisons (`planner.simulator.maintenance`) as one section."""

    def table(runs: Sequence[MaintenanceRun], drain: bool) -> list[str]:
        head = ["", "moves", "peak moves in a minute", "minutes to empty" if drain else "minutes to balance"]
        head += ["peak score", "over-placement", "final spread"]
        lines = ["| " + " | ".join(head) + " |", "| :-- | " + " | ".join("--:" for _ in head[1:]) + " |"]
        for run in runs:
            timing = run.minutes_to_empty if drain else run.minutes_to_balance
            cells = [run.label, str(run.moves), str(run.peak_moves_per_minute), _maybe(timing)]
            cells += [f"{run.peak_score:.1f}", str(run.over_placement), f"{run.final_spread:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    return "\n".join(
        [
            "## Maintenance: drain and fill",
            "",
            "`pulsar-rebalance simulate --maintenance drain` and `--maintenance fill`",
            f"(`planner/simulator/maintenance.py`), this product's plans executed at {pace} unloads a minute.",
            "**Drain** (scenario `drain-1-of-10`): Pulsar's graceful shutdown unloads every bundle of the broker at",
            "once and the leader places each on its clients' lookup; the drain plans them on predicted load and",
            "stops the broker once it owns nothing. Peak score and moves count from the minute the maintenance",
            "starts. **Fill** (scenario `fill-10-to-12`): Pulsar's in-broker shedders after two brokers join, against",
            "one fill plan the minute after they joined (shedding off);",
            "minutes to balance count from the start of the run.",
            "",
            *table(drain, drain=True),
            "",
            *table(fill, drain=False),
            "",
        ]
    )


def evaluation_markdown(
    comparisons: Sequence[Comparison], plots: dict[str, str], command: str, maintenance: str = ""
) -> str:
    """The whole `docs/evaluation.md`: method, definitions, maintenance, then one section per scenario."""
    parts = [
        "# Evaluation: Pulsar's shedders and this product's offline plans in simulation",
        "",
        f"Generated by `{command}`; do not edit by hand. Each scenario runs every policy on the same",
        "simulated traffic (same seed), with Pulsar's load-report rules (a report is written when load moves",
        "by more than 10 % or every 15 minutes), the leader's 10/1000-sample bundle averages, and Pulsar's",
        "placement pipeline. In-broker policies shed every minute with the placement Pulsar deployments pair",
        "them with (ThresholdShedder + LeastResourceUsageWithWeight, Uniform/OverloadShedder +",
        "LeastLongTermMessageRate, AvgShedder + its own planned destinations); `offline:` policies are this",
        "product's plans (`make_plan`) at the scenario's cadence (hourly unless a policy says `@MINUTES`),",
        "approved at once, with in-broker shedding off. All settings are Pulsar's defaults unless the scenario",
        "file says otherwise (`planner/simulator/scenarios/`). Offline policies also collect every broker's",
        "report every 5 minutes, as the collect DAG does; each plan fits the brokers' usage models on the last",
        "24 hours of it (`planner/plan/usage_model.py`). `offline:AvgShedderPredictive` plans with those models:",
        "AvgShedder's hit counting decides when, then one plan balances the whole cluster on predicted scores.",
        "",
        "## Summary",
        "",
        "Each cell: minutes to balance / moves / final spread (points).",
        "",
        summary_markdown(comparisons),
        "",
        "## One plan against the fewest moves",
        "",
        "The first round that moved bundles in the scenarios where every broker has the same hardware (the lower",
        "bound assumes it). Each cell: spread after that round (points) / its moves / the fewest moves any plan",
        "needs for that spread (a lower bound, see the definitions) / moves divided by the bound.",
        "",
        first_round_markdown(comparisons),
        "",
        "## Definitions",
        "",
        _DEFINITIONS,
        *([_POLICY_DEFINITIONS] if any(_columns(comparison) != _COLUMNS for comparison in comparisons) else []),
        *([maintenance] if maintenance else []),
    ]
    for comparison in comparisons:
        scenario = comparison.scenario
        parts += [
            f"## {scenario.name}",
            "",
            " ".join(scenario.description.split()),
            "",
            f"{comparison.minutes} minutes, seed {comparison.seed}, balanced = spread below "
            f"{comparison.target_spread:g} points.",
            "",
            markdown_table(comparison),
            "",
        ]
        if scenario.name in plots:
            parts += [f"![broker scores in {scenario.name}]({plots[scenario.name]})", ""]
    return "\n".join(parts).rstrip() + "\n"


def _obeying(comparison: Comparison) -> list[RunResult]:
    """The runs the summaries compare: this product's runs ignoring the cluster policies are in their scenario's
    own table only."""
    return [run for run in comparison.runs if not run.cluster_policies_ignored]


def _policies(comparisons: Sequence[Comparison]) -> list[str]:
    policies: list[str] = []
    for comparison in comparisons:
        policies += [run.policy for run in _obeying(comparison) if run.policy not in policies]
    return policies


def _table_head(policies: Sequence[str]) -> list[str]:
    return ["| scenario | " + " | ".join(policies) + " |", "| :-- | " + " | ".join("--:" for _ in policies) + " |"]


def first_round_markdown(comparisons: Sequence[Comparison]) -> str:
    """One line per scenario with a lower bound: spread after / moves of each policy's first round."""
    policies = _policies(comparisons)
    lines = _table_head(policies)
    for comparison in comparisons:
        by_policy = {run.policy: run.metrics for run in _obeying(comparison)}
        if all(metrics.moves_lower_bound is None for metrics in by_policy.values()):
            continue
        cells = []
        for policy in policies:
            metrics = by_policy.get(policy)
            if metrics is None or metrics.moves_first_plan is None or metrics.spread_after_first_plan is None:
                cells.append("-")
                continue
            bound = metrics.moves_lower_bound
            ratio = f"{metrics.moves_first_plan / bound:.2f}" if bound else "-"
            cells.append(
                f"{metrics.spread_after_first_plan:.1f} / {metrics.moves_first_plan} / {_number(bound)} / {ratio}"
            )
        lines.append(f"| {comparison.scenario.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_markdown(comparisons: Sequence[Comparison]) -> str:
    """One line per scenario: minutes to balance / moves / final spread of each policy."""
    policies = _policies(comparisons)
    lines = _table_head(policies)
    for comparison in comparisons:
        by_policy = {run.policy: run.metrics for run in _obeying(comparison)}
        cells = []
        for policy in policies:
            metrics = by_policy.get(policy)
            cells.append(
                "n/a"
                if metrics is None
                else f"{_maybe(metrics.minutes_to_balance)} / {metrics.moves} / {metrics.final_spread:.0f}"
            )
        lines.append(f"| {comparison.scenario.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write beside `path` and rename, so a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_bytes(data)
        temporary.replace(path)
    except OSError as error:
        raise InputError(f"cannot write {str(path)!r}: {error.strerror}") from None


def write_evaluation(
    comparisons: Sequence[Comparison], markdown_path: Path, command: str, maintenance: str = ""
) -> list[Path]:
    """Write the Markdown report and one PNG per scenario under `<dir>/<stem>/`; returns the files written."""
    plot_directory = markdown_path.parent / markdown_path.stem
    try:
        plot_directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot create {str(plot_directory)!r}: {error.strerror}") from None
    written: list[Path] = []
    plots: dict[str, str] = {}
    for comparison in comparisons:
        path = plot_directory / f"{comparison.scenario.name}.png"
        _write_atomically(path, plot_png(comparison))
        plots[comparison.scenario.name] = f"{plot_directory.name}/{path.name}"
        written.append(path)
    document = evaluation_markdown(comparisons, plots, command, maintenance)
    _write_atomically(markdown_path, document.encode())
    written.append(markdown_path)
    return written
