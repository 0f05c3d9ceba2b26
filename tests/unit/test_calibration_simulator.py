"""Issue #36's proof of calibration in the simulator: on a noisy scenario whose usage model is wrong per broker,
the p90 score error of offline plans is at most 5 points with calibration and lower than without."""

from __future__ import annotations

import pytest

from planner.simulator.calibration_report import calibration_markdown, compare_calibration, pooled_p90
from planner.simulator.engine import simulate
from planner.simulator.scenario import build_world, load_scenario


@pytest.mark.parametrize("name", ["noisy-heterogeneous", "noisy-cost-drift"])
def test_calibration_brings_the_p90_error_of_offline_plans_under_five_points(name: str) -> None:
    comparisons = compare_calibration([load_scenario(name)])
    # Every offline policy's plans together, as docs/evaluation.md reads the bound.
    pooled_off, pooled_on = (pooled_p90(comparisons, name, calibrated=flag) for flag in (False, True))
    assert pooled_off is not None and pooled_on is not None
    assert sum(len(comparison.on.metrics.plan_errors) for comparison in comparisons) >= 50
    assert pooled_on <= 5.0
    assert pooled_on < pooled_off - 2.0
    [uniform] = [comparison for comparison in comparisons if comparison.policy == "offline:UniformLoadShedder"]
    p90_off, p90_on = (run.metrics.prediction_error_percentile(90) for run in (uniform.off, uniform.on))
    assert p90_off is not None and p90_on is not None and p90_on < p90_off - 2.0
    assert f"| {name} | **every offline plan** |" in calibration_markdown(comparisons)


def test_calibration_does_no_harm_where_the_model_is_right() -> None:
    # No noise, each broker's own fit exact: what calibration learns must leave the predictions as they were.
    scenario = load_scenario("heterogeneous")
    off = simulate(scenario, "offline:AvgShedderPredictive", minutes=480).metrics
    on = simulate(scenario, "offline:AvgShedderPredictive", minutes=480, calibration=True).metrics
    assert on.plan_errors
    assert max(on.plan_errors) <= max(off.plan_errors) + 0.5


def test_a_scenario_declares_cpu_noise_and_a_cost_change_per_broker_group() -> None:
    scenario = load_scenario("noisy-cost-drift")
    brokers = build_world(scenario, seed=1).brokers
    factors_before, factors_after = brokers.cost_factors(0), brokers.cost_factors(1440)
    assert factors_before is not None and factors_after is not None
    degraded = brokers.ids.index("degraded:8080")
    assert factors_before[degraded] == 1.0 and factors_after[degraded] == 1.5
    assert brokers.cpu_noise is not None and set(brokers.cpu_noise.tolist()) == {1.0}


def test_the_cli_runs_the_offline_plans_calibrated_and_prints_each_plans_error(capsys) -> None:
    import json

    from planner.cli import main

    words = ["simulate", "--scenario", "noisy-heterogeneous", "--policy", "offline:UniformLoadShedder"]
    printed = {}
    for setting in ("off", "on"):
        assert main([*words, "--minutes", "600", "--calibration", setting, "--json"]) == 0
        printed[setting] = json.loads(capsys.readouterr().out)["policies"]["offline:UniformLoadShedder"]
    off, on = printed["off"], printed["on"]
    assert len(on["planErrors"]) == len(off["planErrors"]) >= 10
    assert on["predictionErrorP90"] < off["predictionErrorP90"]
    assert on["predictionError"] == max(on["planErrors"])
