"""Predictive planning (issue 9): usage models fitted from history, AvgShedderPredictive, and how it does in
the simulator against the fewest moves any plan needs."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime

import numpy as np
import pytest

from planner.cli import main
from planner.errors import InputError
from planner.plan.forecast import Move, forecast
from planner.plan.planning import make_plan
from planner.plan.shedding import avg_shedder, avg_shedder_predictive
from planner.plan.shedding.registry import shedding_strategy
from planner.plan.usage_model import BrokerHistory, UsageModels, fit_usage_models, histories_from_columns
from planner.pulsar.config import PulsarConfig
from planner.pulsar.model import LoadData, NamespaceBundleStats
from planner.simulator.engine import parse_policy, simulate
from planner.simulator.move_bound import fewest_moves_lower_bound
from planner.simulator.scenario import load_scenario
from tests.builders import broker, bundle, bundle_data

CONFIG = PulsarConfig()


def history(rng, count, background, per_msg, per_byte, *, noise=0.0, rate=(1000, 3000), size=(512, 4096)):
    """`count` samples of a broker whose CPU is background + costs x traffic (+ noise), in percent."""
    msg_in = rng.uniform(*rate, count)
    msg_out = msg_in * rng.uniform(0.5, 2.0, count)
    size_in = rng.uniform(*size, count)
    bytes_in, bytes_out = msg_in * size_in, msg_out * size_in
    cpu = background + per_msg * (msg_in + msg_out) + per_byte * (bytes_in + bytes_out) + rng.normal(0, noise, count)
    return BrokerHistory(
        taken_at=np.arange(count) * 300.0,  # 5-minute collections
        msg_rate_in=msg_in,
        msg_rate_out=msg_out,
        throughput_in=bytes_in,
        throughput_out=bytes_out,
        usage={"cpu": cpu, "bandwidthIn": bytes_in * 1e-6, "bandwidthOut": bytes_out * 1e-6},
    )


# --- usage models ----------------------------------------------------------------------------------


def test_a_brokers_fit_recovers_its_background_and_costs():
    rng = np.random.default_rng(3)
    models = fit_usage_models({"a:8080": history(rng, 60, 4.0, 0.002, 3e-7)})
    cpu = models.brokers["a:8080"]["cpu"]
    assert cpu.source == "broker" and cpu.samples == 60
    assert cpu.intercept == pytest.approx(4.0, abs=1e-6)
    assert cpu.per_msg == pytest.approx(0.002, rel=1e-6)
    assert cpu.per_byte == pytest.approx(3e-7, rel=1e-6)
    assert cpu.r_squared == pytest.approx(1.0)
    bandwidth_in = models.brokers["a:8080"]["bandwidthIn"]
    assert bandwidth_in.per_byte == pytest.approx(1e-6, rel=1e-6) and bandwidth_in.per_msg == pytest.approx(
        0, abs=1e-12
    )


def test_short_flat_or_noisy_histories_fall_back_to_the_cluster_fit_with_their_own_background():
    rng = np.random.default_rng(5)
    histories = {
        "a:8080": history(rng, 60, 3.0, 0.002, 0.0, rate=(500, 8000), size=(1024, 1024)),
        "b:8080": history(rng, 60, 3.0, 0.002, 0.0, rate=(500, 8000), size=(1024, 1024)),
        "short:8080": history(rng, 5, 9.0, 0.002, 0.0, size=(1024, 1024)),  # too few samples
        "idle:8080": history(rng, 40, 2.0, 0.002, 0.0, rate=(0, 0)),  # no traffic: costs unknown
        # Steady traffic and a busy neighbour: its usage varies, but not with its traffic.
        "noisy:8080": history(rng, 40, 3.0, 0.002, 0.0, noise=6.0, rate=(1900, 2100), size=(1024, 1024)),
    }
    models = fit_usage_models(histories)
    assert models.brokers["a:8080"]["cpu"].source == "broker"
    for broker_id, background in (("short:8080", 9.0), ("idle:8080", 2.0)):
        fit = models.brokers[broker_id]["cpu"]
        assert fit.source == "cluster", broker_id
        # The pooled costs are close to the true ones, not exact: brokers differ in background and noise.
        assert fit.intercept == pytest.approx(background, abs=0.5)
        # One message size: the cost splits between messages and bytes, and predicts that mix.
        assert fit.per_msg * 1000 + fit.per_byte * 1000 * 1024 == pytest.approx(2.0, rel=0.05)
    assert models.brokers["noisy:8080"]["cpu"].source == "cluster"
    assert models.cluster["cpu"].samples == 205
    assert UsageModels.from_json(json.loads(json.dumps(models.to_json()))) == models


def test_histories_are_read_from_the_brokers_table_columns_in_snapshot_order():
    columns = {
        "broker": ["b:1", "a:1", "a:1"],
        "snapshot_id": [1, 2, 1],
        "taken_at": [
            datetime(2026, 1, 1, 0, 0, tzinfo=UTC),
            datetime(2026, 1, 1, 0, 5, tzinfo=UTC),
            datetime(2026, 1, 1, 0, 0, tzinfo=UTC),
        ],
        "cpu_usage": [100.0, 300.0, 200.0],
        "cpu_limit": [400.0, 400.0, 0.0],
        "bandwidth_in_usage": [1.0, 1.0, 1.0],
        "bandwidth_in_limit": [10.0, 10.0, 10.0],
        "bandwidth_out_usage": [0.0, 0.0, 0.0],
        "bandwidth_out_limit": [10.0, 10.0, 10.0],
        "msg_rate_in": [1.0, 2.0, 3.0],
        "msg_rate_out": [0.0, 0.0, 0.0],
        "msg_throughput_in": [0.0, 0.0, 0.0],
        "msg_throughput_out": [0.0, 0.0, 0.0],
    }
    histories = histories_from_columns(columns)
    assert list(histories) == ["a:1", "b:1"]
    assert histories["a:1"].msg_rate_in.tolist() == [3.0, 2.0]
    assert histories["a:1"].taken_at.tolist() == [1767225600.0, 1767225900.0]
    assert histories["a:1"].usage["cpu"].tolist() == [0.0, 75.0]  # an unknown limit counts 0 %, as in Pulsar
    assert histories["b:1"].usage["bandwidthIn"].tolist() == [10.0]


def two_broker_load(hot_cpu=80.0, cold_cpu=10.0, rates=(900, 700, 500, 300, 200, 100)):
    names = [bundle(i, "t/hot") for i in range(len(rates))]
    stats = {
        n: NamespaceBundleStats(msg_rate_in=r, msg_rate_out=r, topics=1) for n, r in zip(names, rates, strict=True)
    }
    total = 2 * sum(rates)
    return LoadData(
        brokers={
            "hot:8080": broker(
                cpu=(hot_cpu, 100), rate_in=total / 2, rate_out=total / 2, bundles=names, last_stats=stats
            ),
            "cold:8080": broker(cpu=(cold_cpu, 100)),
        },
        bundle_data={n: bundle_data(r, r) for n, r in zip(names, rates, strict=True)},
    )


def test_without_models_the_forecast_charges_the_snapshots_average_cost_and_with_them_each_brokers_own():
    data = two_broker_load()
    move = Move(bundle(0, "t/hot"), "hot:8080", "cold:8080")
    by_broker = {entry.broker: entry for entry in forecast(data, CONFIG, [move])}
    hot, cold = by_broker["hot:8080"], by_broker["cold:8080"]
    # Snapshot: 90 % CPU over 5,400 msg/s; the bundle is 1,800 msg/s (in + out): 30 points.
    assert hot.score_after == pytest.approx(80 - 30, abs=1e-3)
    assert cold.score_after == pytest.approx(10 + 30, abs=1e-3)
    assert hot.model == cold.model == "snapshot"
    costs = {"hot:8080": 0.01, "cold:8080": 0.04}  # the cold broker is slow: a message costs four times as much
    rng = np.random.default_rng(1)
    models = fit_usage_models({b: history(rng, 30, 5.0, cost, 0.0, size=(0, 0)) for b, cost in costs.items()})
    by_broker = {entry.broker: entry for entry in forecast(data, CONFIG, [move], models)}
    hot, cold = by_broker["hot:8080"], by_broker["cold:8080"]
    assert hot.score_after == pytest.approx(80 - 18.0, abs=1e-3)
    assert cold.score_after == pytest.approx(10 + 72.0, abs=1e-3)
    assert hot.model == cold.model == "broker"


def recorded(usage_cpu, rates, *, every=300.0):
    """A broker's samples at 5-minute collections, oldest first: CPU percent and msg/s in (nothing out, no bytes)."""
    rates = np.asarray(rates, dtype=float)
    return BrokerHistory(
        taken_at=np.arange(len(rates)) * every,
        msg_rate_in=rates,
        msg_rate_out=np.zeros_like(rates),
        throughput_in=np.zeros_like(rates),
        throughput_out=np.zeros_like(rates),
        usage={
            "cpu": np.asarray(usage_cpu, dtype=float),
            "bandwidthIn": np.zeros_like(rates),
            "bandwidthOut": np.zeros_like(rates),
        },
    )


def test_the_forecast_starts_from_the_brokers_last_samples_at_its_current_traffic_not_from_one_noisy_report():
    # CPU = 5 + 0.01 x msg/s exactly, traffic growing each collection; the newest report (the snapshot) has a GC
    # pause's 9 points on top.
    rates = np.linspace(1000, 4000, 24)
    cpu = 5 + 0.01 * rates
    cpu[-1] += 9.0
    histories = {"a:8080": recorded(cpu, rates), "b:8080": recorded(5 + 0.01 * rates, rates)}
    now = float(histories["a:8080"].taken_at[-1])
    data = LoadData(
        brokers={
            "a:8080": broker(cpu=(cpu[-1], 100), rate_in=rates[-1]),
            "b:8080": broker(cpu=(5 + 0.01 * rates[-1], 100), rate_in=rates[-1]),
        }
    )
    models = fit_usage_models(histories, now=now)
    recent = models.brokers["a:8080"]["cpu"].recent
    assert recent is not None and recent.samples == 3  # the collections of the last 15 minutes, the snapshot's included
    by_broker = {entry.broker: entry for entry in forecast(data, CONFIG, [], models)}
    # The three samples, each moved to the current traffic by the fitted cost: the pause counts a third.
    fitted = models.brokers["a:8080"]["cpu"]
    expected = np.mean(cpu[-3:] + fitted.per_msg * (rates[-1] - rates[-3:]))
    assert by_broker["a:8080"].score_after == pytest.approx(expected, abs=1e-9)
    assert by_broker["a:8080"].score_after == pytest.approx(5 + 0.01 * rates[-1] + 3.0, abs=0.6)
    # The before is the report, as the broker published it.
    assert by_broker["a:8080"].score_before == pytest.approx(cpu[-1], abs=1e-4)  # Pulsar's float usage
    assert by_broker["b:8080"].score_after == pytest.approx(by_broker["b:8080"].score_before, abs=1e-6)
    # Fitted for costs only (no snapshot moment), the forecast starts from the report.
    plain = {entry.broker: entry for entry in forecast(data, CONFIG, [], fit_usage_models(histories))}
    assert plain["a:8080"].score_after == pytest.approx(cpu[-1], abs=1e-4)
    assert UsageModels.from_json(json.loads(json.dumps(models.to_json()))) == models


def test_a_broker_with_no_sample_in_the_last_15_minutes_starts_from_its_report():
    rates = np.linspace(1000, 4000, 24)
    histories = {"a:8080": recorded(5 + 0.01 * rates, rates), "gone:8080": recorded(5 + 0.01 * rates[:20], rates[:20])}
    models = fit_usage_models(histories, now=float(histories["a:8080"].taken_at[-1]))
    assert models.brokers["gone:8080"]["cpu"].recent is None
    data = LoadData(brokers={"gone:8080": broker(cpu=(77.0, 100), rate_in=rates[-1])})
    (entry,) = forecast(data, CONFIG, [], models)
    assert entry.score_after == pytest.approx(77.0, abs=1e-4)


# --- the strategy ----------------------------------------------------------------------------------


def test_nothing_moves_before_avg_shedders_confirmation_and_the_hit_counters_are_avg_shedders():
    data = two_broker_load(hot_cpu=40.0, cold_cpu=10.0)  # 30-point gap: 8 low hits needed
    state = avg_shedder_predictive.PredictiveState()
    reference = avg_shedder.AvgShedderState()
    for _ in range(7):
        outcome = avg_shedder_predictive.find_bundles_for_unloading(data, CONFIG, state)
        expected = avg_shedder.find_bundles_for_unloading(data, CONFIG, reference)
        assert outcome.unloads == () and outcome.state.hits == expected.state
        state, reference = outcome.state, expected.state
    assert state.to_json()["strategy"] == "AvgShedderPredictive"
    assert state.to_json()["lowHitCount"] == {"cold:8080": 7, "hot:8080": 7}
    fired = avg_shedder_predictive.find_bundles_for_unloading(data, CONFIG, state)
    assert fired.unloads and fired.state.hits == avg_shedder.AvgShedderState()


def four_broker_load():
    """Two hot brokers (12 bundles each) and two nearly idle ones, all with the same hardware."""
    rng = np.random.default_rng(8)
    brokers, bundles = {}, {}
    for name, cpu, count in (("h1:8080", 82.0, 12), ("h2:8080", 74.0, 12), ("c1:8080", 6.0, 1), ("c2:8080", 3.0, 0)):
        rates = rng.lognormal(0, 0.6, count)
        rates = rates / rates.sum() * (cpu - 2.0) / 0.01 / 2 if count else rates  # 0.01 points per msg/s
        names = [bundle(i, f"t/{name[:2]}") for i in range(count)]
        stats = {
            n: NamespaceBundleStats(msg_rate_in=r, msg_rate_out=r, topics=1) for n, r in zip(names, rates, strict=True)
        }
        bundles.update({n: bundle_data(r, r) for n, r in zip(names, rates, strict=True)})
        total = float(rates.sum())
        brokers[name] = broker(cpu=(cpu, 100), rate_in=total, rate_out=total, bundles=names, last_stats=stats)
    return LoadData(brokers=brokers, bundle_data=bundles)


def test_one_plan_consolidates_on_predicted_scores_and_never_moves_a_bundle_twice():
    data = four_broker_load()
    primed = avg_shedder_predictive.PredictiveState(avg_shedder.AvgShedderState(high_hit_count={"h1:8080": 1}))
    outcome = avg_shedder_predictive.find_bundles_for_unloading(data, CONFIG, primed)
    moved = [unload.bundle for unload in outcome.unloads]
    assert moved and len(moved) == len(set(moved))
    assert all(data.brokers[u.broker].bundles >= {u.bundle} for u in outcome.unloads)
    after = outcome.scores_after
    assert max(after.values()) - min(after.values()) < CONFIG.avg_shedder_low_threshold
    assert max(after.values()) - min(after.values()) < 10
    # Each move's prediction continues from the previous one's, and ends where the plan says it ends.
    for move in outcome.moves:
        assert move.source_after < move.source_before and move.destination_after > move.destination_before
        assert move.destination_after <= CONFIG.broker_overloaded_threshold_percentage

    plan = make_plan("c", data, CONFIG, "AvgShedderPredictive", primed.to_json(), include_splits=False)
    document = plan.to_json()
    assert [(a["source"], a["bundle"], a["destination"]) for a in document["actions"]] == [
        (u.broker, u.bundle, u.destination) for u in outcome.unloads
    ]
    assert {b["broker"]: b["scoreAfter"] for b in document["brokers"]} == pytest.approx(dict(after))
    assert {b["broker"] for b in document["brokers"]} == set(data.brokers)
    assert all("predicted" in action["reason"] for action in document["actions"])
    assert len(document["predictedMoves"]) == len(document["actions"])
    assert document["stateAfter"]["strategy"] == "AvgShedderPredictive"


def test_the_move_budget_caps_a_plan():
    data = four_broker_load()
    primed = avg_shedder_predictive.PredictiveState(avg_shedder.AvgShedderState(high_hit_count={"h1:8080": 1}))
    outcome = avg_shedder_predictive.find_bundles_for_unloading(data, CONFIG, primed, move_budget=3)
    assert len(outcome.unloads) == 3
    assert any("budget" in reason for reason in outcome.reasons)


def test_a_destination_is_never_pushed_above_the_overload_threshold():
    data = two_broker_load(hot_cpu=99.0, cold_cpu=50.0)
    rng = np.random.default_rng(2)
    costs = {"hot:8080": 0.01, "cold:8080": 0.08}  # the cold broker is slow: a message costs eight times as much
    models = fit_usage_models({b: history(rng, 30, 5.0, cost, 0.0, size=(0, 0)) for b, cost in costs.items()})
    primed = avg_shedder_predictive.PredictiveState(avg_shedder.AvgShedderState(high_hit_count={"hot:8080": 1}))
    outcome = avg_shedder_predictive.find_bundles_for_unloading(data, CONFIG, primed, models)
    assert outcome.moves
    assert all(move.destination_after <= 85.0 for move in outcome.moves)
    assert 80 < outcome.scores_after["cold:8080"] <= 85.0
    # With the snapshot's average cost the cold broker seems to have room: that plan, costed with the
    # brokers' own models, would overload it.
    naive = avg_shedder_predictive.find_bundles_for_unloading(data, CONFIG, primed)
    moves = [Move(m.bundle, m.source, m.destination) for m in naive.moves]
    really = {entry.broker: entry.score_after for entry in forecast(data, CONFIG, moves, models)}
    assert really["cold:8080"] > 85.0


def test_the_strategy_is_selectable_by_name_everywhere_but_not_as_an_in_broker_policy():
    assert shedding_strategy("AvgShedderPredictive").name == "AvgShedderPredictive"
    assert parse_policy("offline:AvgShedderPredictive@30").name == "offline:AvgShedderPredictive@30"
    with pytest.raises(InputError, match="offline:AvgShedderPredictive"):
        parse_policy("AvgShedderPredictive")


# --- the lower bound on moves ----------------------------------------------------------------------


def fewest_moves_by_search(points, spread):
    """The exact minimum: try every set of k bundles and every destination for each, k = 0, 1, ..."""
    items = [(owner, value) for owner, values in enumerate(points) for value in values]
    base = np.array([sum(values) for values in points], dtype=float)
    for k in range(len(items) + 1):
        for chosen in itertools.combinations(range(len(items)), k):
            others = [[b for b in range(len(points)) if b != items[i][0]] for i in chosen]
            for destinations in itertools.product(*others):
                scores = base.copy()
                for i, destination in zip(chosen, destinations, strict=True):
                    owner, value = items[i]
                    scores[owner] -= value
                    scores[destination] += value
                if scores.max() - scores.min() <= spread + 1e-9:
                    return k
    return None


@pytest.mark.parametrize(
    "points",
    [
        [[9, 5, 4, 3], [6, 3, 1], [], [2]],
        [[7, 7, 2, 1, 1], [], [4, 3]],
        [[5, 5, 5, 5], [5, 5, 5, 5], [], []],
    ],
)
@pytest.mark.parametrize("spread", [1.0, 3.0, 6.0])
def test_the_bound_never_exceeds_the_exact_minimum_of_a_small_instance(points, spread):
    exact = fewest_moves_by_search(points, spread)
    bound = fewest_moves_lower_bound([sum(p) for p in points], points, spread)
    if exact is None:
        return
    assert bound is not None and bound <= exact


def test_the_bound_is_tight_on_a_scale_out_in_miniature():
    # Two brokers of four 5-point bundles, two empty: two moves each is the only way to spread 0.
    points = [[5, 5, 5, 5], [5, 5, 5, 5], [], []]
    assert fewest_moves_lower_bound([20, 20, 0, 0], points, 0.0) == fewest_moves_by_search(points, 0.0) == 4


# --- in the simulator ------------------------------------------------------------------------------

COMPARED = ("offline:AvgShedderPredictive", "offline:AvgShedder", "offline:UniformLoadShedder", "AvgShedder")


def test_scale_out_from_10_to_20_brokers_is_balanced_by_one_plan_near_the_fewest_moves():
    scenario = load_scenario("scale-out")
    assert [(group.count, group.join_at) for group in scenario.brokers] == [(10, 0), (10, 10)]
    runs = {policy: simulate(scenario, policy, minutes=200) for policy in (*COMPARED, "UniformLoadShedder")}
    predictive = runs["offline:AvgShedderPredictive"].metrics
    assert predictive.spread_after_first_plan < 10
    assert predictive.moves_lower_bound > 0
    assert predictive.moves_first_plan <= 1.2 * predictive.moves_lower_bound
    assert runs["offline:AvgShedderPredictive"].metrics.rounds == 1
    for policy, run in runs.items():
        # Every policy's first round is one of the plans the bound covers.
        assert run.metrics.moves_first_plan >= run.metrics.moves_lower_bound, policy
        if policy != "offline:AvgShedderPredictive":
            assert run.metrics.spread_after_first_plan > 20, policy  # one round of the others is far from balanced


@pytest.mark.parametrize("scenario_name", ["heterogeneous", "heterogeneous-hot-fast"])
def test_on_heterogeneous_brokers_slow_brokers_stay_below_the_overload_threshold_and_predictions_hold(scenario_name):
    result = simulate(load_scenario(scenario_name), "offline:AvgShedderPredictive")
    assert result.plans, "the predictive plan fired"
    column = {broker_id: index for index, broker_id in enumerate(result.brokers)}
    for plan in result.plans:
        for move in plan.predicted_moves:
            if move.destination.startswith("slow"):
                assert move.destination_after <= 85.0
        measured = result.scores[plan.minute + 1]
        for broker_id, predicted in plan.predicted_scores.items():
            assert abs(measured[column[broker_id]] - predicted) <= 5, (broker_id, predicted)
    assert result.metrics.prediction_error <= 5
    assert result.metrics.moves_lower_bound is None  # the bound assumes identical brokers


def test_the_json_metrics_report_the_first_plan_and_its_lower_bound(capsys):
    code = main(
        [
            "simulate",
            "--scenario",
            "scale-out",
            "--policy",
            "offline:AvgShedderPredictive",
            "--minutes",
            "130",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    metrics = json.loads(captured.out)["policies"]["offline:AvgShedderPredictive"]
    assert metrics["spreadAfterFirstPlan"] < 10
    assert metrics["movesFirstPlan"] <= 1.2 * metrics["movesLowerBound"]
    assert metrics["predictionError"] < 5
