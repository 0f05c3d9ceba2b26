"""The evaluation's calibration section: each offline policy on the noisy scenarios, calibration off and on.

The prediction error of a plan is the largest gap between a broker's predicted score after it and its measured
score the minute after it ran; per run the section shows the plans' p50, p90 and max, side by side without and
with the calibration learnt from the run's own executed plans (`planner.plan.calibration`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.simulator.engine import DEFAULT_POLICIES, OFFLINE_PREFIX, RunResult, simulate
from planner.simulator.scenario import Scenario, load_scenario

NOISY_SCENARIOS = ("noisy-heterogeneous", "noisy-cost-drift")


@dataclass(frozen=True, slots=True)
class CalibrationComparison:
    """One offline policy on one scenario, the same traffic, without and with calibration."""

    scenario: str
    policy: str
    off: RunResult
    on: RunResult


def compare_calibration(
    scenarios: Sequence[Scenario] | None = None, policies: Sequence[str] | None = None, *, seed: int = 1
) -> list[CalibrationComparison]:
    chosen = scenarios if scenarios is not None else [load_scenario(name) for name in NOISY_SCENARIOS]
    offline = policies or [policy for policy in DEFAULT_POLICIES if policy.startswith(OFFLINE_PREFIX)]
    return [
        CalibrationComparison(
            scenario.name,
            policy,
            simulate(scenario, policy, seed=seed, calibration=False),
            simulate(scenario, policy, seed=seed, calibration=True),
        )
        for scenario in chosen
        for policy in offline
    ]


def _cell(run: RunResult) -> str:
    metrics = run.metrics
    p50, p90 = metrics.prediction_error_percentile(50), metrics.prediction_error_percentile(90)
    if p50 is None or p90 is None or metrics.prediction_error is None:
        return "- / - / -"
    return f"{p50:.1f} / {p90:.1f} / {metrics.prediction_error:.1f}"


def pooled_p90(comparisons: Sequence[CalibrationComparison], scenario: str, *, calibrated: bool) -> float | None:
    """The p90 of every offline plan's error on `scenario`, all offline policies together: the figure the 5-point
    bound is read against (a policy that plans twice has no p90 of its own worth the name)."""
    errors = [
        error
        for comparison in comparisons
        if comparison.scenario == scenario
        for error in (comparison.on if calibrated else comparison.off).metrics.plan_errors
    ]
    return float(np.percentile(errors, 90)) if errors else None


def _pooled_cell(value: float | None) -> str:
    return "-" if value is None else f"p90 {value:.2f}"


def calibration_markdown(comparisons: Sequence[CalibrationComparison]) -> str:
    lines = [
        "## Calibration",
        "",
        "Each offline policy on the noisy scenarios (per-minute noise on the brokers' CPU and traffic, hardware",
        "the usage model gets wrong per broker; their descriptions are below), the same traffic without and with",
        "calibration: each executed plan's outcome (every broker's usage and traffic the minute before and after",
        "it) scales the costs of the next plans' usage models per broker (`planner/plan/calibration.py`). Each",
        "cell: the plans' prediction error p50 / p90 / max (points); plans: the executed plans that moved",
        "bundles, off / on. The first plans of a run predict before any outcome exists, so a run with few plans keeps",
        "their error in its p90 whatever calibration learns afterwards. The last rows pool every offline policy's",
        "plans of a scenario: a p90 read over tens of plans, to two decimals. Predictions start from each broker's",
        "samples of the last 15 minutes brought to its current traffic (`planner/plan/forecast.py`), not from one",
        "noisy report; the minute measured after a plan keeps its own noise (about one point of CPU here).",
        "",
        "| scenario | policy | plans | calibration off | calibration on |",
        "| :-- | :-- | --: | --: | --: |",
    ]
    for comparison in comparisons:
        plans = f"{len(comparison.off.metrics.plan_errors)} / {len(comparison.on.metrics.plan_errors)}"
        lines.append(
            f"| {comparison.scenario} | {comparison.policy} | {plans} | {_cell(comparison.off)} | "
            f"{_cell(comparison.on)} |"
        )
    for scenario in dict.fromkeys(comparison.scenario for comparison in comparisons):
        runs = [comparison for comparison in comparisons if comparison.scenario == scenario]
        plans = (
            f"{sum(len(c.off.metrics.plan_errors) for c in runs)} / {sum(len(c.on.metrics.plan_errors) for c in runs)}"
        )
        off, on = (pooled_p90(comparisons, scenario, calibrated=flag) for flag in (False, True))
        lines.append(f"| {scenario} | **every offline plan** | {plans} | {_pooled_cell(off)} | {_pooled_cell(on)} |")
    return "\n".join(lines) + "\n"
