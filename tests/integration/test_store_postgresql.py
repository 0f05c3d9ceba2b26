"""The store's tests again on a real PostgreSQL server."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from planner.store.database import Store, current_revisions, migration_heads, upgrade
from planner.store.models import ActionExecution, Approval, AuditEvent, audit_event
from tests.unit import test_collector_and_store as on_sqlite

pytestmark = pytest.mark.integration

cluster = on_sqlite.cluster
test_audit_log_is_append_only = on_sqlite.test_audit_log_is_append_only
test_approvals_and_attempts_are_append_only = on_sqlite.test_approvals_and_attempts_are_append_only
test_collect_records_archive_samples_and_snapshot = on_sqlite.test_collect_records_archive_samples_and_snapshot
test_load_data_replays_snapshots_through_pulsars_sample_rule = (
    on_sqlite.test_load_data_replays_snapshots_through_pulsars_sample_rule
)
test_a_broker_that_times_out_or_answers_garbage_is_recorded_missing = (
    on_sqlite.test_a_broker_that_times_out_or_answers_garbage_is_recorded_missing
)
test_a_failure_while_recording_leaves_nothing_half_written = (
    on_sqlite.test_a_failure_while_recording_leaves_nothing_half_written
)
test_the_token_reaches_neither_logs_nor_database_nor_archive = (
    on_sqlite.test_the_token_reaches_neither_logs_nor_database_nor_archive
)
# Abandonment, renewal and publication race on row locks here (READ COMMITTED re-checks a waiting UPDATE's WHERE).
test_a_live_collect_slower_than_the_abandonment_age_is_not_abandoned_by_the_next = (
    on_sqlite.test_a_live_collect_slower_than_the_abandonment_age_is_not_abandoned_by_the_next
)
test_a_staged_row_whose_heartbeat_stopped_is_abandoned_and_a_renewed_one_is_not = (
    on_sqlite.test_a_staged_row_whose_heartbeat_stopped_is_abandoned_and_a_renewed_one_is_not
)
test_two_abandoners_and_a_renewal_racing_them_the_row_count_decides = (
    on_sqlite.test_two_abandoners_and_a_renewal_racing_them_the_row_count_decides
)
test_a_collect_whose_row_is_abandoned_under_it_fails_and_publishes_nothing = (
    on_sqlite.test_a_collect_whose_row_is_abandoned_under_it_fails_and_publishes_nothing
)


@pytest.fixture
def store(postgres_url):
    opened = Store(postgres_url)
    assert opened.engine.dialect.name == "postgresql"
    yield opened
    opened.dispose()


def test_migrations_upgrade_an_empty_postgresql_database_and_are_no_ops_after(postgres_url):
    bare = Store(postgres_url, migrate=False)
    assert current_revisions(bare.engine) == set()
    assert upgrade(bare.engine) is True
    assert current_revisions(bare.engine) == migration_heads()
    assert upgrade(bare.engine) is False
    assert "***" in bare.safe_url or "@" not in bare.safe_url
    bare.dispose()


def test_the_audit_log_refuses_truncate_on_postgresql(store):
    with store.session() as session:
        session.add(audit_event("c1", "tester", "test.event"))
    with pytest.raises(DBAPIError, match="append-only"), store.session() as session:
        session.execute(text("TRUNCATE audit_log"))
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(AuditEvent)) == 1


def test_approvals_and_attempts_refuse_truncate_on_postgresql(store):
    on_sqlite._approved_plan_with_attempts(store)
    for table in ("approvals", "action_executions"):
        with pytest.raises(DBAPIError, match=f"{table} is append-only"), store.session() as session:
            session.execute(text(f"TRUNCATE {table} CASCADE"))
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(Approval)) == 1
        assert session.scalar(select(func.count()).select_from(ActionExecution)) == 2
