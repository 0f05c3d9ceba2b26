"""Calibration of the usage model from executed plans' outcomes (`planner.plan.calibration`)."""

from __future__ import annotations

import random

import pytest

from planner.plan.calibration import (
    MAX_SCALE,
    NO_CALIBRATION,
    NO_MEASUREMENT,
    BrokerObservation,
    Calibration,
    PlanObservation,
    calibrate,
    model_version,
)
from planner.plan.usage_model import BROKER, CLUSTER, SNAPSHOT, ResourceFit, Traffic, UsageModels

# The fitted model: CPU 0.01 % per msg/s on every broker, NIC by bytes.
FIT = ResourceFit(5.0, 0.01, 0.0, 0.95, 100, CLUSTER)
NIC = ResourceFit(0.0, 0.0, 1e-6, 0.95, 100, CLUSTER)
MODELS = UsageModels(cluster={"cpu": FIT, "bandwidthIn": NIC, "bandwidthOut": NIC})


def _traffic(messages: float) -> Traffic:
    return Traffic(messages / 2, messages / 2, messages * 500, messages * 500)


def _broker(broker: str, before: float, after: float, true_cost: float, noise: float = 0.0) -> BrokerObservation:
    """A broker whose traffic went from `before` to `after` msg/s, its CPU costing `true_cost` per msg/s."""

    def usage(messages: float, shake: float) -> dict[str, float]:
        nic = messages * 500 * 1e-6  # as the model says: the NIC fits are exact
        return {"cpu": 5.0 + true_cost * messages + shake, "bandwidthIn": nic, "bandwidthOut": nic}

    return BrokerObservation(broker, usage(before, 0.0), usage(after, noise), _traffic(before), _traffic(after))


def _plan(name: str, *brokers: BrokerObservation, disturbances: tuple[str, ...] = ()) -> PlanObservation:
    return PlanObservation(name, MODELS, brokers, disturbances)


def test_an_exact_model_keeps_scale_one_and_changes_no_prediction() -> None:
    plans = [_plan(f"p{i}", _broker("a", 1000, 3000, 0.01), _broker("b", 3000, 1000, 0.01)) for i in range(5)]
    calibration = calibrate(plans)
    assert calibration.scale("a", "cpu") == 1.0 and calibration.scale("b", "cpu") == 1.0
    assert calibration.identity
    assert calibration.apply(MODELS).fit("a", "cpu").cost(_traffic(1000), "cpu") == pytest.approx(10.0)


def test_a_biased_pooled_model_is_corrected_per_broker() -> None:
    # Broker a's hardware costs twice the pooled fit, b's half: heterogeneous brokers under one cluster fit.
    plans = [_plan(f"p{i}", _broker("a", 1000, 2000, 0.02), _broker("b", 3000, 2000, 0.005)) for i in range(8)]
    calibrated = calibrate(plans).apply(MODELS)
    error_before = abs(MODELS.fit("a", "cpu").cost(_traffic(1000), "cpu") - 20.0)
    error_after = abs(calibrated.fit("a", "cpu").cost(_traffic(1000), "cpu") - 20.0)
    assert error_after < 0.1 * error_before
    assert calibrated.fit("b", "cpu").per_msg == pytest.approx(0.005, rel=0.1)
    # The background and the cluster-wide fit are not touched: only the brokers' own copies are scaled.
    assert calibrated.fit("a", "cpu").intercept == FIT.intercept
    assert calibrated.cluster["cpu"] is FIT


def test_noise_does_not_turn_an_exact_model_into_a_wrong_one() -> None:
    rng = random.Random(7)
    plans = [
        _plan(f"p{i}", _broker("a", 1000, 1000 + rng.choice([-1, 1]) * 800, 0.01, noise=rng.gauss(0, 1.0)))
        for i in range(20)
    ]
    assert calibrate(plans).scale("a", "cpu") == pytest.approx(1.0, abs=0.1)


def test_few_observations_are_shrunk_towards_one() -> None:
    one = calibrate([_plan("p1", _broker("a", 1000, 2000, 0.02))]).scale("a", "cpu")
    many = calibrate([_plan(f"p{i}", _broker("a", 1000, 2000, 0.02)) for i in range(30)]).scale("a", "cpu")
    assert 1.0 < one < many < 2.0
    assert many == pytest.approx(2.0, abs=0.1)
    # A plan that barely changed the broker's traffic says little about its cost.
    tiny = calibrate([_plan("p1", _broker("a", 1000, 1010, 0.02))]).scale("a", "cpu")
    assert tiny == pytest.approx(1.0, abs=0.01)


def test_the_scale_is_bounded() -> None:
    plans = [_plan(f"p{i}", _broker("a", 1000, 2000, 0.5)) for i in range(10)]
    assert calibrate(plans).scale("a", "cpu") == MAX_SCALE
    assert calibrate(plans, max_scale=2.0).scale("a", "cpu") == 2.0


def test_recent_plans_weigh_more_so_a_drifted_cost_is_followed() -> None:
    old = [_plan(f"old{i}", _broker("a", 1000, 2000, 0.01)) for i in range(10)]
    new = [_plan(f"new{i}", _broker("a", 1000, 2000, 0.015)) for i in range(4)]
    assert calibrate(old + new).scale("a", "cpu") > 1.2
    assert calibrate(new + old).scale("a", "cpu") < 1.1


def test_disturbed_outcomes_are_skipped_and_counted_by_reason() -> None:
    wrong = _broker("a", 1000, 2000, 0.05)  # what a restart mid-measurement looks like
    plans = [
        _plan("clean", _broker("a", 1000, 2000, 0.01)),
        _plan("restart", wrong, disturbances=("broker restarted",)),
        _plan("partial", wrong, disturbances=("partial snapshot", "broker restarted")),
        _plan("traffic", wrong, disturbances=("traffic changed",)),
    ]
    calibration = calibrate(plans)
    assert calibration.scale("a", "cpu") == 1.0
    assert calibration.plans == ("clean",)
    assert calibration.skipped == {"broker restarted": 2, "partial snapshot": 1, "traffic changed": 1}


def test_a_broker_without_measurement_is_skipped() -> None:
    unmeasured = BrokerObservation("a", {"cpu": 10.0}, {}, _traffic(1000), _traffic(2000))
    calibration = calibrate([_plan("p", unmeasured)])
    assert calibration.skipped == {NO_MEASUREMENT: 1}
    assert calibration.plans == ()


def test_a_scale_applies_only_to_the_kind_of_fit_it_was_learnt_on() -> None:
    plans = [_plan(f"p{i}", _broker("a", 1000, 2000, 0.02)) for i in range(6)]
    calibration = calibrate(plans)
    assert set(calibration.scales["a"]) == {CLUSTER}
    own = ResourceFit(5.0, 0.02, 0.0, 0.99, 50, BROKER)
    refitted = UsageModels(brokers={"a": {"cpu": own}}, cluster=MODELS.cluster)
    assert calibration.apply(refitted).fit("a", "cpu") == own
    # A broker whose fit alternates between kinds keeps one scale per kind, each learnt from its own plans.
    snapshot_models = UsageModels(cluster={"cpu": ResourceFit(0.0, 0.04, 0.0, None, 3, SNAPSHOT)})
    estimated = [PlanObservation(f"s{i}", snapshot_models, (_broker("a", 1000, 2000, 0.02),)) for i in range(6)]
    mixed = calibrate([plan for pair in zip(plans, estimated, strict=True) for plan in pair])
    assert mixed.scale("a", "cpu", CLUSTER) > 1.5 and mixed.scale("a", "cpu", SNAPSHOT) < 0.7
    snapshot_fit = mixed.apply(snapshot_models).fit("a", "cpu")
    assert snapshot_fit is not None and snapshot_fit.per_msg == pytest.approx(0.02, rel=0.2)


def test_the_version_is_a_stable_content_hash() -> None:
    plans = [_plan(f"p{i}", _broker("a", 1000, 2000, 0.02)) for i in range(3)]
    first, second = calibrate(plans), calibrate(list(plans))
    assert first.version == second.version and first.version.startswith("cal-")
    assert calibrate(plans[:2]).version != first.version
    assert Calibration.from_json(first.to_json()) == first
    assert Calibration.from_json(first.to_json()).version == first.version
    assert NO_CALIBRATION.identity and NO_CALIBRATION.apply(MODELS) == MODELS
    assert model_version(MODELS) == model_version(UsageModels.from_json(MODELS.to_json()))
    assert model_version(None) is None
