"""an operator's stop requests, honoured by the executor between two actions

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A table of its own: the request outlives the run it stops, and its history (who asked, why, what it ended)
    # stays beside the audit log's events.
    op.create_table(
        "stop_requests",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("plan_id", sa.Integer(), sa.ForeignKey("plans.id"), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requested_by", sa.String(300), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(30), nullable=True),
    )
    op.create_index("ix_stop_requests_plan_id", "stop_requests", ["plan_id"])


def downgrade() -> None:
    op.drop_index("ix_stop_requests_plan_id", table_name="stop_requests")
    op.drop_table("stop_requests")
