"""what an approval binds (TTL, resume window, execution windows), when an unanswered request ended, and one
execution per cluster at a time

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26 14:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Plain ADD COLUMNs: SQLite's batch mode copies tables, which the append-only triggers forbid.


def upgrade() -> None:
    # The freshness and the windows in force when a person (or a policy) decided: an executor may shorten
    # them, never extend them. Decisions taken before carry none (the executor's settings apply).
    op.add_column("approvals", sa.Column("ttl_seconds", sa.Float(), nullable=True))
    op.add_column("approvals", sa.Column("resume_window_seconds", sa.Float(), nullable=True))
    op.add_column("approvals", sa.Column("execution_windows", sa.JSON(), nullable=True))
    # The settle time counts from when the request ended, not from when it started.
    op.add_column("action_executions", sa.Column("request_ended_at", sa.DateTime(timezone=True), nullable=True))
    # The cluster's execution claim: whichever plan holds it is the only one sending to the cluster.
    op.add_column("clusters", sa.Column("execution_token", sa.String(64), nullable=True))
    op.add_column("clusters", sa.Column("execution_plan_id", sa.Integer(), nullable=True))
    op.add_column("clusters", sa.Column("execution_holder", sa.String(300), nullable=True))
    op.add_column("clusters", sa.Column("execution_lease_expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for column in ("execution_lease_expires_at", "execution_holder", "execution_plan_id", "execution_token"):
        op.drop_column("clusters", column)
    op.drop_column("action_executions", "request_ended_at")
    for column in ("execution_windows", "resume_window_seconds", "ttl_seconds"):
        op.drop_column("approvals", column)
