"""The approval gate's text, whole: what the templates render, byte for byte, for every kind of plan."""

from __future__ import annotations

import pytest

from planner.airflow.gate_text import approval_request_markdown, plan_subject, plan_summary_markdown
from planner.plan.document import PlanDocument

URL = "http://review/plans/5"
REASON = "overloaded <a> & 'b'"  # Markdown, not HTML: nothing is escaped
ACTIONS = [
    {"kind": "unload", "bundle": "t/ns/0x00000000_0x00000001", "source": "a:8080", "destination": "b:8080",
     "msgRate": 123.456, "throughput": 98765.5, "reason": REASON},
    {"kind": "split", "bundle": "t/ns/0x00000001_0x00000002", "source": "a:8080", "destination": None,
     "splitAlgorithm": "range_equally_divide"},
    {"kind": "unload", "bundle": "t/ns/0x00000002_0x00000003", "source": "a:8080", "destination": "b:8080",
     "msgRate": 0.0, "throughput": 0.5, "reason": REASON},
]  # fmt: skip
BROKERS = [
    {"broker": name, "msgRateBefore": rate_before, "msgRateAfter": rate_after, "throughputBefore": 1.0,
     "throughputAfter": 2.0, "scoreBefore": score_before, "scoreAfter": score_after, "model": "linear"}
    for name, rate_before, rate_after, score_before, score_after in (
        ("a:8080", 1000.5, 800.49, 80.25, 60.05), ("b:8080", 0.0, 1200.0, 20.0, 40.0)
    )
]  # fmt: skip
PAIRS = [
    {"underloaded": "b:8080", "overloaded": "a:8080", "gap": 40.25, "lowHits": 3, "highHits": 1, "fired": True},
    {"underloaded": "c:8080", "overloaded": "a:8080", "gap": 10.0, "lowHits": 0, "highHits": 0, "fired": False},
    {"underloaded": "d:8080", "overloaded": "e:8080", "gap": 30.05, "lowHits": 2, "highHits": 5, "fired": True},
]
TABLES = """\
| # | kind | bundle | from | to | msg/s | bytes/s | reason |
|---|---|---|---|---|---:|---:|---|
| 1 | unload | `t/ns/0x00000000_0x00000001` | a:8080 | b:8080 | 123 | 98766 | overloaded <a> & 'b' |
| 2 | split | `t/ns/0x00000001_0x00000002` | a:8080 | — | — | — |  |
| 3 | unload | `t/ns/0x00000002_0x00000003` | a:8080 | b:8080 | 0 | 0 | overloaded <a> & 'b' |

Predicted per-broker load:

| broker | score before | score after | msg/s before | msg/s after |
|---|---:|---:|---:|---:|
| a:8080 | 80.2 | 60.0 | 1000 | 800 |
| b:8080 | 20.0 | 40.0 | 0 | 1200 |"""


def plan(**fields: object) -> PlanDocument:
    return PlanDocument.parse({"cluster": "c1", "strategy": "AvgShedder", "actions": ACTIONS, **fields}, "plan")


def test_a_rebalance_shows_its_actions_the_predicted_load_and_only_the_pairs_that_fired():
    rebalance = plan(brokers=BROKERS, pairs=PAIRS, notes=["a rebalance's notes are not shown"])
    assert plan_summary_markdown(rebalance, URL) == (
        "**Rebalance c1: 3 action(s) planned by AvgShedder**. [Open the plan page](http://review/plans/5)\n\n"
        + TABLES
        + """

Firing AvgShedder pairs:

| overloaded | underloaded | gap | low hits | high hits |
|---|---|---:|---:|---:|
| a:8080 | b:8080 | 40.2 | 3 | 1 |
| e:8080 | d:8080 | 30.1 | 2 | 5 |"""
    )


def test_a_drain_leads_with_its_capacity_warning_and_its_notes():
    drain = plan(
        brokers=BROKERS,
        notes=["note one", "note | two"],
        maintenance={"mode": "drain", "brokers": ["a:8080", "x:8080"], "overCapacity": ["b:8080", "c:8080"]},
    )
    assert plan_summary_markdown(drain, URL) == (
        """**Drain a:8080, x:8080 on c1: 3 action(s)**. [Open the plan page](http://review/plans/5)

**Warning:** predicted over the overload threshold after this plan: b:8080, c:8080. The cluster lacks the capacity.

- note one
- note | two

"""
        + TABLES
    )


def test_a_plan_without_actions_or_forecast_still_shows_both_tables_headers():
    empty = plan(actions=[], maintenance={"mode": "fill", "brokers": ["z:8080"]})
    assert plan_summary_markdown(empty, URL) == (
        "**Fill z:8080 on c1: 0 action(s)**. [Open the plan page](http://review/plans/5)\n\n\n"
        "| # | kind | bundle | from | to | msg/s | bytes/s | reason |\n|---|---|---|---|---|---:|---:|---|\n\n"
        "Predicted per-broker load:\n\n"
        "| broker | score before | score after | msg/s before | msg/s after |\n|---|---:|---:|---:|---:|"
    )


@pytest.mark.parametrize(
    ("fields", "subject"),
    [
        ({}, "Rebalance c1: 3 action(s) planned by AvgShedder"),
        ({"maintenance": {"mode": "rollback", "rollsBack": 7}}, "Roll back plan 7 on c1: 3 action(s)"),
        ({"maintenance": {"mode": "fill", "brokers": ["y:8080", "z:8080"]}}, "Fill y:8080, z:8080 on c1: 3 action(s)"),
    ],
)
def test_the_subject_names_what_the_plan_does_in_one_line(fields, subject):
    assert plan_subject(plan(**fields)) == subject


@pytest.mark.parametrize("why_not", [None, "No approval policy covers this cluster."])
def test_the_gate_adds_the_plan_id_the_hash_it_binds_and_why_no_policy_approved(why_not):
    rebalance = plan(brokers=BROKERS)
    expected = f"{plan_summary_markdown(rebalance, URL)}\n\nPlan 5, actions hash `{rebalance.actions_hash}`."
    if why_not is not None:
        expected += f"\n\n{why_not}"
    assert approval_request_markdown(rebalance, URL, 5, why_not) == expected
