"""the brokers each cluster was seen with, and its scale events (joins, removal marks)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 10:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "known_brokers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("cluster_id", sa.Integer(), sa.ForeignKey("clusters.id"), nullable=False),
        sa.Column("broker", sa.String(300), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_snapshot_id", sa.Integer(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_snapshot_id", sa.Integer(), nullable=False),
        sa.Column("joins", sa.Integer(), nullable=False),
        # One row per broker and cluster: two collects that both take a broker for new cannot both insert it.
        sa.UniqueConstraint("cluster_id", "broker"),
    )
    op.create_index("ix_known_brokers_cluster_id", "known_brokers", ["cluster_id"])
    op.create_table(
        "scale_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("cluster_id", sa.Integer(), sa.ForeignKey("clusters.id"), nullable=False),
        sa.Column("event_key", sa.String(400), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("broker", sa.String(300), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_by", sa.String(300), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("snapshot_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.String(300), nullable=True),
        sa.Column("plan_id", sa.Integer(), sa.ForeignKey("plans.id"), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        # The idempotence of every event: the same join or mark, however often observed, is one row.
        sa.UniqueConstraint("cluster_id", "event_key"),
    )
    op.create_index("ix_scale_events_cluster_id", "scale_events", ["cluster_id"])
    op.create_index("ix_scale_events_state", "scale_events", ["state"])


def downgrade() -> None:
    op.drop_index("ix_scale_events_state", table_name="scale_events")
    op.drop_index("ix_scale_events_cluster_id", table_name="scale_events")
    op.drop_table("scale_events")
    op.drop_index("ix_known_brokers_cluster_id", table_name="known_brokers")
    op.drop_table("known_brokers")
