"""Approval policies and time windows: which plan a policy approves, and when a window is open."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from planner import cli
from planner.approval.policies import decide, evaluate
from planner.audit.plan_records import show_plan
from planner.errors import InputError
from planner.lifecycle import AttemptStatus
from planner.orchestrate.rollback import ExecutedUnload, executed_unloads, inverse_plan
from planner.plan.document import PlanDocument
from planner.plan.maintenance import drain_plan
from planner.plan.planning import _current_msg_rate
from planner.pulsar.config import PulsarConfig
from planner.settings import ApprovalPolicy, ExecutionWindow, TimeWindow, is_open, next_opening, planner_settings
from planner.store.approvals import recorded_decision
from planner.store.database import Store

NOW = datetime(2026, 11, 25, 14, 0, tzinfo=UTC)


def plan(
    actions: int = 2,
    *,
    cluster: str = "prod-eu",
    strategy: str = "AvgShedder",
    moved: float | None = 100.0,
    namespace: str = "shop/orders",
    maintenance: dict | None = None,
    cluster_rate: float = 1000.0,
) -> PlanDocument:
    """Two brokers of `cluster_rate` msg/s each before (and as many bytes/s * 1,000); each unload moves `moved`
    msg/s (and as many bytes/s * 1,000), or traffic not measured when `moved` is None."""
    unloads = [
        {
            "kind": "unload",
            "bundle": f"{namespace}/0x{index:08x}_0x{index + 1:08x}",
            "source": "a:8080",
            "destination": "b:8080",
            "msgRate": moved,
            "throughput": None if moved is None else moved * 1000,
        }
        for index in range(actions)
    ]
    brokers = [
        {
            "broker": name,
            "msgRateBefore": cluster_rate,
            "msgRateAfter": after,
            "throughputBefore": cluster_rate * 1000,
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


def test_the_spread_improvement_counts_the_moves_not_the_smoothing_of_a_noisy_report():
    # a's report is 9 points above its recent samples: the prediction starts from 71, not from 80.
    document = plan(2)
    brokers = [
        {**forecast, "scoreStart": start}
        for forecast, start in zip(document.to_json()["brokers"], (71.0, 20.0), strict=True)
    ]
    smoothed = PlanDocument.parse({**document.to_json(), "brokers": brokers}, "plan")
    verdict = evaluate(ApprovalPolicy(name="p", min_spread_improvement=30), smoothed, NOW)
    assert {check.rule: check.value for check in verdict.checks}["minSpreadImprovement"] == 31.0  # 51 -> 20, not 60
    assert failed_rules(ApprovalPolicy(name="p", min_spread_improvement=35), smoothed) == ["minSpreadImprovement"]
    assert failed_rules(ApprovalPolicy(name="p", min_spread_improvement=35), document) == []  # recorded before it


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


SHARES = ApprovalPolicy(
    name="shares", modes=("rebalance", "drain", "rollback"), max_msg_rate_share=1, max_throughput_share=1
)


def share_failures(document: PlanDocument) -> dict[str, str]:
    """The share rules that failed under SHARES, each with the value it reported."""
    verdict = evaluate(SHARES, document, NOW)
    return {check.rule: check.value for check in verdict.failed}


def unmeasured(document: PlanDocument, index: int) -> PlanDocument:
    """`document` with the traffic of its action `index` not measured (as a bundle without stats is planned)."""
    actions = document.to_json()["actions"]
    actions[index] = {**actions[index], "msgRate": None, "throughput": None}
    return PlanDocument.parse({**document.to_json(), "actions": actions}, "plan")


def test_an_unload_without_measured_traffic_makes_each_share_unknown_and_goes_to_a_person():
    document = unmeasured(plan(2), 1)
    bundle = document.actions[1].bundle
    assert share_failures(document) == {
        "maxMsgRateShare": f"unknown: no measured msg/s for 1 of 2 unloads ({bundle})",
        "maxThroughputShare": f"unknown: no measured bytes/s for 1 of 2 unloads ({bundle})",
    }
    decision = decide([SHARES], document, NOW)
    assert decision.approved_by is None
    assert f"shares (maxMsgRateShare unknown: no measured msg/s for 1 of 2 unloads ({bundle}) (limit 1.0)" in (
        decision.why_not()
    )
    # What is unknown is for the reviewer only: the approval hash binds the same actions either way.
    assert document.actions_hash == plan(2).actions_hash


@pytest.mark.parametrize(
    ("document", "unknown"),
    [
        # The cluster reported nothing: even a plan moving nothing has no share of it.
        (plan(2, moved=0.0, cluster_rate=0.0), "the cluster's msg/s before the plan is 0"),
        (plan(2, cluster_rate=0.0), "the cluster's msg/s before the plan is 0"),
        (PlanDocument.parse({**plan(2).to_json(), "brokers": []}, "plan"), "no forecast of the cluster's msg/s"),
    ],
)
def test_a_missing_or_zero_cluster_total_makes_the_share_unknown(document, unknown):
    failures = share_failures(document)
    assert failures["maxMsgRateShare"] == f"unknown: {unknown}"
    assert failures["maxThroughputShare"] == "unknown: " + unknown.replace("msg/s", "bytes/s")


def test_a_measured_zero_is_known_and_a_plan_moving_idle_bundles_is_approved():
    document = plan(2, moved=0.0)
    assert share_failures(document) == {}
    checks = {check.rule: check.value for check in evaluate(SHARES, document, NOW).checks}
    assert checks["maxMsgRateShare"] == 0.0 and checks["maxThroughputShare"] == 0.0


def test_a_rollback_carries_no_bytes_per_second_and_no_forecast_so_its_shares_are_unknown():
    unloads = [
        ExecutedUnload("shop/orders/0x00000000_0x00000001", "a:8080", "b:8080", AttemptStatus.SUCCEEDED, 100.0),
        ExecutedUnload("shop/orders/0x00000001_0x00000002", "a:8080", "b:8080", AttemptStatus.SUCCEEDED, None),
    ]
    rollback = inverse_plan("prod-eu", 7, unloads, 0, {u.bundle: u.destination for u in unloads}, {"a:8080"})
    assert [(a.msg_rate, a.throughput) for a in rollback.actions] == [(100.0, None), (None, None)]
    failures = share_failures(rollback)
    assert failures["maxMsgRateShare"] == (
        "unknown: no measured msg/s for 1 of 2 unloads (shop/orders/0x00000001_0x00000002); "
        "no forecast of the cluster's msg/s"
    )
    assert failures["maxThroughputShare"].startswith("unknown: no measured bytes/s for 2 of 2 unloads")


def test_the_gates_table_shows_unmeasured_traffic_as_a_dash_not_a_zero():
    from planner.airflow.gate_text import plan_summary_markdown

    table = plan_summary_markdown(unmeasured(plan(2), 1), "https://review/plans/1")
    assert "| a:8080 | b:8080 | 100 | 100000 |" in table and "| a:8080 | b:8080 | — | — |" in table


def test_the_store_keeps_an_unmeasured_rate_unknown_for_a_rollback(tmp_path):
    from tests.unit.test_execution_safety import pending_plan, unload

    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    idle = {**unload("t/ns/0x80000000_0xffffffff"), "msgRate": None, "throughput": None}
    plan_id = pending_plan(store, actions=[unload("t/ns/0x00000000_0x80000000"), idle])
    _, _, unloads, _ = executed_unloads(store, plan_id)
    assert [unload.traffic for unload in unloads] == [1.0, None]  # not the traffic column's 0.0
    assert show_plan(store, plan_id).document.actions[1].msg_rate is None
    store.dispose()


def test_a_drain_of_bundles_the_load_reports_leave_out_writes_their_traffic_as_not_measured():
    from tests.builders import broker, bundle, bundle_data, load_data

    quiet, idle = bundle(0), bundle(1)  # quiet: reported at 0 msg/s; idle: only the admin API lists it
    data = load_data(
        {
            "a:8080": broker(rate_in=0.0, bundles=[quiet], cpu=(10.0, 100.0)),
            "b:8080": broker(rate_in=10.0, bundles=[bundle(2)], cpu=(10.0, 100.0)),
        },
        {quiet: bundle_data(0.0), bundle(2): bundle_data(10.0)},
    )
    result = drain_plan("prod-eu", data, PulsarConfig(), ["a:8080"], owned={"a:8080": [quiet, idle]})
    traffic = {action.bundle: (action.msg_rate, action.throughput) for action in result.actions}
    assert traffic == {quiet: (0.0, 0.0), idle: (None, None)}
    assert set(share_failures(result)) == {"maxMsgRateShare", "maxThroughputShare"}


def test_the_msg_rate_of_a_bundle_its_broker_reported_no_stats_for_is_not_measured():
    from tests.builders import broker, bundle, load_data

    data = load_data({"a:8080": broker(rate_in=5.0, bundles=[bundle(0)])})
    assert _current_msg_rate(data, "a:8080", bundle(1)) is None
    assert _current_msg_rate(data, "gone:8080", bundle(0)) is None


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
    assert recorded_decision(store, plan_id).actions_hash == show_plan(store, plan_id).actions_hash
    # A person's options do not mix with the policies'.
    assert cli.main(["approve", str(plan_id), "--by-policy", "--as", "bob", "--db", url]) == 2
    assert "--reject, --as and --expect-hash are for a person" in capsys.readouterr().err
    store.dispose()
