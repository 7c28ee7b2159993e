"""Run the Alembic migrations from code (``monitor db upgrade``) on any supported database URL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import URL

from monitor.db.engine import SQLITE_BEGIN, make_engine

__all__ = ["alembic_config", "current_revision", "downgrade", "upgrade"]

#: The migrations live at the top of the repository (``alembic/`` beside ``alembic.ini``).
ROOT = Path(__file__).resolve().parents[2]


def alembic_config() -> Config:
    """Alembic configuration of the project's ``alembic.ini`` (URL left unset)."""
    return Config(str(ROOT / "alembic.ini"))


def upgrade(url: str | URL, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` (default: the latest).

    Examples
    --------
    >>> upgrade("sqlite://")  # an empty in-memory database
    """
    _run(url, lambda config: command.upgrade(config, revision))


def downgrade(url: str | URL, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"`` drops every table)."""
    _run(url, lambda config: command.downgrade(config, revision))


def current_revision(url: str | URL) -> str | None:
    """The revision the database at ``url`` is at (``None`` before the first upgrade)."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def _run(url: str | URL, action: Callable[[Config], None]) -> None:
    engine = make_engine(url)
    try:
        # IMMEDIATE: a concurrent upgrade on SQLite waits for the write lock before it reads the
        # current revision (PostgreSQL uses an advisory lock in env.py).
        with engine.connect().execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}) as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            action(config)
    finally:
        engine.dispose()
