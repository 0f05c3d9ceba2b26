"""The throwaway PostgreSQL server works end to end through SQLAlchemy and psycopg."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

pytestmark = pytest.mark.integration


def test_postgres_url_gives_a_fresh_writable_database(postgres_url):
    assert postgres_url.startswith("postgresql+psycopg://")
    engine = create_engine(postgres_url)
    try:
        with engine.begin() as connection:
            assert connection.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")).scalar() == 0
            connection.execute(text("CREATE TABLE probe (id integer PRIMARY KEY, name text NOT NULL)"))
            connection.execute(text("INSERT INTO probe VALUES (1, 'bundle'), (2, 'broker')"))
        with engine.begin() as connection:
            names = connection.execute(text("SELECT name FROM probe ORDER BY id")).scalars().all()
            connection.execute(text("DROP TABLE probe"))
            remaining = connection.execute(text("SELECT to_regclass('public.probe')")).scalar()
    finally:
        engine.dispose()

    assert names == ["bundle", "broker"]
    assert remaining is None
