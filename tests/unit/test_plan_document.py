"""The plan document is validated wherever it crosses a stage boundary: bad input names the field."""

from __future__ import annotations

import json

import pytest

from planner.actions import actions_hash
from planner.errors import InputError
from planner.plan.document import JobResult, PlanDocument

ACTION = {"kind": "unload", "bundle": "t/ns/0x00000000_0xffffffff", "source": "a:1", "destination": "b:1"}


def test_the_hash_is_filled_in_and_a_wrong_one_is_refused():
    document = PlanDocument.parse({"cluster": "c", "strategy": "AvgShedder", "actions": [ACTION]}, "plan")
    assert document.actions_hash == actions_hash([ACTION])
    tampered = {**document.to_json(), "actions": [{**ACTION, "destination": "evil:1"}]}
    with pytest.raises(InputError, match=r"invalid plan: <root>: actionsHash .* is not the hash of the plan's actions"):
        PlanDocument.parse(tampered, "plan")


def test_the_wire_form_is_camel_case_and_round_trips():
    split = {**ACTION, "kind": "split", "destination": None, "splitAlgorithm": "range_equally_divide"}
    document = PlanDocument.parse(
        {"cluster": "c", "strategy": "AvgShedder", "actions": [ACTION, {**split, "splitPositions": None}]}, "plan"
    )
    wire = document.to_json()
    assert set(wire) >= {"actionsHash", "stateAfter", "predictedMoves"}
    assert "splitAlgorithm" not in wire["actions"][0] and wire["actions"][1]["splitAlgorithm"] == "range_equally_divide"
    assert PlanDocument.parse(json.loads(json.dumps(wire)), "plan") == document


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "merge"}, "plan.actions[0].kind"),
        ({"msgRate": "fast"}, "plan.actions[0].msgRate"),
        ({"bundle": None}, "plan.actions[0].bundle"),
    ],
)
def test_a_bad_job_output_names_the_field(change, field):
    text = json.dumps({"plan": {"cluster": "c", "strategy": "s", "actions": [{**ACTION, **change}]}, "snapshot": 3})
    with pytest.raises(InputError) as refused:
        JobResult.parse(text, "Spark job output plan-c.json")
    assert str(refused.value).startswith(f"invalid Spark job output plan-c.json: {field}: ")


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"kind": "split", "splitAlgorithm": "range_equally_divide"}, "a split has no destination"),
        ({"kind": "split", "destination": None}, "a split names its algorithm"),
        ({"splitAlgorithm": "range_equally_divide"}, "an unload has no split algorithm or positions"),
        ({"splitPositions": [5]}, "an unload has no split algorithm or positions"),
    ],
)
def test_each_action_kind_is_checked_by_its_own_rules(change, refusal):
    with pytest.raises(InputError, match=rf"invalid plan: actions\[0\]: .*{refusal}"):
        PlanDocument.parse({"cluster": "c", "strategy": "s", "actions": [{**ACTION, **change}]}, "plan")


def test_the_job_request_is_parsed_once_into_typed_values_and_written_back_as_read():
    from datetime import timedelta

    from planner.plan.request import AveragingMode, JobRequest

    wire = {
        "clusters": ["c"],
        "strategy": "org.apache.pulsar.broker.loadbalance.impl.AvgShedder",
        # Settings as callers give them: strings from files and the command line, numbers from code.
        "inputs": {
            "c": {
                "settings": {"minUnloadMessage": "0", "loadBalancerBrokerOverloadedThresholdPercentage": 1000},
                "maintenance": {"mode": "drain", "brokers": ["a:1"]},
            }
        },
        "averaging": "window:10m,1h",
        "history": "30d",
    }
    request = JobRequest.parse(json.dumps(wire), "input")
    assert request.strategy == "AvgShedder" and request.history == timedelta(days=30)
    assert request.averaging.mode is AveragingMode.WINDOW and request.averaging.long_window == timedelta(hours=1)
    assert request.inputs_of("c").maintenance.brokers == ("a:1",) and request.inputs_of("other").include_splits
    assert request.inputs_of("c").settings["loadBalancerBrokerOverloadedThresholdPercentage"] == 1000
    written = request.to_json()
    assert written["history"] == "30d" and written["averaging"] == "window:10m,1h"
    assert JobRequest.parse(json.dumps(written), "input") == request
    with pytest.raises(InputError, match="invalid input: history"):
        JobRequest.parse(json.dumps({**wire, "history": "a week"}), "input")
