"""Alembic environment: runs on the connection the planner hands over (see planner.store.database)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from planner.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_from_config(config.get_section(config.config_ini_section) or {}, poolclass=pool.NullPool)
    with engine.connect() as new_connection:
        context.configure(connection=new_connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run_migrations()
