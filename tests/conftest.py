"""Shared fixtures.

Database fixtures: every database test runs on SQLite and on the local PostgreSQL server
(``MONITOR_TEST_POSTGRES_URL``, default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``,
used only to create and drop uniquely named test databases). If PostgreSQL is down the
PostgreSQL cases *fail* with a message saying so; deselect them explicitly with
``-m "not postgres"``. Schemas are always created by the Alembic migrations.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, delete
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.models import Base

POSTGRES_ADMIN_URL = os.environ.get(
    "MONITOR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

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
def postgres_database(admin: Engine) -> Iterator[str]:
    """A fresh, uniquely named, empty PostgreSQL database, dropped (with FORCE) afterwards."""
    name = f"monitor_test_{uuid.uuid4().hex[:16]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


READER_SCRIPT = (
    Path(__file__).resolve().parents[1] / "dashboards/provisioning/postgres/10-grafana-reader.sh"
)
READER_PASSWORD = "reader-test-only"


@contextmanager
def grafana_reader(admin: Engine, url: str) -> Iterator[str]:
    """Run the compose stack's reader script on the database at ``url`` (as the postgres image
    does: ``sh`` with its environment, ``psql`` on the server); yield the new role, dropped after
    (run it before the migrations, like the stack)."""
    parsed = make_url(url)
    role = f"grafana_reader_{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "POSTGRES_USER": parsed.username or "postgres",
        "POSTGRES_DB": parsed.database or "",
        "GRAFANA_READER_USER": role,
        "GRAFANA_READER_PASSWORD": READER_PASSWORD,
        "PGHOST": parsed.host or "127.0.0.1",
        "PGPORT": str(parsed.port or 5432),
    }
    subprocess.run(["sh", str(READER_SCRIPT)], env=env, check=True, capture_output=True, timeout=60)
    try:
        yield role
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')


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
