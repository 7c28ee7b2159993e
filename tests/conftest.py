"""Shared fixtures.

Database fixtures: every database test runs on SQLite and on the local PostgreSQL server
(``MONITOR_TEST_POSTGRES_URL``, default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``,
used only to create and drop uniquely named test databases). If PostgreSQL is down the
PostgreSQL cases *fail* with a message saying so; deselect them explicitly with
``-m "not postgres"``. Schemas are always created by the Alembic migrations.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, create_engine, delete
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.models import Base
from tests.support.databases import POSTGRES_ADMIN_URL, postgres_database

#: The two supported databases; PostgreSQL cases carry the ``postgres`` marker.
DIALECTS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Engine]:
    """AUTOCOMMIT engine on the server's maintenance database; fails loudly if it is down."""
    engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect():
            error = None
    except OperationalError as exc:
        error = exc.orig
    if error is not None:
        engine.dispose()
        pytest.fail(
            f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL} ({error}). Start the server "
            "(see DEVELOPERS.md), point MONITOR_TEST_POSTGRES_URL at one, or deselect these "
            'tests explicitly with -m "not postgres".',
            pytrace=False,
        )
    yield engine
    engine.dispose()


@contextmanager
def _database(dialect: str, request: pytest.FixtureRequest, folder: str) -> Iterator[str]:
    if dialect == "sqlite":
        yield f"sqlite:///{folder}/monitor.db"
        return
    with postgres_database(request.getfixturevalue("postgres_admin")) as url:
        yield url


@pytest.fixture(params=DIALECTS)
def empty_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """URL of a new empty database (no tables), on each dialect."""
    with _database(request.param, request, str(tmp_path_factory.mktemp("db"))) as url:
        yield url


@pytest.fixture(scope="session", params=DIALECTS)
def migrated_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """URL of a database migrated to head, shared by the session (one per dialect)."""
    with _database(request.param, request, str(tmp_path_factory.mktemp("db"))) as url:
        upgrade(url)
        yield url


@pytest.fixture(scope="session")
def db_engine(migrated_database_url: str) -> Iterator[Engine]:
    """Engine on the session's migrated database."""
    engine = make_engine(migrated_database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(db_engine: Engine) -> Iterator[Session]:
    """A session on a migrated database whose tables were emptied before the test."""
    with db_engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(delete(table))
    with session_factory(db_engine)() as session:
        yield session
