"""the load manager each snapshot's brokers ran

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 22:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Snapshots taken before were not told; None reads as "not known".
    op.add_column("snapshots", sa.Column("load_manager", sa.String(300), nullable=True))


def downgrade() -> None:
    op.drop_column("snapshots", "load_manager")
