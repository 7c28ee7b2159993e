"""Run the Alembic migrations from code (``monitor db upgrade``) on any supported database URL."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import URL

from monitor.db.engine import SQLITE_BEGIN, make_engine

__all__ = ["alembic_config", "current_revision", "downgrade", "upgrade"]



def alembic_config() -> Config:
    """Alembic configuration whose scripts are the package's ``monitor.db.migrations`` (URL
    left unset).

    The scripts are package data, found with :mod:`importlib.resources`, so an installed wheel
    migrates without the source tree; ``alembic.ini`` serves only the ``alembic`` command in a
    checkout and points at the same folder."""
    config = Config()
    scripts = resources.files("monitor.db.migrations")
    config.set_main_option("script_location", str(scripts))
    config.set_main_option("path_separator", "os")
    config.set_main_option("timezone", "UTC")
    config.set_main_option(
        "file_template", "%%(year)d%%(month).2d%%(day).2d_%%(rev)s_%%(slug)s"
    )
    return config


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
