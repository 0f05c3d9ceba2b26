"""execution claims, executable action columns, approver ids, snapshot publication, audit log TRUNCATE guard

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 10:00:00.000000
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Plain ADD COLUMNs throughout: SQLite's batch mode copies tables, which the audit log's triggers forbid.


def upgrade() -> None:
    # A lease-based claim: whoever holds an unexpired lease is the only one who may send a plan's actions.
    op.add_column("plans", sa.Column("claim_token", sa.String(64), nullable=True))
    op.add_column("plans", sa.Column("claimed_by", sa.String(300), nullable=True))
    op.add_column("plans", sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("plans", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("plans", sa.Column("execution_started_at", sa.DateTime(timezone=True), nullable=True))

    # What a split runs is a column of its own, so the approval hash covers exactly the columns the executor reads.
    op.add_column("plan_actions", sa.Column("split_algorithm", sa.String(100), nullable=True))
    op.add_column("plan_actions", sa.Column("split_positions", sa.JSON(), nullable=True))
    bind = op.get_bind()
    actions = sa.table(
        "plan_actions",
        sa.column("id", sa.Integer),
        sa.column("kind", sa.String),
        sa.column("details", sa.JSON),
        sa.column("split_algorithm", sa.String),
        sa.column("split_positions", sa.JSON),
    )
    for row in bind.execute(sa.select(actions.c.id, actions.c.details).where(actions.c.kind == "split")).all():
        details = row.details if isinstance(row.details, dict) else json.loads(row.details or "{}")
        bind.execute(
            actions.update()
            .where(actions.c.id == row.id)
            .values(split_algorithm=details.get("splitAlgorithm"), split_positions=details.get("splitPositions"))
        )

    # Airflow matches approvers by user id; the name is for people. Where the decision came from.
    op.add_column("approvals", sa.Column("approver_id", sa.String(300), nullable=True))
    op.add_column("approvals", sa.Column("source", sa.String(50), nullable=False, server_default="airflow"))

    # Readers see only published snapshots; existing ones were written whole, so they are published.
    op.add_column("snapshots", sa.Column("status", sa.String(20), nullable=False, server_default="published"))
    op.create_index("ix_snapshots_status", "snapshots", ["status"])

    if bind.dialect.name == "postgresql":
        # Attempt statuses grew longer names (planner.lifecycle.AttemptStatus); SQLite does not enforce lengths.
        op.alter_column("action_executions", "status", type_=sa.String(30), existing_type=sa.String(20))
        # UPDATE and DELETE are refused row by row since 0001; TRUNCATE bypasses row triggers.
        op.execute(
            "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log "
            "FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log")
    op.drop_index("ix_snapshots_status", table_name="snapshots")
    op.drop_column("snapshots", "status")
    op.drop_column("approvals", "source")
    op.drop_column("approvals", "approver_id")
    op.drop_column("plan_actions", "split_positions")
    op.drop_column("plan_actions", "split_algorithm")
    for column in ("execution_started_at", "lease_expires_at", "claimed_at", "claimed_by", "claim_token"):
        op.drop_column("plans", column)
