"""Opening the store: engine, automatic idempotent migrations, sessions.

The embedded default is a SQLite file under the planner's home; production passes any SQLAlchemy
URL (tested on PostgreSQL). The URL's password never reaches the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from planner.settings import planner_settings

logger = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")


def default_database_url() -> str:
    settings = planner_settings()
    return settings.database_url or f"sqlite:///{settings.home / 'planner.db'}"


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _enable_sqlite_foreign_keys(dbapi_connection: object, _record: object) -> None:
    # The driver's own transaction handling is off: `_begin_immediate` opens every transaction itself.
    dbapi_connection.isolation_level = None  # type: ignore[attr-defined]
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    """SQLite transactions take the write lock when they start. A deferred transaction that read first
    and writes later fails at once with "database is locked" when another writer got there first; an
    immediate one waits for it, then reads what it committed (so a concurrent plan sees the new state
    version and is refused as stale instead of crashing)."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def migration_heads() -> set[str]:
    return set(ScriptDirectory.from_config(_alembic_config()).get_heads())


def current_revisions(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(MigrationContext.configure(connection).get_current_heads())


def upgrade(engine: Engine) -> bool:
    """Bring the schema to the newest revision; returns whether anything had to change."""
    if current_revisions(engine) == migration_heads():
        return False
    config = _alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    logger.info("migrated %s to %s", engine.url.render_as_string(hide_password=True), ", ".join(migration_heads()))
    return True


class Store:
    """The planner's database: call `session()` for a unit of work (commits on success, rolls back on error)."""

    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        url = url or default_database_url()
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine = create_engine(parsed, pool_pre_ping=True)
        if parsed.get_backend_name() == "sqlite":
            event.listen(self.engine, "connect", _enable_sqlite_foreign_keys)
            event.listen(self.engine, "begin", _begin_immediate)
        if migrate:
            upgrade(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
