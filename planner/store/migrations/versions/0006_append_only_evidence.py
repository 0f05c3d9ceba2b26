"""decisions and execution attempts are evidence: the database refuses to remove them or rewrite what they record

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 09:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# Plain triggers, like the audit log's (0001, 0003). A deleted or rewritten attempt would make the executor take
# a request that was sent for one never tried, and a rewritten approval would approve what nobody approved.
#
# An attempt moves only while it is in doubt (planner.lifecycle.IN_DOUBT_ATTEMPT_STATUSES: 'sending', 'sent',
# 'unknown'; spelled out here, as a migration must not change when the code does), and then only its outcome
# columns: status, error, finished_at, request_ended_at.
_IN_DOUBT = "('sending', 'sent', 'unknown')"
_FROZEN_ATTEMPT_COLUMNS = ("id", "action_id", "attempt", "started_at")
_ATTEMPT_MOVE_REFUSED = (
    "only an attempt in doubt (sending, sent, unknown) may change, and only its status, error, finished_at "
    "and request_ended_at"
)


def _attempt_rewritten(distinct: str) -> str:
    """The condition under which an UPDATE of an attempt is refused (`distinct`: the dialect's null-safe !=)."""
    frozen = " OR ".join(f"NEW.{column} {distinct} OLD.{column}" for column in _FROZEN_ATTEMPT_COLUMNS)
    return f"OLD.status NOT IN {_IN_DOUBT} OR {frozen}"


_SQLITE = [
    "CREATE TRIGGER approvals_no_update BEFORE UPDATE ON approvals "
    "BEGIN SELECT RAISE(ABORT, 'approvals is append-only'); END",
    "CREATE TRIGGER approvals_no_delete BEFORE DELETE ON approvals "
    "BEGIN SELECT RAISE(ABORT, 'approvals is append-only'); END",
    "CREATE TRIGGER action_executions_no_delete BEFORE DELETE ON action_executions "
    "BEGIN SELECT RAISE(ABORT, 'action_executions is append-only'); END",
    f"CREATE TRIGGER action_executions_in_doubt_moves_only BEFORE UPDATE ON action_executions "
    f"WHEN {_attempt_rewritten('IS NOT')} "
    f"BEGIN SELECT RAISE(ABORT, 'action_executions is append-only: {_ATTEMPT_MOVE_REFUSED}'); END",
]
_SQLITE_TRIGGERS = (
    "approvals_no_update",
    "approvals_no_delete",
    "action_executions_no_delete",
    "action_executions_in_doubt_moves_only",
)

# One function for every refusal; a trigger may pass what else it allows. TRUNCATE bypasses row triggers.
_POSTGRESQL = [
    "CREATE FUNCTION evidence_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION '% is append-only%', TG_TABLE_NAME, COALESCE(': ' || TG_ARGV[0], ''); END $$",
    "CREATE TRIGGER approvals_append_only BEFORE UPDATE OR DELETE ON approvals "
    "FOR EACH ROW EXECUTE FUNCTION evidence_append_only()",
    "CREATE TRIGGER approvals_no_truncate BEFORE TRUNCATE ON approvals "
    "FOR EACH STATEMENT EXECUTE FUNCTION evidence_append_only()",
    "CREATE TRIGGER action_executions_no_delete BEFORE DELETE ON action_executions "
    "FOR EACH ROW EXECUTE FUNCTION evidence_append_only()",
    "CREATE TRIGGER action_executions_no_truncate BEFORE TRUNCATE ON action_executions "
    "FOR EACH STATEMENT EXECUTE FUNCTION evidence_append_only()",
    f"CREATE TRIGGER action_executions_in_doubt_moves_only BEFORE UPDATE ON action_executions "
    f"FOR EACH ROW WHEN ({_attempt_rewritten('IS DISTINCT FROM')}) "
    f"EXECUTE FUNCTION evidence_append_only('{_ATTEMPT_MOVE_REFUSED}')",
]
_POSTGRESQL_TRIGGERS = (
    ("approvals_append_only", "approvals"),
    ("approvals_no_truncate", "approvals"),
    ("action_executions_no_delete", "action_executions"),
    ("action_executions_no_truncate", "action_executions"),
    ("action_executions_in_doubt_moves_only", "action_executions"),
)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": _SQLITE, "postgresql": _POSTGRESQL}.get(dialect, []):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for trigger in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    elif dialect == "postgresql":
        for trigger, table in _POSTGRESQL_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
        op.execute("DROP FUNCTION IF EXISTS evidence_append_only()")
