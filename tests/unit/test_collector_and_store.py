"""Collector and store on SQLite with a fault-injecting cluster; the same store tests run on PostgreSQL
in tests/integration."""

from __future__ import annotations

import gzip
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, text, update

from planner import storage
from planner.audit.plan_records import show_plan
from planner.collect import collector
from planner.collect.admin_client import AdminAuth, PulsarAdminClient
from planner.collect.collector import (
    SnapshotAbandonedError,
    abandon_stale_snapshots,
    collect,
    load_data_for_snapshot,
    read_archive,
    snapshot_reports,
)
from planner.errors import NotFoundError
from planner.lifecycle import Decision, IllegalTransitionError, SnapshotStatus, advance
from planner.plan.document import PlanDocument
from planner.samples.dataset import read_dataset, read_samples, samples_root
from planner.samples.reports import SnapshotReports
from planner.store import snapshots
from planner.store.approvals import record_decision
from planner.store.database import Store, current_revisions, migration_heads, upgrade
from planner.store.models import ActionExecution, Approval, AuditEvent, Base, PlanAction, Snapshot
from planner.store.plans import commit_plan
from planner.store.snapshots import list_snapshots, unpublished_snapshot_ids
from tests.fake_pulsar import FakePulsar, Reply, load_report

TOKEN = "tok-3f9a1c55-secret-value"
BUNDLE_A = "t/ns/0x00000000_0x80000000"
BUNDLE_B = "t/ns/0x80000000_0xffffffff"


@pytest.fixture
def cluster():
    """Three fake brokers: healthy with bundle A, healthy with bundle B, and a third that can be broken."""
    brokers = [FakePulsar(), FakePulsar(), FakePulsar()]
    ids = sorted(broker.broker_id for broker in brokers)
    by_id = {broker.broker_id: broker for broker in brokers}
    entry = by_id[ids[0]]
    entry.route("GET", "/admin/v2/brokers/configuration/runtime", Reply(200, {"clusterName": "fake"}))
    entry.route("GET", "/admin/v2/brokers/fake", Reply(200, ids))
    entry.route("GET", "/admin/v2/brokers/leaderBroker", Reply(200, {"brokerId": ids[0]}))
    entry.route(
        "GET",
        "/admin/v2/namespaces/t/ns/bundles",
        Reply(200, {"boundaries": ["0x00000000", "0x80000000", "0xffffffff"], "numBundles": 2}),
    )
    stats = {"msgRateIn": 100.0, "msgRateOut": 50.0, "msgThroughputIn": 1000.0, "topics": 3}
    by_id[ids[0]].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report({BUNDLE_A: stats})))
    by_id[ids[1]].route(
        "GET",
        "/admin/v2/broker-stats/load-report",
        Reply(200, load_report({BUNDLE_B: {**stats, "msgRateIn": 300.0}}, cpu=20)),
    )
    by_id[ids[2]].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report(cpu=5)))
    yield entry, [by_id[i] for i in ids]
    for broker in brokers:
        broker.close()


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'planner.db'}")
    yield opened
    opened.dispose()


def client(entry, **options):
    return PulsarAdminClient(entry.url, timeout=(1.0, 0.5), backoff_factor=0.01, retries=1, **options)


def count(store, model):
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(model))


def test_migrations_upgrade_an_empty_database_and_are_no_ops_on_a_current_one(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    bare = Store(url, migrate=False)
    assert current_revisions(bare.engine) == set()
    assert upgrade(bare.engine) is True
    assert current_revisions(bare.engine) == migration_heads()
    assert upgrade(bare.engine) is False
    assert Store(url).engine is not None  # opening again migrates nothing


def test_audit_log_is_append_only(store):
    with store.session() as session:
        session.add(AuditEvent(actor="test", event="x", details={}))
    for statement in ("UPDATE audit_log SET actor = 'other'", "DELETE FROM audit_log"):
        with pytest.raises(Exception, match="append-only"), store.session() as session:
            session.execute(text(statement))
    assert count(store, AuditEvent) == 1


def _approved_plan_with_attempts(store) -> tuple[int, int, int]:
    """An approved plan of one unload with a final attempt and one in flight: (plan, final, sending) ids."""
    unload = {"kind": "unload", "bundle": BUNDLE_A, "source": "a:8080", "destination": "b:8080"}
    document = PlanDocument.parse(
        {"cluster": "c1", "strategy": "AvgShedder", "actions": [unload], "stateAfter": {}}, "plan"
    )
    plan_id = commit_plan(store, document, admin_url="http://127.0.0.1:9", run_key="r1", expected_version=0).plan_id
    record_decision(
        store, plan_id, Decision.APPROVED, approver="alice", approved_hash=show_plan(store, plan_id).actions_hash
    )
    with store.session() as session:
        action_id = session.scalar(select(PlanAction.id).where(PlanAction.plan_id == plan_id))
        final = ActionExecution(action_id=action_id, attempt=1, status="failed", error="HTTP 500")
        sending = ActionExecution(action_id=action_id, attempt=2, status="sending")
        session.add_all([final, sending])
        session.flush()
        return plan_id, final.id, sending.id


def test_approvals_and_attempts_are_append_only(store):
    """Decisions and attempts are evidence: an approval never changes; an attempt moves only while in doubt, and
    only its outcome; neither is ever deleted (the executor would take a sent request for one never tried)."""
    plan_id, final, sending = _approved_plan_with_attempts(store)
    refused = [
        f"UPDATE approvals SET approver = 'mallory' WHERE plan_id = {plan_id}",
        f"DELETE FROM approvals WHERE plan_id = {plan_id}",
        f"UPDATE action_executions SET status = 'sending' WHERE id = {final}",
        f"UPDATE action_executions SET error = NULL WHERE id = {final}",
        f"DELETE FROM action_executions WHERE id = {final}",
        f"DELETE FROM action_executions WHERE id = {sending}",
        f"UPDATE action_executions SET started_at = '2020-01-01 00:00:00' WHERE id = {sending}",
        f"UPDATE action_executions SET attempt = 7 WHERE id = {sending}",
    ]
    for statement in refused:
        with pytest.raises(Exception, match="append-only"), store.session() as session:
            session.execute(text(statement))
    # The executor's own moves: an attempt in flight is answered, then verified.
    moves = [
        "UPDATE action_executions SET status = 'sent', request_ended_at = :at WHERE id = :id",
        "UPDATE action_executions SET status = 'succeeded', finished_at = :at WHERE id = :id",
    ]
    for statement in moves:
        with store.session() as session:
            session.execute(text(statement), {"at": datetime.now(UTC), "id": sending})
    with pytest.raises(Exception, match="append-only"), store.session() as session:
        session.execute(text(f"UPDATE action_executions SET status = 'failed' WHERE id = {sending}"))
    with store.session() as session:
        assert session.scalars(select(ActionExecution.status).order_by(ActionExecution.attempt)).all() == [
            "failed",
            "succeeded",
        ]
        assert session.scalar(select(Approval.approver)) == "alice"


def test_collect_records_archive_samples_and_snapshot(cluster, store, tmp_path):
    entry, brokers = cluster
    result = collect(client(entry), store, tmp_path)
    assert result.to_json() == {
        "snapshot": result.snapshot_id,
        "cluster": "fake",
        "brokers": 3,
        "bundles": 2,
        "partial": False,
    }
    [listed] = (snapshot.to_json() for snapshot in list_snapshots(store))
    assert listed["cluster"] == "fake" and listed["brokers"] == 3 and not listed["partial"]
    with store.session() as session:
        archive = read_archive(session.get(Snapshot, result.snapshot_id).archive_path)
    assert set(archive["loadReports"]) == {broker.broker_id for broker in brokers}
    assert archive["bundleBoundaries"] == {"t/ns": ["0x00000000", "0x80000000", "0xffffffff"]}
    bundles = read_samples(tmp_path, "bundles", "fake").to_pylist()
    assert sorted((row["bundle"], row["msg_rate_in"]) for row in bundles) == [(BUNDLE_A, 100.0), (BUNDLE_B, 300.0)]
    assert len(read_samples(tmp_path, "brokers", "fake")) == 3


def test_load_data_replays_snapshots_through_pulsars_sample_rule(cluster, store, tmp_path):
    entry, brokers = cluster
    first = collect(client(entry), store, tmp_path)
    stats = {"msgRateIn": 200.0, "msgRateOut": 50.0, "msgThroughputIn": 1000.0, "topics": 3}
    brokers[0].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report({BUNDLE_A: stats})))
    second = collect(client(entry), store, tmp_path)
    data = load_data_for_snapshot(store, tmp_path, second.snapshot_id)
    short = data.bundle_data[BUNDLE_A].short_term_data
    assert (short.num_samples, short.msg_rate_in) == (2, 150.0)  # (100 + 200) / 2
    assert data.bundle_data[BUNDLE_A].long_term_data.max_samples == 1000
    assert set(data.brokers) == {broker.broker_id for broker in brokers}
    earlier = load_data_for_snapshot(store, tmp_path, first.snapshot_id)
    assert earlier.bundle_data[BUNDLE_A].short_term_data.msg_rate_in == 100.0


def test_a_broker_that_times_out_or_answers_garbage_is_recorded_missing(cluster, store, tmp_path):
    entry, brokers = cluster
    brokers[1].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report(), delay=2.0))
    brokers[2].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, "{oops"))
    result = collect(client(entry), store, tmp_path)
    assert result.partial and result.brokers == 1
    assert "timed out" in result.missing[brokers[1].broker_id]
    assert "malformed JSON" in result.missing[brokers[2].broker_id]
    assert brokers[2].broker_id in result.missing[brokers[2].broker_id]
    [listed] = (snapshot.to_json() for snapshot in list_snapshots(store))
    assert listed["partial"] and listed["missingBrokers"] == sorted([brokers[1].broker_id, brokers[2].broker_id])


def test_a_snapshot_with_a_refused_report_loads_without_that_broker(cluster, store, tmp_path, caplog):
    entry, brokers = cluster
    refused = {**load_report(cpu=5), "msgRateIn": -1.0}
    brokers[2].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, refused))
    result = collect(client(entry), store, tmp_path)
    assert "msgRateIn" in result.missing[brokers[2].broker_id]
    # The refused report stays in the archive for audit; the LoadData goes on without that broker, and says so.
    with store.session() as session:
        archive = read_archive(session.get(Snapshot, result.snapshot_id).archive_path)
    assert json.loads(archive["loadReports"][brokers[2].broker_id])["msgRateIn"] == -1.0
    with caplog.at_level("WARNING"):
        load_data = load_data_for_snapshot(store, tmp_path, result.snapshot_id)
    assert set(load_data.brokers) == {brokers[0].broker_id, brokers[1].broker_id}
    assert f"broker {brokers[2].broker_id} left out" in caplog.text


def test_a_failure_while_recording_leaves_nothing_half_written(cluster, store, tmp_path, monkeypatch):
    entry, _ = cluster
    real_write = storage.write_parquet
    writes = []

    def second_write_fails(table, path):
        writes.append(path)
        if len(writes) == 2:
            raise OSError("disk full")
        real_write(table, path)

    monkeypatch.setattr("planner.storage.write_parquet", second_write_fails)
    with pytest.raises(OSError, match="disk full"):
        collect(client(entry), store, tmp_path)
    # The first Parquet file was written (staged), the second failed: nothing of the snapshot remains to read.
    assert not [path for path in tmp_path.rglob("*") if path.is_file() and path.suffix in {".parquet", ".gz"}]
    assert list_snapshots(store) == [] and read_samples(tmp_path, "bundles", "fake").num_rows == 0
    with store.session() as session:
        [abandoned] = session.scalars(select(Snapshot)).all()
        events = [event.event for event in session.scalars(select(AuditEvent))]
    assert abandoned.status == "abandoned" and events == ["snapshot.abandoned"]
    # The id is not given out again, on SQLite too: the next snapshot is complete under a new id.
    monkeypatch.setattr("planner.storage.write_parquet", real_write)
    result = collect(client(entry), store, tmp_path)
    assert result.snapshot_id > abandoned.id
    assert set(read_samples(tmp_path, "bundles", "fake").column("snapshot_id").to_pylist()) == {result.snapshot_id}


def test_readers_see_published_snapshots_only_and_stale_staged_ones_are_abandoned(cluster, store, tmp_path):
    entry, _ = cluster
    first = collect(client(entry), store, tmp_path)
    second = collect(client(entry), store, tmp_path)
    # A collect killed after publishing its files but before publishing its row leaves them like this:
    with store.session() as session:
        session.execute(update(Snapshot).where(Snapshot.id == second.snapshot_id).values(status="staged"))
    assert [row.id for row in list_snapshots(store)] == [first.snapshot_id]
    hidden = unpublished_snapshot_ids(store, "fake")
    assert hidden == [second.snapshot_id]
    assert set(read_samples(tmp_path, "bundles", "fake", exclude=hidden).column("snapshot_id").to_pylist()) == {
        first.snapshot_id
    }
    with pytest.raises(NotFoundError, match="it is staged"):
        load_data_for_snapshot(store, tmp_path, second.snapshot_id)
    # A fresh staged row is left alone (its collect may still run); an old one is abandoned with its files.
    assert abandon_stale_snapshots(store, tmp_path, "fake") == []
    assert abandon_stale_snapshots(store, tmp_path, "fake", older_than=timedelta(0)) == [second.snapshot_id]
    assert read_samples(tmp_path, "bundles", "fake").column("snapshot_id").to_pylist().count(second.snapshot_id) == 0
    assert not [p for p in tmp_path.rglob(f"*snapshot-{second.snapshot_id:012d}*") if p.is_file()]
    with store.session() as session, pytest.raises(IllegalTransitionError):
        row = session.get(Snapshot, second.snapshot_id)
        advance(row.status, SnapshotStatus.PUBLISHED, "snapshot")


def files_of(tmp_path, snapshot_id):
    return sorted(p.name for p in tmp_path.rglob(f"*snapshot-{snapshot_id:012d}*") if p.is_file())


def audit_events(store):
    with store.session() as session:
        return [(event.event, event.actor) for event in session.scalars(select(AuditEvent).order_by(AuditEvent.id))]


def on_nth_call(monkeypatch, target, nth, action, *, after=False):
    """Run `action` when the collector calls `target` (a `planner.storage` function) for the `nth` time, before
    the call itself (or `after` it): a step of a collect that is still running."""
    real = getattr(storage, target.rsplit(".", 1)[1])
    calls = []

    def hooked(*args):
        calls.append(args)
        if len(calls) == nth and not after:
            action()
        result = real(*args)
        if len(calls) == nth and after:
            action()
        return result

    monkeypatch.setattr(target, hooked)
    return calls


@pytest.mark.parametrize(
    ("fetch_delay", "write_delay", "first_stale_after"),
    [
        # The fetch outlasts the age: the row is staged with a taken_at already older than it.
        pytest.param(1.5, 0.0, collector.STALE_AFTER, id="slow-fetch"),
        # The files take longer than the age to write: only the renewals keep the row alive.
        pytest.param(0.0, 1.5, timedelta(seconds=1), id="slow-write"),
    ],
)
def test_a_live_collect_slower_than_the_abandonment_age_is_not_abandoned_by_the_next(
    cluster, store, tmp_path, monkeypatch, fetch_delay, write_delay, first_stale_after
):
    entry, brokers = cluster
    # The first collect's fetch is slow; the second's is not (the fake's replies are consumed in order).
    slow, fast = Reply(200, load_report(cpu=5), delay=fetch_delay), Reply(200, load_report(cpu=5))
    brokers[2].route("GET", "/admin/v2/broker-stats/load-report", slow, fast)
    second = []

    def a_second_collect_runs():
        time.sleep(write_delay)
        # A second collect of the cluster, whose abandonment age the first collect has outlasted.
        second.append(collect(client(entry), store, tmp_path, stale_after=timedelta(seconds=1), actor="second"))

    on_nth_call(monkeypatch, "planner.storage.write_parquet", 1, a_second_collect_runs)
    slow_client = PulsarAdminClient(entry.url, timeout=(1.0, 5.0), backoff_factor=0.01, retries=1)
    first = collect(slow_client, store, tmp_path, stale_after=first_stale_after, actor="first")
    assert not first.partial  # the slow broker was waited for
    assert [row.id for row in list_snapshots(store)] == [second[0].snapshot_id, first.snapshot_id]
    assert unpublished_snapshot_ids(store, "fake") == []
    assert len(files_of(tmp_path, first.snapshot_id)) == 3
    assert ("snapshot.abandoned", "second") not in audit_events(store)
    assert set(read_samples(tmp_path, "bundles", "fake").column("snapshot_id").to_pylist()) == {
        first.snapshot_id,
        second[0].snapshot_id,
    }


def test_a_staged_row_whose_heartbeat_stopped_is_abandoned_and_a_renewed_one_is_not(cluster, store, tmp_path):
    entry, _ = cluster
    killed, silent_since_before_heartbeats, renewed = (collect(client(entry), store, tmp_path) for _ in range(3))
    now = datetime.now(UTC)
    long_ago = now - collector.STALE_AFTER - timedelta(minutes=5)
    # As collects killed after staging leave them (files written or not), and one staged before heartbeats existed;
    # the third's collect began as long ago, but its last heartbeat is recent.
    for result, heartbeat in ((killed, long_ago), (silent_since_before_heartbeats, None), (renewed, now)):
        with store.session() as session:
            row = session.get(Snapshot, result.snapshot_id)
            written_under, row.status, row.taken_at, row.heartbeat_at = row.taken_at, "staged", long_ago, heartbeat
        # A collect writes its files under its taken_at's date: near midnight, long_ago is the day before.
        for (_, written), (_, expected) in zip(
            collector.snapshot_files(tmp_path, "fake", result.snapshot_id, written_under),
            collector.snapshot_files(tmp_path, "fake", result.snapshot_id, long_ago),
            strict=True,
        ):
            if written != expected:
                target = Path(storage.filesystem(expected)[1])
                target.parent.mkdir(parents=True, exist_ok=True)
                Path(storage.filesystem(written)[1]).rename(target)
    assert abandon_stale_snapshots(store, tmp_path, "fake") == [
        killed.snapshot_id,
        silent_since_before_heartbeats.snapshot_id,
    ]
    assert (
        files_of(tmp_path, killed.snapshot_id) == files_of(tmp_path, silent_since_before_heartbeats.snapshot_id) == []
    )
    assert len(files_of(tmp_path, renewed.snapshot_id)) == 3
    assert unpublished_snapshot_ids(store, "fake") == [
        result.snapshot_id for result in (killed, silent_since_before_heartbeats, renewed)
    ]
    with store.session() as session:
        assert session.get(Snapshot, renewed.snapshot_id).status == "staged"


def test_two_abandoners_and_a_renewal_racing_them_the_row_count_decides(cluster, store, tmp_path, monkeypatch):
    entry, _ = cluster
    raced, renewed = (collect(client(entry), store, tmp_path) for _ in range(2))
    with store.session() as session:
        session.execute(update(Snapshot).values(status="staged", heartbeat_at=datetime.now(UTC) - timedelta(hours=1)))
    real_abandon = collector._abandon
    both_looked = threading.Barrier(2, timeout=10)

    def after_both_looked(store_, root, snapshot_id, *args, **kwargs):
        if snapshot_id == raced.snapshot_id:
            both_looked.wait()  # both abandoners saw the row stale, neither has marked it yet
        else:  # the collect's heartbeat lands between the abandoner's look and its UPDATE
            assert snapshots.renew_heartbeat(store_, snapshot_id)
        return real_abandon(store_, root, snapshot_id, *args, **kwargs)

    monkeypatch.setattr(collector, "_abandon", after_both_looked)
    won: list[list[int]] = []
    abandoners = [
        threading.Thread(target=lambda: won.append(abandon_stale_snapshots(store, tmp_path, "fake"))) for _ in range(2)
    ]
    for abandoner in abandoners:
        abandoner.start()
    for abandoner in abandoners:
        abandoner.join()
    assert sorted(won) == [[], [raced.snapshot_id]]
    assert [event for event, _ in audit_events(store)].count("snapshot.abandoned") == 1
    with store.session() as session:
        assert session.get(Snapshot, renewed.snapshot_id).status == "staged"
    assert len(files_of(tmp_path, renewed.snapshot_id)) == 3


@pytest.mark.parametrize(
    ("target", "nth", "after"),
    [
        # While the files are written: the heartbeat notices, and the collect stops writing.
        pytest.param("planner.storage.write_parquet", 1, False, id="while-writing"),
        # While they are published: the abandoner deleted the file the collect was about to move.
        pytest.param("planner.storage.move", 2, False, id="while-moving"),
        # After every file is published, before the row is: the row's publication must not go through.
        pytest.param("planner.storage.move", 3, True, id="before-publishing"),
    ],
)
def test_a_collect_whose_row_is_abandoned_under_it_fails_and_publishes_nothing(
    cluster, store, tmp_path, monkeypatch, target, nth, after
):
    entry, _ = cluster

    def taken_for_dead():
        # Another collect took this one for dead (it was frozen, say, for longer than the age).
        assert len(abandon_stale_snapshots(store, tmp_path, "fake", older_than=timedelta(0), actor="other")) == 1
        time.sleep(0.5)  # five beats: the heartbeat finds the row gone

    calls = on_nth_call(monkeypatch, target, nth, taken_for_dead, after=after)
    with pytest.raises(SnapshotAbandonedError, match="abandoned by another collect"):
        collect(client(entry), store, tmp_path, stale_after=timedelta(seconds=1))
    if target.endswith("write_parquet"):
        assert len(calls) == 1  # the second Parquet file was never written
    with store.session() as session:
        [row] = session.scalars(select(Snapshot)).all()
    assert row.status == "abandoned"
    # The abandoner's event only: none of the collect's own, neither a second abandonment nor a publication.
    assert audit_events(store) == [("snapshot.abandoned", "other")]
    assert list_snapshots(store) == [] and read_samples(tmp_path, "bundles", "fake").num_rows == 0
    assert files_of(tmp_path, row.id) == []  # what it wrote after the abandoner's deletes, it deleted itself


def test_the_stores_record_of_the_reports_agrees_with_the_brokers_table(cluster, store, tmp_path):
    """What the plan runs give the Spark job (`snapshot_reports`): the published snapshots within the window and
    the brokers missing from each, the same as the brokers table of the samples says."""
    entry, brokers = cluster
    before = collect(client(entry), store, tmp_path)
    brokers[1].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, "{oops"))
    partial = collect(client(entry), store, tmp_path)
    brokers[1].route("GET", "/admin/v2/broker-stats/load-report", Reply(200, load_report(cpu=5)))
    whole = collect(client(entry), store, tmp_path)
    staged = collect(client(entry), store, tmp_path)
    with store.session() as session:
        session.execute(update(Snapshot).where(Snapshot.id == staged.snapshot_id).values(status="staged"))
        taken = {row.id: row.taken_at for row in session.scalars(select(Snapshot))}
    after, until = taken[before.snapshot_id], taken[staged.snapshot_id] + timedelta(seconds=1)

    recorded = snapshot_reports(store, "fake", after, until)
    assert [snapshot for snapshot, _ in recorded.snapshots] == [partial.snapshot_id, whole.snapshot_id]
    assert recorded.missing == {brokers[1].broker_id: [partial.snapshot_id]}
    rows = read_dataset(
        samples_root(tmp_path),
        "brokers",
        "fake",
        after=after,
        until=until,
        exclude=unpublished_snapshot_ids(store, "fake"),
        columns=("snapshot_id", "taken_at", "broker"),
    )
    assert SnapshotReports.from_brokers_table(rows) == recorded


def test_the_token_reaches_neither_logs_nor_database_nor_archive(cluster, store, tmp_path, caplog):
    entry, brokers = cluster
    brokers[2].route("GET", "/admin/v2/broker-stats/load-report", Reply(401, {"reason": "Unauthorized"}))
    with caplog.at_level("DEBUG"):
        collect(client(entry, auth=AdminAuth(token=TOKEN)), store, tmp_path)
    assert all(request.headers.get("Authorization") == f"Bearer {TOKEN}" for request in entry.requests)
    assert TOKEN not in caplog.text
    with store.session() as session:
        for table in Base.metadata.sorted_tables:
            dumped = json.dumps([list(row) for row in session.execute(table.select())], default=str)
            assert TOKEN not in dumped, table.name
    for path in tmp_path.rglob("*.gz"):
        with gzip.open(path, "rt") as archive:
            assert TOKEN not in archive.read()
