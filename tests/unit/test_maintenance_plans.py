"""Drain and fill plans (`planner.plan.maintenance`): where each bundle goes, capacity, budgets, bad input."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.plan.document import MaintenanceDocument
from planner.plan.maintenance import MaintenanceMode, MaintenanceRequest, drain_plan, fill_plan, maintenance_plan
from planner.pulsar.config import PulsarConfig
from tests.builders import broker, bundle, bundle_data, load_data

HEARTBEAT = "pulsar/10.0.0.1:8080/0x00000000_0xffffffff"


def cluster(rates: dict[str, list[float]], cpu: dict[str, float] | None = None, heartbeat_on: str | None = None):
    """Brokers owning bundles with these msg/s (in), reports that add up, and optional CPU percentages."""
    brokers, bundles, index = {}, {}, 0
    for name, bundle_rates in rates.items():
        names = []
        for rate in bundle_rates:
            names.append(bundle(index))
            bundles[bundle(index)] = bundle_data(rate)
            index += 1
        if name == heartbeat_on:
            names.append(HEARTBEAT)
        brokers[name] = broker(rate_in=sum(bundle_rates), bundles=names, cpu=((cpu or {}).get(name, 10.0), 100.0))
    return load_data(brokers, bundles)


def after(plan, name: str) -> float:
    return next(b.msg_rate_after for b in plan.brokers if b.broker == name)


def test_a_drain_moves_every_movable_bundle_to_the_others_balanced():
    data = cluster({"a:8080": [50, 40, 30, 20, 10, 5], "b:8080": [100], "c:8080": [60]}, heartbeat_on="a:8080")
    plan = drain_plan("c1", data, PulsarConfig(), ["a:8080"])
    moved = {action.bundle for action in plan.actions}
    assert moved == set(data.brokers["a:8080"].last_stats) - {HEARTBEAT}
    assert {action.source for action in plan.actions} == {"a:8080"}
    assert {action.destination for action in plan.actions} <= {"b:8080", "c:8080"}
    assert after(plan, "a:8080") == pytest.approx(0.0)
    # 155 msg/s onto 100 and 60: the two end within the smallest moved bundle of each other.
    assert abs(after(plan, "b:8080") - after(plan, "c:8080")) <= 5 + 1e-9
    assert after(plan, "b:8080") + after(plan, "c:8080") == pytest.approx(315)
    assert plan.strategy == "drain"
    assert plan.maintenance == MaintenanceDocument(mode="drain", brokers=["a:8080"], max_moves=None, over_capacity=[])
    assert any("heartbeat/SLA-monitor bundles stay" in note for note in plan.notes)
    assert plan.mode == "drain"


def test_a_drain_the_rest_cannot_take_says_so_before_approval():
    # CPU follows messages (the snapshot's cost): b and c would pass 85 % with a's load.
    data = cluster(
        {"a:8080": [300, 300], "b:8080": [300], "c:8080": [300]}, cpu={"a:8080": 60, "b:8080": 60, "c:8080": 60}
    )
    plan = drain_plan("c1", data, PulsarConfig(), ["a:8080"])
    assert len(plan.actions) == 2
    assert plan.maintenance.over_capacity == ["b:8080", "c:8080"]
    assert any(note.startswith("capacity:") for note in plan.notes)
    # The same load with room to spare: no warning.
    roomy = cluster(
        {"a:8080": [300, 300], "b:8080": [300], "c:8080": [300]}, cpu={"a:8080": 20, "b:8080": 20, "c:8080": 20}
    )
    assert drain_plan("c1", roomy, PulsarConfig(), ["a:8080"]).maintenance.over_capacity == []


def test_a_drain_prefers_a_destination_below_the_threshold():
    data = cluster({"a:8080": [10], "b:8080": [0.0], "c:8080": [500]}, cpu={"a:8080": 10, "b:8080": 90, "c:8080": 20})
    [action] = drain_plan("c1", data, PulsarConfig(), ["a:8080"]).actions
    assert action.destination == "c:8080"  # b has fewer msg/s but is already over the threshold


@pytest.mark.parametrize(
    ("brokers", "message"),
    [
        (["x:8080"], "broker 'x:8080' is not one of the brokers"),
        (["a:8080", "b:8080"], "no broker to take"),
        ([], "name the brokers"),
    ],
)
def test_a_drain_of_unknown_or_all_brokers_is_refused(brokers, message):
    data = cluster({"a:8080": [10], "b:8080": [20]})
    with pytest.raises(InputError, match=message) as error:
        drain_plan("c1", data, PulsarConfig(), brokers)
    assert "c1" in str(error.value)


def test_a_fill_brings_a_new_broker_to_its_share_in_one_plan():
    data = cluster({"a:8080": [10] * 30, "b:8080": [10] * 30, "c:8080": [10] * 30, "d:8080": []})
    plan = fill_plan("c1", data, PulsarConfig(), [])  # none named: the broker that owns nothing
    assert plan.maintenance.brokers == ["d:8080"]
    assert {action.destination for action in plan.actions} == {"d:8080"}
    assert after(plan, "d:8080") == pytest.approx(220)  # the share is 225: within one bundle
    for donor in ("a:8080", "b:8080", "c:8080"):
        assert after(plan, donor) == pytest.approx(230, abs=10)
    assert len({action.bundle for action in plan.actions}) == len(plan.actions)


def test_a_fill_stops_at_its_move_budget_and_says_so():
    data = cluster({"a:8080": [10] * 30, "b:8080": [10] * 30, "c:8080": []})
    plan = fill_plan("c1", data, PulsarConfig(), ["c:8080"], max_moves=5)
    assert len(plan.actions) == 5
    assert any("move budget (5) ran out" in note for note in plan.notes)


def test_a_fill_of_a_balanced_cluster_moves_nothing():
    data = cluster({"a:8080": [10] * 3, "b:8080": [10] * 3, "c:8080": [10] * 3})
    assert fill_plan("c1", data, PulsarConfig(), ["c:8080"]).actions == ()
    with pytest.raises(InputError, match="no broker owns nothing"):
        fill_plan("c1", data, PulsarConfig(), [])


def test_plans_are_reproducible_and_the_request_is_validated():
    data = cluster({"a:8080": [5, 5, 7, 3], "b:8080": [1], "c:8080": [2]})
    request = MaintenanceRequest.parse({"mode": "drain", "brokers": ["a:8080"]}, "maintenance of c1")
    assert request.mode is MaintenanceMode.DRAIN
    first = maintenance_plan("c1", data, PulsarConfig(), request)
    assert first.actions == maintenance_plan("c1", data, PulsarConfig(), request).actions
    with pytest.raises(InputError, match="maintenance of c1: mode 'shrink'"):
        MaintenanceRequest.parse({"mode": "shrink"}, "maintenance of c1")
    with pytest.raises(InputError, match="maxMoves must be a positive integer"):
        MaintenanceRequest.parse({"mode": "fill", "maxMoves": 0}, "maintenance of c1")


def test_a_drain_also_moves_the_idle_bundles_only_the_admin_api_lists_spreading_them():
    data = cluster({"a:8080": [], "b:8080": [10], "c:8080": [10]})
    idle = [bundle(100 + index, "tenant/idle") for index in range(4)]
    owned = {"a:8080": [*idle, HEARTBEAT], "b:8080": []}
    plan = drain_plan("c1", data, PulsarConfig(), ["a:8080"], owned=owned)
    moved = {action.bundle: action.destination for action in plan.actions}
    assert set(moved) == set(idle)  # the heartbeat stays
    # No traffic to balance: the fewest bundles planned onto each broker decides.
    assert sorted(list(moved.values()).count(broker) for broker in ("b:8080", "c:8080")) == [2, 2]
