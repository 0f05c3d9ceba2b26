"""Approval policies and time windows: which plan a policy approves, and when a window is open."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from planner import cli
from planner.approval.decisions import recorded_decision
from planner.approval.policies import decide, evaluate
from planner.audit.plan_records import show_plan
from planner.errors import InputError
from planner.plan.document import PlanDocument
from planner.settings import ApprovalPolicy, ExecutionWindow, TimeWindow, is_open, next_opening, planner_settings
from planner.store.database import Store

NOW = datetime(2026, 11, 25, 14, 0, tzinfo=UTC)


def plan(
    actions: int = 2,
    *,
    cluster: str = "prod-eu",
    strategy: str = "AvgShedder",
    moved: float = 100.0,
    namespace: str = "shop/orders",
    maintenance: dict | None = None,
) -> PlanDocument:
    """Two brokers of 1,000 msg/s each before; each unload moves `moved` msg/s (and as many bytes/s * 1,000)."""
    unloads = [
        {
            "kind": "unload",
            "bundle": f"{namespace}/0x{index:08x}_0x{index + 1:08x}",
            "source": "a:8080",
            "destination": "b:8080",
            "msgRate": moved,
            "throughput": moved * 1000,
        }
        for index in range(actions)
    ]
    brokers = [
        {
            "broker": name,
            "msgRateBefore": 1000.0,
            "msgRateAfter": after,
            "throughputBefore": 1e6,
            "throughputAfter": after * 1000,
            "scoreBefore": before,
            "scoreAfter": score_after,
            "model": "linear",
        }
        for name, after, before, score_after in (("a:8080", 800.0, 80.0, 60.0), ("b:8080", 1200.0, 20.0, 40.0))
    ]
    document = {"cluster": cluster, "strategy": strategy, "actions": unloads, "brokers": brokers}
    if maintenance is not None:
        document["maintenance"] = maintenance
    return PlanDocument.parse(document, "plan")


def failed_rules(policy: ApprovalPolicy, document: PlanDocument, now: datetime = NOW) -> list[str]:
    return [check.rule for check in evaluate(policy, document, now).failed]


def test_a_plan_inside_every_rule_is_approved_with_each_rules_limit_and_value():
    policy = ApprovalPolicy(
        name="routine",
        clusters=("prod-*",),
        strategies=("AvgShedder",),
        max_actions=2,
        max_msg_rate_share=0.1,
        max_throughput_share=0.1,
        min_spread_improvement=30,
        excluded_namespaces=("billing/*",),
        windows=(TimeWindow(cron="0 13 * * *", duration=timedelta(hours=2)),),
    )
    verdict = decide([policy], plan(), NOW).approved_by
    assert verdict is not None and verdict.policy == "routine"
    checks = {check.rule: (check.limit, check.value) for check in verdict.checks}
    # 200 of 2,000 msg/s moved; the score spread goes from 60 to 20 points.
    assert checks["maxMsgRateShare"] == (0.1, 0.1) and checks["maxThroughputShare"] == (0.1, 0.1)
    assert checks["minSpreadImprovement"] == (30, 40.0) and checks["maxActions"] == (2, 2)
    assert checks["excludedNamespaces"] == (["billing/*"], [])


@pytest.mark.parametrize(
    ("rules", "document", "failed"),
    [
        ({"max_actions": 1}, plan(2), ["maxActions"]),
        ({"max_msg_rate_share": 0.05}, plan(2), ["maxMsgRateShare"]),
        ({"max_throughput_share": 0.05}, plan(2), ["maxThroughputShare"]),
        ({"min_spread_improvement": 41}, plan(2), ["minSpreadImprovement"]),
        ({"strategies": ("UniformLoadShedder",)}, plan(2), ["strategies"]),
        ({"excluded_namespaces": ("shop/*",)}, plan(2), ["excludedNamespaces"]),
        ({"excluded_namespaces": ("shop/orders",)}, plan(2, namespace="shop/orders"), ["excludedNamespaces"]),
        ({}, plan(0), ["actions"]),  # an empty plan is never approved: there is nothing to approve
        ({}, plan(1, maintenance={"mode": "drain", "brokers": ["a:8080"]}), ["mode"]),  # rebalance plans only
        ({"windows": (TimeWindow(cron="0 15 * * *", duration=timedelta(hours=2)),)}, plan(2), ["windows"]),
    ],
)
def test_a_plan_outside_one_rule_goes_to_a_person_and_the_rule_is_named(rules, document, failed):
    policy = ApprovalPolicy(name="routine", **rules)
    assert failed_rules(policy, document) == failed
    decision = decide([policy], document, NOW)
    assert decision.approved_by is None
    assert decision.why_not().startswith("No approval policy approves this plan: routine (" + failed[0])


def test_a_maintenance_plan_over_capacity_is_never_approved_by_a_policy():
    drain = {"mode": "drain", "brokers": ["a:8080"], "overCapacity": ["b:8080"]}
    policy = ApprovalPolicy(name="drains", modes=("drain",))
    assert failed_rules(policy, plan(1, maintenance=drain)) == ["overCapacity"]
    assert failed_rules(policy, plan(1, maintenance={**drain, "overCapacity": []})) == []


def test_the_first_covering_policy_that_approves_decides_and_other_clusters_policies_do_not_count():
    strict = ApprovalPolicy(name="strict", max_actions=1)
    loose = ApprovalPolicy(name="loose", max_actions=5)
    elsewhere = ApprovalPolicy(name="staging", clusters=("staging-*",), max_actions=50)
    decision = decide([elsewhere, strict, loose], plan(2), NOW)
    assert [verdict.policy for verdict in decision.verdicts] == ["strict", "loose"]
    assert decision.approved_by is not None and decision.approved_by.policy == "loose"
    assert decision.to_json()["approvedBy"] == "policy:loose"
    assert decide([elsewhere], plan(2), NOW).why_not() == "No approval policy covers this cluster."


def test_without_a_forecast_a_share_cannot_be_told_and_the_rule_does_not_hold():
    document = PlanDocument.parse({**plan(1).to_json(), "brokers": []}, "plan")
    assert failed_rules(ApprovalPolicy(name="p", max_msg_rate_share=1), document) == ["maxMsgRateShare"]
    assert failed_rules(ApprovalPolicy(name="p", min_spread_improvement=0), document) == ["minSpreadImprovement"]


def test_a_window_is_open_from_its_opening_for_its_duration_in_its_time_zone():
    nightly = TimeWindow(cron="0 1 * * *", duration=timedelta(hours=3), timezone="Europe/Paris")
    opened = datetime(2026, 11, 25, 0, 0, tzinfo=UTC)  # 01:00 in Paris (UTC+1 in winter)
    assert nightly.opened_at(opened) == opened
    assert nightly.opened_at(opened - timedelta(seconds=1)) is None
    assert nightly.opened_at(opened + timedelta(hours=3) - timedelta(seconds=1)) == opened
    assert nightly.opened_at(opened + timedelta(hours=3)) is None
    assert nightly.next_opening(opened + timedelta(hours=3)) == opened + timedelta(days=1)
    # In summer Paris is UTC+2: the same window opens an hour earlier in UTC.
    assert nightly.next_opening(datetime(2026, 7, 1, 12, tzinfo=UTC)) == datetime(2026, 7, 1, 23, tzinfo=UTC)


def test_several_windows_open_at_the_earliest_and_none_configured_means_always():
    windows = [
        TimeWindow(cron="0 22 * * 1-5", duration=timedelta(hours=2)),
        TimeWindow(cron="0 10 * * 6,0", duration=timedelta(hours=6)),
    ]
    friday_noon = datetime(2026, 11, 27, 12, tzinfo=UTC)
    assert not is_open(windows, friday_noon)
    assert next_opening(windows, friday_noon) == datetime(2026, 11, 27, 22, tzinfo=UTC)
    assert next_opening(windows, datetime(2026, 11, 28, 11, tzinfo=UTC)) is None  # Saturday 10:00-16:00
    assert is_open([], friday_noon) and next_opening([], friday_noon) is None


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ({"cron": "0 25 * * *", "duration": 60}, "cron: '0 25 * * *' is not a cron expression"),
        ({"cron": "0 1 * * *", "duration": 0}, "duration: must be longer than zero"),
        ({"cron": "0 1 * * *", "duration": 60, "timezone": "Mars/Olympus"}, "'Mars/Olympus' is not an IANA time zone"),
        ({"cron": "0 1 * * *", "duration": 60, "cluster": "x"}, "cluster: Extra inputs are not permitted"),
    ],
)
def test_a_bad_window_names_the_setting_and_the_field(monkeypatch, window, message):
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTION_WINDOWS", json.dumps([window]))
    with pytest.raises(InputError) as refused:
        planner_settings()
    assert "execution_windows[0]." in str(refused.value) and message in str(refused.value)
    assert str(refused.value).endswith("(set by PULSAR_REBALANCE_EXECUTION_WINDOWS)")


def test_policies_and_windows_come_from_the_environment_as_json(monkeypatch):
    monkeypatch.setenv(
        "PULSAR_REBALANCE_APPROVAL_POLICIES",
        '[{"name": "small", "clusters": ["prod-*"], "max_actions": 3, "max_msg_rate_share": 0.2,'
        ' "windows": [{"cron": "0 9 * * 1-5", "duration": "PT8H", "timezone": "Europe/Berlin"}]}]',
    )
    monkeypatch.setenv("PULSAR_REBALANCE_EXECUTION_WINDOWS", '[{"cron": "0 1 * * *", "duration": 7200}]')
    settings = planner_settings()
    [policy] = settings.approval_policies
    assert policy.max_actions == 3 and policy.windows[0].duration == timedelta(hours=8)
    assert settings.execution_windows == (ExecutionWindow(cron="0 1 * * *", duration=timedelta(hours=2)),)
    with pytest.raises(ValidationError, match="name"):
        ApprovalPolicy(name="has space")


def test_the_cli_approves_by_policy_bound_to_the_hash_and_audits_the_checks(tmp_path, capsys, monkeypatch):
    from tests.unit.test_execution_safety import events, pending_plan

    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    url = str(store.engine.url)
    plan_id = pending_plan(store)  # two unloads of cluster c1
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVAL_POLICIES", json.dumps([{"name": "one-move", "max_actions": 1}]))
    assert cli.main(["approve", str(plan_id), "--by-policy", "--db", url]) == 2
    assert "No approval policy approves this plan: one-move (maxActions 2 (limit 1))" in capsys.readouterr().err
    assert events(store, "plan.approved") == []

    monkeypatch.setenv("PULSAR_REBALANCE_APPROVAL_POLICIES", json.dumps([{"name": "two-moves", "max_actions": 2}]))
    assert cli.main(["approve", str(plan_id), "--by-policy", "--dry-run", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out)["approvedBy"] == "policy:two-moves"
    assert events(store, "plan.approved") == []  # a dry run records nothing
    assert cli.main(["approve", str(plan_id), "--by-policy", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out)["recorded"] is True
    [approved] = events(store, "plan.approved")
    assert approved.actor == "policy:two-moves" and approved.details["source"] == "policy"
    assert {"rule": "maxActions", "limit": 2, "value": 2, "holds": True} in approved.details["policy"]["checks"]
    assert recorded_decision(store, plan_id).actions_hash == show_plan(store, plan_id)["actionsHash"]
    # A person's options do not mix with the policies'.
    assert cli.main(["approve", str(plan_id), "--by-policy", "--as", "bob", "--db", url]) == 2
    assert "--reject, --as and --expect-hash are for a person" in capsys.readouterr().err
    store.dispose()
