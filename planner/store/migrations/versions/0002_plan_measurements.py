"""plan measurements, and audit events linked to their plan

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 02:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plan_measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("snapshot_id", sa.Integer(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("brokers", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"]),
        sa.ForeignKeyConstraint(["snapshot_id"], ["snapshots.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_plan_measurements_plan_id", "plan_measurements", ["plan_id"])
    # A plain ADD COLUMN: SQLite's batch mode would copy the table, which its append-only triggers forbid.
    op.add_column("audit_log", sa.Column("plan_id", sa.Integer(), nullable=True))
    op.create_index("ix_audit_log_plan_id", "audit_log", ["plan_id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_plan_id", table_name="audit_log")
    op.drop_column("audit_log", "plan_id")
    op.drop_index("ix_plan_measurements_plan_id", table_name="plan_measurements")
    op.drop_table("plan_measurements")
