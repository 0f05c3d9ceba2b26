"""Scale events: a broker that joins gets a fill proposed, one marked for removal a drain; restarts and flaps propose
nothing; every event is recorded once however often a snapshot is observed; approval policies match the plans
proposed for them; the CLI lists, marks and plans them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from planner import cli
from planner.approval.policies import evaluate
from planner.collect.admin_client import PulsarAdminClient
from planner.collect.collector import collect
from planner.errors import InputError
from planner.lifecycle import IllegalTransitionError, ScaleEventKind, ScaleEventState, advance
from planner.orchestrate import scale_events as orchestrate
from planner.plan.maintenance import MaintenanceMode, MaintenanceRequest, maintenance_plan
from planner.plan.scale_events import maintenance_request, observe
from planner.pulsar.config import PulsarConfig
from planner.settings import ApprovalPolicy, planner_settings
from planner.store.clusters import cluster_row
from planner.store.database import Store
from planner.store.models import AuditEvent, Plan, ScaleEvent
from planner.store.scale_events import (
    BrokerSighting,
    list_scale_events,
    mark_removal,
    record_planned,
    record_sightings,
    unmark_removal,
)
from tests.fake_pulsar import FakePulsar, Reply, load_report
from tests.unit.test_approval_policies import NOW, plan
from tests.unit.test_maintenance_plans import cluster as load_of

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)
A, B, C = "10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"


def known(*brokers: str, last_seen: datetime = T0, joins: int = 0) -> dict[str, BrokerSighting]:
    return {broker: BrokerSighting(broker, T0 - DAY, last_seen, joins) for broker in brokers}


# --- detection, pure ----------------------------------------------------------------------------------------------


def test_the_first_snapshot_is_the_baseline_and_none_of_its_brokers_joined():
    seen = observe({}, [B, A], T0)
    assert seen.baseline and seen.new == (A, B) and seen.joins == ()


def test_a_broker_never_seen_joins_and_the_known_ones_are_seen_again():
    seen = observe(known(A, B), [A, B, C], T0 + timedelta(minutes=5))
    assert [(join.broker, join.generation) for join in seen.joins] == [(C, 1)]
    assert seen.new == (C,) and seen.seen == (A, B) and not seen.baseline


@pytest.mark.parametrize("gone", [timedelta(minutes=1), timedelta(hours=3), DAY])
def test_a_restart_or_a_flap_within_the_rejoin_time_is_no_join(gone):
    # Absent from every snapshot (a restart, a load report unreadable for a while), then back under its id.
    seen = observe(known(A, B), [A, B], T0 + gone, rejoin_after=DAY)
    assert seen.joins == () and seen.new == () and seen.seen == (A, B)


def test_a_broker_back_after_longer_than_the_rejoin_time_joins_again():
    seen = observe(known(A, B, joins=1), [A, B], T0 + DAY + timedelta(minutes=5))
    assert [(join.broker, join.generation, join.absent_seconds) for join in seen.joins] == [
        (A, 2, (DAY + timedelta(minutes=5)).total_seconds()),
        (B, 2, (DAY + timedelta(minutes=5)).total_seconds()),
    ]


def test_an_older_snapshot_observed_late_moves_no_sighting_back_and_finds_no_absence():
    seen = observe(known(A, last_seen=T0), [A], T0 - timedelta(hours=2))
    assert seen.joins == () and seen.seen == ()


def test_the_plan_that_answers_an_event_fills_a_joined_broker_and_drains_a_marked_one():
    fill = maintenance_request(ScaleEventKind.JOIN, C, 7)
    assert (fill.mode, fill.brokers, fill.scale_event.id, fill.scale_event.kind) == (
        MaintenanceMode.FILL,
        (C,),
        7,
        "join",
    )
    drain = maintenance_request(ScaleEventKind.REMOVAL, A, 8)
    assert (drain.mode, drain.brokers) == (MaintenanceMode.DRAIN, (A,))
    # Through the job's JSON and into the plan, beside an unchanged actions hash: the event moves nothing.
    assert MaintenanceRequest.parse(fill.to_json(), "request") == fill
    data = load_of({A: [10] * 6, B: [10] * 6, C: []})
    planned = maintenance_plan("c1", data, PulsarConfig(), fill)
    unmarked = maintenance_plan("c1", data, PulsarConfig(), MaintenanceRequest(MaintenanceMode.FILL, (C,)))
    assert planned.maintenance.scale_event == fill.scale_event and unmarked.maintenance.scale_event is None
    assert planned.actions_hash == unmarked.actions_hash and planned.actions
    with pytest.raises(InputError, match="request scaleEvent"):
        MaintenanceRequest.parse({"mode": "fill", "scaleEvent": {"id": 1, "kind": "grow", "broker": C}}, "request")


def test_a_scale_event_moves_only_along_its_transition_table():
    assert advance(None, ScaleEventState.DETECTED, "e") is ScaleEventState.DETECTED
    assert advance("proposed", ScaleEventState.PLANNED, "e") is ScaleEventState.PLANNED
    for final in ("superseded", "withdrawn"):
        with pytest.raises(IllegalTransitionError, match=f"scale event 3: cannot go from {final} to planned"):
            advance(final, ScaleEventState.PLANNED, "scale event 3")


# --- the store: each event once -----------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    with opened.session() as session:
        cluster_row(session, "c1", "http://c1")
    yield opened
    opened.dispose()


def sighting(store, snapshot_id, at, present, rejoin_after=DAY):
    return record_sightings(
        store, "c1", snapshot_id, at, lambda known: observe(known, present, at, rejoin_after), "test:collect"
    )


def a_plan(store, cluster="c1"):
    """A committed plan's row, for an event to be linked to."""
    with store.session() as session:
        row = Plan(
            cluster_id=cluster_row(session, cluster, f"http://{cluster}").id,
            run_key=f"run-{session.scalar(select(func.count()).select_from(Plan))}",
            strategy="fill",
            actions_hash="0" * 64,
            state_version=0,
        )
        session.add(row)
        session.flush()
        return row.id


def rows(store):
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(ScaleEvent))


def audited(store, event):
    with store.session() as session:
        return [row.details for row in session.scalars(select(AuditEvent).where(AuditEvent.event == event))]


def test_a_join_is_recorded_once_however_often_and_however_late_it_is_observed(store):
    assert sighting(store, 1, T0, [A, B]) == []  # the baseline
    [joined] = sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C])
    assert (joined.kind, joined.broker, joined.state, joined.snapshot_id) == (
        ScaleEventKind.JOIN,
        C,
        ScaleEventState.DETECTED,
        2,
    )
    # The same snapshot again (a retried task), the next collects (a cleared task, a rerun), an older one late.
    assert sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C]) == []
    assert sighting(store, 3, T0 + timedelta(minutes=10), [A, B, C]) == []
    assert sighting(store, 1, T0, [A, B]) == []
    assert rows(store) == 1
    assert [details["broker"] for details in audited(store, "scale-event.detected")] == [C]
    assert audited(store, "scale-event.baseline")[0]["brokers"] == [A, B]


def test_a_restarted_or_flapping_broker_records_nothing_and_one_back_after_a_day_joins_again(store):
    sighting(store, 1, T0, [A, B, C])
    assert sighting(store, 2, T0 + timedelta(minutes=5), [A, B]) == []  # C restarting, or its report unreadable
    assert sighting(store, 3, T0 + timedelta(minutes=10), [A, B, C]) == []  # back: a restart
    assert sighting(store, 4, T0 + timedelta(hours=20), [A, B]) == []
    [back] = sighting(store, 5, T0 + timedelta(minutes=10) + DAY + timedelta(minutes=1), [A, B, C])
    assert back.broker == C and back.details["absentSeconds"] == (DAY + timedelta(minutes=1)).total_seconds()
    assert sighting(store, 6, T0 + 2 * DAY, [A, B, C]) == [] and rows(store) == 1


def test_a_removal_mark_records_who_when_and_why_once_and_is_withdrawn_by_unmark(store):
    sighting(store, 1, T0, [A, B])
    event, already = mark_removal(store, "c1", B, "cli:alice", "decommission")
    assert (event.kind, event.state, event.recorded_by, event.reason, already) == (
        ScaleEventKind.REMOVAL,
        ScaleEventState.DETECTED,
        "cli:alice",
        "decommission",
        False,
    )
    again, already = mark_removal(store, "c1", B, "cli:bob")
    assert again.id == event.id and already and rows(store) == 1
    withdrawn = unmark_removal(store, "c1", B, "cli:bob", "not yet")
    assert withdrawn.state is ScaleEventState.WITHDRAWN
    assert audited(store, "broker.marked-for-removal")[0]["reason"] == "decommission"
    assert audited(store, "scale-event.withdrawn")[0]["reason"] == "not yet"
    # Marked again later: a new event, with a key of its own.
    renewed, already = mark_removal(store, "c1", B, "cli:alice")
    assert renewed.id != event.id and not already
    with pytest.raises(InputError, match=r"broker '10.0.0.3:8080' is not one of its brokers \(10.0.0.1:8080, 10"):
        mark_removal(store, "c1", C, "cli:alice")
    with pytest.raises(InputError, match=r"broker '10\.0\.0\.1:8080' is not marked for removal"):
        unmark_removal(store, "c1", A, "cli:alice")
    with pytest.raises(InputError, match="cluster 'c9' is not in the store"):
        mark_removal(store, "c9", A, "cli:alice")


def test_a_mark_supersedes_an_open_join_and_a_rejoin_supersedes_an_old_mark(store):
    sighting(store, 1, T0, [A, B])
    [join] = sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C])
    mark, _ = mark_removal(store, "c1", C, "cli:alice")
    [event] = [event for event in list_scale_events(store, "c1") if event.id == join.id]
    assert event.state is ScaleEventState.SUPERSEDED
    # C gone for two days (decommissioned), then back at its address: a join, and the old mark is moot.
    assert sighting(store, 3, T0 + DAY, [A, B]) == [] and sighting(store, 4, T0 + 2 * DAY, [A, B]) == []
    [rejoin] = sighting(store, 5, T0 + 3 * DAY, [A, B, C])
    states = {event.id: event.state for event in list_scale_events(store, "c1")}
    assert states == {
        join.id: ScaleEventState.SUPERSEDED,
        mark.id: ScaleEventState.SUPERSEDED,
        rejoin.id: ScaleEventState.DETECTED,
    }


def test_proposals_trigger_one_run_per_open_event_under_its_own_id_until_it_is_planned(store):
    sighting(store, 1, T0, [A, B])
    [join] = sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C])
    mark, _ = mark_removal(store, "c1", A, "cli:alice")
    first = [proposal.trigger_kwargs() for proposal in orchestrate.proposals(store, "c1", "test")]
    assert first == [
        {
            "trigger_dag_id": "pulsar_rebalance_maintenance_c1",
            "trigger_run_id": f"scale-event-{join.id}",
            "conf": {"mode": "fill", "brokers": [C], "scale_event": join.id},
        },
        {
            "trigger_dag_id": "pulsar_rebalance_maintenance_c1",
            "trigger_run_id": f"scale-event-{mark.id}",
            "conf": {"mode": "drain", "brokers": [A], "scale_event": mark.id},
        },
    ]
    # Asked again (the next collect, a cleared task): the same runs, which Airflow finds and does not add.
    assert [proposal.trigger_kwargs() for proposal in orchestrate.proposals(store, "c1", "test")] == first
    assert {event.state for event in list_scale_events(store, "c1")} == {ScaleEventState.PROPOSED}
    planned = a_plan(store)
    record_planned(store, join.id, "c1", planned, "test")
    record_planned(store, join.id, "c1", planned, "test")  # a retried commit of the same plan
    assert [proposal.event.id for proposal in orchestrate.proposals(store, "c1", "test")] == [mark.id]
    assert len(audited(store, "scale-event.planned")) == 1


def test_the_plan_for_an_event_is_the_stores_and_refused_for_another_cluster_or_a_closed_event(store):
    sighting(store, 1, T0, [A, B])
    [join] = sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C])
    request = orchestrate.event_request(store, "c1", join.id, max_moves=5)
    assert (request.mode, request.brokers, request.max_moves, request.scale_event.id) == (
        MaintenanceMode.FILL,
        (C,),
        5,
        join.id,
    )
    with store.session() as session:
        cluster_row(session, "c2", "http://c2")
    with pytest.raises(InputError, match=f"scale event {join.id}: an event of cluster 'c1', not of 'c2'"):
        orchestrate.event_request(store, "c2", join.id)
    with pytest.raises(InputError, match=f"scale event {join.id}: not an event of cluster 'c2'"):
        record_planned(store, join.id, "c2", a_plan(store, "c2"), "test")
    mark_removal(store, "c1", C, "cli:alice")  # supersedes the join
    with pytest.raises(InputError, match=f"scale event {join.id}: it is superseded; nothing to plan"):
        orchestrate.event_request(store, "c1", join.id)
    with pytest.raises(IllegalTransitionError):
        record_planned(store, join.id, "c1", a_plan(store), "test")


# --- collect against fake brokers: join, restart, flap ------------------------------------------------------------


@pytest.fixture
def brokers():
    fakes = [FakePulsar() for _ in range(3)]
    by_id = {fake.broker_id: fake for fake in fakes}
    ids = sorted(by_id)
    entry = by_id[ids[0]]
    entry.route("GET", "/admin/v2/brokers/configuration/runtime", Reply(200, {"clusterName": "fake"}))
    entry.route("GET", "/admin/v2/brokers/leaderBroker", Reply(200, {"brokerId": ids[0]}))
    for fake in fakes:
        fake.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report(cpu=5)))
    yield entry, [by_id[broker] for broker in ids]
    for fake in fakes:
        fake.close()


def listing(entry, brokers):
    entry.route("GET", "/admin/v2/brokers/fake", Reply(200, [broker.broker_id for broker in brokers]))


def collected(entry, store, tmp_path):
    with PulsarAdminClient(entry.url, timeout=(1.0, 0.5), backoff_factor=0.01, retries=1) as client:
        result = collect(client, store, tmp_path)
    return orchestrate.observe_snapshot(store, tmp_path, result.snapshot_id, DAY, "test:collect")


def test_collects_see_a_broker_join_once_and_a_restart_or_unreadable_report_as_none(brokers, tmp_path):
    entry, (first, second, third) = brokers
    store = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    listing(entry, [first, second])
    assert collected(entry, store, tmp_path) == []  # the baseline
    listing(entry, [first, second, third])
    [joined] = collected(entry, store, tmp_path)
    assert (joined.kind, joined.broker) == (ScaleEventKind.JOIN, third.broker_id)
    assert collected(entry, store, tmp_path) == []
    # The second broker restarts: gone from the list for a collect, then back. Then its report cannot be read.
    listing(entry, [first, third])
    assert collected(entry, store, tmp_path) == []
    listing(entry, [first, second, third])
    second.route("GET", "/admin/v2/broker-stats/load-report", Reply(500, "down"))
    assert collected(entry, store, tmp_path) == []
    second.route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report(cpu=5)))
    assert collected(entry, store, tmp_path) == []
    assert [event.id for event in list_scale_events(store, "fake")] == [joined.id]
    store.dispose()


# --- approval policies ----------------------------------------------------------------------------------------------


def scale_plan(kind: str | None, mode: str = "fill"):
    event = {"id": 4, "kind": kind, "broker": "b:8080"} if kind else None
    return plan(1, maintenance={"mode": mode, "brokers": ["b:8080"], "scaleEvent": event})


def test_a_policy_of_scale_events_approves_only_the_plans_proposed_for_those_events():
    joins = ApprovalPolicy(name="joins", modes=("fill",), scale_events=("join",), max_actions=5)
    approved = evaluate(joins, scale_plan("join"), NOW)
    assert approved.approves
    [check] = [check for check in approved.checks if check.rule == "scaleEvents"]
    assert (check.limit, check.value) == (["join"], "join")
    # A fill a person asked for, or the drain of a broker marked for removal, is not a join's.
    asked = evaluate(joins, scale_plan(None), NOW)
    assert [check.describe() for check in asked.failed] == [
        "scaleEvents: not proposed for a scale event of join (no scale event asked for it)"
    ]
    drain = evaluate(joins, scale_plan("removal", "drain"), NOW)
    assert {check.rule for check in drain.failed} == {"mode", "scaleEvents"}
    # Over its limits, a join's fill goes to a person too.
    assert not evaluate(
        joins.model_copy(update={"max_actions": 1}),
        plan(
            2,
            maintenance={
                "mode": "fill",
                "brokers": ["b:8080"],
                "scaleEvent": {"id": 4, "kind": "join", "broker": "b:8080"},
            },
        ),
        NOW,
    ).approves
    # Without the rule, a fill policy approves fills whoever asked for them, as before.
    assert evaluate(ApprovalPolicy(name="fills", modes=("fill",)), scale_plan(None), NOW).approves


def test_a_policy_is_read_with_its_scale_events_and_refuses_an_unknown_kind(monkeypatch):
    policies = json.dumps([{"name": "joins", "modes": ["fill"], "scale_events": ["join"]}])
    monkeypatch.setenv("PULSAR_REBALANCE_APPROVAL_POLICIES", policies)
    assert planner_settings().approval_policies[0].scale_events == ("join",)
    with pytest.raises(ValueError, match="scale_events"):
        ApprovalPolicy(name="x", scale_events=("grow",))


# --- the command line -------------------------------------------------------------------------------------------


def run(capsys, *arguments: str) -> tuple[int, dict | str]:
    code = cli.main([str(argument) for argument in arguments])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else err


def test_the_cli_marks_lists_and_unmarks_and_plan_run_takes_an_event(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("USER", "alice")
    db = f"sqlite:///{tmp_path / 'planner.db'}"
    sighting(store, 1, T0, [A, B])
    [join] = sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C])
    code, marked = run(
        capsys, "brokers", "mark-removal", "c1", A, "--reason", "old hardware", "--as", "Alice", "--db", db
    )
    assert code == 0 and not marked["alreadyMarked"]
    assert marked["scaleEvent"]["recordedBy"].endswith(" as Alice") and marked["scaleEvent"]["reason"] == "old hardware"
    code, listed = run(capsys, "brokers", "list", "c1", "--db", db)
    assert [(b["broker"], b["markedForRemoval"]) for b in listed["brokers"]] == [
        (A, marked["scaleEvent"]["id"]),
        (B, None),
        (C, None),
    ]
    code, events = run(capsys, "brokers", "events", "c1", "--state", "detected", "--db", db)
    assert [(e["kind"], e["broker"]) for e in events["scaleEvents"]] == [("removal", A), ("join", C)]
    code, _ = run(capsys, "brokers", "unmark", "c1", A, "--db", db)
    code, events = run(capsys, "brokers", "events", "c1", "--db", db)
    assert [e["state"] for e in events["scaleEvents"]] == ["withdrawn", "detected"]
    # Bad input: one line naming the object and the field, exit 2, nothing written.
    code, error = run(capsys, "brokers", "mark-removal", "c1", "10.9.9.9:8080", "--db", db)
    assert code == 2 and error.count("\n") == 1 and "broker '10.9.9.9:8080' is not one of its brokers" in error
    code, error = run(capsys, "plan", "run", "--cluster", "c1", "--scale-event", join.id, "--mode", "fill", "--db", db)
    assert code == 2 and "--scale-event: name exactly one --cluster, and no --mode or --brokers" in error
    code, error = run(capsys, "plan", "run", "--cluster", "c2", "--scale-event", join.id, "--db", db)
    assert code == 2 and f"scale event {join.id}: an event of cluster 'c1', not of 'c2'" in error


def test_the_cli_collect_lists_the_events_it_recorded(brokers, tmp_path, capsys, monkeypatch):
    entry, (first, second, third) = brokers
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PULSAR_REBALANCE_STORAGE", raising=False)
    monkeypatch.delenv("PULSAR_REBALANCE_DB_URL", raising=False)
    listing(entry, [first, second])
    code, baseline = run(capsys, "collect", "--admin-url", entry.url)
    assert code == 0 and baseline["scaleEvents"] == [] and baseline["brokers"] == 2
    listing(entry, [first, second, third])
    code, joined = run(capsys, "collect", "--admin-url", entry.url)
    [event] = joined["scaleEvents"]
    assert (event["kind"], event["broker"], event["state"], event["snapshot"]) == (
        "join",
        third.broker_id,
        "detected",
        joined["snapshot"],
    )
    code, again = run(capsys, "collect", "--admin-url", entry.url)
    assert again["scaleEvents"] == []


def test_the_gate_says_a_plan_was_proposed_for_a_scale_event_and_not_asked_for():
    from planner.airflow.gate_text import plan_summary_markdown

    text = plan_summary_markdown(scale_plan("join"), "http://review/plans/9")
    assert "Proposed for scale event 4, not asked for by a person: broker b:8080 joined the cluster" in text
    assert "Proposed for scale event" not in plan_summary_markdown(scale_plan(None), "http://review/plans/9")


def test_the_collect_dags_task_proposes_each_clusters_open_events_and_one_failing_cluster_stops_no_other(
    store, tmp_path, monkeypatch
):
    from planner.airflow import tasks as airflow_tasks

    sighting(store, 1, T0, [A, B])
    [join] = sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C])
    monkeypatch.setenv("PULSAR_REBALANCE_HOME", str(tmp_path))
    monkeypatch.setenv("PULSAR_REBALANCE_CLUSTER_NAMES", "broken,c1")
    monkeypatch.setattr(airflow_tasks, "store", lambda: store)
    observed = []

    def observe_latest(store_, root, cluster, rejoin_after, actor):
        observed.append((cluster, rejoin_after))
        if cluster == "broken":
            raise InputError("cluster 'broken': no samples")
        return []

    monkeypatch.setattr(orchestrate, "observe_latest", observe_latest)
    [trigger] = airflow_tasks.propose_scale_events()
    assert trigger["trigger_run_id"] == f"scale-event-{join.id}" and trigger["conf"]["brokers"] == [C]
    assert observed == [("broken", DAY), ("c1", DAY)]
    # Off: the events are still observed, and nothing is triggered.
    monkeypatch.setenv("PULSAR_REBALANCE_SCALE_EVENT_PROPOSALS", "false")
    assert airflow_tasks.propose_scale_events() == [] and len(observed) == 4


def test_the_scale_events_migration_goes_down_and_up_again(tmp_path):
    from alembic import command
    from sqlalchemy import inspect

    from planner.store.database import _alembic_config, current_revisions, migration_heads

    opened = Store(f"sqlite:///{tmp_path / 'migrated.db'}")
    assert {"known_brokers", "scale_events"} <= set(inspect(opened.engine).get_table_names())
    config = _alembic_config()
    with opened.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0008")
    assert current_revisions(opened.engine) == {"0008"}
    assert not {"known_brokers", "scale_events"} & set(inspect(opened.engine).get_table_names())
    opened.dispose()
    again = Store(f"sqlite:///{tmp_path / 'migrated.db'}")  # opening migrates to the newest again
    assert {"known_brokers", "scale_events"} <= set(inspect(again.engine).get_table_names())
    assert current_revisions(again.engine) == migration_heads()
    again.dispose()


def test_an_event_whose_broker_is_gone_waits_and_a_rejoin_supersedes_the_join_never_planned(store):
    sighting(store, 1, T0, [A, B])
    [join] = sighting(store, 2, T0 + timedelta(minutes=5), [A, B, C])
    sighting(store, 3, T0 + timedelta(minutes=10), [A, B])  # C left again (or its report is unreadable)
    assert orchestrate.proposals(store, "c1", "test") == []  # no plan could fill it now
    sighting(store, 4, T0 + timedelta(minutes=15), [A, B, C])
    assert [proposal.event.id for proposal in orchestrate.proposals(store, "c1", "test")] == [join.id]
    for snapshot, hours in ((5, 1), (6, 20), (7, 26)):  # C gone for more than a day
        assert sighting(store, snapshot, T0 + timedelta(hours=hours), [A, B]) == []
    [rejoin] = sighting(store, 8, T0 + timedelta(hours=27), [A, B, C])
    states = {event.id: event.state for event in list_scale_events(store, "c1")}
    assert states == {join.id: ScaleEventState.SUPERSEDED, rejoin.id: ScaleEventState.DETECTED}
    assert [proposal.event.id for proposal in orchestrate.proposals(store, "c1", "test")] == [rejoin.id]
