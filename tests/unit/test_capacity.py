"""Capacity advice (`planner.plan.capacity`): kinds, N+1 counts, the removal choice, the headroom trend."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.errors import InputError
from planner.plan.capacity import (
    CapacityInputs,
    Moment,
    advise_capacity,
    broker_kinds,
    capacity_inputs,
    headroom_trend,
    p95_score,
)
from planner.pulsar.config import PulsarConfig

WEIGHTS = PulsarConfig().resource_weights
START = datetime(2026, 3, 2, tzinfo=UTC)
NIC_KBIT = 10 * 1024 * 1024  # 10 Gbit/s in kbit/s, Pulsar's unit
MESSAGE_BYTES = 1024


@dataclass(frozen=True)
class Hardware:
    cores: int = 8
    cpu_per_msg: float = 0.01  # percent of the broker's CPU per msg/s (in + out)
    background: float = 5.0  # percent
    nic_kbit: float = NIC_KBIT


def recorded(
    hardware: Mapping[str, Hardware],
    *,
    days: int = 1,
    per_day: int = 48,
    bundles: int = 60,
    rate: float = 100.0,
    growth: float = 0.0,
    owners: Mapping[int, str] | None = None,
    seed: int = 7,
    start: datetime = START,
) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """A window of the samples tables: each bundle's msg/s in (as much out) varying around `rate` (times
    1 + growth per day), each broker's CPU usage its background plus its cost of what it owns."""
    rng = random.Random(seed)
    names = sorted(hardware)
    brokers: dict[str, list[Any]] = {}
    rows: dict[str, list[Any]] = {}
    sizes = [rng.uniform(0.5, 1.5) for _ in range(bundles)]
    snapshot = 0
    for day in range(days):
        for step in range(per_day):
            snapshot += 1
            taken_at = start + timedelta(days=day, minutes=step * (24 * 60 // per_day))
            wave = 1.0 + 0.3 * math.sin(2 * math.pi * step / per_day)
            totals = {name: [0.0, 0.0, 0.0, 0.0, 0] for name in names}
            for index in range(bundles):
                owner = (owners or {}).get(index, names[index % len(names)])
                msg_in = rate * sizes[index] * wave * (1 + growth * day) * rng.uniform(0.97, 1.03)
                traffic = [msg_in, msg_in, msg_in * MESSAGE_BYTES, msg_in * MESSAGE_BYTES]
                for key, value in zip(
                    ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out"), traffic, strict=True
                ):
                    rows.setdefault(key, []).append(value)
                for position, value in enumerate(traffic):
                    totals[owner][position] += value
                totals[owner][4] += 1
                rows.setdefault("snapshot_id", []).append(snapshot)
                rows.setdefault("taken_at", []).append(taken_at)
                rows.setdefault("broker", []).append(owner)
                rows.setdefault("bundle", []).append(f"t/ns/0x{index:08x}_0x{index + 1:08x}")
            for name in names:
                spec = hardware[name]
                msg_in, msg_out, bytes_in, bytes_out, count = totals[name]
                cpu_percent = spec.background + spec.cpu_per_msg * (msg_in + msg_out) + rng.gauss(0, 0.05)
                row = {
                    "snapshot_id": snapshot,
                    "taken_at": taken_at,
                    "broker": name,
                    "cpu_usage": cpu_percent * spec.cores,
                    "cpu_limit": spec.cores * 100.0,
                    "direct_memory_usage": 100.0,
                    "direct_memory_limit": 4096.0,
                    "bandwidth_in_usage": bytes_in * 8 / 1024,
                    "bandwidth_in_limit": spec.nic_kbit,
                    "bandwidth_out_usage": bytes_out * 8 / 1024,
                    "bandwidth_out_limit": spec.nic_kbit,
                    "msg_rate_in": msg_in,
                    "msg_rate_out": msg_out,
                    "msg_throughput_in": bytes_in,
                    "msg_throughput_out": bytes_out,
                    "num_bundles": count,
                }
                for key, value in row.items():
                    brokers.setdefault(key, []).append(value)
    return brokers, rows


def inputs_of(hardware: Mapping[str, Hardware], **kwargs: Any) -> CapacityInputs:
    brokers, bundles = recorded(hardware, **kwargs)
    return capacity_inputs("c1", brokers, bundles)


def same(count: int, **spec: Any) -> dict[str, Hardware]:
    return {f"b{index}": Hardware(**spec) for index in range(1, count + 1)}


# --- kinds ----------------------------------------------------------------------------------------------------------


def test_kinds_tell_hardware_apart_by_limits_and_costs() -> None:
    hardware = {
        "a1": Hardware(),
        "a2": Hardware(),
        "big": Hardware(cores=16, cpu_per_msg=0.005),  # other limits
        "slow": Hardware(cpu_per_msg=0.02),  # same limits, twice the cost
        "near": Hardware(cpu_per_msg=0.0105),  # same limits, 5 % dearer: the same kind as a1, a2
    }
    kinds = broker_kinds(inputs_of(hardware))
    assert [kind.brokers for kind in kinds] == [("a1", "a2", "near"), ("big",), ("slow",)]
    assert kinds[1].limits["cpu_limit"] == 1600.0
    # The costs of the same traffic: slow pays about twice what the first kind pays.
    assert kinds[2].reference_cost["cpu"] == pytest.approx(2 * kinds[0].reference_cost["cpu"], rel=0.1)


def test_kind_tolerance_decides_how_close_costs_must_be() -> None:
    hardware = {"a": Hardware(), "b": Hardware(cpu_per_msg=0.013)}  # 30 % dearer
    inputs = inputs_of(hardware)
    assert len(broker_kinds(inputs, tolerance=0.2)) == 2
    assert len(broker_kinds(inputs, tolerance=0.4)) == 1


# --- scores and N+1 ---------------------------------------------------------------------------------------------------

# Four brokers of one kind; 60 bundles of 200 msg/s (in + out) on average at 0.01 % CPU per msg/s: about 145 points
# of CPU at the p95 of the day, plus 5 of background per broker.


def test_the_score_of_a_set_of_brokers_is_the_busiest_after_a_good_placement() -> None:
    inputs = inputs_of(same(4))
    cost = np.percentile([(m.traffic[:, 0] + m.traffic[:, 1]).sum() * 0.01 for m in inputs.moments], 95)
    assert cost == pytest.approx(145, abs=3)
    for count in (2, 3, 4):
        brokers = ["b1", "b2", "b3", "b4"][:count]
        # Small bundles spread evenly: the busiest broker is within a bundle's cost of the mean.
        assert p95_score(inputs, brokers, WEIGHTS) == pytest.approx(5 + cost / count, abs=2)


@pytest.mark.parametrize(("target", "needed"), [(60, 4), (90, 3), (50, 5), (40, 6)])
def test_n_plus_one_counts_the_fewest_brokers_that_survive_the_worst_one_down(target: float, needed: int) -> None:
    # Brokers that serve the load within the target: 2 under 90 (78), 3 under 60 (53), 4 under 50 (41), 5 under 40
    # (34); one more for the one down.
    advice = advise_capacity(inputs_of(same(4)), WEIGHTS, target=target)
    (count,) = advice.counts
    assert (count.recorded, count.needed, count.spare) == (4, needed, 4 - needed)


def test_n_plus_one_with_two_kinds_keeps_each_kind_counted() -> None:
    hardware = {**same(3), "big1": Hardware(cores=16, cpu_per_msg=0.005), "big2": Hardware(cores=16, cpu_per_msg=0.005)}
    advice = advise_capacity(inputs_of(hardware), WEIGHTS, target=60)
    assert [(c.kind, c.recorded) for c in advice.counts] == [("kind-1", 3), ("kind-2", 2)]
    # 145 points of small-broker CPU at the p95: a big broker serves twice a small one. Whatever the mix, the
    # worst one down leaves the rest under 60, and one broker fewer of either kind would not.
    counts = [c.needed for c in advice.counts]
    assert advice.one_down_p95 is not None and advice.one_down_p95 <= 60
    assert sum(counts) <= 5


# --- removal --------------------------------------------------------------------------------------------------------


def test_the_cheapest_broker_to_remove_carries_the_least_traffic_and_the_others_meet_the_target() -> None:
    # b4 owns only 3 of the 60 bundles.
    owners = {index: ("b1", "b2", "b3")[index % 3] if index < 57 else "b4" for index in range(60)}
    inputs = inputs_of(same(4), owners=owners)
    advice = advise_capacity(inputs, WEIGHTS, target=70)
    removal = advice.removal
    assert removal is not None and removal.broker == "b4"
    assert removal.bundles == 3
    assert removal.p95 == pytest.approx(5 + 145 / 3, abs=3) and removal.meets_target
    assert advice.drain_command() == "pulsar-rebalance plan run --cluster c1 --mode drain --brokers b4"
    # Without any two of them the others exceed the target: the one down after the removal is over it.
    assert removal.one_down_p95 is not None and removal.one_down_p95 > 70


def test_no_broker_is_removable_when_the_others_would_exceed_the_target() -> None:
    advice = advise_capacity(inputs_of(same(3)), WEIGHTS, target=70)  # two brokers: 78 at the p95
    assert advice.removal is None and advice.drain_command() is None
    assert all(not option.meets_target for option in advice.removals)
    assert any("No broker can be removed" in line for line in advice.explanation)


def test_a_broker_whose_loss_breaks_the_target_is_not_advised_however_little_it_carries() -> None:
    # "big" has four times a small broker's CPU per message but carries 3 bundles: without it the three small ones
    # are at 53 (over 50); without a small one, big and the other two are at about 29.
    hardware = {**same(3), "big": Hardware(cores=32, cpu_per_msg=0.0025)}
    owners = {index: ("b1", "b2", "b3")[index % 3] if index < 57 else "big" for index in range(60)}
    advice = advise_capacity(inputs_of(hardware, owners=owners), WEIGHTS, target=50)
    by_broker = {option.broker: option for option in advice.removals}
    assert by_broker["big"].share < by_broker["b1"].share and not by_broker["big"].meets_target
    assert advice.removal is not None and advice.removal.broker in {"b1", "b2", "b3"}
    assert advice.removals[-1].broker == "big"


# --- trend ----------------------------------------------------------------------------------------------------------


def test_headroom_trend_per_day_its_slope_and_the_day_it_reaches_zero() -> None:
    moments = tuple(
        Moment(index, START + timedelta(days=index // 2, hours=index % 2), (), (), np.zeros((0, 4)))
        for index in range(6)
    )
    inputs = CapacityInputs("c1", moments, 6, {}, {}, (), {}, {})
    series = [60.0, 60.0, 62.0, 62.0, 64.0, 64.0]  # headroom 20, 18, 16 under a target of 80
    trend = headroom_trend(inputs, series, 80.0)
    assert [(day.day, day.headroom(80.0)) for day in trend.days] == [
        (date(2026, 3, 2), 20.0),
        (date(2026, 3, 3), 18.0),
        (date(2026, 3, 4), 16.0),
    ]
    assert trend.slope == pytest.approx(-2.0)
    assert trend.zero_on == date(2026, 3, 12)  # 20 points at 2 a day from March 2
    rising = headroom_trend(inputs, list(reversed(series)), 80.0)
    assert rising.slope == pytest.approx(2.0) and rising.zero_on is None


def test_headroom_falls_as_traffic_grows_over_recorded_days() -> None:
    advice = advise_capacity(inputs_of(same(4), days=4, per_day=24, growth=0.1), WEIGHTS, target=80)
    trend = advice.trend
    assert len(trend.days) == 4
    # About 3.9 points of score a day (10 % of 39), headroom 36 on the first day: zero some 9 days on.
    assert trend.slope == pytest.approx(-3.9, abs=0.6)
    assert trend.zero_on is not None and date(2026, 3, 9) <= trend.zero_on <= date(2026, 3, 13)
    document = advice.to_json()
    assert document["headroom"]["slopePerDay"] < 0 and document["headroom"]["zeroOn"] == trend.zero_on.isoformat()


# --- the advice as a whole ------------------------------------------------------------------------------------------


def test_a_long_window_is_sampled_evenly_and_says_so() -> None:
    brokers, bundles = recorded(same(2), days=2, per_day=48)
    inputs = capacity_inputs("c1", brokers, bundles, max_moments=10)
    assert len(inputs.moments) == 10 and inputs.snapshots == 96
    assert inputs.moments[0].snapshot_id == 1 and inputs.moments[-1].snapshot_id == 96
    advice = advise_capacity(inputs, WEIGHTS, target=80)
    assert "over 10 of the window's 96 snapshots" in advice.explanation[0]


def test_the_json_explains_its_numbers() -> None:
    document = advise_capacity(inputs_of(same(4)), WEIGHTS, target=90).to_json()
    assert document["counts"] == [{"kind": "kind-1", "recorded": 4, "needed": 3, "spare": 1}]
    assert document["removal"]["broker"] in {"b1", "b2", "b3", "b4"}
    assert document["kinds"][0]["limits"] == {
        "cpu": 800.0,
        "bandwidthIn": float(NIC_KBIT),
        "bandwidthOut": float(NIC_KBIT),
        "directMemory": 4096.0,
    }
    text = "\n".join(document["explanation"])
    assert "kind-1: 4 recorded, 3 keep N+1 under the target (1 can go)" in text
    assert "Drain it with: pulsar-rebalance plan run --cluster c1 --mode drain --brokers" in text


def test_bad_input_names_the_field() -> None:
    brokers, bundles = recorded(same(2))
    with pytest.raises(InputError, match="target"):
        advise_capacity(capacity_inputs("c1", brokers, bundles), WEIGHTS, target=0)
    empty: dict[str, Sequence[Any]] = {key: [] for key in brokers}
    with pytest.raises(InputError, match="no snapshot"):
        capacity_inputs("c1", empty, bundles)


def test_without_a_usable_fit_the_windows_usage_over_its_traffic_stands_in_and_the_advice_says_so() -> None:
    # Three snapshots of three brokers: fewer samples than a fit needs, even pooled (`usage_model.MIN_SAMPLES`).
    brokers, bundles = recorded(same(3), per_day=3)
    inputs = capacity_inputs("c1", brokers, bundles)
    assert sorted(inputs.estimated) == sorted(
        f"b{i} {r}" for i in (1, 2, 3) for r in ("cpu", "bandwidthIn", "bandwidthOut")
    )
    cpu = inputs.models["b1"].fits["cpu"]
    # The background folds into the cost per message: 5 % on about 40 msg/s of 0.01 % each.
    used = sum(u / c * 100 for u, c in zip(brokers["cpu_usage"], brokers["cpu_limit"], strict=True))
    messages = sum(brokers["msg_rate_in"]) + sum(brokers["msg_rate_out"])
    assert cpu.intercept == 0.0 and cpu.per_msg == pytest.approx(used / messages)
    advice = advise_capacity(inputs, WEIGHTS, target=80)
    assert advice.to_json()["estimated"] == list(inputs.estimated)
    assert any(line.startswith("No usable fit") for line in advice.explanation)


def test_the_cli_prints_tables_and_the_explanation_and_refuses_bad_input_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from planner.cli import main
    from tests.unit.test_capacity_page import write_window

    write_window(tmp_path, "west", START)
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(tmp_path))
    store = ["--db", f"sqlite:///{tmp_path / 'planner.db'}"]
    window = ["--from", "2026-03-02", "--to", "2026-03-03T00:00Z"]
    assert main(["capacity", "west", *window, "--target", "60", *store]) == 0
    text = capsys.readouterr().out
    assert "kind-1   b1,b2,b3,b4" in text and "target p95 score 60" in text
    assert "kind-1: 4 recorded, 4 keep N+1 under the target (none to spare)." in text
    for arguments, message in (
        (["west", "--days", "2", "--from", "2026-03-02"], "give --from or --days, not both"),
        (["west", "--from", "2026-03-03", "--to", "2026-03-02"], "--to 2026-03-02T00:00:00+00:00 is not after --from"),
        (["west", "--from", "2027-01-01", "--to", "2027-01-02"], "capacity of cluster 'west': no snapshot recorded"),
        (["west", "--target", "0"], "argument --target: must be from 1 to 1000 points"),
        (["west", "--from", "yesterday"], "argument --from: expected an ISO 8601 time"),
        (["bad/name"], "invalid cluster name from CLUSTER 'bad/name'"),
    ):
        assert main(["capacity", *arguments, *store]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1


def test_the_stored_window_is_read_only_for_the_snapshots_the_advice_is_evaluated_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planner.audit.capacity import read_capacity_inputs
    from planner.samples import dataset
    from tests.unit.test_capacity_page import write_window

    write_window(tmp_path, "west", START)
    end = START + timedelta(days=1)
    everything = capacity_inputs(
        "west",
        dataset.read_samples(tmp_path, "brokers", "west").to_pydict(),
        dataset.read_samples(tmp_path, "bundles", "west").to_pydict(),
        max_moments=5,
    )
    read: list[int] = []
    reader = dataset.read_dataset

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = reader(*args, **kwargs)
        if args[1] == "bundles" and kwargs.get("columns") != ("snapshot_id", "broker"):
            read.append(rows.num_rows)
        return rows

    monkeypatch.setattr(dataset, "read_dataset", counted)
    targeted = read_capacity_inputs(tmp_path, "west", START, end, max_moments=5)
    assert replace(targeted, moments=()) == replace(everything, moments=())
    assert [(m.snapshot_id, m.bundles, m.owners) for m in targeted.moments] == [
        (m.snapshot_id, m.bundles, m.owners) for m in everything.moments
    ]
    assert all(np.array_equal(a.traffic, b.traffic) for a, b in zip(targeted.moments, everything.moments, strict=True))
    # Five moments of 60 bundles (the latest snapshot is the last moment), not the day's 24 snapshots.
    assert read == [5 * 60]
