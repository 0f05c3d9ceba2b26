"""when a staged snapshot's collect was last known alive, so abandonment never races a live collect

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# A plain ADD COLUMN: SQLite's batch mode copies tables, which the append-only triggers forbid.


def upgrade() -> None:
    # Set when the row is staged and renewed while its collect runs. Rows staged before carry none: their age
    # is their taken_at's, as it was.
    op.add_column("snapshots", sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("snapshots", "heartbeat_at")
